"""``utf8_char_set_dfa`` (one character of a set, built straight from its ranges)
against the generic path it replaces in the GBNF reader (``utf8_byte_dfa`` of the
two-state character automaton): the same automaton, state for state; and the GBNF
reader's per-process cache of character sets."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jsonmode import native
from jsonmode import regex as rx
from jsonmode.decoding.grammars import gbnf, gbnf_sets
from jsonmode.decoding.ir import Lex
from jsonmode.regex.syntax import charset, negate

SETTINGS = settings(
    max_examples=300,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)

# Where UTF-8 changes shape: lengths, lead byte groups, the special lead bytes
# (E0, ED, F0, F4), surrogates, the last code point.
_EDGES = (
    0x00, 0x7F, 0x80, 0xBF, 0xC0, 0x7FF, 0x800, 0xFFF, 0x1000, 0xCFFF, 0xD000, 0xD7FF,
    0xD800, 0xDFFF, 0xE000, 0xFFFF, 0x10000, 0x3FFFF, 0x40000, 0xFFFFF, 0x100000,
    0x10FFFF,
)  # fmt: skip


def _point() -> st.SearchStrategy[int]:
    near_edge = st.builds(
        lambda edge, delta: min(max(edge + delta, 0), 0x10FFFF),
        st.sampled_from(_EDGES),
        st.integers(-70, 70),
    )
    return st.one_of(near_edge, st.integers(0, 0x10FFFF), st.integers(0, 0x200))


@st.composite
def _sets(draw: st.DrawFn) -> tuple[tuple[int, int], ...]:
    """A normal set without surrogates, as the GBNF reader makes them: listed ranges,
    maybe negated, maybe everything."""
    pairs = draw(st.lists(st.tuples(_point(), _point()), max_size=8))
    intervals = charset([(min(a, b), max(a, b)) for a, b in pairs])
    if draw(st.booleans()):
        intervals = negate(intervals)
    return tuple(gbnf_sets.without_surrogates(intervals))


def _generic(intervals: tuple[tuple[int, int], ...]) -> rx.ByteDFA:
    dfa = rx.CharDFA(0, (False, True), (tuple((lo, hi, 1) for lo, hi in intervals), ()))
    return rx.utf8_byte_dfa(dfa)


def _assert_same(got: rx.ByteDFA, want: rx.ByteDFA) -> None:
    assert got.start == want.start
    assert got.accepting.dtype == want.accepting.dtype == np.bool_
    assert got.trans.dtype == want.trans.dtype == np.int32
    assert np.array_equal(got.accepting, want.accepting)
    assert np.array_equal(got.trans, want.trans)
    assert not got.trans.flags.writeable
    assert not got.accepting.flags.writeable


@SETTINGS
@given(intervals=_sets())
def test_char_set_dfa_is_the_generic_automaton(intervals: tuple[tuple[int, int], ...]) -> None:
    _assert_same(rx.utf8_char_set_dfa(intervals), _generic(intervals))


@SETTINGS
@given(intervals=_sets())
def test_char_set_dfa_in_c_is_the_python_form(intervals: tuple[tuple[int, int], ...]) -> None:
    """With the compiled core (r6dfa_byte_dfa given the two-state automaton) and
    without it (the Python construction, the reference): the same table."""
    if native.KERNELS is None:
        pytest.skip("the compiled core is not loaded")
    with native.use(False):
        python = rx.utf8_char_set_dfa(intervals)
    _assert_same(rx.utf8_char_set_dfa(intervals), python)


@pytest.mark.parametrize(
    "intervals",
    [
        (),  # an empty set: one dead state
        ((0, 0xD7FF), (0xE000, 0x10FFFF)),  # "."
        ((0x10FFFF, 0x10FFFF),),
        ((0x10FFFE, 0x10FFFF),),
        ((0xD7FF, 0xD7FF), (0xE000, 0xE000)),  # around the surrogates
        ((0x20, 0x21), (0x23, 0x5B), (0x5D, 0xD7FF), (0xE000, 0x10FFFF)),  # [^"\\\x00-\x1f]
        ((0x41, 0x5A), (0x61, 0x7A)),  # ASCII only
        ((0x7F, 0x80),),
        ((0x3FFFF, 0x40000),),
        ((0x800, 0x800), (0x1000, 0x1000), (0x10000, 0x10000), (0x100000, 0x100000)),
    ],
)
def test_char_set_dfa_edges(intervals: tuple[tuple[int, int], ...]) -> None:
    got = rx.utf8_char_set_dfa(intervals)
    _assert_same(got, _generic(intervals))
    with native.use(False):
        _assert_same(rx.utf8_char_set_dfa(intervals), got)
    members = [lo for lo, _ in intervals] + [hi for _, hi in intervals]
    for code_point in members:
        assert got.accepts(chr(code_point).encode("utf-8"))
    assert not got.accepts(b"")
    if intervals:
        assert not got.accepts(b"\xed\xa0\x80")  # U+D800's would-be bytes


@pytest.mark.parametrize(
    "intervals",
    [
        ((5, 3),),  # reversed
        ((3, 5), (1, 2)),  # unsorted
        ((1, 2), (3, 4)),  # adjacent
        ((1, 4), (3, 6)),  # overlapping
        ((0xD800, 0xD800),),  # a surrogate
        ((0xD000, 0xE000),),  # across the surrogates
        ((0, 0x110000),),  # beyond U+10FFFF
        ((-1, 3),),
    ],
)
def test_char_set_dfa_refuses_malformed_sets(intervals: tuple[tuple[int, int], ...]) -> None:
    with pytest.raises(ValueError, match="intervals"):
        rx.utf8_char_set_dfa(intervals)


# -- the GBNF reader's set cache ------------------------------------------------------------


def test_gbnf_classes_are_the_generic_automata() -> None:
    text = 'root ::= [^"\\\\\\x00-\\x1f] [a-z0-9] . [^a] [\\U0010FFFF\\u00e9-\\u0100]'
    rules = gbnf.parse(text).rules
    root = rules["root"]
    lexemes = [item for item in root.items if isinstance(item, Lex)]  # type: ignore[attr-defined]
    assert [lex.label for lex in lexemes] == [
        '[^\\x00-\\x1F\\"\\\\]',
        "[0-9a-z]",
        ".",
        "[^a]",
        "[\\xE9-\\u0100\\U0010FFFF]",
    ]
    for lex in lexemes:
        parsed = rx.CharDFA(0, (False, True), (_set_of(lex.label), ()))
        _assert_same(lex.dfa, rx.utf8_byte_dfa(parsed))


def _set_of(label: str) -> tuple[tuple[int, int, int], ...]:
    """The set a class label names, read back by the GBNF reader itself."""
    expr = gbnf.parse(f"root ::= {label}").rules["root"]
    assert isinstance(expr, Lex)
    key = next(key for key, known in gbnf_sets._set_cache.items() if known is expr)
    return tuple((lo, hi, 1) for lo, hi in key)


def test_gbnf_set_cache_shares_small_sets_only() -> None:
    first = gbnf.parse("root ::= [0-9x]").rules["root"]
    again = gbnf.parse('root ::= "a" | [x0-9]').rules["root"]
    assert isinstance(first, Lex)
    assert first in again.options  # type: ignore[attr-defined]
    assert any(option is first for option in again.options)  # type: ignore[attr-defined]
    # Past _CACHED_INTERVALS intervals: built each time, never kept.
    many = "".join(f"\\x{2 * k + 0x20:02X}" for k in range(gbnf_sets._CACHED_INTERVALS + 1))
    big = gbnf.parse(f"root ::= [{many}]").rules["root"]
    big_again = gbnf.parse(f"root ::= [{many}]").rules["root"]
    assert isinstance(big, Lex)
    assert big == big_again
    assert big is not big_again
    assert all(known is not big for known in gbnf_sets._set_cache.values())
