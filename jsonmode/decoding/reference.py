"""The slow, obviously correct matcher: a set of parse stacks, one byte at a time.

A matcher state is a set of stacks, as a sorted tuple (canonical and hashable; a
tuple of tuples of ints, which the garbage collector stops tracking, where a
frozenset would be traversed by every full collection for as long as a cache holds
it); a stack is a tuple of ``(rule, state)`` frames, bottom first. The set is kept
*closed*: calls are entered and finished rules returned from eagerly (a tail call,
return state ``TAIL``, replaces the caller's frame instead of pushing on it), so every
stack in it can read a byte next, and the empty stack ``()`` in the set means "the
document may end here". The empty state ``()`` is the dead one.

No vectorisation and no caching (but of per-state flags, each a pure function of one
row of a table): this is the oracle the fast matcher is tested against.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import TypeVar

import numpy as np
import numpy.typing as npt

from jsonmode import native
from jsonmode.decoding.automata.families import TAIL
from jsonmode.decoding.automata.headroom import headroom
from jsonmode.decoding.automata.network import Network
from jsonmode.errors import BudgetExceededError
from jsonmode.lru import IdentityMemo

__all__ = ["END", "MAX_STACKS", "ReferenceMatcher", "State"]

Stack = tuple[tuple[int, int], ...]
State = tuple[Stack, ...]  # sorted, no duplicates
END: Stack = ()
_Flags = Mapping[int, bool] | bytes  # per state of a rule, truthy where the flag holds
# Rules with more states than this have their "reads" flags worked out per state.
_EAGER_STATES = 512
_T = TypeVar("_T")
_RULES_KEPT = 1 << 16  # values per rule kept (see _PerRule)
#: Stacks one matcher state may hold (see ReferenceMatcher).
MAX_STACKS = 4096
_SCHEMA_STACKS_HINT = (
    "the schema's alternatives (anyOf/oneOf branches that start alike) nest into each "
    "other: make them start differently, or give the union a discriminating property"
)
_GRAMMAR_STACKS_HINT = (
    "the grammar's alternatives start alike and nest into each other: make them start "
    "differently (factor the common start out of the alternatives)"
)


class ReferenceMatcher:
    """Byte-level simulation of a :class:`Network`. Thread-safe (stateless but for the
    lazily refined depth threshold ``safe``, an idempotent write of sound values).

    ``max_depth`` bounds the stack (nesting) depth, counted in frames, or in levels
    of recursion when ``levels`` (grammars; see :mod:`~jsonmode.decoding.automata.headroom`):
    a stack is kept only while it can still finish within the bound, so no state
    allows a byte whose only continuations nest deeper (the matcher is never left
    with no way on), and deeper calls are not entered.
    ``max_stacks`` bounds the stacks of one state: an ambiguous grammar (a recursive
    union whose branches start alike, each nesting into both again) doubles them with
    every level the text nests, so each byte would cost twice the last; past the bound,
    :meth:`close` (and so :meth:`step`, :meth:`feed`, :meth:`accepts`) raises
    :class:`~jsonmode.errors.BudgetExceededError`. The 300 MaskBench schemas of the
    decoder benchmark need at most 28.
    """

    def __init__(
        self,
        network: Network,
        *,
        max_depth: int = 64,
        max_stacks: int = MAX_STACKS,
        levels: bool = False,
    ) -> None:
        self.network = network
        self.max_depth = max_depth
        self.max_stacks = max_stacks
        self.levels = levels
        self.headroom = headroom(network, levels)
        # A stack of at most this many frames is viable whatever its states (each frame
        # counts one at most): only deeper ones are checked (see _viable). Refined
        # lazily (see roomy): from the number of rules (no need exceeds it), to the
        # headroom's bound, to the largest need.
        self.safe = max_depth - len(network.rules) - 1
        self._refined = 0
        # Per rule: transitions as a flat memoryview of ints (``state * 256 + byte``;
        # a NumPy scalar lookup costs several times more), and per state whether it
        # reads a byte, accepts, or is *settled* (reads, calls nothing and cannot
        # return: its closure is itself), looked up as plain ints and bools. In a big
        # rule, whether a state reads is worked out on its first lookup: a walk visits
        # few of its states, and scanning every row of a big lexeme (a string with
        # maxLength 128 has ~2,500 states) cost more than the rest of the engine's
        # set-up.
        # (Per rule number, each filled on its first lookup: a mask engine's walks reach
        # only the rules its texts use, and any-order objects number their rules while
        # matching: see jsonmode.decoding.automata.families.)
        rules = network.rules
        self._trans: _PerRule[memoryview] = _PerRule(lambda n: _flat(rules[n].trans))
        self._accepting: _PerRule[bytes] = _PerRule(lambda n: rules[n].accepting.tobytes())
        self._calls: _PerRule[tuple[tuple[tuple[int, int], ...], ...]] = _PerRule(
            lambda n: rules[n].calls
        )
        self._reads: _PerRule[_Flags] = _PerRule(lambda n: _state_reads(rules[n].trans))
        # (The tables by local name, not through ``self``: a closure over ``self`` held
        # in ``self`` is a reference cycle, which kept every dropped engine's network
        # and tables alive until the cyclic collector came round to them.)
        reads, calls, accepting = self._reads, self._calls, self._accepting
        self._settled: _PerRule[_PerState] = _PerRule(
            lambda n: _PerState(functools.partial(_settled, reads[n], calls[n], accepting[n]))
        )

    def table(self, rule: int) -> memoryview:
        """A rule's transitions, flat (``state * 256 + byte``; -1: none), as a
        memoryview of ints."""
        return self._trans[rule]

    def rule_lists(
        self,
    ) -> tuple[
        Mapping[int, _Flags],
        Mapping[int, tuple[tuple[tuple[int, int], ...], ...]],
        Mapping[int, bytes],
    ]:
        """Per rule, indexed by state: whether it reads a byte, its calls (``(callee,
        return state)``; a return state of ``TAIL``: a tail call), whether it accepts
        (0/1)."""
        return self._reads, self._calls, self._accepting

    def initial(self) -> State:
        return self.close([((self.network.root, 0),)])

    def close(self, stacks: list[Stack]) -> State:
        if len(stacks) == 1 and stacks[0]:
            rule, state = stacks[0][-1]
            if self._settled[rule][state]:
                return (stacks[0],)
        reads, calls, accepting = self._reads, self._calls, self._accepting
        safe = self.safe  # (a stale value is sound: see roomy)
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
                if len(done) > self.max_stacks:
                    raise self.too_many_stacks()
            for callee, back in calls[rule][state]:
                if back == TAIL:  # (the callee replaces the frame)
                    pushed = (*stack[:-1], (callee, 0))
                    if len(stack) <= safe or self._viable(pushed):
                        work.append(pushed)
                else:
                    pushed = (*stack[:-1], (rule, back), (callee, 0))
                    if len(stack) < safe or self._viable(pushed):
                        work.append(pushed)
            if accepting[rule][state]:
                work.append(stack[:-1])
        return tuple(sorted(done))

    def too_many_stacks(self) -> BudgetExceededError:
        """The error for a state of more than ``max_stacks`` stacks."""
        return BudgetExceededError(
            "parse stacks per state",
            self.max_stacks,
            doing="matching the text",
            hint=_GRAMMAR_STACKS_HINT if self.levels else _SCHEMA_STACKS_HINT,
        )

    def step(self, state: State, byte: int) -> State:
        """The state after reading ``byte`` (empty: the byte is not allowed)."""
        trans = self._trans
        safe = self.safe
        moved: list[Stack] = []
        for stack in state:
            if not stack:
                continue
            rule, at = stack[-1]
            target = trans[rule][at * 256 + byte]
            if target >= 0:
                following = (*stack[:-1], (rule, target))
                if len(stack) <= safe or self._viable(following):
                    moved.append(following)
        return self.close(moved) if moved else ()

    def roomy(self, depth: int) -> bool:
        """Whether every stack ``depth`` deep (or fewer frames) is viable whatever its
        states. Costs a comparison, but the first time a stack gets that deep: the
        headroom's bound then, its needs if the bound leaves no room."""
        if depth <= self.safe:
            return True
        while self._refined < 2 and depth > self.safe:
            room = self.headroom
            self._refined += 1
            most = room.bound if self._refined == 1 else room.most
            self.safe = max(self.safe, self.max_depth - most)
        return depth <= self.safe

    def _viable(self, stack: Stack) -> bool:
        """Whether the stack's top frame, and the one below it, can still finish
        within ``max_depth`` (the frames below were checked when they were on top)."""
        if self.roomy(len(stack)):
            return True
        room = self.headroom
        depth = room.depth(stack)
        rule, state = stack[-1]
        if depth + room.need(rule)[state] > self.max_depth:
            return False
        if len(stack) < 2:
            return True
        below, back = stack[-2]
        lower = depth - room.weight(stack[-3][0] if len(stack) > 2 else -1, rule)
        return lower + room.need(below)[back] <= self.max_depth

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
        """Which next bytes keep the document alive (for tests and forced-byte reads).
        Near the depth bound, exactly those :meth:`step` takes (a byte into a state
        that could only nest deeper is not allowed)."""
        rules = self.network.rules
        allowed = np.zeros(256, dtype=np.bool_)
        near = False
        for stack in state:
            if stack:
                rule, at = stack[-1]
                allowed |= rules[rule].trans[at] >= 0
                near = near or not self.roomy(len(stack))
        if near:
            for byte in np.flatnonzero(allowed).tolist():
                allowed[byte] = bool(self.step(state, byte))
        return allowed


