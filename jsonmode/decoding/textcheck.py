"""Checking a whole text against a compiled constraint, in time linear in the text.

:class:`~jsonmode.decoding.reference.ReferenceMatcher` keeps each parse stack as a
tuple of frames: obviously correct, and what the mask engine keys its caches by, but
every step copies the stack, hashes it whole and works out its depth from every frame,
so a text that nests ``n`` frames deep costs ``n`` per byte (a 5 001-character text
under a cycle of 5 001 rules: 20 s). :class:`TextChecker` walks the same automata by
the same rules (its tables, its ``max_depth``/``max_stacks`` bounds, its viability
test, unchanged) over *linked* stacks: a stack is its top frame and a link to the
stack below, shared, never copied; each carries its size, its depth (see
:mod:`~jsonmode.decoding.automata.headroom`) and its hash, worked out once when it is pushed.
So a byte costs the same whatever the depth, and the stacks alive are all the memory
kept (nothing is interned).

Checking a text is bounded in time, from the compile budget's mechanism
(:mod:`~jsonmode.budget`): :func:`check_seconds` gives the compiled
constraint's ``max_compile_seconds`` plus :data:`SECONDS_PER_BYTE` per byte of the text
(a text checked in linear time always fits; an ambiguous grammar that keeps thousands
of stacks per byte does not), and past it the walk raises
:class:`~jsonmode.errors.BudgetExceededError` (budget :data:`TEXT_BUDGET`) naming the
option to raise.

Thread-safe: a checker is stateless but for its matcher's lazily refined threshold.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import numpy as np
import numpy.typing as npt

from jsonmode.budget import checkpoint, deadline
from jsonmode.decoding.automata.families import TAIL
from jsonmode.decoding.reference import ReferenceMatcher
from jsonmode.errors import BudgetExceededError

__all__ = [
    "SECONDS_PER_BYTE",
    "TEXT_BUDGET",
    "Checked",
    "TextChecker",
    "check_seconds",
    "checking",
    "raise_if_time",
]

#: The name :class:`~jsonmode.errors.BudgetExceededError` gives the time budget of
#: checking one text.
TEXT_BUDGET = "time to check a text (seconds)"
#: Seconds per byte of a text that checking it may take beyond ``max_compile_seconds``
#: (a linear walk takes a few microseconds a byte).
SECONDS_PER_BYTE = 1e-4
#: Work items of one closure between two looks at the clock.
_CLOCK_EVERY = 1024


class _Stack:
    """A parse stack: its top frame ``(rule, state)`` over ``below`` (None: the frame
    is the bottom one), with its size in frames, its depth, and its hash (from the top
    frame and the hash below). Equal when the frames are."""

    __slots__ = ("below", "depth", "key", "rule", "size", "state")
    below: _Stack | None
    depth: int
    key: int
    rule: int
    size: int
    state: int

    def __init__(self, below: _Stack | None, rule: int, state: int, depth: int) -> None:
        self.below = below
        self.rule = rule
        self.state = state
        self.depth = depth
        self.size = below.size + 1 if below is not None else 1
        self.key = hash((below.key if below is not None else 0, rule, state))

    def __hash__(self) -> int:
        return self.key

    def __eq__(self, other: object) -> bool:
        mine: _Stack | None = self
        theirs = other
        while mine is not theirs:  # (iterative: a stack may be thousands of frames)
            if (
                mine is None
                or not isinstance(theirs, _Stack)
                or mine.key != theirs.key
                or mine.rule != theirs.rule
                or mine.state != theirs.state
                or mine.size != theirs.size
            ):
                return False
            mine, theirs = mine.below, theirs.below
        return True

    def frames(self) -> tuple[tuple[int, int], ...]:
        """The frames, bottom first (the reference matcher's form; linear)."""
        out: list[tuple[int, int]] = []
        stack: _Stack | None = self
        while stack is not None:
            out.append((stack.rule, stack.state))
            stack = stack.below
        return tuple(reversed(out))


#: A walk's state: its stacks (None: the document may end here); empty: dead.
Checked = tuple["_Stack | None", ...]


class TextChecker:
    """The :class:`ReferenceMatcher`'s walk over linked stacks (see the module): the
    same states (as :meth:`ReferenceMatcher.close` and :meth:`~ReferenceMatcher.step`
    make them, stack for stack), each byte at a cost independent of the depth.

    Raises what the reference raises (``max_stacks``), and under a deadline
    (:func:`checking`) :class:`~jsonmode.errors.BudgetExceededError` once it passes.
    """

    def __init__(self, reference: ReferenceMatcher) -> None:
        self.reference = reference
        self._room = reference.headroom
        self._levels = reference.levels
        self._reads, self._calls, self._accepting = reference.rule_lists()

    def initial(self) -> Checked:
        network = self.reference.network
        return self.close([self._push(None, network.root, 0)])

    def _push(self, below: _Stack | None, rule: int, state: int) -> _Stack:
        """``(rule, state)`` called on top of ``below``, its depth from below's."""
        if below is None:
            depth = 0 if self._levels else 1
        else:
            depth = below.depth + self._room.weight(below.rule, rule)
        return _Stack(below, rule, state, depth)

    def close(self, stacks: list[_Stack | None]) -> Checked:
        """The closure (:meth:`ReferenceMatcher.close`'s, stack for stack)."""
        reference = self.reference
        reads, calls, accepting = self._reads, self._calls, self._accepting
        if len(stacks) == 1 and stacks[0] is not None:  # (settled: its own closure)
            rule, state = stacks[0].rule, stacks[0].state
            if reads[rule][state] and not calls[rule][state] and not accepting[rule][state]:
                return (stacks[0],)
        max_stacks = reference.max_stacks
        safe = reference.safe
        done: dict[_Stack | None, None] = {}
        seen: set[_Stack | None] = set()
        work = list(stacks)
        counted = 0
        while work:
            stack = work.pop()
            if stack in seen:
                continue
            seen.add(stack)
            counted += 1
            if not counted % _CLOCK_EVERY:
                checkpoint()
            if stack is None:
                done[None] = None
                continue
            rule, state = stack.rule, stack.state
            if reads[rule][state]:
                done[stack] = None
                if len(done) > max_stacks:
                    raise reference.too_many_stacks()
            for callee, back in calls[rule][state]:
                if back == TAIL:  # (the callee replaces the frame)
                    pushed = self._push(stack.below, callee, 0)
                    if stack.size <= safe or self._viable(pushed):
                        work.append(pushed)
                else:
                    pushed = self._push(_Stack(stack.below, rule, back, stack.depth), callee, 0)
                    if stack.size < safe or self._viable(pushed):
                        work.append(pushed)
            if accepting[rule][state]:
                work.append(stack.below)
        return tuple(done)

    def step(self, state: Checked, byte: int) -> Checked:
        """The state after reading ``byte`` (empty: the byte is not allowed)."""
        checkpoint()
        reference = self.reference
        safe = reference.safe
        moved: list[_Stack | None] = []
        for stack in state:
            if stack is None:
                continue
            target = reference.table(stack.rule)[stack.state * 256 + byte]
            if target >= 0:
                following = _Stack(stack.below, stack.rule, target, stack.depth)
                if stack.size <= safe or self._viable(following):
                    moved.append(following)
        return self.close(moved) if moved else ()

    def _viable(self, stack: _Stack) -> bool:
        """:meth:`ReferenceMatcher._viable` on a linked stack (its depth kept, not
        recomputed)."""
        reference = self.reference
        if reference.roomy(stack.size):
            return True
        room = self._room
        limit = reference.max_depth
        depth, rule = stack.depth, stack.rule
        if depth + room.need(rule)[stack.state] > limit:
            return False
        below = stack.below
        if below is None:
            return True
        lowest = below.below
        lower = depth - room.weight(lowest.rule if lowest is not None else -1, rule)
        return bool(lower + room.need(below.rule)[below.state] <= limit)

    def feed(self, state: Checked, data: bytes) -> Checked:
        for byte in data:
            if not state:
                break
            state = self.step(state, byte)
        return state

    @staticmethod
    def can_end(state: Checked) -> bool:
        return any(stack is None for stack in state)

    def accepts(self, data: bytes) -> bool:
        return self.can_end(self.feed(self.initial(), data))

    def allowed_bytes(self, state: Checked) -> npt.NDArray[np.bool_]:
        """Which next bytes keep the text alive (:meth:`ReferenceMatcher.allowed_bytes`'s
        answer)."""
        rules = self.reference.network.rules
        allowed = np.zeros(256, dtype=np.bool_)
        near = False
        for stack in state:
            if stack is not None:
                allowed |= rules[stack.rule].trans[stack.state] >= 0
                near = near or not self.reference.roomy(stack.size)
        if near:
            for byte in np.flatnonzero(allowed).tolist():
                allowed[byte] = bool(self.step(state, byte))
        return allowed

    @staticmethod
    def frames(state: Checked) -> tuple[tuple[tuple[int, int], ...], ...]:
        """The state as the reference matcher's (sorted tuples of frames; linear in
        the stacks' sizes: for tests)."""
        return tuple(sorted(() if stack is None else stack.frames() for stack in state))


def check_seconds(max_compile_seconds: float, size: int) -> float:
    """The time budget of checking a text of ``size`` bytes against a constraint
    compiled with ``max_compile_seconds`` (see the module)."""
    return round(max_compile_seconds + size * SECONDS_PER_BYTE, 3)


@contextlib.contextmanager
def checking(max_compile_seconds: float, size: int) -> Iterator[None]:
    """Run the ``with`` block (one text's check) under :func:`check_seconds`'s
    deadline: past it, :func:`~jsonmode.budget.checkpoint` raises
    :class:`~jsonmode.errors.BudgetExceededError` (budget :data:`TEXT_BUDGET`, the
    limit in seconds). Thread-safe: per context."""
    seconds = check_seconds(max_compile_seconds, size)
    hint = (
        f"checking may take max_compile_seconds plus {SECONDS_PER_BYTE * 1e6:g} µs per byte "
        f"of the text ({seconds:g} s here): compile with a larger max_compile_seconds, "
        "or make the grammar's alternatives start differently (an ambiguous grammar "
        "keeps many parse stacks per byte)"
    )
    with deadline(seconds, budget=TEXT_BUDGET, doing="checking the text", hint=hint):
        yield


def raise_if_time(error: BudgetExceededError) -> None:
    """Re-raise ``error`` when it is the text check's time budget running out."""
    if error.budget == TEXT_BUDGET:
        raise error
