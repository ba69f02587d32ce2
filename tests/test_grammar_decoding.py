"""Grammars through the token matcher (issue 25): walks with real tokenizers,
random-logits fuzz, masks against the reference matcher, and a JSON grammar written in
GBNF judged against ``compile_schema({})`` on MaskBench.

Every grammar here is our own: two regexes, a choice, GBNF for arithmetic (recursive),
chess moves, a bulleted list, one grammar using every GBNF construct once, JSON with
the standard whitespace policy, a tool call whose arguments are a bound JSON Schema,
and the built-ins ``compile_jsonl`` and ``compile_csv``. Each has a second judge
written independently (a Python ``re`` pattern, a reduction of parentheses,
``compile_schema``, Python's ``csv`` reader), of the accept/reject lists and of every
fuzzed text.

1. accepted texts, tokenized by Qwen2.5, Llama-3 and Mistral (a SentencePiece
   tokenizer, spelling the text mid-sequence), are walked token by token: each token is
   allowed by ``mask()`` before it is taken, EOS is allowed exactly where the prefix is
   an accepted text, no other special token ever is, and EOS ends the matcher;
   rejected texts are masked at the first token that leaves the language;
2. random-logits fuzz (Qwen2.5): sampling among the allowed ids never meets an empty
   mask (not even at the nesting limit), and every finished text is accepted (by
   ``accepts()`` and by the second judge);
3. differential (Qwen2.5): on states met by those walks, ``mask()`` equals the mask
   computed by feeding each token's bytes through the reference matcher (a random
   subset of the vocabulary plus every allowed id; the whole vocabulary for one state);
4. JSON in GBNF: ``accepts()`` agrees with ``compile_schema({})`` on MaskBench's
   instances (compact, ASCII-escaped, spaced, indented, with a leading space...) and
   on mutated and hand-written invalid texts, and the two give equal masks along
   token walks;
5. bench/grammars.py's GBNF accepts the texts it times, and its hand-written CSV is
   the language of ``compile_csv``.

JSONMODE_FULL_GATES=1 judges every MaskBench instance (the default: every instance of
at most 512 bytes, a fixed sample of the larger ones).
"""

from __future__ import annotations

import csv
import dataclasses
import functools
import gzip
import hashlib
import io
import json
import os
import pathlib
import random
import re
import sys
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

from jsonmode import compile_choice, compile_csv, compile_grammar, compile_jsonl, compile_regex
from jsonmode.decoding.compiled import Compiled, compile_schema
from jsonmode.decoding.vocabulary import Vocabulary

DATA = pathlib.Path(__file__).resolve().parents[1].parent / "shared" / "data"
TOKENIZERS = DATA / "tokenizers"
MASKBENCH = DATA / "jsonschemabench" / "maskbench"
FULL = os.environ.get("JSONMODE_FULL_GATES") == "1"

WALK_TOKENIZERS = ("qwen2.5", "llama-3", "mistral-7b-v0.1")
# The nesting bound where JSON in GBNF is compared with compile_schema({}) (a schema's
# counts stack frames, default 64; a grammar's levels of recursion, default 256): far
# above MaskBench's deepest instance (34 levels), so the bound never decides a verdict.
DEPTH = 1024

# -- the grammars --------------------------------------------------------------------------

DATE = r"(19|20)\d\d-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])"
PRICE = r"[A-Z][a-zé]{1,12}( [A-Z][a-zé]{1,12}){0,2}: \d+(\.\d{1,2})? €"
MOODS = ["positive", "pos", "negative", "neutral", "très négatif", "🙂"]

ARITHMETIC = r"""
# arithmetic on decimals; one optional space around binary operators
root   ::= expr
expr   ::= term (sp [-+] sp term)*
term   ::= factor (sp [*/%] sp factor)*
factor ::= "-"? (number | "(" sp expr sp ")")
number ::= [0-9]+ ("." [0-9]{1,6})?
sp     ::= " "?
"""

CHESS = r"""
# numbered moves in standard algebraic notation
root   ::= turn (" " turn){0,59}
turn   ::= [1-9] [0-9]{0,2} ". " move (" " move)?
move   ::= (castle | piece | pawn) [+#]?
castle ::= "O-O" "-O"?
piece  ::= [KQRBN] [a-h]? [1-8]? "x"? square
pawn   ::= ([a-h] "x")? square ("=" [QRBN])?
square ::= [a-h] [1-8]
"""

LIST = r"""
# a bulleted list, optionally titled: one to five items
root   ::= header? item{1,5}
header ::= "## " [^\n\x00-\x1f]+ "\n"
item   ::= ("- " | "* ") text "\n"
text   ::= [^\n\t]{1,60}
"""

CONSTRUCTS = r"""
# Every construct once: alternatives (one continued on the next line), groups over
# several lines, ? * + {m} {m,} {m,n} {0,n}, escapes in literals and in classes,
# ranges, negation, the dot.
root     ::= greeting ws count ws tail code?   # a comment after a rule
greeting ::= "h\x65llo" | "\u00e9t\u00e9" |
             "\U0001F600" | "tab\tq\"uote\\"
ws       ::= [ \t]+
count    ::= (
               [1-9] [0-9]{0,2} ("," [0-9]{3})*
             | "0"
             )
tail     ::= ("x"{2} | [^a-z0-9\n ]+ | .)? "!"{1,}
code     ::= "#" [a-c\x41-\x43]{2,} ([\u0400-\u04FF] | [\U0001F300-\U0001F5FF]){0,2}
"""

