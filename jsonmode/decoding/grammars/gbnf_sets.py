"""GBNF's character sets and repetitions as IR: the pieces both GBNF readers share.

:func:`set_expr` turns a normal set of code point intervals into one character of it
(nothing, a literal, or a :class:`~jsonmode.decoding.ir.Lex` over its UTF-8 automaton,
labelled by a canonical GBNF spelling), memoised per process for small sets;
:func:`repeat` makes ``item{low,high}``. :func:`plain_class`, :func:`normal`,
:func:`complement` and :func:`without_surrogates` turn a class's text into such a set.
Pure functions; thread-safe (the memo is a dict, its entries immutable).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from jsonmode import regex as rx
from jsonmode.decoding.ir import EMPTY, Alt, Expr, Lex, Lit, Rep
from jsonmode.regex.syntax import MAX_CODE_POINT, negate

__all__ = [
    "MAX_CODE_POINT",
    "NEVER",
    "plain_class",
    "repeat",
    "set_expr",
    "show",
    "without_surrogates",
]

#: The expression that matches nothing (an empty alternative).
NEVER = Alt(())
_SURROGATES = (0xD800, 0xDFFF)


def plain_class(body: str) -> list[tuple[int, int]] | None:
    """The intervals a class body without escapes lists (what char_class reads from
    it, character by character: ``a-z`` a range, a ``-`` last itself), or None where
    it has a reversed range (char_class's general path reports it)."""
    return class_intervals([(ord(char), char == "-") for char in body])


def class_intervals(units: list[tuple[int, bool]]) -> list[tuple[int, int]] | None:
    """The intervals a class body lists, given as its characters in order, each with
    whether it is a raw ``-`` (an escaped one is a character like any other): a raw
    ``-`` between two characters makes a range, anywhere else it is itself. None where
    a range is reversed."""
    intervals: list[tuple[int, int]] = []
    index, size = 0, len(units)
    while index < size:
        low = units[index][0]
        if index + 2 < size and units[index + 1][1]:
            high = units[index + 2][0]
            if high < low:
                return None
            intervals.append((low, high))
            index += 3
        else:
            intervals.append((low, low))
            index += 1
    return intervals


def without_surrogates(intervals: Iterable[tuple[int, int]]) -> Iterator[tuple[int, int]]:
    first, last = _SURROGATES
    for low, high in intervals:
        if low < first:
            yield low, min(high, first - 1)
        if high > last:
            yield max(low, last + 1), high


#: Character sets memoised per process (see set_expr): at most this many, each of at
#: most _CACHED_INTERVALS intervals and _CACHED_STATES automaton states (1 KiB each).
_CACHED_SETS = 256
_CACHED_INTERVALS = 64
_CACHED_STATES = 32
_set_cache: dict[tuple[tuple[int, int], ...], Expr] = {}


def set_expr(intervals: tuple[tuple[int, int], ...]) -> Expr:
    """One character of the normal set ``intervals`` (surrogates removed): nothing, a
    literal, or a lexeme over its UTF-8 automaton. Small sets are memoised per process
    (the expressions are immutable; at most 8 MiB of automata kept), so the classes
    grammars share (``[0-9]``, ``[a-z]``, ``[^"\\]``) are built once. Thread-safe."""
    known = _set_cache.get(intervals)
    if known is not None:
        return known
    if not intervals:
        return NEVER
    if len(intervals) == 1 and intervals[0][0] == intervals[0][1]:
        return Lit(chr(intervals[0][0]).encode("utf-8"))
    dfa = rx.utf8_char_set_dfa(intervals)
    made = Lex(_label(list(intervals)), dfa)
    if len(intervals) <= _CACHED_INTERVALS and dfa.n_states <= _CACHED_STATES:
        if len(_set_cache) >= _CACHED_SETS:
            _set_cache.clear()
        _set_cache[intervals] = made
    return made


def _label(intervals: list[tuple[int, int]]) -> str:
    """A canonical GBNF spelling of the set (surrogates aside): ``.`` for every
    character, else the shorter of ``[...]`` and ``[^...]``."""
    if intervals[-1][1] < _SURROGATES[0] - 1:
        # (The complement then has one interval per gap, and two past the set: more.)
        return "[" + "".join([_show_interval(lo, hi) for lo, hi in intervals]) + "]"
    others = list(without_surrogates(negate(tuple(intervals))))
    if not others:
        return "."
    if len(others) < len(intervals):
        return "[^" + "".join([_show_interval(lo, hi) for lo, hi in others]) + "]"
    return "[" + "".join([_show_interval(lo, hi) for lo, hi in intervals]) + "]"


def _show_interval(low: int, high: int) -> str:
    shown = _SHOWN
    first = shown[low] if low < 0x80 else show(low)
    if low == high:
        return first
    last = shown[high] if high < 0x80 else show(high)
    return first + last if high == low + 1 else f"{first}-{last}"


def show(code_point: int) -> str:
    """A code point as GBNF writes it inside a class or literal."""
    char = chr(code_point)
    if char in '\\"[]':
        return "\\" + char
    if 0x21 <= code_point <= 0x7E and char not in "-^":
        return char
    if char in "\n\r\t":
        return {"\n": "\\n", "\r": "\\r", "\t": "\\t"}[char]
    if code_point < 0x100:
        return f"\\x{code_point:02X}"
    if code_point <= 0xFFFF:
        return f"\\u{code_point:04X}"
    return f"\\U{code_point:08X}"


_SHOWN = tuple(show(code_point) for code_point in range(0x80))  # (ASCII, looked up)


def repeat(item: Expr, low: int, high: int | None) -> Expr:
    """``item`` ``low`` to ``high`` times (None: no bound), simplified: nothing
    repeated is nothing, once is the item, a repetition of what matches nothing
    matches the empty text or nothing."""
    if high == 0 or item == EMPTY:
        return EMPTY
    if (low, high) == (1, 1):
        return item
    if item == NEVER:
        return EMPTY if low == 0 else NEVER
    return Rep(item, low, high)
