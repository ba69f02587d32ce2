"""The nesting bound's bookkeeping: what a parse stack's depth is, and how much of it
a rule still needs to finish.

A matcher bounds how deep its parse stack may grow (``max_nesting_depth``). Two
measures of a stack's depth:

- **frames** (schemas): every frame counts one;
- **levels** (grammars): only the frames entered by a *recursive call* count one: a
  call along an edge by which a depth-first walk of the call graph from the root comes
  back to a rule on its path (every cycle of calls has such an edge); the root's frame
  and every other call count none. A text nested N levels is N deep, whatever the
  number of rules one level passes: ``((1))`` with ``expr → term → factor → "(" expr
  ")"`` (three frames a level, one call back to ``expr``) is 2 deep, ``[[]]`` with
  ``root ::= "[" root? "]"`` is 1 deep (the outer ``[`` is the root's). Between two
  frames that count there are fewer frames than rules (a chain of calls with no
  recursive call repeats no rule), so the stack still holds at most ``(bound + 1) ×
  rules`` frames.

The bound must never strand a matcher (leave it a state no byte continues, before the
text is complete). So a stack is kept only when it can still *finish* within the
bound: :attr:`Headroom.need` gives, per rule and state, the least depth the frames
above that rule's frame need before it returns (0 at an accepting state; through a
call, the callee's weight plus its own need; along bytes and after the call, the most
of the rest), and a frame at depth ``d`` is viable when ``d + need <= bound``. A
stack is viable when every frame is; the matchers check the frame whose state or
depth changes (a byte read, a call entered) and so never keep, nor allow a byte into,
a stack whose only continuations nest too deep.

Rules made while matching (the rules of any-order objects, see
:mod:`~jsonmode.decoding.automata.families`) need nothing (a lower bound: never refuses a text
that fits), and their calls count as a frame's (by frames) or none (by levels); a tail
call (theirs only) counts as the call it replaces.

Cost: one pass over the calling rules' states and edges, O((states + edges) log
states) (call-free rules need nothing and are skipped); memoised per network.
Thread-safe (a race computes equal values twice).
"""

from __future__ import annotations

import heapq
import itertools
import threading
import weakref
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from jsonmode.budget import checkpoint
from jsonmode.decoding.automata.families import TAIL
from jsonmode.decoding.automata.network import Network

__all__ = ["UNREACHABLE", "Headroom", "headroom"]

#: The need of a state that cannot finish at all.
UNREACHABLE = 1 << 30

_memo: weakref.WeakKeyDictionary[Network, dict[bool, Headroom]] = weakref.WeakKeyDictionary()
_lock = threading.Lock()


class _Nothing:
    """The needs of a rule that calls nothing (a lexeme: every state of a trimmed
    automaton reaches its end) or is made while matching: nothing, at every state."""

    def __getitem__(self, state: int) -> int:
        return 0


_NOTHING = _Nothing()


class Headroom:
    """One network's depth measure and needs (see the module), worked out lazily:
    ``bound`` (a cheap upper bound on every need: the longest chain of calls that
    repeats no rule) first, the needs themselves only once a stack is deeper than the
    bound leaves room for. Thread-safe (a race computes equal values twice)."""

    def __init__(self, network: Network, levels: bool) -> None:
        self.levels = levels
        self._network = weakref.ref(network)  # (memoised per network: no cycle)
        self._callee_lists: list[list[int]] | None = None
        #: By levels, the calls ``(caller, callee)`` that count (see the module).
        self.recursive = _back_edges(self._callees, network.root) if levels else frozenset()
        self._bound: int | None = None
        self._needs: list[npt.NDArray[np.int64] | _Nothing] | None = None
        self._most: list[int] = []

    @property
    def _callees(self) -> list[list[int]]:
        """Per static rule, the rules it calls (made on first use: a pass over every
        state's calls)."""
        if self._callee_lists is None:
            network = self._network()
            assert network is not None  # (a caller holds it)
            rules = (network.rules[number] for number in range(len(network.rules)))
            self._callee_lists = [
                sorted({callee for calls in rule.calls if calls for callee, _ in calls})
                for rule in rules
            ]
        return self._callee_lists

    def weight(self, caller: int, callee: int) -> int:
        """What a frame of ``callee`` called by ``caller`` (-1: the root's frame)
        counts."""
        if not self.levels:
            return 1
        return 1 if (caller, callee) in self.recursive else 0

    def depth(self, frames: Sequence[tuple[int, int]]) -> int:
        """The depth of a stack (its frames, bottom first)."""
        if not self.levels:
            return len(frames)
        recursive = self.recursive
        pairs = itertools.pairwise(frames)
        return sum((caller, callee) in recursive for (caller, _), (callee, _) in pairs)

    @property
    def bound(self) -> int:
        """At least every need: a stack this much below the limit is viable whatever
        its states. Linear in the call graph; memoised."""
        if self._bound is None:
            self._bound = _longest_chain(self._callees) + 1
        return self._bound

    @property
    def most(self) -> int:
        """The largest finite need of any state (computes the needs)."""
        self._compute()
        return max(self._most, default=0)

    def most_of(self, rule: int) -> int:
        """The largest finite need of the rule's states (computes the needs)."""
        self._compute()
        return self._most[rule] if rule < len(self._most) else 0

    def need(self, rule: int) -> npt.NDArray[np.int64] | _Nothing:
        """The rule's needs, indexed by state (ints; computes the needs)."""
        needs = self._compute()
        return needs[rule] if rule < len(needs) else _NOTHING

    def _compute(self) -> list[npt.NDArray[np.int64] | _Nothing]:
        if self._needs is None:
            network = self._network()
            assert network is not None  # (a caller holds it)
            needs, most = _needs(network, self)
            self._most = most
            self._needs = needs
        return self._needs