# JSON with compile_schema({})'s "standard" whitespace policy: one optional leading
# space, one optional space after "," and ":", none anywhere else; strings as JSON
# escapes them, a surrogate escape only as a high-low pair.
JSON_GBNF = r"""
root   ::= " "? value
value  ::= object | array | string | number | "true" | "false" | "null"
object ::= "{" ( member ( "," " "? member )* )? "}"
member ::= string ":" " "? value
array  ::= "[" ( value ( "," " "? value )* )? "]"
string ::= "\"" char* "\""
char   ::= [^"\\\x00-\x1f] | "\\" escape
escape ::= ["\\/bfnrt] | "u" bmp | "u" [dD] [89abAB] hex hex "\\u" [dD] [c-fC-F] hex hex
bmp    ::= [0-9a-cA-CeEfF] hex hex hex | [dD] [0-7] hex hex
hex    ::= [0-9a-fA-F]
number ::= "-"? ("0" | [1-9] [0-9]*) ("." [0-9]+)? ([eE] [-+]? [0-9]+)?
"""

TOOL = r"""
# free text, then a call whose arguments follow a JSON Schema (bound as "args")
root    ::= thought "\n" action
thought ::= "Thought: " [^\n]{1,100}
action  ::= "Action: " tool " " args
tool    ::= "search" | "weather"
"""
TOOL_ARGS = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "maxLength": 40},
        "days": {"type": "integer", "minimum": 1, "maximum": 14},
    },
    "required": ["city"],
    "additionalProperties": False,
}


JSONL_DOC = {
    "type": "object",
    "properties": {
        "id": {"type": "integer"},
        "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 3},
    },
    "required": ["id"],
    "additionalProperties": False,
}
CSV_ROW = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 20},
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
        "score": {"type": "number"},
        "active": {"type": "boolean"},
    },
    "required": ["name", "age"],
}


# -- second judges -------------------------------------------------------------------------


def _regex_judge(pattern: str, flags: int = 0) -> Callable[[str], bool]:
    compiled = re.compile(pattern, flags)
    return lambda text: compiled.fullmatch(text) is not None


_SQUARE = "[a-h][1-8]"
_MOVE = rf"(?:O-O(?:-O)?|[KQRBN][a-h]?[1-8]?x?{_SQUARE}|(?:[a-h]x)?{_SQUARE}(?:=[QRBN])?)[+#]?"
_TURN = rf"[1-9][0-9]{{0,2}}\. {_MOVE}(?: {_MOVE})?"
_GREETING = "|".join(re.escape(g) for g in ("hello", "été", "😀", 'tab\tq"uote\\'))
_CONSTRUCTS_RE = (
    rf"(?:{_GREETING})[ \t]+(?:[1-9][0-9]{{0,2}}(?:,[0-9]{{3}})*|0)[ \t]+"
    r"(?:xx|[^a-z0-9\n ]+|.)?!+(?:#[a-cA-C]{2,}(?:[\u0400-\u04FF]|[\U0001F300-\U0001F5FF]){0,2})?"
)


_OPERAND = r"-?(?:[0-9]+(?:\.[0-9]{1,6})?|N)"  # N: a parenthesised expression, judged
_EXPRESSION = rf"{_OPERAND}(?: ?[-+*/%] ?{_OPERAND})*"
_INNERMOST = re.compile(rf"\( ?{_EXPRESSION} ?\)")


def _arithmetic_judge(text: str) -> bool:
    """Without recursion (the grammar nests as deep as the matcher's limit): each
    innermost well-formed parenthesised expression becomes ``N``, until none is left.
    (Precedence does not change the language: both operator kinds join operands alike.)"""
    if "N" in text:
        return False
    while True:
        reduced = _INNERMOST.sub("N", text)
        if reduced == text:
            return re.fullmatch(_EXPRESSION, text) is not None
        text = reduced


def _tool_judge(text: str) -> bool:
    found = re.fullmatch(r"Thought: [^\n]{1,100}\nAction: (?:search|weather) (.*)", text, re.S)
    return found is not None and compile_schema(TOOL_ARGS).accepts(found.group(1))


def _jsonl_judge(text: str) -> bool:
    lines = (text[:-1] if text.endswith("\n") else text).split("\n")
    document = compile_schema(JSONL_DOC)
    return 1 <= len(lines) <= 4 and all(document.accepts(line) for line in lines)


_JSON_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?")


def _csv_judge(text: str) -> bool:
    """Python's csv reader (lenient about quotes inside bare cells, so this judge
    checks only that what jsonmode accepts reads as rows of the right cells)."""
    try:
        rows = list(csv.reader(io.StringIO(text, newline=""), strict=True))
    except csv.Error:
        return False
    if not rows or rows[0] != list(CSV_ROW["properties"]) or len(rows) < 2:
        return False
    for name, age, score, active, *extra in (r + [""] * (4 - len(r)) for r in rows[1:]):
        if extra or len(name) > 20 or active not in ("", "true", "false"):
            return False
        if not re.fullmatch(r"-?(?:0|[1-9][0-9]*)", age) or not 0 <= int(age) <= 150:
            return False
        if score and not _JSON_NUMBER.fullmatch(score):
            return False
    return all(len(r) == 4 for r in rows)


