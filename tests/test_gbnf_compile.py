"""What a GBNF grammar compiles to, for speed (issue 43, grammars): calls inside counted
repetitions stay calls, character classes are built directly; each checked against the
slower construction it replaces (the same automata, or the same language and masks)."""

from __future__ import annotations

import functools
import pathlib
import random
import sys
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.recursive_grammars import ARITHMETIC, NESTED
from tokenizers import Tokenizer

from jsonmode import compile_grammar
from jsonmode import regex as rx
from jsonmode.decoding.grammars import compiled as compiled_module
from jsonmode.decoding.grammars import gbnf, gbnf_sets
from jsonmode.decoding.ir import Lex, Lit, nodes
from jsonmode.decoding.vocabulary import Vocabulary
from jsonmode.regex import byte_dfa

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

import grammars as bench_grammars  # noqa: E402  (bench/grammars.py: the four grammars)

CHESS = bench_grammars.CHESS_GBNF


def _texts(name: str) -> list[str]:
    return bench_grammars.GRAMMARS[name].texts(random.Random(7))


# -- counted repetitions of rules ---------------------------------------------------------


def test_a_rule_repeated_by_a_count_stays_one_call_and_builds_once() -> None:
    compiled = compile_grammar(CHESS)
    # 60 copies of `turn` written in place made one 2 700-state automaton (45 ms).
    assert "turn" in compiled.grammar.rules
    assert compiled.network.n_states < 400
    for text in _texts("chess"):
        assert compiled.accepts(text)
        assert not compiled.accepts(text + " ")
    turns = " ".join(f"{n}. e4 e5" for n in range(1, 61))
    assert compiled.accepts(turns)
    assert not compiled.accepts(turns + " 61. e4")  # the count still holds


def test_small_counted_repetitions_are_still_written_in_place() -> None:
    compiled = compile_grammar("root ::= hex{4}\nhex ::= [0-9a-f]")
    assert set(compiled.grammar.rules) == {"root"}


@pytest.fixture(scope="module")
def qwen() -> tuple[Vocabulary, Tokenizer]:
    path = bench_grammars.decoder.TOKENIZER_DIR
    return Vocabulary.from_tokenizer(path), Tokenizer.from_file(str(path / "tokenizer.json"))


def test_called_and_inlined_repetitions_give_the_same_masks(
    qwen: tuple[Vocabulary, Tokenizer], monkeypatch: pytest.MonkeyPatch
) -> None:
    vocabulary, tokenizer = qwen
    called = compile_grammar(CHESS, vocabulary)
    # The former construction: every copy written in place (no size bound on inlining;
    # another text, so not the cached constraint).
    monkeypatch.setattr(compiled_module, "MAX_INLINE_NODES", 1 << 40)
    inlined = compile_grammar(CHESS + "\n", vocabulary)
    assert "turn" not in inlined.grammar.rules
    assert inlined.network.n_states > 2000
    for text in _texts("chess")[:2]:
        _same_masks_along(called, inlined, tokenizer.encode(text, add_special_tokens=False).ids)