def headroom(network: Network, levels: bool) -> Headroom:
    """The network's :class:`Headroom`, by levels (grammars) or frames (schemas).
    Memoised per network; costs nothing by frames (all on demand), by levels a pass
    over the call lists and a walk of the call graph."""
    with _lock:
        known = _memo.get(network, {}).get(levels)
    if known is None:
        known = Headroom(network, levels)
        with _lock:
            known = _memo.setdefault(network, {}).setdefault(levels, known)
    return known


def _needs(
    network: Network, room: Headroom
) -> tuple[list[npt.NDArray[np.int64] | _Nothing], list[int]]:
    """Every static rule's needs, and the largest finite one per rule, in one pass over
    every calling rule's states at once (Knuth's generalisation of Dijkstra's
    algorithm: each option of a state, a byte or a call, is a function of other states'
    needs at least as large as each of them, so the states settle smallest first).

    A state's options: 0 when it accepts; a byte into ``t``: ``t``'s need; a call of
    ``callee`` returning to ``back``: the callee's weight plus its need at its first
    state, or ``back``'s need if larger (a tail call: the callee's need). A rule that
    calls nothing needs nothing. Cost: O((states + edges) log states) in plain Python
    lists, the byte edges found with a few NumPy calls per million table cells (not
    per rule); checks the current deadline (:func:`~jsonmode.budget.checkpoint`)
    as it goes."""
    count = len(network.rules)
    rules = [network.rules[number] for number in range(count)]
    calling = [number for number, rule in enumerate(rules) if any(rule.calls)]
    # Each calling rule's states are numbered consecutively: node = base[rule] + state.
    base = [-1] * count
    total = 0
    for number in calling:
        base[number] = total
        total += rules[number].n_states
    starts, sources = _inbound([rules[number].trans for number in calling], total)
    best = [UNREACHABLE] * total
    settled = bytearray(total)
    heap: list[tuple[int, int]] = []
    # Calls, as sites: (node they are an option of, weight, callee node or -1 for a
    # callee that needs nothing, back node or -1 for a tail call); each waits for its
    # inputs to settle (``pending``), listed by input in ``waiting``.
    sites: list[tuple[int, int, int, int]] = []
    pending: list[int] = []
    waiting: dict[int, list[int]] = {}
    for number in calling:
        rule, first = rules[number], base[number]
        accepting = rule.accepting.tolist()
        for state, calls in enumerate(rule.calls):
            node = first + state
            if accepting[state]:
                best[node] = 0
                heap.append((0, node))
            for callee, back in calls:
                entry = base[callee] if callee < count else -1
                returns = -1 if back == TAIL else first + back
                weight = 0 if back == TAIL else room.weight(number, callee)
                site = len(sites)
                sites.append((node, weight, entry, returns))
                inputs = [given for given in (entry, returns) if given >= 0]
                pending.append(len(inputs))
                for given in inputs:
                    waiting.setdefault(given, []).append(site)
                if not inputs and best[node] > 0:  # (a tail call of one needing nothing)
                    best[node] = 0
                    heap.append((0, node))
    heapq.heapify(heap)
    popped = 0
    while heap:
        value, node = heapq.heappop(heap)
        if settled[node]:
            continue
        settled[node] = 1
        popped += 1
        if not popped & 1023:
            checkpoint()
        for source in sources[starts[node] : starts[node + 1]]:
            if value < best[source]:
                best[source] = value
                heapq.heappush(heap, (value, source))
        for site in waiting.get(node, ()):
            pending[site] -= 1
            if pending[site]:
                continue
            target, weight, entry, returns = sites[site]
            offered = weight + (best[entry] if entry >= 0 else 0)
            if returns >= 0:
                offered = max(offered, best[returns])
            if offered < best[target]:
                best[target] = offered
                heapq.heappush(heap, (offered, target))
    # (Unsettled states keep UNREACHABLE: best only lowers on a settled input's offer.)
    values = np.asarray(best, dtype=np.int64)
    needs: list[npt.NDArray[np.int64] | _Nothing] = [_NOTHING] * count
    most = [0] * count
    for number in calling:
        first = base[number]
        need = values[first : first + rules[number].n_states]
        needs[number] = need
        finite = [value for value in best[first : first + len(need)] if value < UNREACHABLE]
        most[number] = max(finite, default=0)
    return needs, most


