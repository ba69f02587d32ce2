"""Byte-level automata: a :class:`CharDFA`'s language over UTF-8 bytes, raw or inside
a JSON string literal, as a NumPy transition table for the token-level engine.

Part of jsonmode's regex engine (:mod:`jsonmode.regex.glushkov` re-exports the public
names). Byte DFAs cost 1 KiB of table per state: a character state with ASCII-only
edges needs ~1 byte state for raw UTF-8 and ~7 with JSON escapes; one that takes any
code point needs ~8 (the UTF-8 continuation states remember where to go) and ~20–28
with escapes (``\\uXXXX`` and surrogate-pair prefixes). Measured: ``^[a-z]{1,64}$`` →
449 body states in ~10 ms; a string of at most 64 code points → 1281 states in ~30 ms;
at most 256 → 5121 states in ~130 ms.

Those times are the pure-Python builder's (the reference, and the fallback without the
compiled core); the compiled core's ``r6dfa_byte_dfa`` (csrc/r6dfa_bytes.c) builds the
same tables 30-70x sooner (3316 states: ~1.3 ms, much of it writing the table).

NumPy is imported when a byte DFA is first built, not at import. All objects are
immutable and thread-safe.
"""

from __future__ import annotations

import bisect
import functools
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from jsonmode import native
from jsonmode.budget import checkpoint
from jsonmode.errors import JsonModeError
from jsonmode.regex.char_dfa import CharDFA, Edge, minimize
from jsonmode.regex.syntax import MAX_CODE_POINT

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    _ArrayT = TypeVar("_ArrayT", bound=npt.NDArray[Any])

__all__ = ["ByteDFA", "json_string_body_dfa", "utf8_byte_dfa", "utf8_char_set_dfa"]


@dataclass(frozen=True, eq=False)
class ByteDFA:
    """A deterministic automaton over bytes, for the token-level engine.

    Attributes:
        start: the start state.
        accepting: ``bool`` array ``(n_states,)``.
        trans: ``int32`` array ``(n_states, 256)``; -1 = dead. Both arrays are read-only.

    Trimmed: every state is reachable and can reach an accepting state. Immutable and
    thread-safe.
    """

    start: int
    accepting: npt.NDArray[np.bool_]
    trans: npt.NDArray[np.int32]

    @property
    def n_states(self) -> int:
        """The number of states."""
        return int(self.trans.shape[0])

    def accepts(self, data: bytes) -> bool:
        """Whether the whole of ``data`` is in the language."""
        state = self.start
        trans = self.trans
        for byte in data:
            state = int(trans[state, byte])
            if state < 0:
                return False
        return bool(self.accepting[state])


# Slot kinds of a pending multi-byte sequence: each reads one byte worth a digit.
_CONT, _HEX, _LOWSUR, _FIX_BS, _FIX_U, _FIX_D, _FIX_0, _BIT = range(8)
_RADIX = {_CONT: 64, _HEX: 16, _LOWSUR: 4, _FIX_BS: 1, _FIX_U: 1, _FIX_D: 1, _FIX_0: 1, _BIT: 2}

ByteRanges = list[tuple[int, int]]


def _slot_bytes(kind: int, v1: int, v2: int) -> ByteRanges:
    """The byte ranges that spell the digit values ``v1..v2`` of a slot of ``kind``."""
    if kind == _CONT:
        return [(0x80 + v1, 0x80 + v2)]
    if kind == _HEX:
        out: ByteRanges = []
        if v1 <= 9:
            out.append((0x30 + v1, 0x30 + min(v2, 9)))
        if v2 >= 10:
            a, b = max(v1, 10) - 10, v2 - 10
            out += [(0x41 + a, 0x41 + b), (0x61 + a, 0x61 + b)]  # A-F, a-f
        return out
    if kind == _LOWSUR:
        return [(0x43 + v1, 0x43 + v2), (0x63 + v1, 0x63 + v2)]  # C-F, c-f
    if kind == _FIX_BS:
        return [(0x5C, 0x5C)]
    if kind == _FIX_U:
        return [(0x75, 0x75)]
    if kind == _FIX_0:
        return [(0x30, 0x30)]
    if kind == _BIT:
        return [(0x30 + v1, 0x30 + v2)]
    return [(0x44, 0x44), (0x64, 0x64)]  # D, d


