"""Character-level DFAs: the :class:`CharDFA` type, minimisation and the Boolean algebra.

Part of jsonmode's regex engine (:mod:`jsonmode.regex.glushkov` is the entry point and
re-exports every public name here). Every :class:`CharDFA` the functions of this module
return is **trimmed and minimal, numbered canonically** (breadth-first from the start
state, edges in code-point order): two DFAs of the same language are equal (``==``).

Costs: minimisation is Hopcroft's partition refinement over the distinguishable
character classes, O(m·log n) for n states and m transitions (counted per class), with
the transitions into the implicit dead state never visited; a DFA that is already
minimal (one this package built) is returned as it is, at no cost. Products cost
O(states × edges per state) before minimisation and are bounded by ``max_states``.

:func:`minimize_raw` runs in C when the compiled core is loaded
(:data:`jsonmode.native.KERNELS`, ``csrc/regex.c``), with the same answers (the
canonical form depends only on the language); the pure-Python form stays as the
reference and the fallback. No NumPy. All objects are immutable and thread-safe.
"""

from __future__ import annotations

import bisect
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field

from jsonmode import native
from jsonmode.budget import checkpoint
from jsonmode.errors import JsonModeError, UnsupportedSchemaError
from jsonmode.regex.syntax import MAX_CODE_POINT

__all__ = [
    "DEFAULT_MAX_STATES",
    "CharDFA",
    "Edge",
    "any_char_dfa",
    "budget_error",
    "canonical_dfa",
    "complement",
    "intersect",
    "known_minimal",
    "literal_dfa",
    "merge_row",
    "minimize",
    "minimize_raw",
    "union",
]

#: Default bound on the states built by subset / product construction.
DEFAULT_MAX_STATES = 2000

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
    # Set (by known_minimal) on DFAs this package built trimmed, minimal and canonical,
    # so that minimize() returns them as they are.
    _minimal: bool = field(default=False, init=False, repr=False, compare=False)

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


def known_minimal(dfa: CharDFA) -> CharDFA:
    """Mark ``dfa`` (trimmed, minimal, canonically numbered) so minimize() skips it."""
    object.__setattr__(dfa, "_minimal", True)
    return dfa


def canonical_dfa(accepting: tuple[bool, ...], edges: tuple[tuple[Edge, ...], ...]) -> CharDFA:
    """The CharDFA (start 0) of a compiled kernel's answer: ``accepting`` and ``edges``
    as a trimmed, minimal, canonically numbered DFA's fields (marked so)."""
    return known_minimal(CharDFA(0, accepting, edges))


def _empty_dfa() -> CharDFA:
    return known_minimal(CharDFA(0, (False,), ((),)))


def budget_error(what: str, limit: int, detail: str = "") -> UnsupportedSchemaError:
    """The error for ``what`` (a regex, a keyword) needing more than ``limit`` states:
    an UnsupportedSchemaError whose hint says the keyword is left to post-validation."""
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


def merge_row(row: Iterable[Edge]) -> tuple[Edge, ...]:
    """``row`` (edges sorted by code point) with adjacent ranges to the same target
    joined into one: the canonical form every CharDFA row is kept in."""
    out: list[Edge] = []
    for lo, hi, d in row:
        if out and out[-1][2] == d and out[-1][1] + 1 == lo:
            out[-1] = (out[-1][0], hi, d)
        else:
            out.append((lo, hi, d))
    return tuple(out)


def _canonical(start: int, accepting: Sequence[bool], edges: Sequence[Sequence[Edge]]) -> CharDFA:
    """Renumber breadth-first from ``start`` (edges in order) and merge adjacent edges.
    The caller guarantees that the automaton is trimmed and minimal."""
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
        rows[k] = merge_row((lo, hi, order[d]) for lo, hi, d in edges[s])
        acc[k] = bool(accepting[s])
    return known_minimal(CharDFA(0, tuple(acc), tuple(rows)))


def _predecessors(rows: Sequence[Sequence[Edge]]) -> list[list[tuple[int, int]]]:
    """Per state ``t``, the ``(symbol, s)`` pairs of the transitions ``s -> t``.

    Symbols are the distinguishable character classes: the code points split into the
    atoms that no edge boundary crosses, and atoms that every state maps alike are one
    symbol. Each state has at most one transition per symbol (it is deterministic).
    """
    n = len(rows)
    points = sorted(
        {lo for row in rows for lo, _, _ in row} | {hi + 1 for row in rows for _, hi, _ in row}
    )
    index = {pt: k for k, pt in enumerate(points)}
    columns: list[list[int]] = [[n] * n for _ in range(max(len(points) - 1, 0))]
    for s, row in enumerate(rows):
        if not s & 255:
            checkpoint()
        for lo, hi, d in row:
            for a in range(index[lo], index[hi + 1]):
                columns[a][s] = d
    symbol_ids: dict[tuple[int, ...], int] = {}
    pred: list[list[tuple[int, int]]] = [[] for _ in range(n)]
    for column in columns:
        key = tuple(column)
        if key in symbol_ids:
            continue
        j = symbol_ids[key] = len(symbol_ids)
        for s, d in enumerate(key):
            if d != n:
                pred[d].append((j, s))
    return pred


