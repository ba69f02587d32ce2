"""Grammar → a recursive transition network: one DFA per rule, over bytes and calls.

Each rule becomes a deterministic automaton whose edges are either bytes or calls
to other rules (a call edge says: run the callee to acceptance, then continue at
the return state). Lexemes are inlined, so a rule's byte edges cover whole string
bodies and numbers; only structure (objects, arrays, references) needs calls.

After building, rules that accept nothing are removed with every edge leading to
them, and every state that cannot reach acceptance is trimmed: no live state is a
dead end, which is what lets the matcher promise a non-empty mask until the
document is complete.

Cost: subset construction over byte intervals, linear in the size of the result
for typical schemas. Budget: ``max_states`` per rule (a typed
:class:`~jsonmode.errors.BudgetExceededError` beyond it).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from jsonmode.decoding.grammar import Alt, Call, Expr, Grammar, Lex, Lit, Members, Rep, Seq
from jsonmode.errors import BudgetExceededError, UnsupportedSchemaError

__all__ = ["Network", "RuleDFA", "build_network"]

# The NFA may be this many times larger than the DFA budget before we give up early.
_NFA_PER_DFA_STATE = 4
Interval = tuple[int, int, int]  # (lo, hi, target): bytes lo..hi inclusive go to target


@dataclass
class _NFA:
    eps: list[list[int]] = field(default_factory=list)
    edges: list[list[Interval]] = field(default_factory=list)
    calls: list[list[tuple[str, int]]] = field(default_factory=list)

    def state(self) -> int:
        self.eps.append([])
        self.edges.append([])
        self.calls.append([])
        return len(self.eps) - 1

    def fragment(self, expr: Expr, start: int, end: int, budget: int) -> None:
        """Add transitions from ``start`` to ``end`` that read ``expr``."""
        if len(self.eps) > budget * _NFA_PER_DFA_STATE:
            raise BudgetExceededError("states per rule", budget)
        if isinstance(expr, Lit):
            here = start
            for index, byte in enumerate(expr.data):
                there = end if index == len(expr.data) - 1 else self.state()
                self.edges[here].append((byte, byte, there))
                here = there
            if not expr.data:
                self.eps[start].append(end)
        elif isinstance(expr, Lex):
            self._embed(expr, start, end)
        elif isinstance(expr, Call):
            self.calls[start].append((expr.rule, end))
        elif isinstance(expr, Seq):
            here = start
            for index, item in enumerate(expr.items):
                there = end if index == len(expr.items) - 1 else self.state()
                self.fragment(item, here, there, budget)
                here = there
            if not expr.items:
                self.eps[start].append(end)
        elif isinstance(expr, Alt):
            for option in expr.options:
                self.fragment(option, start, end, budget)
        elif isinstance(expr, Rep):
            self._repeat(expr, start, end, budget)
        elif isinstance(expr, Members):
            self._members(expr, start, end, budget)
        else:  # pragma: no cover - Expr is closed
            raise TypeError(expr)

    def _repeat(self, rep: Rep, start: int, end: int, budget: int) -> None:
        here = start
        for _ in range(rep.low):
            there = self.state()
            self.fragment(rep.item, here, there, budget)
            here = there
        self.eps[here].append(end)
        if rep.high is None:
            loop = self.state()
            self.fragment(rep.item, here, loop, budget)
            self.eps[loop].append(here)
            return
        for _ in range(rep.high - rep.low):
            there = self.state()
            self.fragment(rep.item, here, there, budget)
            self.eps[there].append(end)
            here = there

    def _members(self, node: Members, start: int, end: int, budget: int) -> None:
        """Declared members in order: states (position, anything written yet)."""
        if node.any_order:
            self._members_any_order(node, start, end, budget)
            return
        count = len(node.members)
        fresh = [self.state() for _ in range(count + 1)]  # nothing written yet
        after = [self.state() for _ in range(count + 1)]  # something written
        self.eps[start].append(fresh[0])
        for index, (member, needed) in enumerate(node.members):
            self.fragment(member, fresh[index], after[index + 1], budget)
            self.fragment(Seq((node.sep, member)), after[index], after[index + 1], budget)
            if not needed:
                self.eps[fresh[index]].append(fresh[index + 1])
                self.eps[after[index]].append(after[index + 1])
        if node.extra is not None:
            for index in range(count + 1):
                self.fragment(node.extra, fresh[index], after[index], budget)
                self.fragment(Seq((node.sep, node.extra)), after[index], after[index], budget)
        self.eps[fresh[count]].append(end)
        self.eps[after[count]].append(end)

    def _members_any_order(self, node: Members, start: int, end: int, budget: int) -> None:
        """Any order: states (set of members written, anything written yet)."""
        count = len(node.members)
        states = {(mask, wrote): self.state() for mask in range(1 << count) for wrote in (0, 1)}
        self.eps[start].append(states[0, 0])
        needed = sum(1 << i for i, (_, required) in enumerate(node.members) if required)
        for (mask, wrote), here in states.items():
            if mask and not wrote:
                continue  # unreachable: writing a member sets "wrote"
            for index, (member, _) in enumerate(node.members):
                if not mask & (1 << index):
                    item = Seq((node.sep, member)) if wrote else member
                    self.fragment(item, here, states[mask | (1 << index), 1], budget)
            if node.extra is not None:
                item = Seq((node.sep, node.extra)) if wrote else node.extra
                self.fragment(item, here, states[mask, 1], budget)
            if mask & needed == needed:
                self.eps[here].append(end)

    def _embed(self, lex: Lex, start: int, end: int) -> None:
        dfa = lex.dfa
        base = len(self.eps)
        count = int(dfa.trans.shape[0])
        for _ in range(count):
            self.state()
        self.eps[start].append(base + int(dfa.start))
        for state in range(count):
            if dfa.accepting[state]:
                self.eps[base + state].append(end)
            self.edges[base + state].extend(
                (lo, hi, base + target) for lo, hi, target in _intervals(dfa.trans[state])
            )


def _intervals(row: npt.NDArray[np.int32]) -> Iterable[Interval]:
    """Runs of equal, live targets in a 256-entry transition row."""
    change = np.flatnonzero(np.diff(row)) + 1
    starts = np.concatenate(([0], change))
    ends = np.concatenate((change - 1, [255]))
    for lo, hi in zip(starts.tolist(), ends.tolist(), strict=True):
        target = int(row[lo])
        if target >= 0:
            yield lo, hi, target


@dataclass(frozen=True, eq=False)
class RuleDFA:
    """One rule's automaton. ``trans[s, b]`` is the next state on byte ``b`` (-1: none);
    ``calls[s]`` lists ``(callee index, return state)``."""

    name: str
    trans: npt.NDArray[np.int32]
    calls: tuple[tuple[tuple[int, int], ...], ...]
    accepting: npt.NDArray[np.bool_]

    @property
    def n_states(self) -> int:
        return int(self.trans.shape[0])


@dataclass(frozen=True, eq=False)
class Network:
    """Every rule's automaton; ``rules[root]`` starts the document. Immutable."""

    rules: tuple[RuleDFA, ...]
    root: int
    names: dict[str, int]

    @property
    def n_states(self) -> int:
        return sum(rule.n_states for rule in self.rules)