def _u_byte(v1: int, v2: int) -> ByteRanges:
    return [(0x75, 0x75)]  # the u of \u00XX (one digit of value 0: U+0000..U+001F)


def _high_surrogate_bytes(v1: int, v2: int) -> ByteRanges:
    return _slot_bytes(_HEX, v1 + 8, v2 + 8)  # \uD8.. to \uDB..


def _lead_bytes(first: int) -> Callable[[int, int], ByteRanges]:
    return lambda v1, v2: [(first + v1, first + v2)]


_SURROGATE_TAIL = (_HEX, _HEX, _FIX_BS, _FIX_U, _FIX_D, _LOWSUR, _HEX, _HEX)
_CONTROL_TAIL = (_FIX_0, _FIX_0, _BIT, _HEX)  # the 00XX of \u00XX
# JSON's short escapes: byte after the backslash -> code point.
_SHORT_ESCAPES = {
    0x22: 0x22,
    0x5C: 0x5C,
    0x2F: 0x2F,
    0x62: 0x08,
    0x66: 0x0C,
    0x6E: 0x0A,
    0x72: 0x0D,
    0x74: 0x09,
}
# UTF-8 lead bytes that behave alike: (first code point, last, code points per lead
# byte, continuation bytes, first lead byte).
_LEAD_GROUPS = (
    (0x80, 0x7FF, 1 << 6, 1, 0xC2),
    (0x1000, 0xCFFF, 1 << 12, 2, 0xE1),
    (0xE000, 0xFFFF, 1 << 12, 2, 0xEE),
    (0x40000, 0xFFFFF, 1 << 18, 3, 0xF1),
)
# Lead bytes whose continuation range is restricted (no overlong forms, no surrogates,
# nothing above U+10FFFF): lead -> (first code point, last, code point of offset 0, conts).
_LEAD_SPECIAL = {
    0xE0: (0x800, 0xFFF, 0x0, 2),
    0xED: (0xD000, 0xD7FF, 0xD000, 2),
    0xF0: (0x10000, 0x3FFFF, 0x0, 3),
    0xF4: (0x100000, 0x10FFFF, 0x100000, 3),
}


def _clip(
    row: Sequence[Edge], lo: int, hi: int, lows: Sequence[int] | None = None
) -> tuple[Edge, ...]:
    """The edges of ``row`` within ``[lo, hi]``, shifted so that ``lo`` becomes 0."""
    if not row or row[-1][1] < lo or row[0][0] > hi:
        return ()  # the common case (an ASCII-only row, a non-ASCII range): no search
    if lows is None:
        lows = [e[0] for e in row]
    k = max(bisect.bisect_right(lows, lo) - 1, 0)
    out: list[Edge] = []
    while k < len(row) and row[k][0] <= hi:
        a, b, d = row[k]
        if b >= lo:
            out.append((max(a, lo) - lo, min(b, hi) - lo, d))
        k += 1
    return tuple(out)


def _shift(row: Iterable[Edge], by: int) -> tuple[Edge, ...]:
    return tuple((a + by, b + by, d) for a, b, d in row)