def minimize_raw(start: int, accepting: Sequence[bool], edges: Sequence[Sequence[Edge]]) -> CharDFA:
    """Trim, minimise (Hopcroft) and number canonically.

    In C when the compiled core is loaded (``jsonmode._native.minimize_raw``, same
    answer); rows it does not take (not sorted and disjoint, an empty range, a target
    out of range) and the pure-Python core go to :func:`_minimize_raw_python`, the
    reference, described here. Raises BudgetExceededError at the compile deadline.
    """
    kernels = native.KERNELS
    if kernels is not None:
        try:
            accepted, rows = kernels.minimize_raw(start, accepting, edges, checkpoint)
        except (ValueError, TypeError, OverflowError) as exc:
            if isinstance(exc, JsonModeError):
                raise
        else:
            return canonical_dfa(accepted, rows)
    return _minimize_raw_python(start, accepting, edges)


def _minimize_raw_python(
    start: int, accepting: Sequence[bool], edges: Sequence[Sequence[Edge]]
) -> CharDFA:
    """Trim, minimise (Hopcroft) and number canonically (the pure-Python form).

    The automaton is partial: a missing transition goes to an implicit dead state. Once
    trimmed, that state is distinguishable from every other (none of which is dead), so
    it is a block of its own from the start; Hopcroft's rule lets one initial block stay
    out of the splitters, and that one is the dead state's, so the (many) transitions
    into it are never visited. Cost O(m·log n) for m transitions (per symbol).
    """
    trimmed = _trim(start, accepting, edges)
    if trimmed is None:
        return _empty_dfa()
    (start,), acc, rows = trimmed
    n = len(rows)
    pred = _predecessors(rows)
    finals = {s for s in range(n) if acc[s]}
    others = set(range(n)) - finals
    blocks: list[set[int]] = [b for b in (finals, others) if b]
    block_of = [0] * n
    for k, block in enumerate(blocks):
        for s in block:
            block_of[s] = k
    work = set(range(len(blocks)))
    rounds = 0
    while work:
        rounds += 1
        if not rounds & 63:
            checkpoint()
        splitter = blocks[work.pop()]
        # The sources of the transitions into the splitter, per symbol.
        by_symbol: dict[int, list[int]] = {}
        for t in splitter:
            for j, s in pred[t]:
                sources = by_symbol.get(j)
                if sources is None:
                    by_symbol[j] = [s]
                else:
                    sources.append(s)
        for sources in by_symbol.values():
            hit: dict[int, list[int]] = {}
            for s in sources:
                b = block_of[s]
                part = hit.get(b)
                if part is None:
                    hit[b] = [s]
                else:
                    part.append(s)
            for b, part in hit.items():
                whole = blocks[b]
                if len(part) == len(whole):
                    continue
                inside = set(part)
                rest = whole - inside
                new_id = len(blocks)
                small, large = (inside, rest) if len(inside) <= len(rest) else (rest, inside)
                blocks[b] = large
                blocks.append(small)
                for s in small:
                    block_of[s] = new_id
                # Hopcroft: if b was pending it stays so (now the larger half) and the
                # smaller half joins it; if not, the smaller half suffices.
                work.add(new_id)
    reps: dict[int, int] = {}
    for s in range(n):
        reps.setdefault(block_of[s], s)
    ids = {b: k for k, b in enumerate(reps)}
    return _canonical(
        ids[block_of[start]],
        [acc[s] for s in reps.values()],
        [[(lo, hi, ids[block_of[d]]) for lo, hi, d in rows[s]] for s in reps.values()],
    )


def minimize(a: CharDFA) -> CharDFA:
    """The trimmed, minimal, canonically numbered DFA of ``a``'s language.

    Free for a DFA this package built (every function here returns one already); else
    one trim and Hopcroft pass (see :func:`minimize_raw`).
    """
    if a._minimal:
        return a
    return minimize_raw(a.start, a.accepting, a.edges)


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
        raise budget_error(f"string length bounds [{min_len}, {max_len}]", max_states)
    rows: list[tuple[Edge, ...]] = [((0, MAX_CODE_POINT, s + 1),) for s in range(top)]
    rows.append(((0, MAX_CODE_POINT, top),) if max_len is None else ())
    # A chain, numbered from its start: trimmed, minimal and canonical as built.
    return known_minimal(CharDFA(0, tuple(s >= min_len for s in range(top + 1)), tuple(rows)))


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
    return minimize_raw(0, accepting, rows)


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
                    raise budget_error(what, max_states)
                dst = ids[pair] = len(order)
                order.append(pair)
            row.append((lo, hi, dst))
        edges.append(row)

    def acc(sa: int, sb: int) -> bool:
        in_a = sa >= 0 and a.accepting[sa]
        in_b = sb >= 0 and b.accepting[sb]
        return (in_a and in_b) if both else (in_a or in_b)

    return minimize_raw(0, [acc(sa, sb) for sa, sb in order], edges)


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
    return minimize_raw(a.start, accepting, rows)
