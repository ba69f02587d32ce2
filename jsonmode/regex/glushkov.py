"""Pattern → DFA: Glushkov positions and subset construction (:func:`compile_pattern`),
the lazy search that never builds the whole DFA (:func:`lazy_search`), and integer
ranges written as patterns (:func:`integer_range_pattern`).

The second stage of :mod:`jsonmode.regex` (see there for the stages, the canonical
form of every DFA returned, the budgets and the costs). Thread-safe: nothing here
keeps state between calls.
"""

from __future__ import annotations

import bisect
import time
from collections.abc import Iterable

from jsonmode import native
from jsonmode.budget import checkpoint
from jsonmode.limits import check_pattern
from jsonmode.regex.char_dfa import (
    DEFAULT_MAX_STATES,
    CharDFA,
    Edge,
    budget_error,
    canonical_dfa,
    merge_row,
    minimize_raw,
)
from jsonmode.regex.syntax import (
    ALL,
    Alt,
    Chars,
    CharSet,
    Concat,
    Node,
    Repeat,
    parse,
)

#: The Glushkov automaton may have at most this many positions per allowed state.
POSITIONS_PER_STATE = 10
#: ... at most this many follow links per position allowed: nested optional repeats
#: such as ``(a?){1,5000}`` link every position to every later one, quadratic in memory.
LINKS_PER_POSITION = 16
#: ... and at most this many positions per position allowed in the subset
#: construction's states, summed (an unanchored ``a{1000}`` needs ~25).
MEMBERS_PER_POSITION = 64


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
            raise budget_error(
                f"regex `{_short(self.pattern)}`",
                self.max_states,
                f": more than {LINKS_PER_POSITION * self.limit} follow links",
            )

    def new(self, cs: CharSet) -> int:
        if not len(self.cs) & 255:
            checkpoint()
        if len(self.cs) > self.limit:
            raise budget_error(
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
    See :mod:`jsonmode.regex.syntax` for the supported syntax.

    Args:
        pattern: the regular expression text.
        max_states: budget on the states of the subset construction (before
            minimisation); positions are bounded by ``POSITIONS_PER_STATE * max_states``.
        anchored: match whole strings only, as if every alternative were written
            ``^...$`` (``compile_regex``'s meaning).

    Raises:
        UnsupportedSchemaError: unsupported or malformed syntax (the message names the
            fragment), or a budget exceeded (the message says which).
        BudgetExceededError: a pattern longer than
            :data:`~jsonmode.limits.MAX_PATTERN_CHARS` (refused before it is read).
    """
    pos, last = _positions_of(pattern, max_states, anchored)
    return _determinise(pos, last, max_states)


def lazy_search(pattern: str, *, max_states: int = DEFAULT_MAX_STATES) -> PatternSearch:
    """``pattern``'s unanchored search (:func:`compile_pattern`'s language) without the
    subset construction up front: for a pattern whose DFA is over the state budget
    (a long literal run: ``a{2000}.`` unanchored needs millions of position sets in
    all), searched in bounded time all the same (:meth:`PatternSearch.search`).

    Raises:
        UnsupportedSchemaError: what :func:`compile_pattern` raises for syntax, or a
            position budget (``POSITIONS_PER_STATE * max_states`` positions, follow
            links); BudgetExceededError: a pattern over
            :data:`~jsonmode.limits.MAX_PATTERN_CHARS`.
    """
    pos, last = _positions_of(pattern, max_states, False)
    return PatternSearch(pos, last)


def _positions_of(
    pattern: str, max_states: int, anchored: bool
) -> tuple[_Positions, frozenset[int]]:
    """The position automaton of ``pattern``'s search, and its accepting positions."""
    check_pattern(pattern)
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
    return pos, frozenset(last)


def _determinise(pos: _Positions, last: frozenset[int], max_states: int) -> CharDFA:
    """Subset construction over ``pos``, then minimisation: in C when the compiled core
    is loaded (``jsonmode._native.glushkov_determinise``, the same DFA and the same budget
    errors), else :func:`_determinise_python`."""
    kernels = native.KERNELS
    if kernels is None:
        return _determinise_python(pos, last, max_states)
    most = MEMBERS_PER_POSITION * pos.limit
    got = kernels.glushkov_determinise(
        pos.cs, pos.follow, last, pos.univ, max_states, most, checkpoint
    )
    if got is None:
        raise budget_error(f"regex `{_short(pos.pattern)}`", max_states)
    return canonical_dfa(*got)


def _determinise_python(pos: _Positions, last: frozenset[int], max_states: int) -> CharDFA:
    """Subset construction over ``pos``, then minimisation (the pure-Python form).

    Work per subset state is one union of follow sets per character class it can read
    and one per segment of the code points; the segments of a set of classes are swept
    once per distinct set (:func:`_segments`), since many states read the same classes.
    """
    univ = pos.univ
    cs_list, groups = _follow_groups(pos)
    segments: dict[frozenset[int], list[tuple[int, int, tuple[int, ...]]]] = {}
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
        # (Each class's follow sets are gathered, then joined once: joining them one
        # at a time copied the growing set each time, cubic in a long literal.)
        gathered: dict[int, list[frozenset[int]]] = {}
        for p in state:
            for c, qs in groups[p]:
                got = gathered.get(c)
                if got is None:
                    gathered[c] = [qs]
                else:
                    got.append(qs)
        by_cs = {
            c: parts[0] if len(parts) == 1 else frozenset().union(*parts)
            for c, parts in gathered.items()
        }
        classes = frozenset(by_cs)
        segs = segments.get(classes)
        if segs is None:
            segs = segments[classes] = _segments(classes, cs_list)
        unions: dict[tuple[int, ...], frozenset[int]] = {}
        row: list[Edge] = []
        for lo, hi, active in segs:
            if len(active) == 1:
                target = by_cs[active[0]]
            else:
                found = unions.get(active)
                if found is None:
                    found = unions[active] = frozenset().union(*(by_cs[c] for c in active))
                target = found
            if univ >= 0 and univ in target:
                target = frozenset({univ})
            dst = ids.get(target)
            if dst is None:
                members += len(target)
                if len(order) >= max_states or members > most:
                    raise budget_error(f"regex `{_short(pos.pattern)}`", max_states)
                dst = ids[target] = len(order)
                order.append(target)
            row.append((lo, hi, dst))
        edges.append(list(merge_row(row)))
    accepting = [not state.isdisjoint(last) for state in order]
    return minimize_raw(0, accepting, edges)


def _follow_groups(
    pos: _Positions,
) -> tuple[list[CharSet], list[tuple[tuple[int, frozenset[int]], ...]]]:
    """The distinct character classes, and each position's followers grouped by their
    class (as ``(class id, positions)``): a set of positions' successors on a class
    are then the union of its members' groups for that class."""
    cs_ids: dict[CharSet, int] = {}
    cs_of = [cs_ids.setdefault(cs, len(cs_ids)) for cs in pos.cs]
    groups: list[tuple[tuple[int, frozenset[int]], ...]] = []
    for follow in pos.follow:
        by: dict[int, list[int]] = {}
        for q in follow:
            by.setdefault(cs_of[q], []).append(q)
        groups.append(tuple((c, frozenset(qs)) for c, qs in by.items()))
    return list(cs_ids), groups


#: Positions a :class:`PatternSearch` keeps in the sets it remembers, all sets
#: together (then it forgets them all and starts over): about 40 bytes each.
SEARCH_MEMBERS = 1 << 18


class PatternSearch:
    """A pattern's search run on its position automaton, the subset construction done
    lazily: only the sets of positions a text reaches are made, each successor
    remembered (at most :data:`SEARCH_MEMBERS` positions in all, then forgotten at once).

    Cost per character: a remembered step, two dict lookups; a new one, a pass over
    the set's positions. Memory: the remembered sets. Thread-safe: the memo is only
    ever given equal values for a key, whoever computes them.
    """

    __slots__ = ("_classes", "_groups", "_held", "_last", "_next", "_univ")

    def __init__(self, pos: _Positions, last: frozenset[int]) -> None:
        cs_list, self._groups = _follow_groups(pos)
        # Each class as (interval starts, intervals) for a bisection per code point.
        self._classes = [(tuple(lo for lo, _ in cs), cs) for cs in cs_list]
        self._univ = pos.univ
        self._last = last
        self._next: dict[tuple[frozenset[int], int], frozenset[int]] = {}
        self._held = 0  # positions in the remembered successors (about)

    def search(self, text: str, until: float) -> bool | None:
        """Whether the pattern matches somewhere in ``text``; None when this thread's
        CPU time (``time.thread_time()``) passes ``until`` first (checked every 256
        characters: time spent waiting for the GIL or a core does not count)."""
        state = frozenset({0})
        univ = self._univ
        memo = self._next
        for index, char in enumerate(text):
            if univ in state:
                return True  # (the universal tail: whatever follows, a match)
            if not state:
                return False
            if not index & 255 and time.thread_time() > until:
                return None
            key = (state, ord(char))
            following = memo.get(key)
            if following is None:
                following = self._step(state, key[1])
                self._held += len(following) + 1
                if self._held > SEARCH_MEMBERS:
                    memo.clear()
                    self._held = len(following) + 1
                memo[key] = following
            state = following
        return univ in state or not state.isdisjoint(self._last)

    def _step(self, state: frozenset[int], code: int) -> frozenset[int]:
        classes, groups = self._classes, self._groups
        gathered: list[frozenset[int]] = []
        for p in state:
            for c, qs in groups[p]:
                starts, intervals = classes[c]
                at = bisect.bisect_right(starts, code) - 1
                if at >= 0 and code <= intervals[at][1]:
                    gathered.append(qs)
        target = frozenset().union(*gathered)
        if self._univ >= 0 and self._univ in target:
            return frozenset({self._univ})
        return target


def _segments(
    classes: Iterable[int], cs_list: list[CharSet]
) -> list[tuple[int, int, tuple[int, ...]]]:
    """Split the union of the classes into maximal segments that no class boundary
    crosses, each with the classes (sorted ids) that contain it, in code-point order."""
    events: list[tuple[int, int, int]] = []
    for c in classes:
        for lo, hi in cs_list[c]:
            events.append((lo, 1, c))
            events.append((hi + 1, -1, c))
    events.sort()
    out: list[tuple[int, int, tuple[int, ...]]] = []
    active: set[int] = set()
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
            out.append((point, events[i][0] - 1, tuple(sorted(active))))
    return out


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