class _ByteBuilder:
    """Builds the byte automaton: char states keep their numbers; multi-byte sequences
    in progress are "pending" states keyed by (remaining slots, residual edges), so they
    are shared between all character states that continue alike. Work is per edge, not
    per byte value: a run of digit values that all lead to the same place is one range."""

    def __init__(self, dfa: CharDFA) -> None:
        self.dfa = dfa
        self.lows = [[e[0] for e in row] for row in dfa.edges]
        self.n_char = dfa.n_states
        self.count = dfa.n_states
        self.ranges: list[tuple[int, int, int, int]] = []  # (src, byte_lo, byte_hi, dst)
        self.pending: dict[tuple[tuple[int, ...], tuple[Edge, ...]], int] = {}
        self.todo: list[tuple[int, tuple[int, ...], tuple[Edge, ...]]] = []

    def new_state(self) -> int:
        self.count += 1
        return self.count - 1

    def add(self, src: int, ranges: ByteRanges, dst: int) -> None:
        for lo, hi in ranges:
            self.ranges.append((src, lo, hi, dst))

    def pend(self, slots: tuple[int, ...], residual: tuple[Edge, ...]) -> int:
        """The state that reads ``slots`` and then continues per ``residual`` (offsets)."""
        key = (slots, residual)
        got = self.pending.get(key)
        if got is None:
            got = self.pending[key] = self.new_state()
            self.todo.append((got, slots, residual))
        return got

    def emit(
        self,
        src: int,
        residual: Sequence[Edge],
        weight: int,
        rest: tuple[int, ...],
        to_bytes: Callable[[int, int], ByteRanges],
    ) -> None:
        """Transitions of ``src`` on one digit worth ``weight`` offsets of ``residual``;
        ``rest`` are the slots still to read after it."""
        partial: set[int] = set()
        for a, b, d in residual:
            first, last = -(-a // weight), (b + 1) // weight - 1
            if first <= last:
                dst = self.pend(rest, ((0, weight - 1, d),)) if rest else d
                self.add(src, to_bytes(first, last), dst)
            if a % weight:
                partial.add(a // weight)
            if (b + 1) % weight:
                partial.add(b // weight)
        if partial:
            lows = [e[0] for e in residual]
            for v in sorted(partial):
                sub = _clip(residual, v * weight, v * weight + weight - 1, lows)
                self.add(src, to_bytes(v, v), self.pend(rest, sub))

    def run_pending(self) -> None:
        done = 0
        while self.todo:
            done += 1
            if not done & 63:
                checkpoint()
            state, slots, residual = self.todo.pop()
            weight = 1
            for other in slots[1:]:
                weight *= _RADIX[other]
            kind = slots[0]
            self.emit(state, residual, weight, slots[1:], functools.partial(_slot_bytes, kind))

    def raw_utf8(self, s: int, *, json: bool) -> None:
        """Transitions of char state ``s`` on raw UTF-8 (minus what JSON must escape)."""
        row, lows = self.dfa.edges[s], self.lows[s]
        for lo, hi, d in row:
            if lo > 0x7F:
                break
            hi = min(hi, 0x7F)
            if json:
                self.add(s, list(_minus(lo, hi, ((0x00, 0x1F), (0x22, 0x22), (0x5C, 0x5C)))), d)
            else:
                self.add(s, [(lo, hi)], d)
        if not row or row[-1][1] <= 0x7F:
            return  # ASCII only: no multi-byte sequence
        for cp_lo, cp_hi, weight, n_cont, first in _LEAD_GROUPS:
            sub = _clip(row, cp_lo, cp_hi, lows)
            if sub:
                self.emit(s, sub, weight, (_CONT,) * n_cont, _lead_bytes(first))
        for lead, (cp_lo, cp_hi, base, n_cont) in _LEAD_SPECIAL.items():
            sub = _clip(row, cp_lo, cp_hi, lows)
            if sub:
                self.add(s, [(lead, lead)], self.pend((_CONT,) * n_cont, _shift(sub, cp_lo - base)))

    def escapes(self, s: int, *, complete: bool) -> None:
        """Transitions of char state ``s`` on a JSON escape sequence: every escape JSON
        allows (``complete``), or only those ``json.dumps(..., ensure_ascii=False)``
        writes (see :func:`json_string_body_dfa`)."""
        dfa = self.dfa
        esc = self.new_state()
        self.add(s, [(0x5C, 0x5C)], esc)
        for byte, cp in _SHORT_ESCAPES.items():
            d = dfa.step(s, cp)
            if d >= 0 and (complete or byte != 0x2F):
                self.add(esc, [(byte, byte)], d)
        if not complete:
            self.control_escapes(s, esc)
            return
        row, lows = dfa.edges[s], self.lows[s]
        u = self.new_state()  # after \u
        self.add(esc, [(0x75, 0x75)], u)
        ud = self.new_state()  # after \uD
        self.add(u, _slot_bytes(_HEX, 0xD, 0xD), ud)
        plain = _clip(row, 0, 0xCFFF, lows) + _shift(_clip(row, 0xE000, 0xFFFF, lows), 0xE000)
        hex3 = (_HEX, _HEX, _HEX)
        self.emit(u, plain, 1 << 12, hex3, functools.partial(_slot_bytes, _HEX))
        low_bmp = _clip(row, 0xD000, 0xD7FF, lows)
        self.emit(ud, low_bmp, 1 << 8, (_HEX, _HEX), functools.partial(_slot_bytes, _HEX))
        astral = _clip(row, 0x10000, MAX_CODE_POINT, lows)
        self.emit(ud, astral, 1 << 18, _SURROGATE_TAIL, _high_surrogate_bytes)

    def control_escapes(self, s: int, esc: int) -> None:
        """``\\u0000`` .. ``\\u001f`` (hex digits in either case) from char state ``s``,
        whose backslash leads to ``esc``: the characters JSON requires escaped. The
        states after ``\\u`` are pending ones, shared by every char state whose control
        characters lead to the same places."""
        controls = _clip(self.dfa.edges[s], 0, 0x1F, self.lows[s])
        if controls:
            self.emit(esc, controls, 0x20, _CONTROL_TAIL, _u_byte)

    def finish(self) -> ByteDFA:
        """The trimmed automaton: the states reachable from the start that reach
        acceptance, numbered in the order they were made. Small automata (a character
        class, a CSV cell: up to :data:`PLAIN_FINISH_RANGES` ranges) are trimmed in plain
        Python (:meth:`_finish_small`, ~5x sooner than the NumPy passes), with the same
        result."""
        if len(self.ranges) <= PLAIN_FINISH_RANGES:
            return self._finish_small()
        import numpy as np

        n = self.count
        accepting = np.zeros(n, dtype=np.bool_)
        accepting[: self.n_char] = np.asarray(self.dfa.accepting, dtype=np.bool_)
        if self.ranges:
            arr = np.asarray(self.ranges, dtype=np.int64)
        else:
            arr = np.zeros((0, 4), dtype=np.int64)
        src, blo, bhi, dst = arr[:, 0], arr[:, 1], arr[:, 2], arr[:, 3]
        # Trim: forward from the start, backward from acceptance, over the distinct arcs.
        arcs = np.unique(src * n + dst)
        frm, to = arcs // n, arcs % n
        fwd = _reach(n, frm, to, [self.dfa.start])
        bwd = _reach(n, to, frm, np.flatnonzero(accepting).tolist())
        keep = fwd & bwd
        if not keep[self.dfa.start]:
            return ByteDFA(
                0, _readonly(np.zeros(1, np.bool_)), _readonly(np.full((1, 256), -1, np.int32))
            )
        new_id = np.full(n, -1, dtype=np.int64)
        new_id[keep] = np.arange(int(keep.sum()))
        ok = keep[src] & keep[dst]
        src, blo, bhi, dst = new_id[src[ok]], blo[ok], bhi[ok], new_id[dst[ok]]
        trans = np.full((int(keep.sum()), 256), -1, dtype=np.int32)
        lengths = bhi - blo + 1
        rows = np.repeat(src, lengths)
        offsets = np.arange(int(lengths.sum())) - np.repeat(np.cumsum(lengths) - lengths, lengths)
        trans[rows, np.repeat(blo, lengths) + offsets] = np.repeat(dst, lengths)
        return ByteDFA(int(new_id[self.dfa.start]), _readonly(accepting[keep]), _readonly(trans))

    def _finish_small(self) -> ByteDFA:
        """:meth:`finish` over few ranges: the same trimming and numbering in plain
        Python, one slice store per range."""
        import numpy as np

        n, start = self.count, self.dfa.start
        accepting = [False] * n
        accepting[: self.n_char] = [bool(a) for a in self.dfa.accepting]
        forward: list[list[int]] = [[] for _ in range(n)]
        backward: list[list[int]] = [[] for _ in range(n)]
        for src, _, _, dst in self.ranges:
            forward[src].append(dst)
            backward[dst].append(src)
        fwd = _reach_lists(forward, [start])
        bwd = _reach_lists(backward, [state for state in range(n) if accepting[state]])
        keep = [a and b for a, b in zip(fwd, bwd, strict=True)]
        if not keep[start]:
            return ByteDFA(
                0, _readonly(np.zeros(1, np.bool_)), _readonly(np.full((1, 256), -1, np.int32))
            )
        new_id = [-1] * n
        kept = 0
        for state in range(n):
            if keep[state]:
                new_id[state] = kept
                kept += 1
        trans = np.full((kept, 256), -1, dtype=np.int32)
        for src, blo, bhi, dst in self.ranges:
            if keep[src] and keep[dst]:
                trans[new_id[src], blo : bhi + 1] = new_id[dst]
        final = np.array([accepting[state] for state in range(n) if keep[state]], dtype=np.bool_)
        return ByteDFA(new_id[start], _readonly(final), _readonly(trans))


#: Builders with at most this many byte ranges finish in plain Python.
PLAIN_FINISH_RANGES = 512


def _reach_lists(adjacency: list[list[int]], seeds: list[int]) -> list[bool]:
    """The states reachable from ``seeds`` over ``adjacency`` (lists of successors)."""
    seen = [False] * len(adjacency)
    for seed in seeds:
        seen[seed] = True
    todo = list(seeds)
    while todo:
        for nxt in adjacency[todo.pop()]:
            if not seen[nxt]:
                seen[nxt] = True
                todo.append(nxt)
    return seen


def _readonly(arr: _ArrayT) -> _ArrayT:
    arr.setflags(write=False)
    return arr


def _reach(
    n: int, frm: npt.NDArray[np.int64], to: npt.NDArray[np.int64], seeds: list[int]
) -> npt.NDArray[np.bool_]:
    """The states reachable from ``seeds`` over the arcs ``frm -> to``. Plain Python
    lists: a NumPy slice per visited state costs more than the visit itself."""
    import numpy as np

    adjacency: list[list[int]] = [[] for _ in range(n)]
    for a, b in zip(frm.tolist(), to.tolist(), strict=True):
        adjacency[a].append(b)
    return np.array(_reach_lists(adjacency, seeds), dtype=np.bool_)


def _minus(lo: int, hi: int, holes: Sequence[tuple[int, int]]) -> Iterator[tuple[int, int]]:
    for a, b in holes:
        if b < lo or a > hi:
            continue
        if a > lo:
            yield lo, a - 1
        lo = b + 1
        if lo > hi:
            return
    if lo <= hi:
        yield lo, hi


def utf8_char_set_dfa(intervals: Sequence[tuple[int, int]]) -> ByteDFA:
    """The byte DFA of one character of a set: exactly what :func:`utf8_byte_dfa` builds
    for the two-state :class:`CharDFA` that reads one character of ``intervals`` (state
    0, the start, reads a character into state 1, which accepts), state for state and
    in the same numbering, built straight from the ranges: the generic path's minimising
    and its general builder cost ~0.2 ms a set, this ~10-40 us.

    In C when the compiled core is loaded (``r6dfa_byte_dfa``, :func:`utf8_byte_dfa`'s
    kernel, given that two-state automaton: ~5 us a set, where the Python form below,
    the reference, takes ~40 us for a set beyond ASCII and ~0.3 ms the first time).

    ``intervals``: sorted, disjoint, non-adjacent ``(low, high)`` code point ranges in
    0..U+10FFFF without surrogates (a GBNF class or ``.``); empty: the automaton that
    accepts nothing (one dead state, as :func:`utf8_byte_dfa` gives).

    Raises ValueError for intervals out of that form. Cost: linear in the intervals
    (a few states per UTF-8 length, lead byte group and partial lead byte); requires
    NumPy. Pure function; thread-safe.
    """
    import numpy as np

    _check_set(intervals)
    if not intervals:
        return ByteDFA(
            0, _readonly(np.zeros(1, np.bool_)), _readonly(np.full((1, 256), -1, np.int32))
        )
    # (The C form of utf8_byte_dfa, given the two-state automaton, already minimal.)
    edges = (tuple([(lo, hi, 1) for lo, hi in intervals]), ())
    made = _kernel_byte_dfa(0, (False, True), edges, json=False, complete=False)
    if made is not None:
        return made
    if intervals[-1][1] <= 0x7F:  # ASCII only (most classes): one byte
        trans = np.full((2, 256), -1, dtype=np.int32)
        for lo, hi in intervals:
            trans[0, lo : hi + 1] = 1
        return ByteDFA(0, _readonly(np.array([False, True])), _readonly(trans))
    builder = _SetBuilder()
    ranges = builder.ranges
    for lo, hi in intervals:
        if lo > 0x7F:
            break
        ranges.append((0, lo, min(hi, 0x7F), 1))
    builder.multibyte(intervals)
    n_states = 2 + len(builder.pending)
    trans = np.full((n_states, 256), -1, dtype=np.int32)
    for src, lo, hi, dst in ranges:
        trans[src, lo : hi + 1] = dst
    accepting = np.zeros(n_states, dtype=np.bool_)
    accepting[1] = True
    return ByteDFA(0, _readonly(accepting), _readonly(trans))


class _SetBuilder:
    """:class:`_ByteBuilder` for one character of a set (see :func:`utf8_char_set_dfa`):
    every edge leads to state 1, so a pending state is keyed by its continuation bytes
    and residual offsets alone; the same states, made in the same order."""

    def __init__(self) -> None:
        self.ranges: list[tuple[int, int, int, int]] = []  # (src, byte_lo, byte_hi, dst)
        self.pending: dict[tuple[int, tuple[tuple[int, int], ...]], int] = {}
        self.todo: list[tuple[int, int, tuple[tuple[int, int], ...]]] = []

    def multibyte(self, intervals: Sequence[tuple[int, int]]) -> None:
        """The start state's lead bytes (:meth:`_ByteBuilder.raw_utf8`), then every
        pending state's continuation bytes (:meth:`_ByteBuilder.run_pending`)."""
        for cp_lo, cp_hi, weight, n_cont, first in _LEAD_GROUPS:
            sub = _clip_set(intervals, cp_lo, cp_hi - cp_lo + 1)
            if sub:
                self.emit(0, sub, weight, n_cont, first)
        for lead, (cp_lo, cp_hi, base, n_cont) in _LEAD_SPECIAL.items():
            sub = _clip_set(intervals, cp_lo, cp_hi - cp_lo + 1)
            if sub:
                shift = cp_lo - base
                dst = self.pend(n_cont, tuple((a + shift, b + shift) for a, b in sub))
                self.ranges.append((0, lead, lead, dst))
        todo = self.todo
        while todo:
            state, conts, residual = todo.pop()
            self.emit(state, residual, 1 << (6 * (conts - 1)), conts - 1, 0x80)

    def pend(self, conts: int, residual: tuple[tuple[int, int], ...]) -> int:
        """The state that reads ``conts`` continuation bytes into an offset of
        ``residual``, then accepts (the builder's pending state, same key)."""
        key = (conts, residual)
        got = self.pending.get(key)
        if got is None:
            got = self.pending[key] = 2 + len(self.pending)
            self.todo.append((got, conts, residual))
        return got

    def emit(
        self, src: int, residual: Sequence[tuple[int, int]], weight: int, rest: int, base: int
    ) -> None:
        """:meth:`_ByteBuilder.emit` for byte ``base + digit``, ``rest`` continuation
        bytes after it (the builder's order of states and ranges, kept)."""
        ranges = self.ranges
        partial: set[int] = set()
        for a, b in residual:
            first, last = -(-a // weight), (b + 1) // weight - 1
            if first <= last:
                dst = self.pend(rest, ((0, weight - 1),)) if rest else 1
                ranges.append((src, base + first, base + last, dst))
            if a % weight:
                partial.add(a // weight)
            if (b + 1) % weight:
                partial.add(b // weight)
        for v in sorted(partial):
            dst = self.pend(rest, _clip_set(residual, v * weight, weight))
            ranges.append((src, base + v, base + v, dst))


def _clip_set(
    intervals: Sequence[tuple[int, int]], lo: int, size: int
) -> tuple[tuple[int, int], ...]:
    """The parts of ``intervals`` within ``[lo, lo + size)``, shifted so that ``lo``
    becomes 0 (:func:`_clip` without targets)."""
    hi = lo + size - 1
    return tuple((max(a, lo) - lo, min(b, hi) - lo) for a, b in intervals if b >= lo and a <= hi)


def _check_set(intervals: Sequence[tuple[int, int]]) -> None:
    """ValueError unless ``intervals`` is a normal set of scalar values (see
    :func:`utf8_char_set_dfa`)."""
    previous = -2
    for low, high in intervals:
        if not (previous + 1 < low <= high <= MAX_CODE_POINT) or (low <= 0xDFFF and high >= 0xD800):
            raise ValueError(
                f"a character set's intervals must be sorted, disjoint, non-adjacent "
                f"ranges of scalar values: {(low, high)!r} after {previous}"
            )
        previous = high


def utf8_byte_dfa(dfa: CharDFA) -> ByteDFA:
    """The byte DFA accepting exactly the UTF-8 encodings of the strings ``dfa`` accepts.

    Only valid UTF-8 (no overlong forms, no surrogates U+D800..U+DFFF, nothing above
    U+10FFFF). Cost: about 50 clipped edge lookups per character state, plus 64 per
    shared continuation state; requires NumPy.
    """
    return _byte_dfa(dfa, json=False, complete=False)


def json_string_body_dfa(dfa: CharDFA, *, complete: bool = False) -> ByteDFA:
    """The byte strings ``B`` such that ``'"' + B + '"'`` is a JSON string literal whose
    decoded value ``dfa`` accepts, spelled canonically or (``complete``) in any way.

    Canonical (what generation writes): raw UTF-8 characters except ``"``, ``\\`` and
    U+0000..U+001F; the short escapes ``\\" \\\\ \\b \\f \\n \\r \\t``; and
    ``\\u0000``..``\\u001f`` (hex digits in either case) for the control characters.
    That is every spelling ``json.dumps(s, ensure_ascii=False)`` writes, and no
    needless escape: no ``\\/``, no ``\\u`` for a character that may be written as
    it is.

    Complete (what JSON allows, for ``accepts``): also ``\\/``, ``\\uXXXX`` of any
    code point with hex digits in either case, and UTF-16 surrogate pairs
    ``\\uD8xx\\uDCxx`` for code points above U+FFFF (a lone surrogate escape is
    rejected). So ``json.dumps(s)[1:-1]`` is accepted whenever ``dfa`` accepts ``s``,
    with ``ensure_ascii`` true or false.

    Requires NumPy; costs about three extra states per character state.
    """
    return _byte_dfa(dfa, json=True, complete=complete)


def _byte_dfa(dfa: CharDFA, *, json: bool, complete: bool) -> ByteDFA:
    """``dfa`` (minimised) as bytes: each character state's raw UTF-8 edges (``json``:
    as a JSON string body, with its escapes, see :func:`json_string_body_dfa`).

    In C when the compiled core is loaded (``jsonmode._native.r6dfa_byte_dfa``: the
    same table, state for state, 30-70x sooner); an automaton it does not take (a
    code point past U+10FFFF, rows not sorted and disjoint) and the pure-Python core go
    to :func:`_byte_dfa_python`, the reference. Raises BudgetExceededError at the
    compile deadline (``checkpoint`` called alike on both paths)."""
    dfa = minimize(dfa)
    made = _kernel_byte_dfa(dfa.start, dfa.accepting, dfa.edges, json=json, complete=complete)
    if made is not None:
        return made
    return _byte_dfa_python(dfa, json=json, complete=complete)


def _kernel_byte_dfa(
    start: int, accepting: Any, edges: Any, *, json: bool, complete: bool
) -> ByteDFA | None:
    """``jsonmode._native.r6dfa_byte_dfa`` of a character automaton (its start, its
    accepting flags and its rows of ``(lo, hi, target)`` edges), or None where the
    compiled core is not loaded or does not take the automaton (the caller's Python
    form then answers). The tables are read-only views of the kernel's bytes objects
    (no copy). Raises BudgetExceededError at the compile deadline."""
    kernels = native.KERNELS
    if kernels is None:
        return None
    try:
        made_start, made_accepting, trans = kernels.r6dfa_byte_dfa(
            start, accepting, edges, json, complete, checkpoint
        )
    except (ValueError, TypeError, OverflowError) as exc:
        if isinstance(exc, JsonModeError):
            raise
        return None
    import numpy as np

    return ByteDFA(
        made_start,
        np.frombuffer(made_accepting, dtype=np.bool_),
        np.frombuffer(trans, dtype=np.int32).reshape(-1, 256),
    )


def _byte_dfa_python(dfa: CharDFA, *, json: bool, complete: bool) -> ByteDFA:
    """:func:`_byte_dfa` in pure Python over a minimised ``dfa`` (the reference)."""
    builder = _ByteBuilder(dfa)
    for s in range(dfa.n_states):
        if not s & 63:
            checkpoint()
        builder.raw_utf8(s, json=json)
        if json:
            builder.escapes(s, complete=complete)
    builder.run_pending()
    return builder.finish()
