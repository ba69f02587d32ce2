"""Stage 4: boundary tokens finished from the real parse stack, one stack at a time.

A walk (:mod:`~jsonmode.decoding.engine.walk`) leaves the tokens that pass a call or
return point as boundary groups. Which of them are allowed depends on the whole
stack: the stacks a boundary leads to (the caller's continuation after a return, the
callee after a call) are numbered ``(context, rule state)`` pairs (:class:`Stacks`),
stepped by the rules' byte tables. The tokens of a group whose rest starts with a
byte those stacks can read are kept as a small trie of their *rests*
(:class:`Rests`; the same few dozen rests, such as ``",`` and ``"}`` after a string,
recur in every schema: memoised by content, ``group_rests``), and the stacks walk
that trie (:meth:`Stacks.finish`): one step per distinct rest prefix. A group of more
than ``_TRIE_RESTS`` such tokens (white space before an identifier in a grammar) is
finished in the token trie itself, from where its rests start (:func:`group_starts`,
:meth:`Stacks.finish_in_trie`): the vocabulary's trie is already the trie of its rests.

A stack whose top state reads few bytes (a literal's next bytes, a number's digits,
the ``:`` after a key) skips walks, hashes and caches altogether: the stack itself
follows the token trie in plain Python (:func:`direct`); NumPy's per-call overhead
would cost several times such a walk.

Cost: per distinct rest prefix or live trie node visited, not per token. With the
compiled core (:mod:`jsonmode.native`), the numbering and closures of :class:`Stacks`
are a ``jsonmode._native.Stacks`` (C), and the C walks take its closures directly.
Thread-safe: numbers are handed out under a lock (the compiled numbering: with the GIL
held), memos are idempotent writes of equal values, the rests memo is a thread-safe
cache.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from jsonmode import native
from jsonmode.decoding.automata.families import TAIL
from jsonmode.decoding.engine.entries import Following
from jsonmode.decoding.engine.facts import Facts, ReadLists, TokenIndex, facts
from jsonmode.decoding.engine.trie import TokenTrie
from jsonmode.decoding.reference import ReferenceMatcher, Stack
from jsonmode.lru import Lru

Pair = tuple[int, int]  # (context, rule state): one parse stack, see Stacks

# A stack whose top state reads at most _SMALL_BYTES first bytes is walked through
# the token trie in plain Python with the whole stack (see direct), while
# at most _DIRECT_NODES (trie node, stack) pairs are live in all; past that, the
# vectorised walk takes over. It does at once where a first byte leads a stack to a
# state reading more than _WIDE_BYTES bytes (a string's body after its opening quote)
# with more than _DIRECT_NODES tokens below: such a walk would pass that budget.
_SMALL_BYTES = 8
_DIRECT_NODES = 256
_WIDE_BYTES = 128
# A boundary group with more than _TRIE_RESTS tokens whose rest its stacks can start
# reading (after ``ws ::= [ \t\n]+`` in a grammar, every " word" token may go on into an
# identifier) is finished in the token trie itself, from its entries' children
# (group_starts, Stacks.finish_in_trie), rather than through a trie of its rests:
# building that trie costs per token (~0.6 s for 100 000 rests in plain Python), and one
# that big would not stay in the rests memo. (The JSON of schemas makes smaller groups:
# at most 255 such tokens over the MaskBench sample, Qwen2.5.)
_TRIE_RESTS = 512

Starts = tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64]]


class Stacks:
    """Parse stacks numbered for walking tokens one stack at a time.

    A stack is a pair ``(context, state)``: the state is its top rule's state, the
    context numbers everything else, as a parent context (-1: none), the state in
    the parent's rule to return to, and the top rule (so the stack's frames are its
    parent's, ending in that return state, then ``(rule, state)``). A step reads a
    byte in the top rule's table (``tables[context]``, flat ``state * 256 + byte``;
    -1: not readable); only where it lands in a *crossing* state
    (``crossings[context]``: accepting or calling) does the stack become the stacks
    of its closure (:meth:`expand`, memoised; the reference matcher's ``close``
    computed on pairs: a call pushes a child context, a return goes to the parent's
    pair; the end of the document is the pair ``(-1, 0)``, which reads nothing). So
    a walk steps by table and by ints, and builds no stack tuples.

    A numbering grows with the stacks met; the engine replaces it past ``_STACKS``
    entries (see ``MaskEngine._current_stacks``). Thread-safe: numbers are handed out
    under a lock, the memos are idempotent writes of equal values.

    With the compiled core loaded when it is made (:data:`jsonmode.native.KERNELS`),
    the numbering and the closures (:meth:`context`, :meth:`expand`, :meth:`readers`,
    :meth:`returns`, :meth:`stack`, :attr:`size`) are kept by a
    ``jsonmode._native.Stacks``, which hands out the same numbers in the same order and
    the same closures (the pure-Python form below stays the reference); what it asks of
    Python is a rule's parts on first sight of the rule, the headroom's needs and
    bounded tables near the nesting bound, and whether a depth is roomy, once per
    depth. It keeps that form for its life (``native.use`` switches later calls'
    walks, not a numbering). Shared by the engine's threads: its C code runs with the
    GIL held, so each call is atomic with respect to other Python threads but for its
    callbacks into Python, across which it holds no pointer into its own arrays and
    after which it looks a number up again before handing out a new one.
    """

    def __init__(self, reference: ReferenceMatcher) -> None:
        self.reference = reference
        self.tables: list[memoryview] = []
        self.crossings: list[bytes] = []
        self._rule: list[int] = []
        self._parent: list[int] = []
        self._back: list[int] = []
        self._depth: list[int] = []
        self._children: dict[tuple[int, int, int], int] = {}
        self._numbers: dict[tuple[Stack, int], int] = {}
        self._expanded: dict[Pair, tuple[Pair, ...]] = {}
        self._returns: dict[int, tuple[Pair, ...]] = {}
        self._reads: list[ReadLists] = []  # per context, its rule's
        self._readable: dict[tuple[Pair, ...], npt.NDArray[np.bool_]] = {}
        self._facts: dict[int, Facts] = {}
        # Near the nesting bound, a context's table and read lists leave out the bytes
        # into states that cannot finish within it (by rule and depth left; see near).
        self.near: list[bool] = []
        self._bounded: dict[tuple[int, int], tuple[memoryview, ReadLists]] = {}
        self._lock = threading.Lock()
        self._core: Any = None  # (the compiled numbering, or None: see the class)
        kernels = native.KERNELS
        if kernels is not None:
            room = reference.headroom
            core = kernels.Stacks(
                functools.partial(_rule_parts, reference),
                functools.partial(_bounded_table, reference, self._bounded),
                reference.roomy,
                room.need,
                room.most_of,
                room.recursive,
                reference.levels,
                reference.max_depth,
                reference.safe,
            )
            self._core = core
            self.tables, self.crossings, self._reads, self.near = (
                core.tables,
                core.crossings,
                core.reads,
                core.near,
            )

    @property
    def size(self) -> int:
        """Contexts numbered and closures memoised so far."""
        if self._core is not None:
            size: int = self._core.size
            return size
        return len(self._rule) + len(self._expanded)

    @property
    def core(self) -> Any:
        """The compiled numbering (a ``jsonmode._native.Stacks``), or None for the
        pure-Python form."""
        return self._core

    @property
    def closure(self) -> Callable[[int, int], tuple[Pair, ...]]:
        """What the walks are handed as ``expand``: the compiled numbering itself
        (calling it is its ``expand``; the C walks take its closures directly), else
        :meth:`expand`."""
        if self._core is not None:
            core: Callable[[int, int], tuple[Pair, ...]] = self._core
            return core
        return self.expand

    def context(self, lower: Stack, rule: int) -> int:
        """The number of the context of a stack ``(*lower, (rule, state))``."""
        if self._core is not None:
            number: int = self._core.context(lower, rule)
            return number
        key = (lower, rule)
        known = self._numbers.get(key)
        if known is None:
            if lower:
                parent = self.context(lower[:-1], lower[-1][0])
                known = self._child(parent, lower[-1][1], rule)
            else:
                known = self._child(-1, -1, rule)
            self._numbers[key] = known
        return known

    def _child(self, parent: int, back: int, rule: int) -> int:
        """The context of ``rule`` called from ``parent``, to return to ``back``."""
        key = (parent, back, rule)
        known = self._children.get(key)
        if known is None:
            facts = self._rule_facts(rule)
            reference = self.reference
            if reference.levels:
                caller = self._rule[parent] if parent >= 0 else -1
                depth = (self._depth[parent] if parent >= 0 else 0) + (
                    reference.headroom.weight(caller, rule)
                )
            else:
                depth = self._depth[parent] + 1 if parent >= 0 else 1
            near = depth > reference.safe and not reference.roomy(depth)
            near = near and depth + reference.headroom.most_of(rule) > reference.max_depth
            table, reads = reference.table(rule), facts.reads
            if near:
                table, reads = _bounded_table(
                    reference, self._bounded, rule, reference.max_depth - depth
                )
            with self._lock:
                known = self._children.get(key)
                if known is None:
                    known = len(self._rule)
                    self.tables.append(table)
                    self.crossings.append(facts.flags)
                    self._reads.append(reads)
                    self._parent.append(parent)
                    self._back.append(back)
                    self._depth.append(depth)
                    self._rule.append(rule)
                    self.near.append(near)
                    self._children[key] = known
        return known

    def stack(self, context: int, state: int) -> Stack:
        """The stack a pair stands for (``()``: the end of the document)."""
        if self._core is not None:
            stack: Stack = self._core.stack(context, state)
            return stack
        frames: list[tuple[int, int]] = []
        while context >= 0:
            frames.append((self._rule[context], state))
            context, state = self._parent[context], self._back[context]
        return tuple(reversed(frames))

    def _rule_facts(self, rule: int) -> Facts:
        known = self._facts.get(rule)
        if known is None:
            known = self._facts[rule] = facts(self.reference.network.rules[rule])
        return known

    def reads(self, context: int, state: int) -> list[int]:
        """The bytes the stack can read, ascending."""
        return self._reads[context][state]

    def readable(self, pairs: tuple[Pair, ...]) -> npt.NDArray[np.bool_]:
        """Which bytes any of the stacks can read."""
        known = self._readable.get(pairs)
        if known is None:
            known = np.zeros(256, dtype=np.bool_)
            for context, state in pairs:
                known[self.reads(context, state)] = True
            self._readable[pairs] = known
        return known

    def expand(self, context: int, state: int) -> tuple[Pair, ...]:
        """The closure of the stack: itself if it reads, the callee's first state on
        top of it for each call (within the reference's ``max_depth``), its caller's
        continuation if it accepts, and so on (the reference matcher's ``close``)."""
        if self._core is not None:
            expanded: tuple[Pair, ...] = self._core.expand(context, state)
            return expanded
        key = (context, state)
        known = self._expanded.get(key)
        if known is None:
            reads, calls, accepting = self.reference.rule_lists()
            limit = self.reference.max_depth
            room = self.reference.headroom
            closed: dict[Pair, None] = {}
            seen: set[Pair] = set()
            work = [key]
            while work:
                pair = work.pop()
                if pair in seen:
                    continue
                seen.add(pair)
                here, at = pair
                if here < 0:
                    closed[pair] = None
                    continue
                rule = self._rule[here]
                if reads[rule][at]:
                    closed[pair] = None
                depth = self._depth[here]
                roomy = depth < self.reference.safe or self.reference.roomy(depth + 1)
                for callee, back in calls[rule][at]:
                    # (Only a stack that can finish within the limit: see
                    # jsonmode.decoding.automata.headroom.)
                    if back == TAIL:  # (the callee replaces the frame: no deeper)
                        if roomy or depth + room.need(callee)[0] <= limit:
                            sibling = self._child(self._parent[here], self._back[here], callee)
                            work.append((sibling, 0))
                    elif roomy or (
                        depth + room.weight(rule, callee) + room.need(callee)[0] <= limit
                        and depth + room.need(rule)[back] <= limit
                    ):
                        work.append((self._child(here, back, callee), 0))
                if accepting[rule][at]:
                    parent = self._parent[here]
                    work.append((parent, self._back[here]) if parent >= 0 else (-1, 0))
            known = self._expanded[key] = tuple(closed)
        return known

    def readers(self, context: int, state: int) -> tuple[Pair, ...]:
        """The stacks a boundary token passing crossing state ``state`` goes on in,
        but the stack itself (its own continuation is in the walk already) and the end
        of the document (which reads nothing)."""
        if self._core is not None:
            readers: tuple[Pair, ...] = self._core.readers(context, state)
            return readers
        own = (context, state)
        return tuple(pair for pair in self.expand(context, state) if pair[0] >= 0 and pair != own)

    def returns(self, context: int) -> tuple[Pair, ...]:
        """The stacks that read on after the top rule of the context returns: the
        parent's stack, closed (the end of the document left out)."""
        if self._core is not None:
            returns: tuple[Pair, ...] = self._core.returns(context)
            return returns
        known = self._returns.get(context)
        if known is None:
            parent = self._parent[context]
            closed = self.expand(parent, self._back[context]) if parent >= 0 else ()
            known = self._returns[context] = tuple(pair for pair in closed if pair[0] >= 0)
        return known

    def step(self, context: int, state: int, byte: int) -> tuple[Pair, ...]:
        """The stacks after the stack reads ``byte`` (none: it cannot)."""
        target = self.tables[context][state * 256 + byte]
        if target < 0:
            return ()
        if self.crossings[context][target]:
            return self.expand(context, target)
        return ((context, target),)

    def finish_in_trie(self, trie: TokenTrie, starts: Starts, pairs: tuple[Pair, ...]) -> list[int]:
        """:meth:`finish` for a group kept as :func:`group_starts`: the positions of the
        tokens whose rest one of ``pairs`` reads to its end, the stacks stepped by each
        entry's first rest byte and then walking the token trie below its node (one
        :meth:`TokenTrie.walk_stacks` per level). A token may be listed twice (its
        rest after two boundaries). (The compiled miss walks the trie with the stacks
        at a node as one set, each set's step memoised: csrc/r7deep_sets.c; the same
        tokens.)"""
        byte, node, depth = (part.tolist() for part in starts)
        found: list[int] = []
        begin, count = 0, len(depth)
        while begin < count:
            end = begin
            while end < count and depth[end] == depth[begin]:
                end += 1
            seeds = [
                (node[k], *pair)
                for k in range(begin, end)
                for context, state in pairs
                for pair in self.step(context, state, byte[k])
            ]
            walked = trie.walk_stacks(
                self.tables, self.crossings, self.reads, self.closure, seeds, 1 << 62, depth[begin]
            )
            assert walked is not None  # (no budget)
            found.extend(walked)
            begin = end
        return found

    def finish(self, rests: Rests, pairs: tuple[Pair, ...]) -> list[int]:
        """The positions of the tokens whose rest one of ``pairs`` reads to its end:
        the stacks walk the rests' trie, one step per node for all the tokens below."""
        tables, crossings, expand = self.tables, self.crossings, self.closure
        byte_of, kids, ends = rests.byte, rests.kids, rests.ends
        kernels = native.KERNELS
        if kernels is not None:  # (the same walk in C: jsonmode.native)
            finished: list[int] = kernels.finish(
                byte_of, kids, ends, pairs, tables, crossings, expand
            )
            return finished
        found: list[int] = []
        work = [(child, pairs) for child in kids[0]]
        while work:
            node, here = work.pop()
            byte = byte_of[node]
            # (self.step, inlined: this loop runs per rest node of every group.)
            after: tuple[Pair, ...]
            readers: tuple[Pair, ...] | None = None  # (None: filtered from after)
            if len(here) == 1:
                context, state = here[0]
                target = tables[context][state * 256 + byte]
                if target < 0:
                    continue
                if crossings[context][target]:
                    after = expand(context, target)
                else:  # (the common case: one stack, still reading, nothing to filter)
                    after = readers = ((context, target),)
            else:
                merged: dict[Pair, None] = {}
                for context, state in here:
                    target = tables[context][state * 256 + byte]
                    if target < 0:
                        continue
                    if crossings[context][target]:
                        merged.update(dict.fromkeys(expand(context, target)))
                    else:
                        merged[(context, target)] = None
                if not merged:
                    continue
                after = tuple(merged)
            found.extend(ends[node])
            if kids[node]:
                if readers is None:
                    readers = tuple([pair for pair in after if pair[0] >= 0])
                if readers:
                    work.extend([(child, readers) for child in kids[node]])
        return found


def _rule_parts(
    reference: ReferenceMatcher, rule: int
) -> tuple[memoryview, bytes, ReadLists, tuple[tuple[tuple[int, int], ...], ...], bytes]:
    """What the compiled numbering takes of a rule on first sight: its flat table, its
    crossing flags and read lists (its :class:`Facts`), its calls and accepting flags
    per state (see :meth:`ReferenceMatcher.rule_lists`)."""
    _, calls, accepting = reference.rule_lists()
    known = facts(reference.network.rules[rule])
    return reference.table(rule), known.flags, known.reads, calls[rule], accepting[rule]


def _bounded_table(
    reference: ReferenceMatcher,
    memo: dict[tuple[int, int], tuple[memoryview, ReadLists]],
    rule: int,
    room: int,
) -> tuple[memoryview, ReadLists]:
    """The rule's table and read lists less the bytes into states that need more than
    ``room`` depth to finish (see :mod:`~jsonmode.decoding.automata.headroom`),
    memoised in ``memo``."""
    key = (rule, room)
    known = memo.get(key)
    if known is None:
        trans = reference.network.rules[rule].trans
        need = np.asarray(reference.headroom.need(rule))
        live = trans >= 0
        kept = np.where(live & (need[np.where(live, trans, 0)] <= room), trans, -1)
        kept = np.ascontiguousarray(kept, dtype=np.int32)
        known = memo[key] = (memoryview(kept.reshape(-1)), ReadLists(kept))  # type: ignore[arg-type]
    return known


@dataclass(frozen=True, slots=True)
class Rests:
    """The rests of a boundary group's tokens (their bytes from the boundary on), as a
    trie: node ``n`` (0: the root) has the byte ``byte[n]`` that leads to it, its
    children ``kids[n]`` and the positions of the tokens whose rest ends there
    (``ends[n]``)."""

    byte: list[int]
    kids: list[list[int]]
    ends: list[list[int]]

    @staticmethod
    def of(tokens: list[bytes], positions: list[int]) -> Rests:
        """The trie of ``tokens`` (rests), each ending in its position."""
        byte: list[int] = [-1]
        kids: list[list[int]] = [[]]
        ends: list[list[int]] = [[]]
        index: dict[tuple[int, int], int] = {}
        for rest, position in zip(tokens, positions, strict=True):
            node = 0
            for value in rest:
                child = index.get((node, value))
                if child is None:
                    child = index[(node, value)] = len(byte)
                    byte.append(value)
                    kids.append([])
                    ends.append([])
                    kids[node].append(child)
                node = child
            ends[node].append(position)
        return Rests(byte, kids, ends)


# Rests by group content (see group_rests): ~90 distinct ones serve the benchmark's
# 7,000 boundary groups.
_rests: Lru[tuple[bytes, bytes], Rests] = Lru(8 << 20)


def readable_part(split: Following, readable: npt.NDArray[np.bool_]) -> Following:
    """The entries of ``split`` whose rest starts with a ``readable`` byte (the others
    die on their first byte in every stack of the group). Their positions and columns
    are the group's content: an entry's column and first position name its trie node,
    and so its byte and its last position."""
    kept = readable[split.byte].nonzero()[0]
    if kept.size == split.byte.size:
        return split
    return Following(split.byte[kept], split.lo[kept], split.hi[kept], split.col[kept])


def _rests_key(part: Following) -> tuple[bytes, bytes]:
    return part.lo.tobytes(), part.col.tobytes()


def group_form(
    index: TokenIndex, split: Following, readable: npt.NDArray[np.bool_]
) -> Rests | Starts:
    """How a group is finished: its rests when they are memoised (a group seen before:
    no size to work out); else, for a big group, where its rests start in the token trie
    (:func:`group_starts`, for :meth:`Stacks.finish_in_trie`); else its rests, made and
    memoised (:func:`group_rests`, for :meth:`Stacks.finish`). Only the entries whose
    rest starts with a ``readable`` byte count, and only they are keyed: a group where
    every token crosses (a free-text lexeme's return, ~300 000 children) but a few
    bytes are readable next costs one gather, not a key of megabytes."""
    part = readable_part(split, readable)
    known = _rests.get(_rests_key(part))
    if known is not None:
        return known
    starts = group_starts(index, part)
    return starts if starts is not None else group_rests(index, part)


def group_rests(index: TokenIndex, part: Following) -> Rests:
    """The rests of the tokens of a group's readable ``part`` (see
    :func:`readable_part`), memoised by content (the same groups recur across rules
    and schemas)."""
    key = _rests_key(part)
    known = _rests.get(key)
    if known is None:
        data, width, lengths = index.flat_bytes, index.width, index.lengths_view
        tokens: list[bytes] = []
        positions: list[int] = []
        for lo, hi, col in zip(part.lo.tolist(), part.hi.tolist(), part.col.tolist(), strict=True):
            for position in range(lo, hi):
                base = position * width
                tokens.append(bytes(data[base + col : base + lengths[position]]))
                positions.append(position)
        known = Rests.of(tokens, positions)
        size = sum(len(piece) for piece in key) + 64 * len(known.byte) + 8 * len(positions)
        _rests.put(key, known, size + 64)
    return known


def group_starts(index: TokenIndex, part: Following) -> Starts | None:
    """Where the rests of a big group start in the token trie: for the entries of a
    group's readable ``part`` (see :func:`readable_part`), the byte each rest starts
    with, the trie node it leads to and the node's level (the rest's column + 1),
    ordered by level. None for a group of at most ``_TRIE_RESTS`` such tokens (its
    rests' trie is the cheaper form). Cost: a few vector operations over the part's
    entries."""
    if int((part.hi - part.lo).sum()) <= _TRIE_RESTS:
        return None
    order = np.argsort(part.col, kind="stable")
    cols, los = part.col[order], part.lo[order]
    nodes = np.empty(order.size, dtype=np.int64)
    levels = index.trie.levels
    for col in np.unique(cols).tolist():
        at = cols == col
        # (An entry's tokens lo .. hi - 1 are its child's, a node of level col + 1:
        # the one whose range starts at lo.)
        nodes[at] = np.searchsorted(levels[col].lo, los[at], side="right") - 1
    return part.byte[order].astype(np.int64), nodes, (cols + 1).astype(np.int64)


def rests_lists(
    index: TokenIndex, split: Following, readable: bytes
) -> tuple[list[int], list[list[int]], list[list[int]]] | tuple[bytes, bytes, bytes]:
    """:func:`group_form` with ``readable`` as 256 bytes of 0/1 flags, as the compiled
    miss asks for it (see ``MaskEngine``): rests as the lists of their trie (``byte``,
    ``kids``, ``ends``); a big group's starts as three buffers of int64 (bytes objects),
    from which the compiled miss walks the token trie."""
    if len(readable) != 256:
        raise ValueError("readable must be 256 flags")
    form = group_form(index, split, np.frombuffer(readable, dtype=np.bool_))
    if isinstance(form, Rests):
        return form.byte, form.kids, form.ends
    byte, node, depth = form
    return byte.tobytes(), node.tobytes(), depth.tobytes()


def direct(
    trie: TokenTrie, stacks: Stacks, context: int, state: int, whole: bool = False
) -> list[int] | None:
    """The positions of the tokens the stack ``(context, state)`` reads, when its
    top state reads few bytes: the stack follows the token trie itself (see
    :meth:`TokenTrie.walk_stacks`). None for a wider stack, or when more than
    ``_DIRECT_NODES`` trie nodes and stacks would be live (or surely will: see
    ``_WIDE_BYTES``). ``whole``: however wide (a context near the nesting bound,
    whose rule's walk, shared by every depth, would allow too much)."""
    reads = stacks.reads(context, state)
    if whole:
        first = trie.first_node_list
        seeds = [
            (first[byte], *pair)
            for byte in reads
            if first[byte] >= 0
            for pair in stacks.step(context, state, byte)
        ]
        found = trie.walk_stacks(
            stacks.tables, stacks.crossings, stacks.reads, stacks.closure, seeds, 1 << 62
        )
        assert found is not None  # (no budget)
        return found
    if len(reads) > _SMALL_BYTES:
        return None
    first, below = trie.first_node_list, trie.first_sizes
    seeds = [
        (first[byte], *pair)
        for byte in reads
        if first[byte] >= 0
        for pair in stacks.step(context, state, byte)
    ]
    for node, here, at in seeds:
        if below[node] > _DIRECT_NODES and here >= 0 and len(stacks.reads(here, at)) > _WIDE_BYTES:
            return None
    return trie.walk_stacks(
        stacks.tables, stacks.crossings, stacks.reads, stacks.closure, seeds, _DIRECT_NODES
    )