# -- the cases -----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    build: Callable[[Vocabulary | None], Compiled]
    good: tuple[str, ...]
    bad: tuple[str, ...]
    judge: Callable[[str], bool]  # a second, independent judge of the language


CASES = [
    Case(
        "regex-date",
        lambda v: compile_regex(DATE, v),
        ("2024-02-29", "1999-12-31", "2000-01-01"),
        ("2024-13-01", "1999-1-01", "2024-02-29 ", "2124-01-01", ""),
        _regex_judge(DATE, re.ASCII),
    ),
    Case(
        "regex-price",
        lambda v: compile_regex(PRICE, v),
        ("Café Noir: 3.50 €", "Tea: 2 €", "Pain Au Chocolat: 1.2 €"),
        ("tea: 2 €", "Tea: 2.505 €", "Tea: 2€", "T: 2 €", "Tea: 2 $"),
        _regex_judge(PRICE, re.ASCII),
    ),
    Case(
        "choice",
        lambda v: compile_choice(MOODS, v),
        tuple(MOODS),
        ("positiv", "po", "Positive", "neutral ", "", "🙂🙂"),
        frozenset(MOODS).__contains__,
    ),
    Case(
        "gbnf-arithmetic",
        lambda v: compile_grammar(ARITHMETIC, v),
        ("1", "12.5 * (3 - -4)", "((2))", "7%3+-(1/2)", "-(-(1.25 + 2) * 3) / 4"),
        ("1 +", "(1", "1  + 2", "1.", "()", "1 2", "1.1234567", " 1", "--1"),
        _arithmetic_judge,
    ),
    Case(
        "gbnf-chess",
        lambda v: compile_grammar(CHESS, v),
        (
            "1. e4 e5 2. Nf3 Nc6 3. Bb5 a6",
            "1. d4 Nf6 2. c4 e6 3. Nc3 Bb4 4. Qc2 O-O 5. a3 Bxc3+ 6. Qxc3",
            "41. exd8=Q+ Kxd8 42. O-O-O#",
            "1. e4",
        ),
        ("1. e9", "1.e4", "0. e4", "1. e4  e5", "1. Nf3 Nc6 Bb5", "1. O-O-O-O", "1. e4 "),
        _regex_judge(rf"{_TURN}(?: {_TURN}){{0,59}}"),
    ),
    Case(
        "gbnf-list",
        lambda v: compile_grammar(LIST, v),
        (
            "- milk\n- eggs\n",
            "## Courses\n* pain\n* café au lait\n* 🍎 x3\n",
            "- a\n- b\n- c\n- d\n- e\n",
        ),
        ("- milk", "- milk\n- \n", "- a\n" * 6, "## \n- a\n", "-milk\n", "- tab\there\n"),
        _regex_judge(r"(?:## [^\n\x00-\x1f]+\n)?(?:[-*] [^\n\t]{1,60}\n){1,5}"),
    ),
    Case(
        "gbnf-constructs",
        lambda v: compile_grammar(CONSTRUCTS, v),
        (
            "hello 1,234 xx!",
            "été\t\t0 !!!",
            "😀 999 \n!#abAC",
            'tab\tq"uote\\ 12 ??!!#cbЖ🌍',
            "hello 7 é!",
            "😀 1 🙂!",
        ),
        (
            "hello 1234 !",
            "hello 0,123 !",
            "hallo 1 !",
            "hello 1 xxx!",
            "hello 1 !#a",
            "hello 1 !#abЖ🌍🌍",
            "ete 1 !",
            "hello 1 ab!",
            "hello 1 ",
        ),
        _regex_judge(_CONSTRUCTS_RE, re.S),
    ),
    Case(
        "gbnf-json",
        lambda v: compile_grammar(JSON_GBNF, v),
        (
            '{"name":"Ada","tags":["x",1.5e-3,true,null],"nested":{"k":[{}]}}',
            ' [1, {"é": "\\u00e9\\ud83d\\ude00", "q": "a\\"b\\\\"}, -0.0, []]',
            '"just a string"',
            "-12",
        ),
        ('{"a":1,}', "[01]", '{"a" :1}', "[1,  2]", '"\\ud800"', "{ }", "tru", "1.", '"a\tb"'),
        lambda text: compile_schema({}, max_nesting_depth=DEPTH).accepts(text),
    ),
    Case(
        "gbnf-tool",
        lambda v: compile_grammar(TOOL, v, schemas={"args": TOOL_ARGS}),
        (
            'Thought: I should check the forecast.\nAction: weather {"city":"Paris","days":3}',
            'Thought: Où est-ce ?\nAction: search {"city": "Zürich"}',
            'Thought: x\nAction: weather  {"city":"Oslo", "days":14}',
        ),
        (
            'Thought: x\nAction: weather {"city":"Paris","days":30}',
            'Thought: x\nAction: weather {"days":3}',
            'Thought: x\nAction: weather{"city":"Paris"}',
            'Thought: x\nAction: search {"city":"Paris","when":1}',
            'Thought: \nAction: search {"city":"Paris"}',
            'Thought: x\nAction: cook {"city":"Paris"}',
        ),
        _tool_judge,
    ),
    Case(
        "builtin-jsonl",
        lambda v: compile_jsonl(JSONL_DOC, v, max_lines=4),
        (
            '{"id":1}',
            '{"id":1,"tags":["a","bé"]}\n{"id":2}\n',
            ' {"id": 3, "tags": []}\n{"id":-4}',
        ),
        (
            "",
            '{"id":1}\n\n{"id":2}',
            '{"tags":[]}',
            '{"id":1}\n' * 5,
            '{"id":1}\r\n{"id":2}',
            '{"id":1,"tags":["a","b","c","d"]}',
        ),
        _jsonl_judge,
    ),
    Case(
        "builtin-csv",
        lambda v: compile_csv(CSV_ROW, v),
        (
            "name,age,score,active\nAda,36,1.5,true\n",
            'name,age,score,active\r\n"Lovelace, Ada",36,,\r\nBob,0,-2e3,false',
            'name,age,score,active\n,150,0,\n"say ""hi""",1,,\n',
        ),
        (
            "name,age,score,active\nAda,36\n",
            "name,age,score,active\nAda,151,1,true",
            "name,age\nAda,3",
            "name,age,score,active\nAda,3.5,1,true",
            "name,age,score,active\nAda,,1,true",
            "name,age,score,active\nAda,3,1,yes",
            "name,age,score,active\nAda,36,1.5,true\n\n",
            "name,age,score,active\nAda Augusta Byron King,3,,\n",
        ),
        _csv_judge,
    ),
]
CASE_IDS = [case.name for case in CASES]


