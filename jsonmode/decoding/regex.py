"""jsonmode's own regex → DFA engine: no backtracking, so no catastrophic patterns.

Used by the constrained decoder to enforce ``pattern``, ``format``, ``minLength`` /
``maxLength`` and integer ranges inside JSON strings and numbers.

Stages (each one printable, RE2-style):

1. :func:`~jsonmode.decoding.regex_parse.parse` — ECMA-262 text → syntax tree (see that
   module for exactly which syntax is supported);
2. :func:`compile_pattern` — Glushkov position automaton, determinised by subset
   construction (state budget ``max_states``), trimmed and minimised (Hopcroft):
   a :class:`CharDFA` over Unicode code points, printable with :meth:`CharDFA.to_text`;
3. :func:`utf8_byte_dfa` / :func:`json_string_body_dfa` — the same language over bytes
   (a :class:`ByteDFA`: a NumPy ``(n_states, 256)`` table) for the token-level engine.

Every :class:`CharDFA` these functions return is **trimmed and minimal, numbered
canonically** (breadth-first from the start state, edges in code-point order): two
DFAs of the same language are equal (``==``). Every live state can reach an accepting
state; a transition that could not is simply absent. The empty language is one
non-accepting state with no edges (:meth:`CharDFA.is_empty`).

Budgets (typed, documented, never a hang): ``max_states`` (default
:data:`DEFAULT_MAX_STATES` = 2000) bounds the states built by subset or product
construction *before* minimisation; the Glushkov automaton may hold at most
``POSITIONS_PER_STATE * max_states`` positions (one per character class occurrence
after unrolling counted repeats). Exceeding either raises
:class:`~jsonmode.errors.UnsupportedSchemaError` saying which budget, so the caller
can fall back to post-validation. Costs: parsing is linear; compiling a typical schema
pattern takes well under a millisecond to a few milliseconds; the worst case is about
``max_states × (distinct classes per state)`` interval sweeps — ``(a|b)*a(a|b){30}``
hits the default budget in tens of milliseconds. Minimisation is O(n·k·log n) for n
states and k distinguishable character classes. Byte DFAs cost 1 KiB of table per
state: a character state with ASCII-only edges needs ~1 byte state for raw UTF-8 and
~7 with JSON escapes; one that takes any code point needs ~8 (the UTF-8 continuation
states remember where to go) and ~20–28 with escapes (``\\uXXXX`` and surrogate-pair
prefixes). Measured: ``^[a-z]{1,64}$`` → 449 body states in ~10 ms; a string of at
most 64 code points → 1281 states in ~30 ms; at most 256 → 5121 states in ~130 ms.

All objects are immutable and thread-safe. NumPy is imported only by the byte-level
functions, so the character-level engine works without it.
"""

from __future__ import annotations

import bisect
import functools
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from jsonmode.decoding.budget import checkpoint
from jsonmode.decoding.regex_parse import (
    ALL,
    MAX_CODE_POINT,
    Alt,
    Chars,
    CharSet,
    Concat,
    Node,
    Repeat,
    parse,
)
from jsonmode.errors import UnsupportedSchemaError

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    _ArrayT = TypeVar("_ArrayT", bound=npt.NDArray[Any])

__all__ = [
    "DEFAULT_MAX_STATES",
    "POSITIONS_PER_STATE",
    "ByteDFA",
    "CharDFA",
    "any_char_dfa",
    "compile_pattern",
    "complement",
    "integer_range_pattern",
    "intersect",
    "json_string_body_dfa",
    "literal_dfa",
    "minimize",
    "union",
    "utf8_byte_dfa",
]

#: Default bound on the states built by subset / product construction.
DEFAULT_MAX_STATES = 2000
#: The Glushkov automaton may have at most this many positions per allowed state.
POSITIONS_PER_STATE = 10
#: ... at most this many follow links per position allowed: nested optional repeats
#: such as ``(a?){1,5000}`` link every position to every later one, quadratic in memory.
LINKS_PER_POSITION = 16
#: ... and at most this many positions per position allowed in the subset
#: construction's states, summed (an unanchored ``a{1000}`` needs ~25).
MEMBERS_PER_POSITION = 64

