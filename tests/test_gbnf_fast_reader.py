"""The one-pass GBNF reader (``gbnf_fast.read``) against the reference reader
(``gbnf._Parser``, what ``gbnf.parse`` runs when the fast reader declines): for every
text, the same grammar (rules, expressions, lexemes' automata) or the same error (type,
message, line, column, hint). Texts: the benchmark's grammars (every set), every
grammar text the GBNF tests name, hand-written edge cases, and Hypothesis-generated
texts from pieces that make well-formed and malformed grammars alike. The fast reader
must also read (not decline) every well-formed benchmark grammar, or these tests would
compare the reference reader with itself."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jsonmode.budget import deadline
from jsonmode.decoding.grammars import gbnf, gbnf_fast
from jsonmode.decoding.ir import Lex, nodes
from jsonmode.errors import BudgetExceededError, JsonModeError

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import grammars as bench_grammars

_BENCH = {
    **bench_grammars.GRAMMARS,
    **bench_grammars.grammar_set("wide"),
    **bench_grammars.grammar_set("more"),
}
_BENCH_TEXTS = {name: spec.gbnf for name, spec in _BENCH.items() if spec.gbnf}


def _outcome(text: str, externals: frozenset[str] = frozenset()) -> str:
    try:
        grammar = gbnf.parse(text, externals=externals)
    except JsonModeError as error:
        where = (getattr(error, "line", None), getattr(error, "column", None))
        return f"{type(error).__name__}: {error} at {where} hint {error.hint}"
    lexemes = [
        (node.label, node.dfa.start, node.dfa.accepting.tobytes(), node.dfa.trans.tobytes())
        for expr in grammar.rules.values()
        for node in nodes(expr)
        if isinstance(node, Lex)
    ]
    return f"{grammar!r} {lexemes!r}"


def _reference(text: str, externals: frozenset[str] = frozenset()) -> str:
    saved = gbnf_fast.read
    gbnf_fast.read = lambda text, externals: None  # type: ignore[assignment]
    try:
        return _outcome(text, externals)
    finally:
        gbnf_fast.read = saved  # type: ignore[assignment]


def _assert_same(text: str, externals: frozenset[str] = frozenset()) -> None:
    assert _outcome(text, externals) == _reference(text, externals), text


def _named_texts() -> Iterator[str]:
    """Every grammar text the GBNF test modules pass to their parametrised tests."""
    for module_name in ("test_gbnf", "test_gbnf_compile", "test_gbnf_fast_paths"):
        module = importlib.import_module(module_name)
        for value in vars(module).values():
            for mark in getattr(value, "pytestmark", ()):
                if mark.name == "parametrize":
                    yield from _strings(mark.args[1])


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        if "::=" in value or ":" in value or "=" in value:
            yield value
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _strings(item)
    elif hasattr(value, "values"):  # (pytest.param)
        yield from _strings(value.values)


_EDGES = [
    # well-formed
    'root ::= "a" | \n "b"\n',
    'root ::= ( "a"\n | "b" )\n',
    'root ::=\n  "a" x\nx ::= [a-z]{2,5} [0-9]{ 3 } "z"{1,} "y"{0,2}? .*',
    '\ufeffroot ::= "x" # comment\n\n# more\r\nx ::= "y"\r',
    'root ::= "a\\n\\t\\r\\\\\\"\\[\\]\\x41\\u00e9\\U0001F600"',
    "root ::= [\\x00-\\x1f\\]\\[\\\\a-] [^\\n] [\\u0100-\\uFFFF] [a\\-] [--\\x41]",
    "root ::= [\n] [^\n\r]",
    'root ::= "a" ("b" ("c" "d")*)+ | "" | ()',
    'root ::= x\nx ::= "a" x | "b"',
    'root ::= "(" root ")" | ""',
    "root ::= a\na ::= b\nb ::= c\nc ::= [0-9]{0000}",
    'root ::= "a"{0} "b"{1} "c"{1,1} []a]',
    "root ::= [a-a] [\ud800-\udfff] [\ud7ff-\ue000]",
    'root ::= "é" [é-ü] "\U0001f600"',
    'root ::= "a" |',
    "root ::= ",
    'root ::= "a" | | "b"',
    'root ::= "a"*+?{2}',
    'root::=x\nx::="y"',
    # malformed or left to the reference reader
    'root ::= "\\ud83d\\ude00"',
    'root ::= "\\uD800"',
    'root ::= "a\ud800"',
    'root ::= "\\U00110000"',
    "root ::= [\\U00110000]",
    'root ::= "\\q"',
    'root ::= "\\x4"',
    'root ::= "a\\',
    'root ::= "abc',
    "root ::= [abc",
    "root ::= [z-a]",
    "root ::= [\\x42-\\x41]",
    "root ::= [] | [^]",
    "root ::= ()) ",
    'root ::= ("a"',
    'root ::= "a"{3,1}',
    'root ::= "a"{2000000}',
    'root ::= "a"{ 2 #c\n}',
    'root ::= "a"{,2}',
    'root ::= *"a"',
    'root ::= "a"\n| "b"',
    'root ::= "a" ::= "b"',
    'root ::= "a"\nb ::= "c" x',
    'root ::= "a"\nroot ::= "b"',
    'start ::= "a"',
    "",
    "# nothing\n",
    'root ::= <[1000]> "a"',
    "root ::= !<x>",
    'root ::= my_rule\nmy_rule ::= "a"',
    'root ::= expr\nexpr ::= expr "+" "1" | "1"',
    'root ::= a\na ::= b? a "x"\nb ::= "y"',
    'start: "a" b\nb: "c"',
    'root = "a"',
    '<root> ::= "a"',
    'root ::= "a" \f "b"',
    "root ::= " + "(" * 60 + '"a"' + ")" * 60,
    "root ::= " + "(" * 130 + '"a"' + ")" * 130,
    'root ::= "a"' + "*" * 130,
    'root ::= "a"' + "?" * 40 + ' ("b"' + "+" * 40 + ")",
    'root ::= x\nx ::= "a" (',
    'root ::= "a" {2} "b" * ( "c" ) + # c {2}\n',
    'root ::= "a"\n{2}',
    'root ::= "a" #c\n  | "b"',
    'root ::= ( # c\n "a" # d\n ) # e',
    "root ::= 123 a-b\n123 ::= [0-9]\na-b ::= [a-b]",
]


@pytest.mark.parametrize("name", sorted(_BENCH_TEXTS))
def test_the_fast_reader_reads_every_benchmark_grammar_as_the_reference(name: str) -> None:
    text = _BENCH_TEXTS[name]
    assert gbnf_fast.read(text, frozenset()) is not None  # (read here, not declined)
    _assert_same(text)


def test_named_texts_read_as_the_reference() -> None:
    texts = sorted(set(_named_texts()))
    assert len(texts) > 100
    read = 0
    for text in texts:
        _assert_same(text)
        read += gbnf_fast.read(text, frozenset()) is not None
    assert read > 50  # (most of them well-formed: read by the fast reader)


@pytest.mark.parametrize("text", _EDGES)
def test_edge_cases_read_as_the_reference(text: str) -> None:
    _assert_same(text)


@pytest.mark.parametrize(
    "text",
    [
        'root ::= "a" x\nx ::= [a-z]+ "b"{2,3}',
        'root ::= "a\\x41" [\\x00-\\x1f\\]] ("b" | "c")* .',
        "root ::= [a-] [-a] [a-b-c] [^^]",
    ],
)
def test_the_fast_reader_reads_well_formed_text(text: str) -> None:
    assert gbnf_fast.read(text, frozenset()) is not None
    _assert_same(text)


def test_externals_read_as_the_reference() -> None:
    for text in ['root ::= "a" item', "item ::= root", 'x ::= "y"', 'root ::= item\nitem ::= "a"']:
        for externals in (frozenset(), frozenset({"item"}), frozenset({"root", "item"})):
            _assert_same(text, externals)
    assert gbnf_fast.read('root ::= "a" item', frozenset({"item"})) is not None


@pytest.mark.parametrize(
    ("text", "least"),
    [
        ("root ::= " + " ".join(f'"{k}"' for k in range(300)), 5),
        ("root ::= " + "|" * 300, 5),
        ("root ::= " + "(" * 40 + ")" * 40, 2),
        ("\n\n".join(f'r{k} ::= "a"' for k in range(300)), 300),
    ],
)
def test_the_fast_reader_keeps_the_deadline(
    monkeypatch: pytest.MonkeyPatch, text: str, least: int
) -> None:
    """The deadline is checked once per rule and every 64 tokens of a rule."""
    assert gbnf_fast.read(text, frozenset({"root"})) is not None  # (read here, not declined)
    checked: list[int] = []
    monkeypatch.setattr(gbnf_fast, "checkpoint", lambda: checked.append(1))
    gbnf_fast.read(text, frozenset({"root"}))
    assert len(checked) >= least
    monkeypatch.undo()
    with deadline(0.0), pytest.raises(BudgetExceededError):
        gbnf_fast.read(text, frozenset({"root"}))


_PIECES = [
    "root", "x", "y-1", " ", "  ", "\t", "\n", "\r\n", " | ", "|", "(", ")", "(", ")",
    '"a"', '"bc"', '""', '"\\n"', '"\\x41"', '"\\u00e9"', '"\\U0001F600"', '"\\q"',
    '"\\uD83D\\uDE00"', '"é"', '"a', "[a-z]", "[^a]", "[a-]", "[\\]a]", "[\\x00-\\x1f]",
    "[]", "[z-a]", "[\\x41-\\x40]", "[é-\U0001f600]", ".", "*", "+", "?", "{2}", "{1,3}",
    "{ 0 , }", "{3,1}", "{,", "::=", " ::= ", "# c\n", "_", "<", "!<", ":", "=", "\ud800",
]  # fmt: skip


# Hypothesis's settings for the two generators (400 texts each, no example database).
_GENERATED = settings(
    max_examples=400,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)


@_GENERATED
@given(
    rules=st.lists(
        st.tuples(
            st.sampled_from(["root", "x", "y-1", "z"]),
            st.lists(st.sampled_from(_PIECES), max_size=12),
        ),
        min_size=1,
        max_size=4,
    ),
    separator=st.sampled_from(["\n", "\r\n", "\n\n# comment\n", " "]),
)
def test_generated_texts_read_as_the_reference(
    rules: list[tuple[str, list[str]]], separator: str
) -> None:
    text = separator.join(f"{name} ::= {''.join(body)}" for name, body in rules)
    _assert_same(text)


_NAMES = ["root", "x", "y-1", "z"]
_LITERAL_PIECES = [
    "a", "b", "é", "\U0001f600", "\\n", "\\\\", '\\"', "\\x41", "\\u00e9", "\\U0001F600", "\n",
    "\\[", " ",
]  # fmt: skip
_CLASS_PIECES = [
    "a", "z", "-", "^", "0-9", "\\]", "\\x00-\\x1f", "\\u0100-\\uFFFF", "é", "\\n", "\n", "a-",
]  # fmt: skip
_SUFFIXES = ["", "", "", "*", "+", "?", "{2}", "{0,3}", "{ 1 , }", "{0}", "*?", "{2}+"]


@st.composite
def _expressions(draw: st.DrawFn, depth: int = 0) -> str:
    """A well-formed GBNF expression (mostly; a class may come out reversed)."""
    blank = st.sampled_from([" ", "  ", "\t"] + (["\n  ", " # c\n "] if depth else []))
    options = []
    for _ in range(draw(st.integers(1, 3))):
        items = []
        for _ in range(draw(st.integers(0 if depth else 1, 4))):
            kind = draw(
                st.sampled_from(
                    ["name", "literal", "class", "dot", "group"][: 5 if depth < 3 else 4]
                )
            )
            if kind == "name":
                item = draw(st.sampled_from(_NAMES))
            elif kind == "literal":
                item = (
                    '"'
                    + "".join(draw(st.lists(st.sampled_from(_LITERAL_PIECES), max_size=4)))
                    + '"'
                )
            elif kind == "class":
                body = "".join(
                    draw(st.lists(st.sampled_from(_CLASS_PIECES), min_size=1, max_size=4))
                )
                item = "[" + draw(st.sampled_from(["", "^"])) + body + "]"
            elif kind == "dot":
                item = "."
            else:
                item = "(" + draw(blank) + draw(_expressions(depth + 1)) + draw(blank) + ")"
            items.append(item + draw(st.sampled_from(_SUFFIXES)))
        options.append(draw(blank).join(items))
    return (draw(blank) + "|" + draw(st.sampled_from([" ", "\n  ", " # c\n"]))).join(options)


@_GENERATED
@given(
    bodies=st.lists(_expressions(), min_size=4, max_size=4),
    separator=st.sampled_from(["\n", "\r\n", "\n\n# comment\n", "\r"]),
)
def test_generated_grammars_read_as_the_reference(bodies: list[str], separator: str) -> None:
    text = separator.join(f"{name} ::= {body}" for name, body in zip(_NAMES, bodies, strict=True))
    _assert_same(text)