# -- tokenizers ----------------------------------------------------------------------------


class Tokenized:
    """A real tokenizer (to encode texts) and its jsonmode vocabulary."""

    def __init__(self, name: str) -> None:
        from tokenizers import Tokenizer

        self.name = name
        self.tokenizer = Tokenizer.from_file(str(TOKENIZERS / name / "tokenizer.json"))
        self.vocabulary = Vocabulary.from_tokenizer(TOKENIZERS / name)

    def encode(self, text: str) -> list[int]:
        """``text`` as a model writes it mid-sequence: with the tokenizer's own
        merges, but without the space a SentencePiece tokenizer puts before the first
        piece of an input (``▁``): for those, ``"\\n" + text`` is encoded and the
        tokens of the newline (``▁``, ``<0x0A>``) dropped."""
        ids = list(self.tokenizer.encode(text, add_special_tokens=False).ids)
        if self.vocabulary.decode(ids) == text.encode():
            return ids
        ids = list(self.tokenizer.encode("\n" + text, add_special_tokens=False).ids)
        for cut in range(1, 4):
            if self.vocabulary.decode(ids[:cut]) in (b"\n", b" \n"):
                rest = ids[cut:]
                assert self.vocabulary.decode(rest) == text.encode(), (self.name, text)
                return rest
        raise AssertionError(f"{self.name} cannot spell {text!r} mid-sequence")


@functools.cache
def tokenized(name: str) -> Tokenized:
    return Tokenized(name)


@functools.cache
def compiled_for(case_name: str, tokenizer: str | None) -> Compiled:
    case = CASES[CASE_IDS.index(case_name)]
    return case.build(tokenized(tokenizer).vocabulary if tokenizer else None)


# -- 0. the accept and reject lists, by both judges ----------------------------------------


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_accepted_and_rejected_texts(case: Case) -> None:
    compiled = compiled_for(case.name, None)
    assert compiled.unenforced == ()
    for text in case.good:
        assert case.judge(text), f"the second judge refuses {text!r}"
        assert compiled.accepts(text), text
    for text in case.bad:
        assert not case.judge(text), f"the second judge accepts {text!r}"
        assert not compiled.accepts(text), text


# -- 1. token walks ------------------------------------------------------------------------


def walk(compiled: Compiled, ids: list[int]) -> list[Any]:
    """Walk ``ids`` then EOS through a fresh matcher, checking every step; the states met."""
    vocabulary = compiled.vocabulary
    assert vocabulary is not None
    eos = sorted(vocabulary.eos_ids)
    others = sorted(vocabulary.special_ids - vocabulary.eos_ids)
    matcher = compiled.matcher()
    states = []
    prefix = b""
    for position, token in enumerate(ids):
        states.append(matcher.state)
        mask = matcher.mask()
        where = f"token {position} {vocabulary.token_bytes(token)!r} after {prefix!r}"
        assert mask[token], f"masked: {where}"
        ends = compiled.accepts(prefix)
        assert matcher.can_end() == ends, where
        assert mask[eos].all() == ends, f"EOS wrong at {where}"
        assert mask[eos].any() == ends, f"EOS wrong at {where}"
        assert not mask[others].any(), f"a special token allowed at {where}"
        assert matcher.advance(token), f"advance refused {where}"
        prefix += vocabulary.token_bytes(token)
    states.append(matcher.state)
    mask = matcher.mask()
    assert matcher.can_end()
    assert mask[eos].all(), f"EOS refused at the end of {prefix!r}"
    assert not mask[others].any()
    assert not matcher.is_finished()
    assert matcher.advance(eos[0])
    assert matcher.is_finished()
    assert not matcher.mask().any()
    assert not matcher.advance(ids[0] if ids else eos[0])
    return states


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
@pytest.mark.parametrize("tokenizer", WALK_TOKENIZERS)
def test_token_walks_of_accepted_texts(tokenizer: str, case: Case) -> None:
    tok = tokenized(tokenizer)
    compiled = compiled_for(case.name, tokenizer)
    for text in case.good:
        ids = tok.encode(text)
        assert ids
        walk(compiled, ids)