def _closure(nfa: _NFA, states: Iterable[int]) -> frozenset[int]:
    seen = set(states)
    stack = list(seen)
    while stack:
        for nxt in nfa.eps[stack.pop()]:
            if nxt not in seen:
                seen.add(nxt)
                stack.append(nxt)
    return frozenset(seen)


def _determinise(
    name: str, nfa: _NFA, start: int, final: int, budget: int
) -> tuple[list[list[Interval]], list[dict[str, int]], list[bool]]:
    first = _closure(nfa, [start])
    index = {first: 0}
    order = [first]
    edges: list[list[Interval]] = []
    calls: list[dict[str, int]] = []
    accepting: list[bool] = []

    def intern(target_set: frozenset[int]) -> int:
        """The DFA state for a set of NFA states, made on first sight (within budget)."""
        if target_set not in index:
            if len(order) >= budget:
                raise BudgetExceededError("states per rule", budget)
            index[target_set] = len(order)
            order.append(target_set)
        return index[target_set]

    position = 0
    while position < len(order):
        members = order[position]
        position += 1
        accepting.append(final in members)
        intervals = [iv for member in members for iv in nfa.edges[member]]
        points = sorted({lo for lo, _, _ in intervals} | {hi + 1 for _, hi, _ in intervals})
        row: list[Interval] = []
        for lo, nxt in itertools.pairwise(points):
            targets = [t for a, b, t in intervals if a <= lo and nxt - 1 <= b]
            if not targets:
                continue
            row.append((lo, nxt - 1, intern(_closure(nfa, targets))))
        edges.append(row)
        grouped: dict[str, list[int]] = {}
        for member in members:
            for callee, target in nfa.calls[member]:
                grouped.setdefault(callee, []).append(target)
        call_row: dict[str, int] = {}
        for callee, targets in grouped.items():
            call_row[callee] = intern(_closure(nfa, targets))
        calls.append(call_row)
    return edges, calls, accepting