def _same_masks_along(one_grammar: Any, two_grammar: Any, ids: list[int]) -> None:
    """Both grammars' matchers take ``ids`` in lockstep with equal token bitmasks at
    every step, each token allowed, and the text may end after them (EOS allowed)."""
    words = (one_grammar.vocabulary.size + 31) // 32
    one, two = one_grammar.matcher(), two_grammar.matcher()
    for token in [*ids, None]:
        a = np.zeros(words, dtype=np.int32)
        b = np.zeros(words, dtype=np.int32)
        one.fill_bitmask(a)
        two.fill_bitmask(b)
        assert np.array_equal(a, b)
        if token is None:
            break
        assert a[token // 32] >> (token % 32) & 1
        assert one.advance(token)
        assert two.advance(token)
    eos = min(one_grammar.vocabulary.eos_ids)
    assert a[eos // 32] >> (eos % 32) & 1  # the text may end here


# -- rules called from recursive rules -----------------------------------------------------

# Pretty-printed JSON as llama.cpp's JSON grammars allow it (bench/grammars_more.py): a
# white-space rule of 22 states (up to 20 blanks of indentation) after every token,
# strings and numbers rules of their own, all called from recursive rules.
PRETTY_JSON = bench_grammars.grammar_set("more")["pretty"].gbnf
PRETTY = '{\n  "name": "Ann",\n  "tags": [\n    "a",\n    -2.5e3\n  ],\n  "x": {"y": null}\n}'


def test_big_rules_called_from_recursive_rules_stay_calls() -> None:
    compiled = compile_grammar(PRETTY_JSON)
    assert {"sp", "str", "num"} <= set(compiled.grammar.rules)
    # In place, each call of sp copied its 22 states into obj (and val, arr).
    assert compiled.network.rules[compiled.network.names["obj"]].n_states < 40
    assert compiled.accepts(PRETTY)
    assert not compiled.accepts(PRETTY.replace("    ", " " * 25, 1))  # over 20 blanks


def test_small_rules_and_repeated_items_are_still_written_in_place() -> None:
    compiled = compile_grammar(
        r"""root ::= "(" (root | atom)? ")" sep char*
        atom ::= [a-z] [a-z0-9]*
        sep ::= ";"?
        char ::= "<" ( [^<>\\] | "\\" ["<>\\nt] | "\\u" [0-9a-f]{4} | "\\U" [0-9a-f]{8} ) ">"
        """
    )
    # atom and sep are small; char, over the bound, is a repetition's whole item (a call
    # per item).
    assert set(compiled.grammar.rules) == {"root"}
    assert compiled.accepts("((ab1);<x>)<\\u00e9>")
    assert not compiled.accepts("((ab1)<x>;)")


def test_called_and_inlined_rules_of_recursive_rules_give_the_same_masks(
    qwen: tuple[Vocabulary, Tokenizer], monkeypatch: pytest.MonkeyPatch
) -> None:
    vocabulary, tokenizer = qwen
    called = compile_grammar(PRETTY_JSON, vocabulary)
    # The former construction: every non-recursive rule written in place (another
    # text, so not the cached constraint).
    monkeypatch.setattr(compiled_module, "MAX_STRUCTURAL_INLINE_NODES", 1 << 40)
    inlined = compile_grammar(PRETTY_JSON + "\n", vocabulary)
    assert set(inlined.grammar.rules) == {"root", "val", "obj", "pair", "arr"}
    obj = inlined.network.rules[inlined.network.names["obj"]]
    assert obj.n_states > 60
    for text in (PRETTY, '{"a": [1, {"b": "c\\n"}], "d": true}'):
        _same_masks_along(called, inlined, tokenizer.encode(text, add_special_tokens=False).ids)


# -- character classes ----------------------------------------------------------------------


def _utf8_set_dfa(intervals: tuple[tuple[int, int], ...]) -> Any:
    """The general construction of one character of a set (the reference)."""
    dfa = rx.CharDFA(0, (False, True), (tuple((lo, hi, 1) for lo, hi in intervals), ()))
    return rx.utf8_byte_dfa(dfa)


def _same_dfa(one: Any, two: Any) -> bool:
    return (
        one.start == two.start
        and np.array_equal(one.accepting, two.accepting)
        and np.array_equal(one.trans, two.trans)
    )


def _lexemes(expr: Any) -> list[Lex]:
    return [node for node in nodes(expr) if isinstance(node, Lex)]


CLASS_GRAMMARS = [
    bench_grammars.JSON_GBNF,
    bench_grammars.CHESS_GBNF,
    bench_grammars.ARITHMETIC_GBNF,
    bench_grammars.CSV_GBNF,
    ARITHMETIC,
    NESTED,
    r"root ::= [a-cx-z0-9_] [a-] [-a] [^a-z] [\]\[\\\x2D^] [\x41-\x43] [\t\n\r ] [\x00-\x7f] .",
    r"root ::= [\x41-\x43\u00e9] [ぁ-ゟ] [\U0001F600-\U0001F64F] [^\n] [a-c]",
]


def _byte_runs(row: Any) -> tuple[tuple[int, int], ...]:
    """The runs of bytes a table row reads."""
    runs: list[tuple[int, int]] = []
    for byte in np.flatnonzero(row >= 0).tolist():
        if runs and runs[-1][1] == byte - 1:
            runs[-1] = (runs[-1][0], byte)
        else:
            runs.append((byte, byte))
    return tuple(runs)


def _class_text(intervals: tuple[tuple[int, int], ...]) -> str:
    return "[" + "".join(f"\\x{lo:02x}-\\x{hi:02x}" for lo, hi in intervals) + "]"


@pytest.mark.parametrize("grammar", CLASS_GRAMMARS)
def test_every_ascii_class_automaton_is_the_general_constructions(grammar: str) -> None:
    lexemes = [lex for expr in gbnf.parse(grammar).rules.values() for lex in _lexemes(expr)]
    ascii_sets = 0
    for lex in lexemes:
        runs = _byte_runs(lex.dfa.trans[lex.dfa.start])
        if runs[-1][1] <= 0x7F:  # one ASCII character: the direct construction
            ascii_sets += 1
            assert _same_dfa(lex.dfa, _utf8_set_dfa(runs)), lex.label
            assert not lex.dfa.trans.flags.writeable
            assert not lex.dfa.accepting.flags.writeable
    assert ascii_sets or grammar == NESTED  # (NESTED has only single characters)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 0x7F), st.integers(0, 0x7F)), min_size=1, max_size=8))
def test_ascii_classes_are_built_as_the_general_construction(pairs: list[tuple[int, int]]) -> None:
    intervals = tuple(sorted((min(a, b), max(a, b)) for a, b in pairs))
    made = gbnf.parse("root ::= " + _class_text(intervals)).rules["root"]
    chars = sorted({c for lo, hi in intervals for c in range(lo, hi + 1)})
    if len(chars) == 1:
        assert made == Lit(bytes(chars))
        return
    assert isinstance(made, Lex)
    assert _byte_runs(made.dfa.trans[made.dfa.start]) == _byte_runs(
        np.array([c in chars for c in range(256)], dtype=np.int32) - 1
    )
    assert _same_dfa(made.dfa, _utf8_set_dfa(_byte_runs(made.dfa.trans[made.dfa.start])))


def test_no_class_takes_the_general_construction(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every class is built straight from its ranges (rx.utf8_char_set_dfa, held to the
    general construction by tests/test_char_set_dfa.py), ASCII or not."""
    built: list[int] = []
    general = rx.utf8_byte_dfa
    monkeypatch.setattr(rx, "utf8_byte_dfa", lambda dfa: built.append(1) or general(dfa))
    monkeypatch.setattr(gbnf_sets, "_set_cache", {})
    direct: list[int] = []
    straight = rx.utf8_char_set_dfa
    monkeypatch.setattr(rx, "utf8_char_set_dfa", lambda sets: direct.append(1) or straight(sets))
    gbnf.parse(bench_grammars.JSON_GBNF)  # eleven ASCII classes, and [^"\\\x00-\x1f]
    assert (len(built), len(direct)) == (0, 12)
    gbnf.parse(bench_grammars.CHESS_GBNF)
    assert len(built) == 0


# -- trimming small byte automata ------------------------------------------------------------


@st.composite
def char_dfas(draw: st.DrawFn) -> rx.CharDFA:
    """Small character automata: per state, sorted disjoint intervals to random states
    (code points across every UTF-8 length, surrogates included)."""
    count = draw(st.integers(1, 4))
    points = st.integers(0, 0x10FFFF) | st.sampled_from([0x7F, 0x80, 0x7FF, 0x800, 0xD7FF, 0xE000])
    rows = []
    for _ in range(count):
        cuts = sorted(set(draw(st.lists(points, max_size=8))))
        row = [
            (lo, hi, draw(st.integers(0, count - 1)))
            for lo, hi in zip(cuts[::2], cuts[1::2], strict=False)
        ]
        rows.append(tuple(row))
    accepting = tuple(draw(st.lists(st.booleans(), min_size=count, max_size=count)))
    return rx.CharDFA(draw(st.integers(0, count - 1)), accepting, tuple(rows))


def _both_finishes(build: Any, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, Any]:
    plain = build()
    with monkeypatch.context() as patch:
        patch.setattr(byte_dfa, "PLAIN_FINISH_RANGES", -1)  # every builder through NumPy
        general = build()
    return plain, general


@settings(max_examples=300, deadline=None)
@given(char_dfas(), st.sampled_from(["utf8", "json", "complete"]))
def test_small_automata_are_trimmed_as_the_numpy_passes_trim_them(
    dfa: rx.CharDFA, kind: str
) -> None:
    build = {
        "utf8": lambda: rx.utf8_byte_dfa(dfa),
        "json": lambda: rx.json_string_body_dfa(dfa),
        "complete": lambda: rx.json_string_body_dfa(dfa, complete=True),
    }[kind]
    with pytest.MonkeyPatch.context() as monkeypatch:
        plain, general = _both_finishes(build, monkeypatch)
    assert _same_dfa(plain, general)
    assert not plain.trans.flags.writeable
    assert not plain.accepting.flags.writeable
    assert plain.trans.dtype == np.int32
    assert plain.accepting.dtype == np.bool_


@pytest.mark.parametrize("grammar", CLASS_GRAMMARS)
def test_grammar_lexemes_are_the_same_on_both_trimming_paths(
    grammar: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    plain, general = _both_finishes(lambda: gbnf.parse(grammar), monkeypatch)
    one = [lex for expr in plain.rules.values() for lex in _lexemes(expr)]
    two = [lex for expr in general.rules.values() for lex in _lexemes(expr)]
    assert [lex.label for lex in one] == [lex.label for lex in two]
    assert all(_same_dfa(a.dfa, b.dfa) for a, b in zip(one, two, strict=True))


def test_small_automata_skip_the_numpy_passes(monkeypatch: pytest.MonkeyPatch) -> None:
    dfa = rx.CharDFA(0, (False, True), (((0x20, 0x10FFFF, 1),), ()))
    expected = rx.utf8_byte_dfa(dfa)

    def refused(*args: object, **kwargs: object) -> None:
        raise AssertionError("np.unique called")

    monkeypatch.setattr(np, "unique", refused)
    assert _same_dfa(rx.utf8_byte_dfa(dfa), expected)
    assert _same_dfa(rx.json_string_body_dfa(dfa), rx.json_string_body_dfa(dfa))


def _maskbench_patterns(limit: int) -> list[str]:
    """The first ``limit`` distinct ``pattern`` keywords of the MaskBench schemas."""
    import gzip
    import json

    found: dict[str, None] = {}

    def visit(node: Any) -> None:
        if isinstance(node, dict):
            if isinstance(node.get("pattern"), str):
                found.setdefault(node["pattern"])
            for value in node.values():
                visit(value)
        elif isinstance(node, list):
            for value in node:
                visit(value)

    for path in sorted(bench_grammars.decoder.MASKBENCH.glob("*.jsonl.gz")):
        with gzip.open(path, "rt", encoding="utf-8") as handle:
            for line in handle:
                visit(json.loads(line)["schema"])
                if len(found) >= limit:
                    return list(found)
    return list(found)


def test_maskbench_patterns_are_trimmed_alike_on_both_paths(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    compared = 0
    for pattern in _maskbench_patterns(120):
        try:
            dfa = rx.compile_pattern(pattern)
        except Exception:  # (outside the subset: not this test's concern)
            continue
        for build in (
            functools.partial(rx.utf8_byte_dfa, dfa),
            functools.partial(rx.json_string_body_dfa, dfa),
            functools.partial(rx.json_string_body_dfa, dfa, complete=True),
        ):
            plain, general = _both_finishes(build, monkeypatch)
            assert _same_dfa(plain, general), pattern
            compared += 1
    assert compared >= 150