def test_rejected_texts_are_masked_at_the_first_token_that_leaves_the_language() -> None:
    tok = tokenized("qwen2.5")
    for case in CASES:
        compiled = compiled_for(case.name, "qwen2.5")
        for text in case.bad:
            ids = tok.encode(text) if text else []
            matcher = compiled.matcher()
            prefix = b""
            for token in ids:
                data = tok.vocabulary.token_bytes(token)
                alive = bool(
                    compiled.reference().feed(compiled.reference().initial(), prefix + data)
                )
                assert bool(matcher.mask()[token]) == alive, (case.name, text, prefix + data)
                if not alive:
                    assert not matcher.advance(token)
                    break
                assert matcher.advance(token)
                prefix += data
            else:
                assert not matcher.can_end(), (case.name, text)


# -- 2. random-logits fuzz -----------------------------------------------------------------

FUZZ_SEEDS = 10
FUZZ_MAX_TOKENS = 160
# Bytes that close things (strings, groups, lines): sampling prefers tokens made only of
# them now and then, so that texts end within the bound.
CLOSING = frozenset(b'"}]),\n!')


@functools.cache
def _closing_tokens(tokenizer: str) -> np.ndarray:
    vocabulary = tokenized(tokenizer).vocabulary
    closing = np.zeros(vocabulary.size, dtype=np.bool_)
    for token in np.flatnonzero(vocabulary.allowed_base).tolist():
        data = vocabulary.token_bytes(token)
        closing[token] = bool(data) and all(byte in CLOSING for byte in data)
    return closing


def sample(compiled: Compiled, seed: int, tokenizer: str = "qwen2.5") -> Iterator[Any]:
    """Random logits through the mask: yields ``(state, token)`` before each advance;
    returns at EOS (taken half the time it is allowed) or after FUZZ_MAX_TOKENS.
    Fails the test where the mask is empty (the nesting limit included).
    """
    vocabulary = compiled.vocabulary
    assert vocabulary is not None
    rng = np.random.default_rng(seed)
    closing = _closing_tokens(tokenizer)
    eos = sorted(vocabulary.eos_ids)
    matcher = compiled.matcher()
    for _ in range(FUZZ_MAX_TOKENS):
        mask = matcher.mask()
        if not mask.any():
            raise AssertionError(f"an empty mask before the text is finished: {matcher.state}")
        ordinary = mask.copy()
        ordinary[eos] = False
        if mask[eos[0]] and (rng.random() < 0.5 or not ordinary.any()):
            token = eos[0]
        else:
            pool = ordinary & closing if rng.random() < 0.3 else ordinary
            choices = np.flatnonzero(pool if pool.any() else ordinary)
            token = int(choices[rng.integers(choices.size)])
        yield matcher.state, token
        assert matcher.advance(token), f"advance refused token {token}, which the mask allowed"
        if matcher.is_finished():
            return


def sampled_states(compiled: Compiled, seed: int) -> list[Any]:
    """The states one fuzz run meets."""
    return [state for state, _ in sample(compiled, seed)]


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_random_logits_fuzz_only_finishes_on_accepted_text(case: Case) -> None:
    compiled = compiled_for(case.name, "qwen2.5")
    vocabulary = compiled.vocabulary
    assert vocabulary is not None
    finished = 0
    for seed in range(FUZZ_SEEDS):
        tokens = [token for _, token in sample(compiled, seed)]
        if tokens[-1] not in vocabulary.eos_ids:
            continue
        finished += 1
        data = vocabulary.decode(tokens[:-1])
        assert compiled.accepts(data), data
        assert case.judge(data.decode("utf-8")), f"the second judge refuses {data!r}"
        if case.name == "gbnf-json":
            json.loads(data)
    assert finished >= FUZZ_SEEDS // 3, f"only {finished} of {FUZZ_SEEDS} runs ended"