def _inbound(tables: list[npt.NDArray[np.int32]], total: int) -> tuple[list[int], list[int]]:
    """The byte edges of the automata, states numbered consecutively table after
    table, reversed: the states with a byte into node ``n`` are
    ``sources[starts[n]:starts[n + 1]]`` (each once). A few NumPy calls per chunk of
    about a million table cells."""
    pairs: list[npt.NDArray[np.int64]] = []
    first = 0
    chunk: list[npt.NDArray[np.int32]] = []
    cells = 0
    for index, trans in enumerate(tables):
        chunk.append(trans)
        cells += trans.size
        if cells >= 1 << 20 or index == len(tables) - 1:
            cat = np.concatenate(chunk) if len(chunk) > 1 else chunk[0]
            sizes = np.fromiter((table.shape[0] for table in chunk), np.int64, len(chunk))
            bases = np.repeat(np.cumsum(sizes) - sizes + first, sizes)
            rows, columns = np.nonzero(cat >= 0)
            targets = cat[rows, columns].astype(np.int64) + bases[rows]
            pairs.append(np.unique(targets * max(total, 1) + rows + first))
            first += int(sizes.sum())
            chunk, cells = [], 0
    joined = np.unique(np.concatenate(pairs)) if pairs else np.zeros(0, np.int64)
    targets, sources = np.divmod(joined, max(total, 1))
    starts = np.searchsorted(targets, np.arange(total + 1))
    return starts.tolist(), sources.tolist()


def _longest_chain(callees: list[list[int]]) -> int:
    """The most rules a chain of calls can pass without repeating one (at most): the
    longest path through the strongly connected components, each counted by its size."""
    count = len(callees)
    index = [-1] * count
    low = [0] * count
    component = [-1] * count
    on_stack = [False] * count
    stack: list[int] = []
    sizes: list[int] = []
    counter = 0
    for start in range(count):  # (Tarjan's algorithm, without recursion)
        if index[start] >= 0:
            continue
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack[start] = True
        work = [(start, 0)]
        while work:
            node, at = work[-1]
            edges = callees[node]
            if at < len(edges):
                work[-1] = (node, at + 1)
                callee = edges[at]
                if callee >= count:
                    continue
                if index[callee] < 0:
                    index[callee] = low[callee] = counter
                    counter += 1
                    stack.append(callee)
                    on_stack[callee] = True
                    work.append((callee, 0))
                elif on_stack[callee]:
                    low[node] = min(low[node], index[callee])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                size = 0
                while True:
                    member = stack.pop()
                    on_stack[member] = False
                    component[member] = len(sizes)
                    size += 1
                    if member == node:
                        break
                sizes.append(size)
    # (Components come callees first: a component's chain is its size plus the longest
    # chain among the components it calls.)
    chain = [0] * len(sizes)
    members: list[list[int]] = [[] for _ in sizes]
    for node in range(count):
        members[component[node]].append(node)
    for number, size in enumerate(sizes):
        below = 0
        for node in members[number]:
            for callee in callees[node]:
                if callee < count and component[callee] != number:
                    below = max(below, chain[component[callee]])
        chain[number] = size + below
    return max(chain, default=0)


def _back_edges(callees: list[list[int]], root: int) -> frozenset[tuple[int, int]]:
    """The calls ``(caller, callee)`` by which a depth-first walk of the call graph
    from ``root`` comes back to a rule on its path (every cycle of calls has one)."""
    edges: set[tuple[int, int]] = set()
    colour = [0] * len(callees)  # 0: unseen, 1: on the walk's path, 2: done
    colour[root] = 1
    work = [(root, iter(callees[root]))]
    while work:
        rule, todo = work[-1]
        callee = next(todo, None)
        if callee is None:
            colour[rule] = 2
            work.pop()
        elif callee < len(callees):
            if colour[callee] == 1:
                edges.add((rule, callee))
            elif colour[callee] == 0:
                colour[callee] = 1
                work.append((callee, iter(callees[callee])))
    return frozenset(edges)
