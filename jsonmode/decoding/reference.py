"""The slow, obviously correct matcher: a set of parse stacks, one byte at a time.

A matcher state is a set of stacks, as a sorted tuple (canonical and hashable; a
tuple of tuples of ints, which the garbage collector stops tracking, where a
frozenset would be traversed by every full collection for as long as a cache holds
it); a stack is a tuple of ``(rule, state)`` frames, bottom first. The set is kept
*closed*: calls are entered and finished rules returned from eagerly, so every stack
in it can read a byte next, and the empty stack ``()`` in the set means "the
document may end here". The empty state ``()`` is the dead one.

No caching, no vectorisation: this is the oracle the fast matcher is tested against.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from jsonmode.decoding.automaton import Network

__all__ = ["END", "ReferenceMatcher", "State"]

Stack = tuple[tuple[int, int], ...]
State = tuple[Stack, ...]  # sorted, no duplicates
END: Stack = ()


class ReferenceMatcher:
    """Byte-level simulation of a :class:`Network`. Stateless; thread-safe.

    ``max_depth`` bounds the stack (nesting) depth: deeper calls are not entered.
    """

    def __init__(self, network: Network, *, max_depth: int = 64) -> None:
        self.network = network
        self.max_depth = max_depth
        # Per rule, as plain Python sequences (a NumPy scalar lookup costs several times
        # more): transitions (``state * 256 + byte``), accepting states, calls, and
        # whether a state can read a byte at all.
        self._trans = [
            memoryview(np.ascontiguousarray(rule.trans, dtype=np.int32).reshape(-1))  # type: ignore[arg-type]
            for rule in network.rules
        ]
        self._accepting: list[list[bool]] = [
            list(rule.accepting.tolist()) for rule in network.rules
        ]
        self._calls = [rule.calls for rule in network.rules]
        self._reads: list[list[bool]] = [
            np.asarray((rule.trans >= 0).any(axis=1)).tolist() for rule in network.rules
        ]
        # States that close to themselves: they read, call nothing and cannot return.
        self._settled: list[list[bool]] = [
            [r and not c and not a for r, c, a in zip(reads, calls, accepting, strict=True)]
            for reads, calls, accepting in zip(
                self._reads, self._calls, self._accepting, strict=True
            )
        ]

    def table(self, rule: int) -> memoryview:
        """A rule's transitions, flat (``state * 256 + byte``; -1: none), as a
        memoryview of ints."""
        return self._trans[rule]

    def rule_lists(
        self,
    ) -> tuple[list[list[bool]], list[tuple[tuple[tuple[int, int], ...], ...]], list[list[bool]]]:
        """Per rule and state, as plain lists: whether it reads a byte, its calls
        (``(callee, return state)``), whether it accepts."""
        return self._reads, self._calls, self._accepting

    def initial(self) -> State:
        return self.close([((self.network.root, 0),)])

    def close(self, stacks: list[Stack]) -> State:
        if len(stacks) == 1 and stacks[0]:
            rule, state = stacks[0][-1]
            if self._settled[rule][state]:
                return (stacks[0],)
        reads, calls, accepting = self._reads, self._calls, self._accepting
        done: set[Stack] = set()
        seen: set[Stack] = set()
        work = list(stacks)
        while work:
            stack = work.pop()
            if stack in seen:
                continue
            seen.add(stack)
            if not stack:
                done.add(END)
                continue
            rule, state = stack[-1]
            if reads[rule][state]:
                done.add(stack)
            if len(stack) < self.max_depth:
                for callee, back in calls[rule][state]:
                    work.append((*stack[:-1], (rule, back), (callee, 0)))
            if accepting[rule][state]:
                work.append(stack[:-1])
        return tuple(sorted(done))

    def step(self, state: State, byte: int) -> State:
        """The state after reading ``byte`` (empty: the byte is not allowed)."""
        trans = self._trans
        moved: list[Stack] = []
        for stack in state:
            if not stack:
                continue
            rule, at = stack[-1]
            target = trans[rule][at * 256 + byte]
            if target >= 0:
                moved.append((*stack[:-1], (rule, target)))
        return self.close(moved) if moved else ()

    def feed(self, state: State, data: bytes) -> State:
        for byte in data:
            if not state:
                break
            state = self.step(state, byte)
        return state

    @staticmethod
    def can_end(state: State) -> bool:
        return END in state

    def accepts(self, data: bytes) -> bool:
        return self.can_end(self.feed(self.initial(), data))

    def allowed_bytes(self, state: State) -> npt.NDArray[np.bool_]:
        """Which next bytes keep the document alive (for tests and forced-byte reads)."""
        rules = self.network.rules
        allowed = np.zeros(256, dtype=np.bool_)
        for stack in state:
            if stack:
                rule, at = stack[-1]
                allowed |= rules[rule].trans[at] >= 0
        return allowed