def test_the_nesting_limit_never_strands_the_matcher() -> None:
    """A grammar whose recursion is mandatory after a byte: at the limit, neither
    ``(`` nor a token starting ``(-`` is allowed any more (after it only a deeper call
    could go on), so the mask never empties; ``x`` closes the text, which is accepted.
    (Before: ``(`` and ``-`` stayed allowed at the limit, then no token was.)"""
    vocabulary = Vocabulary.from_token_bytes(
        [b"(", b"-", b")", b"x", b"(-", b"-(", b"-x", b""], eos_ids=[7]
    )
    compiled = compile_grammar('root ::= "(" "-" root ")" | "x"', vocabulary)
    limit = compiled.options.max_nesting_depth
    matcher = compiled.matcher()
    tokens: list[int] = []
    for level in range(limit + 8):
        mask = matcher.mask()
        assert mask.any(), f"an empty mask at level {level}"
        assert not mask[7], "end-of-sequence before the text is complete"
        if not mask[0]:
            break
        for token in (0, 1) if level % 2 else (4,):  # "(" "-", or "(-"
            assert matcher.mask()[token]
            assert matcher.advance(token)
            tokens.append(token)
    else:
        pytest.fail("the nesting limit was never met")
    assert level == limit  # (the documented depth holds: 256 levels of "(-")
    assert np.flatnonzero(matcher.mask()).tolist() == [3]  # only "x"
    assert matcher.advance(3)
    for _ in range(level):
        assert matcher.advance(2)
    assert matcher.can_end()
    assert matcher.advance(7)
    assert matcher.is_finished()
    text = compiled.vocabulary.decode([*tokens, 3, *[2] * level])
    assert compiled.accepts(text)
    deeper = b"(-" * (limit + 1) + b"x" + b")" * (limit + 1)
    mismatch = compiled.diagnose(deeper)
    assert mismatch is not None
    assert mismatch.offset == 2 * limit
    assert "deeper than max_nesting_depth (256)" in str(mismatch)
    assert 'expected "x"' in str(mismatch)  # (not "(", the byte refused)


# -- 3. masks against the reference matcher ------------------------------------------------

DIFF_SUBSET = 3000
DIFF_STATES = 8


class ReferenceMasks:
    """Masks by feeding each token's bytes through the slow reference matcher (memoised
    per (state, byte); tokens sorted by their bytes share the walk of a common prefix):
    the answer for a token is exactly ``bool(reference.feed(state, token_bytes))``."""

    def __init__(self, compiled: Compiled) -> None:
        vocabulary = compiled.vocabulary
        assert vocabulary is not None
        self.vocabulary = vocabulary
        self.reference = compiled.reference()
        ordinary = np.flatnonzero(vocabulary.allowed_base).tolist()
        self.order = np.array(sorted(ordinary, key=vocabulary.token_bytes))
        self.steps: dict[tuple[Any, int], Any] = {}

    def mask(self, state: Any, only: np.ndarray | None = None) -> np.ndarray:
        vocabulary = self.vocabulary
        allowed = np.zeros(vocabulary.size, dtype=np.bool_)
        order = self.order if only is None else self.order[np.isin(self.order, only)]
        prefix = b""
        states = [state]  # states[k]: the state after the first k bytes of prefix
        for token in order.tolist():
            data = vocabulary.token_bytes(token)
            common = 0
            limit = min(len(prefix), len(data))
            while common < limit and prefix[common] == data[common]:
                common += 1
            del states[common + 1 :]
            current = states[-1]
            for byte in data[common:]:
                if current:
                    key = (current, byte)
                    following = self.steps.get(key)
                    if following is None:
                        following = self.steps[key] = self.reference.step(current, byte)
                    current = following
                states.append(current)
            prefix = data
            allowed[token] = bool(current)
        if self.reference.can_end(state):
            allowed[sorted(vocabulary.eos_ids)] = True
        return allowed


def _spread(states: list[Any], count: int) -> list[Any]:
    unique = list(dict.fromkeys(states))
    picks = np.linspace(0, len(unique) - 1, min(count, len(unique))).round().astype(int)
    return [unique[i] for i in sorted(set(picks.tolist()))]


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_masks_equal_reference_masks_on_visited_states(case: Case) -> None:
    tok = tokenized("qwen2.5")
    compiled = compiled_for(case.name, "qwen2.5")
    vocabulary = tok.vocabulary
    states: list[Any] = []
    for text in case.good:
        states += walk(compiled, tok.encode(text))
    for seed in range(3):
        states += sampled_states(compiled, seed)  # (the fuzz test's first runs)
    reference = ReferenceMasks(compiled)
    rng = np.random.default_rng(int(hashlib.sha256(case.name.encode()).hexdigest()[:8], 16))
    picked = _spread(states, DIFF_STATES)
    assert len(picked) >= min(DIFF_STATES, 4)
    for number, state in enumerate(picked):
        fast = compiled.engine.mask(state)
        if number == len(picked) // 2:  # one state against the whole vocabulary
            slow = reference.mask(state)
        else:
            subset = rng.choice(vocabulary.size, size=DIFF_SUBSET, replace=False)
            only = np.union1d(subset, np.flatnonzero(fast))
            slow = reference.mask(state, only)
            keep = np.zeros(vocabulary.size, dtype=np.bool_)
            keep[only] = True
            keep[sorted(vocabulary.special_ids)] = True
            fast = fast & keep
        differ = np.flatnonzero(fast != slow)
        assert not differ.size, f"{differ.size} tokens differ, e.g. " + ", ".join(
            f"{vocabulary.token_bytes(int(t))!r} fast={bool(fast[t])}" for t in differ[:6]
        )


# -- 4. JSON in GBNF against compile_schema({}) --------------------------------------------

# Instances longer than this (compact UTF-8) are judged in a fixed sample only (one in
# LARGE_SHARE, by hash), unless JSONMODE_FULL_GATES=1.
SMALL_BYTES = 512
LARGE_SHARE = 8
VARIATION_SHARE = 10  # one instance in this many is also judged in the variations