class _PerRule(dict[int, _T]):
    """A value per rule number, computed by ``compute`` on first lookup (the rules of
    any-order objects are numbered while matching)."""

    def __init__(self, compute: Callable[[int], _T]) -> None:
        super().__init__()
        self.compute = compute

    def __missing__(self, number: int) -> _T:
        value = self.compute(number)
        if len(self) >= _RULES_KEPT:
            self.clear()  # (recomputed on demand: any-order objects' rules are many)
        self[number] = value
        return value


def _flat(trans: npt.NDArray[np.int32]) -> memoryview:
    """A transition table as a flat memoryview of ints (shared, not copied, when the
    table is contiguous int32 already)."""
    return memoryview(np.ascontiguousarray(trans, dtype=np.int32).reshape(-1))  # type: ignore[arg-type]


class _PerState(dict[int, bool]):
    """A flag per state of one automaton, computed by ``compute`` on first lookup."""

    def __init__(self, compute: Callable[[int], bool]) -> None:
        super().__init__()
        self.compute = compute

    def __missing__(self, state: int) -> bool:
        value = self[state] = self.compute(state)
        return value


def _reads(trans: npt.NDArray[np.int32], state: int) -> bool:
    return bool(trans[state].max() >= 0)


def _state_reads(trans: npt.NDArray[np.int32]) -> _Flags:
    """Whether each state of a rule reads a byte: all at once for a small rule, on
    first lookup for a big one (see ReferenceMatcher.__init__). A small rule's are
    memoised by table: the networks that share a rule's automaton (its lexeme, its
    shape) share them. (Not a big rule's: its flags hold the table, which would keep
    it, and them, alive for good.)"""
    if trans.shape[0] > _EAGER_STATES:
        return _PerState(functools.partial(_reads, trans))
    known = _reads_of.get(trans)
    if known is None:
        kernels = native.KERNELS
        if (
            kernels is not None
            and trans.dtype == np.int32
            and trans.flags.c_contiguous
            and trans.shape[1:] == (256,)
        ):
            found: bytes = kernels.r5setup_row_reads(trans)
        else:
            found = _row_reads_python(trans)
        known = _reads_of.put(trans, found)
    return known


def _row_reads_python(trans: npt.NDArray[np.int32]) -> bytes:
    """Per state (row) of a rule's table, ``b"\\x01"`` where it reads a byte (holds
    any transition), else ``b"\\x00"``. The pure-Python form of the compiled
    ``r5setup_row_reads`` (which scans each row only up to its first transition:
    ~10x sooner on the tables of a schema's rules, part of its first compile)."""
    return np.asarray((trans >= 0).any(axis=1)).tobytes()


_reads_of: IdentityMemo[bytes] = IdentityMemo()  # see _state_reads


def _settled(
    reads: _Flags,
    calls: tuple[tuple[tuple[int, int], ...], ...],
    accepting: bytes,
    state: int,
) -> bool:
    return bool(reads[state]) and not calls[state] and not accepting[state]