Edge = tuple[int, int, int]


# -- the character-level automaton ---------------------------------------------------


@dataclass(frozen=True)
class CharDFA:
    """A deterministic automaton over Unicode code points (0..0x10FFFF).

    Attributes:
        start: the start state.
        accepting: per state, whether it accepts.
        edges: per state, sorted disjoint ``(lo, hi, dst)`` inclusive code-point
            intervals; a code point covered by no interval leads nowhere (rejected).

    Immutable and thread-safe. :meth:`accepts` costs O(len(text) · log(edges)).
    """

    start: int
    accepting: tuple[bool, ...]
    edges: tuple[tuple[Edge, ...], ...]
    _lows: tuple[tuple[int, ...], ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if len(self.accepting) != len(self.edges) or not 0 <= self.start < len(self.edges):
            raise ValueError("CharDFA: accepting/edges lengths differ or start out of range")
        object.__setattr__(self, "_lows", tuple(tuple(e[0] for e in row) for row in self.edges))

    @property
    def n_states(self) -> int:
        """The number of states."""
        return len(self.edges)

    def step(self, state: int, code_point: int) -> int:
        """The state after ``code_point`` from ``state``, or -1 (rejected)."""
        row = self.edges[state]
        k = bisect.bisect_right(self._lows[state], code_point) - 1
        if k >= 0 and code_point <= row[k][1]:
            return row[k][2]
        return -1

    def accepts(self, text: str) -> bool:
        """Whether the whole of ``text`` is in the language."""
        state = self.start
        for ch in text:
            state = self.step(state, ord(ch))
            if state < 0:
                return False
        return self.accepting[state]

    def is_empty(self) -> bool:
        """Whether the language is empty (true only of the one-state empty DFA when trimmed)."""
        seen = {self.start}
        todo = [self.start]
        while todo:
            s = todo.pop()
            if self.accepting[s]:
                return False
            for _, _, d in self.edges[s]:
                if d not in seen:
                    seen.add(d)
                    todo.append(d)
        return True

    def to_text(self) -> str:
        """A stable printable form, one line per state (for golden tests and debugging)."""
        lines = []
        for s, row in enumerate(self.edges):
            mark = ("S" if s == self.start else " ") + ("A" if self.accepting[s] else " ")
            parts = [f"{_show_interval(lo, hi)}->{d}" for lo, hi, d in row]
            lines.append(f"{s}{mark}: " + " ".join(parts))
        return "\n".join(lines)


def _show_cp(cp: int) -> str:
    ch = chr(cp)
    if 0x21 <= cp <= 0x7E and ch not in "-[]\\":
        return ch
    return f"\\u{cp:04X}" if cp <= 0xFFFF else f"\\U{cp:06X}"


def _show_interval(lo: int, hi: int) -> str:
    return f"[{_show_cp(lo)}]" if lo == hi else f"[{_show_cp(lo)}-{_show_cp(hi)}]"


def _empty_dfa() -> CharDFA:
    return CharDFA(0, (False,), ((),))


def _budget_error(what: str, limit: int, detail: str = "") -> UnsupportedSchemaError:
    return UnsupportedSchemaError(
        f"{what} exceeds the state budget (max_states={limit}){detail}",
        hint="the keyword is left to post-validation; raise max_states to enforce it while "
        "decoding, at the cost of compile time and memory",
    )


# -- minimisation --------------------------------------------------------------------


def _trim(
    start: int, accepting: Sequence[bool], edges: Sequence[Sequence[Edge]]
) -> tuple[list[int], list[bool], list[list[Edge]]] | None:
    """Keep states reachable from ``start`` that can reach acceptance; None if none can."""
    n = len(edges)
    reach = [False] * n
    reach[start] = True
    todo = [start]
    rev: list[list[int]] = [[] for _ in range(n)]
    while todo:
        s = todo.pop()
        for _, _, d in edges[s]:
            rev[d].append(s)
            if not reach[d]:
                reach[d] = True
                todo.append(d)
    live = [False] * n
    todo = [s for s in range(n) if reach[s] and accepting[s]]
    for s in todo:
        live[s] = True
    while todo:
        s = todo.pop()
        for p in rev[s]:
            if not live[p]:
                live[p] = True
                todo.append(p)
    if not live[start]:
        return None
    keep = [s for s in range(n) if live[s]]
    new = {s: k for k, s in enumerate(keep)}
    out_edges = [[(lo, hi, new[d]) for lo, hi, d in edges[s] if live[d]] for s in keep]
    return [new[start]], [bool(accepting[s]) for s in keep], out_edges


def _merge_row(row: Iterable[Edge]) -> tuple[Edge, ...]:
    out: list[Edge] = []
    for lo, hi, d in row:
        if out and out[-1][2] == d and out[-1][1] + 1 == lo:
            out[-1] = (out[-1][0], hi, d)
        else:
            out.append((lo, hi, d))
    return tuple(out)


def _canonical(start: int, accepting: Sequence[bool], edges: Sequence[Sequence[Edge]]) -> CharDFA:
    """Renumber breadth-first from ``start`` (edges in order) and merge adjacent edges."""
    order = {start: 0}
    queue = deque([start])
    while queue:
        s = queue.popleft()
        for _, _, d in edges[s]:
            if d not in order:
                order[d] = len(order)
                queue.append(d)
    rows: list[tuple[Edge, ...]] = [()] * len(order)
    acc = [False] * len(order)
    for s, k in order.items():
        rows[k] = _merge_row((lo, hi, order[d]) for lo, hi, d in edges[s])
        acc[k] = bool(accepting[s])
    return CharDFA(0, tuple(acc), tuple(rows))


def _minimize_raw(
    start: int, accepting: Sequence[bool], edges: Sequence[Sequence[Edge]]
) -> CharDFA:
    trimmed = _trim(start, accepting, edges)
    if trimmed is None:
        return _empty_dfa()
    (start,), acc, rows = trimmed
    n = len(rows)
    # Split the code points into the atoms that no edge boundary crosses, then group the
    # atoms by the column they induce: those are the distinguishable symbols.
    points = sorted(
        {lo for row in rows for lo, _, _ in row} | {hi + 1 for row in rows for _, hi, _ in row}
    )
    index = {pt: k for k, pt in enumerate(points)}
    sink = n
    columns: list[list[int]] = [[sink] * n for _ in range(max(len(points) - 1, 0))]
    for s, row in enumerate(rows):
        if not s & 63:
            checkpoint()
        for lo, hi, d in row:
            for a in range(index[lo], index[hi + 1]):
                columns[a][s] = d
    symbols = list({tuple(col): None for col in columns})
    # inverse transitions per symbol; the sink loops to itself and receives the rest.
    inv: list[dict[int, list[int]]] = []
    for col in symbols:
        back: dict[int, list[int]] = {}
        for s, d in enumerate(col):
            back.setdefault(d, []).append(s)
        back.setdefault(sink, []).append(sink)
        inv.append(back)
    # Hopcroft's partition refinement.
    finals = [s for s in range(n) if acc[s]]
    others = [s for s in range(n) if not acc[s]] + [sink]
    blocks: list[set[int]] = [set(finals), set(others)]
    block_of = [0] * (n + 1)
    for s in others:
        block_of[s] = 1
    work = {0, 1}
    rounds = 0
    while work:
        rounds += 1
        if not rounds & 63:
            checkpoint()
        splitter = blocks[work.pop()]
        for back in inv:
            hit: dict[int, set[int]] = {}
            for t in splitter:
                for s in back.get(t, ()):
                    hit.setdefault(block_of[s], set()).add(s)
            for b, part in hit.items():
                whole = blocks[b]
                if len(part) == len(whole):
                    continue
                rest = whole - part
                new_id = len(blocks)
                small, large = (part, rest) if len(part) <= len(rest) else (rest, part)
                blocks[b] = large
                blocks.append(small)
                for s in small:
                    block_of[s] = new_id
                # Hopcroft: if b was pending it stays so (now the larger half) and the
                # smaller half joins it; if not, the smaller half suffices.
                work.add(new_id)
    sink_block = block_of[sink]
    reps: dict[int, int] = {}
    for s in range(n):
        reps.setdefault(block_of[s], s)
    min_edges: dict[int, list[Edge]] = {}
    min_acc: dict[int, bool] = {}
    for b, s in reps.items():
        min_acc[b] = acc[s]
        min_edges[b] = [(lo, hi, block_of[d]) for lo, hi, d in rows[s] if block_of[d] != sink_block]
    ids = {b: k for k, b in enumerate(reps)}
    return _canonical(
        ids[block_of[start]],
        [min_acc[b] for b in reps],
        [[(lo, hi, ids[d]) for lo, hi, d in min_edges[b]] for b in reps],
    )


def minimize(a: CharDFA) -> CharDFA:
    """The trimmed, minimal, canonically numbered DFA of ``a``'s language."""
    return _minimize_raw(a.start, a.accepting, a.edges)


# -- pattern compilation: Glushkov positions + subset construction ------------------


class _Positions:
    """Glushkov's position automaton: one position per character-class occurrence."""

    def __init__(self, limit: int, pattern: str, max_states: int) -> None:
        self.cs: list[CharSet] = [()]  # position 0: the initial position
        self.follow: list[set[int]] = [set()]
        self.limit = limit
        self.pattern = pattern
        self.max_states = max_states
        self.univ = -1
        self.links = 0  # follow links so far (see LINKS_PER_POSITION)

    def link(self, sources: Iterable[int], targets: set[int]) -> None:
        """Every position of ``targets`` may follow every position of ``sources``."""
        follow = self.follow
        for p in sources:
            before = len(follow[p])
            follow[p] |= targets
            self.links += len(follow[p]) - before
        if self.links > LINKS_PER_POSITION * self.limit:
            checkpoint()
            raise _budget_error(
                f"regex `{_short(self.pattern)}`",
                self.max_states,
                f": more than {LINKS_PER_POSITION * self.limit} follow links",
            )

    def new(self, cs: CharSet) -> int:
        if not len(self.cs) & 255:
            checkpoint()
        if len(self.cs) > self.limit:
            raise _budget_error(
                f"regex `{_short(self.pattern)}`",
                self.max_states,
                f": more than {self.limit} positions after unrolling repeats",
            )
        self.cs.append(cs)
        self.follow.append(set())
        return len(self.cs) - 1

    def universal(self) -> int:
        """The one shared ``[\\s\\S]*`` tail position of unanchored-at-end alternatives."""
        if self.univ < 0:
            self.univ = self.new(ALL)
            self.follow[self.univ].add(self.univ)
        return self.univ

    def build(self, node: Node | None) -> tuple[set[int], set[int], bool]:
        """(first, last, nullable) of ``node``; ``None`` stands for the universal tail."""
        if node is None:
            u = self.universal()
            return {u}, {u}, True
        if isinstance(node, Chars):
            if not node.cs:
                return set(), set(), False
            p = self.new(node.cs)
            return {p}, {p}, False
        if isinstance(node, Concat):
            first: set[int] = set()
            last: set[int] = set()
            nullable = True
            for item in node.items:
                f, la, nu = self.build(item)
                self.link(last, f)
                if nullable:
                    first |= f
                last = (last | la) if nu else la
                nullable = nullable and nu
            return first, last, nullable
        if isinstance(node, Alt):
            first, last, nullable = set(), set(), False
            for item in node.items:
                f, la, nu = self.build(item)
                first |= f
                last |= la
                nullable = nullable or nu
            return first, last, nullable
        return self.repeat(node)

    def repeat(self, node: Repeat) -> tuple[set[int], set[int], bool]:
        lo, hi = node.min, node.max
        if hi == 0:
            return set(), set(), True
        if hi is None:
            copies = [self.build(node.item) for _ in range(max(lo, 1))]
            f, la, _ = copies[-1]
            self.link(la, f)
            if lo == 0:
                copies[-1] = (f, la, True)
        else:
            copies = [self.build(node.item) for _ in range(hi)]
            # Optional tail (C_lo (C_lo+1 (...)?)?)?, folded from the back.
            tail: tuple[set[int], set[int], bool] | None = None
            for j in range(hi - 1, lo - 1, -1):
                f, la, nu = copies[j]
                if tail is None:
                    tail = (set(f), set(la), True)
                else:
                    self.link(la, tail[0])
                    tail = (f | tail[0] if nu else set(f), tail[1] | la, True)
            copies = copies[:lo] + ([tail] if tail is not None else [])
        first: set[int] = set()
        last: set[int] = set()
        nullable = True
        for f, la, nu in copies:
            self.link(last, f)
            if nullable:
                first |= f
            last = (last | la) if nu else la
            nullable = nullable and nu
        return first, last, nullable


def _short(pattern: str) -> str:
    return pattern if len(pattern) <= 80 else pattern[:77] + "..."


def compile_pattern(
    pattern: str, *, max_states: int = DEFAULT_MAX_STATES, anchored: bool = False
) -> CharDFA:
    """The DFA of the strings that JSON Schema's ``pattern`` accepts.

    ECMA-262 semantics over code points, **unanchored search** (a string matches if the
    pattern matches anywhere in it) unless an alternative is anchored with ``^`` / ``$``.
    See :mod:`jsonmode.decoding.regex_parse` for the supported syntax.

    Args:
        pattern: the regular expression text.
        max_states: budget on the states of the subset construction (before
            minimisation); positions are bounded by ``POSITIONS_PER_STATE * max_states``.
        anchored: match whole strings only, as if every alternative were written
            ``^...$`` (``compile_regex``'s meaning).

    Raises:
        UnsupportedSchemaError: unsupported or malformed syntax (the message names the
            fragment), or a budget exceeded (the message says which).
    """
    branches = parse(pattern)
    pos = _Positions(POSITIONS_PER_STATE * max_states, pattern, max_states)
    groups: dict[tuple[bool, bool], list[Node]] = {}
    for br in branches:
        ends = (br.anchored_start or anchored, br.anchored_end or anchored)
        groups.setdefault(ends, []).append(br.node)
    first: set[int] = set()
    last: set[int] = set()
    nullable = False
    for (anchored_start, anchored_end), nodes in groups.items():
        body: Node = nodes[0] if len(nodes) == 1 else Alt(tuple(nodes))
        if not anchored_start:
            body = Concat((Repeat(Chars(ALL), 0, None), body))
        f, la, nu = pos.build(body)
        if not anchored_end:  # then anything may follow: the shared universal tail
            uf, ul, _ = pos.build(None)
            pos.link(la, uf)
            f = f | uf if nu else f
            la = la | ul
        first |= f
        last |= la
        nullable = nullable or nu
    pos.follow[0] = first
    if nullable:
        last.add(0)
    return _determinise(pos, frozenset(last), max_states)


def _determinise(pos: _Positions, last: frozenset[int], max_states: int) -> CharDFA:
    univ = pos.univ
    cs_ids: dict[CharSet, int] = {}
    cs_of = [cs_ids.setdefault(cs, len(cs_ids)) for cs in pos.cs]
    cs_list = list(cs_ids)
    follow = [frozenset(f) for f in pos.follow]
    start = frozenset({0})
    ids: dict[frozenset[int], int] = {start: 0}
    order = [start]
    edges: list[list[Edge]] = []
    members, most = 1, MEMBERS_PER_POSITION * pos.limit  # positions over all states
    k = 0
    while k < len(order):
        state = order[k]
        k += 1
        if not k & 15:
            checkpoint()
        by_cs: dict[int, set[int]] = {}
        for p in state:
            for q in follow[p]:
                by_cs.setdefault(cs_of[q], set()).add(q)
        row: list[Edge] = []
        for lo, hi, target in _sweep(by_cs, cs_list):
            if univ >= 0 and univ in target:
                target = frozenset({univ})
            dst = ids.get(target)
            if dst is None:
                members += len(target)
                if len(order) >= max_states or members > most:
                    raise _budget_error(f"regex `{_short(pos.pattern)}`", max_states)
                dst = ids[target] = len(order)
                order.append(target)
            row.append((lo, hi, dst))
        edges.append(list(_merge_row(row)))
    accepting = [bool(state & last) for state in order]
    return _minimize_raw(0, accepting, edges)


def _sweep(
    by_cs: dict[int, set[int]], cs_list: list[CharSet]
) -> Iterator[tuple[int, int, frozenset[int]]]:
    """Split the union of the classes into segments, each with the positions it enters."""
    if len(by_cs) == 1:
        ((c, targets),) = by_cs.items()
        target = frozenset(targets)
        for lo, hi in cs_list[c]:
            yield lo, hi, target
        return
    events: list[tuple[int, int, int]] = []
    for c in by_cs:
        for lo, hi in cs_list[c]:
            events.append((lo, 1, c))
            events.append((hi + 1, -1, c))
    events.sort()
    active: set[int] = set()
    cache: dict[frozenset[int], frozenset[int]] = {}
    i = 0
    n = len(events)
    while i < n:
        point = events[i][0]
        while i < n and events[i][0] == point:
            _, kind, c = events[i]
            if kind > 0:
                active.add(c)
            else:
                active.discard(c)
            i += 1
        if active and i < n:
            key = frozenset(active)
            found = cache.get(key)
            if found is None:
                found = cache[key] = frozenset().union(*(by_cs[c] for c in key))
            yield point, events[i][0] - 1, found


# -- building blocks and Boolean operations ------------------------------------------


def any_char_dfa(
    min_len: int = 0, max_len: int | None = None, *, max_states: int = DEFAULT_MAX_STATES
) -> CharDFA:
    """Any string whose length in code points is within ``[min_len, max_len]``.

    ``max_len=None`` means unbounded; ``max_len < min_len`` gives the empty language.
    Costs ``max(min_len, max_len) + 1`` states.

    Raises:
        UnsupportedSchemaError: more than ``max_states`` states would be needed.
    """
    if min_len < 0:
        min_len = 0
    if max_len is not None and max_len < min_len:
        return _empty_dfa()
    top = max_len if max_len is not None else min_len
    if top + 1 > max_states:
        raise _budget_error(f"string length bounds [{min_len}, {max_len}]", max_states)
    rows: list[tuple[Edge, ...]] = [((0, MAX_CODE_POINT, s + 1),) for s in range(top)]
    rows.append(((0, MAX_CODE_POINT, top),) if max_len is None else ())
    return CharDFA(0, tuple(s >= min_len for s in range(top + 1)), tuple(rows))


def literal_dfa(strings: Iterable[str]) -> CharDFA:
    """Exactly the given strings (a trie, minimised). Costs O(total length)."""
    edges: list[dict[int, int]] = [{}]
    accepting = [False]
    for count, text in enumerate(strings):
        if not count & 255:
            checkpoint()
        s = 0
        for ch in text:
            nxt = edges[s].get(ord(ch))
            if nxt is None:
                nxt = edges[s][ord(ch)] = len(edges)
                edges.append({})
                accepting.append(False)
            s = nxt
        accepting[s] = True
    rows = [[(cp, cp, d) for cp, d in sorted(row.items())] for row in edges]
    return _minimize_raw(0, accepting, rows)


def _overlay(a: Sequence[Edge], b: Sequence[Edge]) -> Iterator[tuple[int, int, int, int]]:
    """Segments where ``a`` or ``b`` has an edge: ``(lo, hi, dst_a or -1, dst_b or -1)``."""
    points = sorted(
        {e[0] for e in a} | {e[1] + 1 for e in a} | {e[0] for e in b} | {e[1] + 1 for e in b}
    )
    i = j = 0
    for k in range(len(points) - 1):
        lo, hi = points[k], points[k + 1] - 1
        while i < len(a) and a[i][1] < lo:
            i += 1
        while j < len(b) and b[j][1] < lo:
            j += 1
        da = a[i][2] if i < len(a) and a[i][0] <= lo else -1
        db = b[j][2] if j < len(b) and b[j][0] <= lo else -1
        if da >= 0 or db >= 0:
            yield lo, hi, da, db


def _product(a: CharDFA, b: CharDFA, *, both: bool, max_states: int, what: str) -> CharDFA:
    start = (a.start, b.start)
    ids = {start: 0}
    order = [start]
    edges: list[list[Edge]] = []
    k = 0
    while k < len(order):
        sa, sb = order[k]
        k += 1
        if not k & 15:
            checkpoint()
        row: list[Edge] = []
        ea = a.edges[sa] if sa >= 0 else ()
        eb = b.edges[sb] if sb >= 0 else ()
        for lo, hi, da, db in _overlay(ea, eb):
            if both and (da < 0 or db < 0):
                continue
            pair = (da, db)
            dst = ids.get(pair)
            if dst is None:
                if len(order) >= max_states:
                    raise _budget_error(what, max_states)
                dst = ids[pair] = len(order)
                order.append(pair)
            row.append((lo, hi, dst))
        edges.append(row)

    def acc(sa: int, sb: int) -> bool:
        in_a = sa >= 0 and a.accepting[sa]
        in_b = sb >= 0 and b.accepting[sb]
        return (in_a and in_b) if both else (in_a or in_b)

    return _minimize_raw(0, [acc(sa, sb) for sa, sb in order], edges)


def intersect(a: CharDFA, b: CharDFA, *, max_states: int = DEFAULT_MAX_STATES) -> CharDFA:
    """The strings both accept (product construction, then minimised).

    Raises:
        UnsupportedSchemaError: the product needs more than ``max_states`` states.
    """
    return _product(a, b, both=True, max_states=max_states, what="intersection of two regexes")


def union(a: CharDFA, b: CharDFA, *, max_states: int = DEFAULT_MAX_STATES) -> CharDFA:
    """The strings either accepts (product construction, then minimised).

    Raises:
        UnsupportedSchemaError: the product needs more than ``max_states`` states.
    """
    return _product(a, b, both=False, max_states=max_states, what="union of two regexes")


def complement(a: CharDFA) -> CharDFA:
    """Every code-point string that ``a`` rejects. Costs O(states + edges) plus minimisation."""
    n = a.n_states
    sink = n
    rows: list[list[Edge]] = []
    for row in a.edges:
        out: list[Edge] = []
        nxt = 0
        for lo, hi, d in row:
            if lo > nxt:
                out.append((nxt, lo - 1, sink))
            out.append((lo, hi, d))
            nxt = hi + 1
        if nxt <= MAX_CODE_POINT:
            out.append((nxt, MAX_CODE_POINT, sink))
        rows.append(out)
    rows.append([(0, MAX_CODE_POINT, sink)])
    accepting = [not x for x in a.accepting] + [True]
    return _minimize_raw(a.start, accepting, rows)


# -- integer ranges ------------------------------------------------------------------


def _digit_class(lo: int, hi: int) -> str:
    if lo == hi:
        return str(lo)
    if hi == lo + 1:
        return f"[{lo}{hi}]"
    return f"[{lo}-{hi}]"


def _any_digits(k: int) -> str:
    return "" if k == 0 else ("[0-9]" if k == 1 else f"[0-9]{{{k}}}")


def _same_length(lo: str, hi: str) -> list[str]:
    """Alternatives matching the decimal strings of equal length in ``[lo, hi]``."""
    if lo == hi:
        return [lo]
    k = 0
    while lo[k] == hi[k]:
        k += 1
    prefix, lo, hi = lo[:k], lo[k:], hi[k:]
    rest = len(lo) - 1
    d1, d2 = int(lo[0]), int(hi[0])
    lo_full = lo[1:] == "0" * rest
    hi_full = hi[1:] == "9" * rest
    out: list[str] = []
    mid_lo = d1 if lo_full else d1 + 1
    mid_hi = d2 if hi_full else d2 - 1
    if not lo_full:
        out += [f"{d1}{alt}" for alt in _same_length(lo[1:], "9" * rest)]
    if mid_lo <= mid_hi:
        out.append(_digit_class(mid_lo, mid_hi) + _any_digits(rest))
    if not hi_full:
        out += [f"{d2}{alt}" for alt in _same_length("0" * rest, hi[1:])]
    return [prefix + alt for alt in out]


def _non_negative(lo: int, hi: int | None) -> list[str]:
    """Alternatives for the canonical spellings of the integers in ``[lo, hi]``, lo >= 0."""
    out: list[str] = []
    if lo == 0:
        out.append("0")
        lo = 1
        if hi is not None and hi < 1:
            return out
    width = len(str(lo))
    top = hi if hi is not None else 10**width - 1
    while True:
        upper = min(top, 10**width - 1)
        lower = max(lo, 10 ** (width - 1))
        if lower <= upper:
            out += _same_length(str(lower), str(upper))
        if upper == top:
            break
        width += 1
    if hi is None:
        out.append(f"[1-9][0-9]{{{width},}}")
    return out


def integer_range_pattern(minimum: int | None, maximum: int | None) -> str:
    """An ECMA regex (unanchored text, meant to be matched whole, e.g. inside ``^(?:…)$``)
    matching exactly the canonical JSON spellings of the integers in ``[minimum, maximum]``.

    Canonical: no leading zeros, no ``+``, and ``-0`` excluded. Either bound may be
    None (unbounded). Exact for any size of bound. An empty range gives ``[^\\s\\S]``,
    which matches nothing. Example: ``(3, 125)`` → ``(?:[3-9]|[1-9][0-9]|1[01][0-9]|12[0-5])``.
    Cost: O(number of digits²) characters.
    """
    if minimum is not None and maximum is not None and minimum > maximum:
        return "[^\\s\\S]"
    alts: list[str] = []
    if minimum is None or minimum < 0:
        # negative part: -[1..-minimum] restricted to <= min(maximum, -1)
        neg_hi = None if minimum is None else -minimum
        neg_lo = 1 if maximum is None or maximum >= 0 else -maximum
        alts += ["-" + a for a in _non_negative(neg_lo, neg_hi)]
    if maximum is None or maximum >= 0:
        alts += _non_negative(max(minimum or 0, 0), maximum)
    return "(?:" + "|".join(alts) + ")"


# -- byte-level automata -------------------------------------------------------------


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


def _readonly(arr: _ArrayT) -> _ArrayT:
    arr.setflags(write=False)
    return arr


def _reach(
    n: int, frm: npt.NDArray[np.int64], to: npt.NDArray[np.int64], seeds: list[int]
) -> npt.NDArray[np.bool_]:
    import numpy as np

    order = np.argsort(frm, kind="stable")
    frm_sorted, to_sorted = frm[order], to[order]
    starts = np.searchsorted(frm_sorted, np.arange(n + 1))
    seen = np.zeros(n, dtype=np.bool_)
    seen[seeds] = True
    todo = list(seeds)
    while todo:
        s = todo.pop()
        for d in to_sorted[starts[s] : starts[s + 1]].tolist():
            if not seen[d]:
                seen[d] = True
                todo.append(d)
    return seen


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


def utf8_byte_dfa(dfa: CharDFA) -> ByteDFA:
    """The byte DFA accepting exactly the UTF-8 encodings of the strings ``dfa`` accepts.

    Only valid UTF-8 (no overlong forms, no surrogates U+D800..U+DFFF, nothing above
    U+10FFFF). Cost: about 50 clipped edge lookups per character state, plus 64 per
    shared continuation state; requires NumPy.
    """
    dfa = minimize(dfa)
    builder = _ByteBuilder(dfa)
    for s in range(dfa.n_states):
        if not s & 63:
            checkpoint()
        builder.raw_utf8(s, json=False)
    builder.run_pending()
    return builder.finish()


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
    dfa = minimize(dfa)
    builder = _ByteBuilder(dfa)
    for s in range(dfa.n_states):
        if not s & 63:
            checkpoint()
        builder.raw_utf8(s, json=True)
        builder.escapes(s, complete=complete)
    builder.run_pending()
    return builder.finish()