def _maskbench_values() -> list[Any]:
    files = sorted(MASKBENCH.glob("*.jsonl.gz"))
    assert files, f"MaskBench missing under {MASKBENCH}"
    values = []
    for path in files:
        with gzip.open(path, "rt", encoding="utf-8") as handle:
            for line in handle:
                values += [case["data"] for case in json.loads(line)["tests"]]
    return values


def _chosen(text: str, share: int) -> bool:
    return (
        int(hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:8], 16) % share == 0
    )


def _variations(value: Any) -> list[str]:
    compact = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    return [
        json.dumps(value, separators=(",", ":")),  # ASCII escapes
        json.dumps(value, ensure_ascii=False),  # ", " and ": "
        json.dumps(value, indent=1),  # newlines: refused by both
        " " + compact,
        "  " + compact,
        compact + " ",
        json.dumps(value, separators=(", ", " : ")),
        json.dumps(value, separators=(",  ", ":  ")),  # two spaces: refused by both
        json.dumps(value, separators=(",\t", ":")),
    ]


class Judge:
    """``compiled.accepts`` with the reference matcher's steps memoised across texts
    (``ReferenceMatcher.step`` is a pure function of (state, byte): the verdict is
    exactly ``accepts``'s, ~4x sooner, which is what lets this judge ~25k texts)."""

    def __init__(self, compiled: Compiled) -> None:
        self.reference = compiled.reference()
        self.initial = self.reference.initial()
        self.steps: dict[tuple[Any, int], Any] = {}

    def __call__(self, text: str) -> bool:
        try:
            data = text.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate: accepts() says no
            return False
        state, steps, step = self.initial, self.steps, self.reference.step
        for byte in data:
            key = (state, byte)
            following = steps.get(key)
            if following is None:
                following = steps[key] = step(state, byte)
            state = following
            if not state:
                return False
        return self.reference.can_end(state)


def test_json_gbnf_judges_maskbench_instances_like_compile_schema() -> None:
    # (JSON_GBNF spells strings in every way JSON allows: so does spelling="complete".)
    schema = compile_schema({}, max_nesting_depth=DEPTH, spelling="complete")
    grammar = compile_grammar(JSON_GBNF, max_nesting_depth=DEPTH)
    by_schema, by_grammar = Judge(schema), Judge(grammar)
    judged = accepted = instances = compact_accepted = 0
    disagreements: list[str] = []
    for value in _maskbench_values():
        compact = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
        size = len(compact.encode("utf-8", "surrogatepass"))
        if not FULL and size > SMALL_BYTES and not _chosen(compact, LARGE_SHARE):
            continue
        texts = [compact]
        if FULL or _chosen(compact, VARIATION_SHARE):
            texts += _variations(value)
        for text in texts:
            verdict = by_schema(text)
            if judged % 50 == 0:  # the memoised judges are accepts()
                assert schema.accepts(text) == verdict
                assert grammar.accepts(text) == by_grammar(text)
            judged += 1
            accepted += verdict
            if text is compact:
                instances += 1
                compact_accepted += verdict
            if by_grammar(text) != verdict:
                disagreements.append(f"compile_schema says {verdict}: {text[:200]!r}")
    print(f"\nJSON GBNF vs compile_schema({{}}): {judged} texts, {accepted} accepted by both")
    assert not disagreements, f"{len(disagreements)} disagreements:\n" + "\n".join(
        disagreements[:10]
    )
    assert instances > 20_000
    assert judged > instances
    # Every instance is JSON (MaskBench's invalid ones are invalid for their schema):
    # the compact spelling is refused only where it cannot be UTF-8 (a lone surrogate).
    assert compact_accepted > 0.99 * instances


MUTATIONS = 600
MASK_WALKS = 25  # MaskBench instances walked through both (Qwen2.5)
MASK_FUZZ_RUNS = 3
# Bytes mutations draw from: JSON's own, whitespace, escapes' letters, control bytes,
# a few UTF-8 lead/continuation bytes.
_ALPHABET = b"{}[]:,\"\\ \t\n\r0123456789-+.eEtrufalsnbu/xdDaAfFvU'\x00\x1f\x7f\xc3\xa9\xed\xa0\x80"


def _mutate(data: bytes, rng: np.random.Generator) -> bytes:
    where = int(rng.integers(len(data) + 1))
    byte = bytes([_ALPHABET[int(rng.integers(len(_ALPHABET)))]])
    kind = int(rng.integers(7))
    if kind == 0 and data:  # delete
        where = min(where, len(data) - 1)
        return data[:where] + data[where + 1 :]
    if kind == 1:  # insert
        return data[:where] + byte + data[where:]
    if kind == 2 and data:  # replace
        where = min(where, len(data) - 1)
        return data[:where] + byte + data[where + 1 :]
    if kind == 3:  # truncate
        return data[:where]
    if kind == 4 and len(data) > 1:  # swap two neighbours
        where = min(where, len(data) - 2)
        return (
            data[:where] + data[where + 1 : where + 2] + data[where : where + 1] + data[where + 2 :]
        )
    if kind == 5:  # a space after a separator (or two)
        found = [i + 1 for i, byte in enumerate(data) if byte in b",:"]
        if found:
            where = found[int(rng.integers(len(found)))]
            return data[:where] + b" " * int(rng.integers(1, 3)) + data[where:]
    return data[:where] + b" " + data[where:]  # a space somewhere