def build_network(grammar: Grammar, *, max_states: int = 20_000) -> Network:
    """Compile every rule and trim what cannot complete.

    Raises:
        UnsupportedSchemaError: the root rule accepts nothing (an unsatisfiable schema).
        BudgetExceededError: a rule needs more than ``max_states`` states.
    """
    raw: dict[str, tuple[list[list[Interval]], list[dict[str, int]], list[bool]]] = {}
    for name, expr in grammar.rules.items():
        nfa = _NFA()
        start, final = nfa.state(), nfa.state()
        nfa.fragment(expr, start, final, max_states)
        raw[name] = _determinise(name, nfa, start, final, max_states)
    live = _live_states(raw)
    if not live.get(grammar.root, {0: False}).get(0, False):
        raise UnsupportedSchemaError("the schema accepts no value at all")
    names = [name for name in raw if live[name].get(0, False)]
    number = {name: index for index, name in enumerate(names)}
    rules = tuple(_finish(name, raw[name], live, number) for name in names)
    return Network(rules, number[grammar.root], number)


def _live_states(
    raw: dict[str, tuple[list[list[Interval]], list[dict[str, int]], list[bool]]],
) -> dict[str, dict[int, bool]]:
    """Per rule, the states from which acceptance is reachable (calls to live rules count)."""
    live: dict[str, dict[int, bool]] = {name: {} for name in raw}
    changed = True
    while changed:
        changed = False
        for name, (edges, calls, accepting) in raw.items():
            mark = live[name]
            for state in range(len(accepting)):
                if mark.get(state):
                    continue
                ok = (
                    accepting[state]
                    or any(mark.get(t) for _, _, t in edges[state])
                    or any(
                        live[callee].get(0) and mark.get(t) for callee, t in calls[state].items()
                    )
                )
                if ok:
                    mark[state] = True
                    changed = True
    return live


def _finish(
    name: str,
    parts: tuple[list[list[Interval]], list[dict[str, int]], list[bool]],
    live: dict[str, dict[int, bool]],
    number: dict[str, int],
) -> RuleDFA:
    edges, calls, accepting = parts
    mark = live[name]
    keep = [state for state in range(len(accepting)) if mark.get(state)]
    renumber = {old: new for new, old in enumerate(keep)}
    trans = np.full((len(keep), 256), -1, dtype=np.int32)
    call_rows: list[tuple[tuple[int, int], ...]] = []
    for new, old in enumerate(keep):
        for lo, hi, target in edges[old]:
            if target in renumber:
                trans[new, lo : hi + 1] = renumber[target]
        call_rows.append(
            tuple(
                (number[callee], renumber[target])
                for callee, target in calls[old].items()
                if live[callee].get(0) and target in renumber
            )
        )
    flags = np.array([accepting[old] for old in keep], dtype=np.bool_)
    return RuleDFA(name, trans, tuple(call_rows), flags)