HAND_WRITTEN_JSON = [
    "01", "1.", ".5", "+1", "1e", "1e+", "-", "-0", "0e0", "1E-07", "00", "1.0e", "Infinity",
    "NaN", "tru", "nul", "[1,]", "[,1]", "{,}", '{"a"}', '{"a":}', '{"a":1 ,"b":2}',
    '{"a": 1}', '{"a":  1}', "[ 1]", "[1 ]", "[1, 2]", "[1,\t2]", "[1,\n2]", "'a'",
    '"\\u12"', '"\\u12345"', '"\\U0041"', '"\\x41"', '"\\ud800"', '"\\udc00"',
    '"\\ud800\\udc00"', '"\\uDBFF\\uDFFF"', '"\\ud800\\ud800"', '"\\udc00\\ud800"',
    '"\\uD83D\\u0041"', '"\\u0000"', '"\\/"', '"\\a"', '"\x7f"', '"\x1f"', '"\t"', '"é"',
    '"\U0001f600"', "[[[[[[[[]]]]]]]]", '{"":{"":{"":[]}}}', "  1", " 1", "1 ", "",
    '{"a":1,  "b":2}', '{"a":  1}', '{"a":1, "b": [1,  2]}', '"\\v"', '"\\0"', '"\\\'"',
]  # fmt: skip


def test_json_gbnf_judges_mutated_and_invalid_texts_like_compile_schema() -> None:
    # (JSON_GBNF spells strings in every way JSON allows: so does spelling="complete".)
    schema = compile_schema({}, max_nesting_depth=DEPTH, spelling="complete")
    grammar = compile_grammar(JSON_GBNF, max_nesting_depth=DEPTH)
    values = _maskbench_values()
    rng = np.random.default_rng(25)
    texts: list[bytes] = [text.encode() for text in HAND_WRITTEN_JSON]
    for _ in range(MUTATIONS):
        value = values[int(rng.integers(len(values)))]
        data = json.dumps(value, separators=(",", ":"), ensure_ascii=bool(rng.integers(2))).encode(
            "utf-8", "surrogatepass"
        )
        data = data[:300]  # (the mutation counts, not the length)
        for _ in range(int(rng.integers(1, 4))):
            data = _mutate(data, rng)
        texts.append(data)
    rejected = 0
    for data in texts:
        verdict = schema.accepts(data)
        rejected += not verdict
        assert grammar.accepts(data) == verdict, f"compile_schema says {verdict}: {data!r}"
    assert rejected > len(texts) // 2


def test_json_gbnf_masks_equal_compile_schema_masks_along_walks() -> None:
    """The two accept the same texts, so after the same prefix they allow the same
    tokens: walk MaskBench instances (and fuzzed documents) with Qwen2.5 through both."""
    tok = tokenized("qwen2.5")
    schema = compile_schema({}, tok.vocabulary, max_nesting_depth=DEPTH, spelling="complete")
    grammar = compile_grammar(JSON_GBNF, tok.vocabulary, max_nesting_depth=DEPTH)
    texts = [json.dumps(v, separators=(",", ":"), ensure_ascii=False) for v in _maskbench_values()]
    texts = [text for text in texts[::997] if len(text) < 1000][:MASK_WALKS]
    steps = 0
    for text in texts:
        a, b = schema.matcher(), grammar.matcher()
        for token in tok.encode(text):
            assert np.array_equal(a.mask(), b.mask()), (text, a.state)
            assert a.advance(token)
            assert b.advance(token)
            steps += 1
        assert np.array_equal(a.mask(), b.mask())
        assert a.can_end()
        assert b.can_end()
    for seed in range(MASK_FUZZ_RUNS):
        b = grammar.matcher()
        for state, token in sample(schema, 500 + seed):
            assert np.array_equal(schema.engine.mask(state), b.mask())
            assert b.advance(token)
            steps += 1
    assert steps > 300


# -- 5. the benchmark's grammars (bench/grammars.py) ---------------------------------------


def test_the_benchmark_grammars_accept_their_texts_and_csv_matches_the_builtin() -> None:
    """bench/grammars.py times jsonmode on its GBNF and peers on translations: the GBNF
    must accept every text it walks, and its hand-written CSV must be the language of
    ``compile_csv`` (the peers get the former, jsonmode the latter)."""
    import importlib.util

    path = pathlib.Path(__file__).resolve().parents[1] / "bench" / "grammars.py"
    spec = importlib.util.spec_from_file_location("bench_grammars", path)
    assert spec is not None
    assert spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("bench_grammars", bench)  # (its dataclasses look it up)
    spec.loader.exec_module(bench)

    rng = np.random.default_rng(7)
    for name, grammar in bench.GRAMMARS.items():
        compiled = compile_grammar(grammar.gbnf)
        texts = grammar.texts(random.Random(2025))
        assert texts, name
        for text in texts:
            assert compiled.accepts(text), (name, text[:100])
        if grammar.builtin == "csv":
            builtin = compile_csv(bench.CSV_ROW)
            for _ in range(300):
                data = texts[int(rng.integers(len(texts)))].encode()[:150]
                for _ in range(int(rng.integers(1, 3))):
                    data = _mutate(data, rng)
                assert compiled.accepts(data) == builtin.accepts(data), data
