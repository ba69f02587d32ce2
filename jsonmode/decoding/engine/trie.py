"""The vocabulary as a trie, for walking an automaton over every token at once.

Tokens sorted lexicographically ("positions") share their prefixes: Qwen2.5's
151 651 tokens have 333 080 distinct prefixes but 976 070 bytes. :class:`TokenTrie`
stores the prefixes level by level (depth 1 = first byte), each node with its
parent in the level above, its last byte, and the range of positions below it.
:meth:`TokenTrie.walk` then runs a byte automaton over chosen subtrees one level
at a time, following live prefixes only: every prefix is read at most once, not
once per token, and a dead prefix is never expanded. :meth:`TokenTrie.walk_stacks`
does the same in plain Python for parse stacks that read few bytes, across the
points where they call or return.

In the mask engine, missing segments (:mod:`~jsonmode.decoding.engine.segments`) and
patched walks (:mod:`~jsonmode.decoding.engine.walk`) walk it vectorised, narrow stacks
(:mod:`~jsonmode.decoding.engine.boundary`) in plain Python.

Built once per vocabulary (a few hundred milliseconds for 150k tokens); immutable
and thread-safe afterwards.
"""

from __future__ import annotations

import itertools
from bisect import bisect_left
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import numpy as np
import numpy.typing as npt

from jsonmode import native
from jsonmode.decoding.engine.entries import (
    NO_BOUNDARIES,
    Bools,
    Boundaries,
    Following,
    Ints,
    TrieWalk,
    ranges,
)

__all__ = ["TokenTrie"]

_EMPTY = np.zeros(0, dtype=np.int64)
_ZERO = np.zeros(1, dtype=np.int64)

# A wide walk takes this many levels in full (one gather over every node of a level),
# then follows the live nodes of the deeper, smaller levels as a frontier.
_WIDE_LEVELS = 12

# A live frontier of at most this many nodes is stepped in plain Python (NumPy's
# per-call overhead, ~25 calls a level, beats vectorising below this size). Its work
# is bounded: at most 24 nodes x 256 children a level, fewer where a state reads few
# bytes (those children are looked up, not scanned). Bounding it tighter by the
# children to try measured ~10 % slower over the benchmark's segments.
_SMALL = 24

# A compiled walk's inside ranges are expanded in plain Python when there are at most
# _FEW_SPANS of them holding at most _FEW_TOKENS positions (NumPy's expansion costs
# ~15 us in calls whatever its size: most of a narrow walk's time).
_FEW_SPANS = 64
_FEW_TOKENS = 256


@dataclass(frozen=True, slots=True)
class _Level:
    parent: Ints  # node index in the level above (depth 1: unused)
    byte: Ints  # the byte that leads here
    lo: Ints  # first position below the node
    hi: Ints  # one past the last position below the node
    term: Ints  # how many tokens equal the node's prefix (they sort first; duplicates exist)
    child_lo: Ints  # first child in the level below...
    child_hi: Ints  # ...and one past the last (children of a node are adjacent)
    ends: Ints  # positions whose token ends at this depth...
    ends_node: Ints  # ...and the node where each ends


class TokenTrie:
    """Prefix levels of tokens given in lexicographic order (see module docstring)."""

    def __init__(self, matrix: npt.NDArray[np.uint8], lengths: Ints) -> None:
        count = matrix.shape[0]
        self.count = count
        found: list[tuple[Ints, Ints, Ints, Ints, Ints]] = []
        ends: list[tuple[Ints, Ints]] = []
        node = np.zeros(count, dtype=np.int64)  # each row's node at the previous depth
        rows = np.arange(count, dtype=np.int64)
        for depth in range(1, matrix.shape[1] + 1):
            rows = rows[lengths[rows] >= depth]
            if not rows.size:
                break
            byte = matrix[rows, depth - 1].astype(np.int64)
            parent = node[rows]
            # Rows with one prefix are adjacent: a node starts where the parent or the
            # byte changes from the row before.
            new = np.ones(rows.size, dtype=np.bool_)
            new[1:] = (parent[1:] != parent[:-1]) | (byte[1:] != byte[:-1])
            ids = np.cumsum(new) - 1
            starts = np.flatnonzero(new)
            last = np.append(starts[1:], rows.size) - 1
            ending = lengths[rows] == depth
            term = np.bincount(ids[ending], minlength=starts.size).astype(np.int64)
            found.append((parent[starts], byte[starts], rows[starts], rows[last] + 1, term))
            ends.append((rows[ending], ids[ending]))
            node[rows] = ids
        levels: list[_Level] = []
        for depth, (parent, byte, lo, hi, term) in enumerate(found):
            below = found[depth + 1][0] if depth + 1 < len(found) else np.zeros(0, np.int64)
            nodes = np.arange(byte.size)
            levels.append(
                _Level(
                    parent=parent,
                    byte=byte,
                    lo=lo,
                    hi=hi,
                    term=term,
                    child_lo=np.searchsorted(below, nodes, side="left").astype(np.int64),
                    child_hi=np.searchsorted(below, nodes, side="right").astype(np.int64),
                    ends=ends[depth][0],
                    ends_node=ends[depth][1],
                )
            )
        self.levels = tuple(levels)
        # Every node of every level in one numbering (level by level): node ``n`` at
        # depth ``d`` is ``self._first[d - 1] + n``; its children, byte and positions.
        self._first = np.cumsum([0, *(level.byte.size for level in levels)]).astype(np.int64)
        below = self._first[1:]
        self._child_lo = _joined(
            [lv.child_lo + base for lv, base in zip(levels, below, strict=True)]
        )
        self._child_hi = _joined(
            [lv.child_hi + base for lv, base in zip(levels, below, strict=True)]
        )
        self._byte = _joined([level.byte for level in levels])
        # Per position, the node where its token ends (in the one numbering).
        self.end_nodes = np.zeros(count, dtype=np.int64)
        for level, base in zip(levels, self._first[:-1], strict=True):
            self.end_nodes[level.ends] = level.ends_node + base
        self._lo = _joined([level.lo for level in levels])
        self._hi = _joined([level.hi for level in levels])
        # Per level, memoryviews of the arrays the small-frontier steps read (indexing
        # one gives a plain int, without NumPy's per-call overhead).
        self._views = tuple(
            tuple(
                memoryview(array)  # type: ignore[arg-type]
                for array in (level.lo, level.hi, level.term, level.child_lo, level.child_hi)
            )
            for level in levels
        )
        self._bytes = tuple(memoryview(level.byte) for level in levels)  # type: ignore[arg-type]
        # The depth-1 node of each first byte (-1: no token starts with it).
        self.first_nodes = np.full(256, -1, dtype=np.int64)
        if levels:
            self.first_nodes[levels[0].byte] = np.arange(levels[0].byte.size)
        self.first_node_list: list[int] = self.first_nodes.tolist()
        # Per depth-1 node, the number of tokens below it (itself included).
        self.first_sizes: list[int] = (levels[0].hi - levels[0].lo).tolist() if levels else []
        # The compiled core's form of the levels (_compiled), made now where the core
        # runs: with the trie, per vocabulary, not in some schema's first mask (~1 ms).
        self._parent_memo: Ints | None = None  # see _parents
        self._native: Any = None
        if native.KERNELS is not None:
            self._compiled(native.KERNELS)

    def walk(
        self,
        table: npt.NDArray[np.int32] | Ints,
        dead: int,
        crossing: npt.NDArray[np.bool_],
        nodes: Ints,
        states: Ints,
        reads: Callable[[int], list[int]],
        *,
        depth: int = 1,
        wide: bool = False,
        follow: Bools | None = None,
    ) -> TrieWalk:
        """Run an automaton over the subtrees of ``nodes`` (at ``depth``), from
        ``states`` (the state after each node's prefix), visiting live prefixes only
        (``wide``, at depth 1 only: every node of every level instead, one gather per
        level; cheaper when most of the trie is live).

        ``table``: flat transitions ``(n_states + 1) * 256`` where ``dead`` is the
        extra state, mapped to itself and standing for every missing transition.
        ``crossing``: per state (``dead`` included, False), whether a token passing it
        with bytes left is a boundary token. ``reads(state)``: the bytes a state can
        read, ascending (used to look up few children among many). ``follow``: None,
        or 256 flags: a node is a boundary entry only if one of its children is on a
        flagged byte (the rest of its tokens starts with a child's byte: one that
        nothing after the rule reads is dropped, see
        :mod:`~jsonmode.decoding.automata.follow`).

        The cost follows the live frontier: a level is a few vectorised steps over it,
        or plain Python steps when it is small, so a state that reads few bytes walks
        few nodes however big the vocabulary.
        """
        kernels = native.KERNELS
        if kernels is not None:  # (the same levels in C: jsonmode.native)
            return self._compiled_walk(
                kernels, table, dead, crossing, (nodes, states), depth, wide, follow
            )
        found = _Found(None if follow is None else (self, follow))
        frontier: tuple[Ints, Ints] | tuple[list[int], list[int]]
        if wide and depth == 1:
            first = np.full(self.levels[0].byte.size, dead, dtype=np.int64)
            first[nodes] = states
            frontier = self._walk_levels(table, dead, crossing, first, found)
            depth = _WIDE_LEVELS + 1
        else:
            alive = states != dead
            frontier = (nodes[alive], states[alive])
        while len(frontier[0]):
            if len(frontier[0]) <= _SMALL:
                small = (_as_list(frontier[0]), _as_list(frontier[1]))
                frontier, depth = self._small_levels(
                    depth, small, table, dead, crossing, reads, found
                )
            else:
                last = depth == len(self.levels)
                big = (np.asarray(frontier[0]), np.asarray(frontier[1]))
                frontier = self._big_level(depth, big, table, dead, crossing, found, last)
                depth += 1
        return found.result()

    def walk_stacks(
        self,
        tables: list[memoryview],
        crossings: list[bytes],
        reads: Callable[[int, int], list[int]],
        expand: Callable[[int, int], tuple[tuple[int, int], ...]],
        seeds: list[tuple[int, int, int]],
        budget: int,
        depth: int = 1,
    ) -> list[int] | None:
        """The positions of the tokens that parse stacks read to their end, walking
        the trie in plain Python from ``seeds``: ``(node, context, state)``, nodes of
        level ``depth`` (1: a first byte's), the stacks after each node's byte.

        A stack ``(context, state)`` steps by its rule's flat table
        ``tables[context]`` (-1: no transition); where it lands in a crossing state
        (``crossings[context]``) it becomes the stacks ``expand(context, state)``
        (context -1: the end of the document, which reads no further). ``reads``
        gives the bytes a stack reads, ascending (to look up few children among
        many). A token is read when some stack is alive at its last node. None as
        soon as more than ``budget`` (node, stack) pairs have been live.

        Raises:
            ValueError: ``depth`` is not a level of the trie.
        """
        levels = len(self.levels)
        if not 1 <= depth <= max(levels, 1):
            raise ValueError(f"depth {depth} is not a level of the trie (1 .. {levels})")
        kernels = native.KERNELS
        if kernels is not None:  # (the same walk in C: jsonmode.native)
            walked: list[int] | None = self._compiled(kernels).walk_stacks(
                tables, crossings, reads, expand, seeds, budget, depth
            )
            return walked
        found: list[int] = []
        frontier = seeds
        seen = 0
        while frontier:
            seen += len(frontier)
            if seen > budget:
                return None
            lo_of, _, term_of, child_lo, child_hi = self._views[depth - 1]
            below = self._bytes[depth] if depth < levels else None
            following: list[tuple[int, int, int]] = []
            credited: set[int] = set()
            for node, context, state in frontier:
                if node not in credited:
                    credited.add(node)
                    term = term_of[node]
                    if term:
                        lo = lo_of[node]
                        found.extend(range(lo, lo + term))
                if below is None or context < 0:
                    continue
                first, end = child_lo[node], child_hi[node]
                if first == end:
                    continue
                table, crossing = tables[context], crossings[context]
                base = state * 256
                readable = reads(context, state) if end - first > 16 else None
                # (Two loops, one step inlined in each: this is the mask's inner loop.)
                if readable is not None and len(readable) < end - first:
                    for byte in readable:
                        child = bisect_left(below, byte, first, end)
                        if child < end and below[child] == byte:
                            target = table[base + byte]
                            if crossing[target]:
                                following.extend(
                                    [(child, *pair) for pair in expand(context, target)]
                                )
                            else:
                                following.append((child, context, target))
                    continue
                for child in range(first, end):
                    target = table[base + below[child]]
                    if target >= 0:
                        if crossing[target]:
                            following.extend([(child, *pair) for pair in expand(context, target)])
                        else:
                            following.append((child, context, target))
            frontier = following
            depth += 1
        return found

    def _compiled_walk(
        self,
        kernels: ModuleType,
        table: npt.NDArray[np.int32] | Ints,
        dead: int,
        crossing: Bools,
        frontier: tuple[Ints, Ints],
        depth: int,
        wide: bool,
        follow: Bools | None = None,
    ) -> TrieWalk:
        """:meth:`walk` by the compiled core: what :meth:`_Found.result` makes of the
        ranges and entries the Python levels record (a wide walk's first
        ``_WIDE_LEVELS`` levels count as big ones, and its inside tokens are flags, as
        there), made straight from the kernel's answer (its entries come sorted, as
        :meth:`_Found.result` sorts them, and as four blocks; its inside ranges are disjoint
        subtrees' tokens: sorting them by their starts sorts the positions; a small
        walk's cost is mostly this wrapper's NumPy calls, so it makes few)."""
        wide = wide and depth == 1
        flags = np.zeros(self.count, dtype=np.bool_) if wide else None
        inside, entries = self._compiled(kernels).walk(
            np.ascontiguousarray(table),
            dead,
            np.ascontiguousarray(crossing, dtype=np.bool_),
            np.ascontiguousarray(frontier[0], dtype=np.int64),
            np.ascontiguousarray(frontier[1], dtype=np.int64),
            depth,
            _SMALL,
            _WIDE_LEVELS if wide else 0,
            flags,
            None if follow is None else np.ascontiguousarray(follow, dtype=np.bool_),
        )
        bounds = NO_BOUNDARIES
        if entries:
            # (Sorted by rest in C, stably, as four blocks: one copy makes the fields.)
            blocks = np.frombuffer(entries, dtype=np.int64).reshape(4, -1).copy()
            bounds = Boundaries(blocks[0], blocks[1], blocks[2], blocks[3])
        spans = np.frombuffer(inside, dtype=np.int64)
        if flags is not None:
            if spans.size:
                flags[ranges(spans[0::2], spans[1::2])] = True
            return TrieWalk(flags.nonzero()[0], bounds)
        if spans.size <= 2 * _FEW_SPANS:
            pairs = spans.tolist()
            starts, ends = pairs[0::2], pairs[1::2]
            if sum(ends) - sum(starts) <= _FEW_TOKENS:  # (in plain Python: ~4x cheaper)
                inside = sorted(itertools.chain.from_iterable(map(range, starts, ends)))
                return TrieWalk(np.array(inside, dtype=np.int64), bounds)
        return TrieWalk(np.sort(ranges(spans[0::2], spans[1::2])), bounds)

    def live_below(
        self, table: npt.NDArray[np.int32] | Ints, dead: int, starts: list[tuple[int, int]]
    ) -> int:
        """The tokens a walk from the first bytes of ``starts``, each in its state (``(byte,
        state)`` pairs; ``table`` and ``dead`` as :meth:`walk` takes them), may still
        read after two bytes: those equal to a live first byte, and those below its
        children whose byte the state reads. A dozen NumPy calls, however many bytes."""
        first_node = self.first_node_list
        if len(self.levels) < 2:
            return sum(self.first_sizes[first_node[byte]] for byte, _ in starts)
        first, second = self.levels[0], self.levels[1]
        nodes = np.array([first_node[byte] for byte, _ in starts], dtype=np.int64)
        states = np.array([state for _, state in starts], dtype=np.int64)
        keep = (nodes >= 0) & (states != dead)
        nodes, states = nodes[keep], states[keep]
        lo, hi = first.child_lo[nodes], first.child_hi[nodes]
        children = ranges(lo, hi)
        live = table[np.repeat(states, hi - lo) * 256 + second.byte[children]] != dead
        sizes = second.hi[children] - second.lo[children]
        return int(first.term[nodes].sum()) + int(sizes[live].sum())

    def walk_cut(
        self,
        table: npt.NDArray[np.int32] | Ints,
        dead: int,
        crossing: Bools,
        firsts: list[int],
        targets: list[int],
        offsets: Ints,
        cut: bool,
        follow: Bools | None = None,
    ) -> tuple[bytes, bytes, tuple[tuple[bytes, bytes], ...] | None] | None:
        """:meth:`walk` from the depth-1 nodes of the first bytes ``firsts``, each in the
        state ``targets[i]`` (not wide), and, if ``cut``, its cut into those bytes'
        segments (their tokens end at ``offsets[b + 1]``), in one call of the compiled
        core (``r6narrow_walk_cut``): the inside positions (int32 bytes, ascending), the
        boundary entries (int64 rows ``lo, hi, col, node``, sorted by ``lo``) and, per
        first byte, its positions and entries (see
        ``jsonmode.decoding.engine.segments._split``, the reference). None where the
        compiled core is off (the caller walks and cuts in Python). ``follow``: as
        :meth:`walk`'s. Cost: the walk in C, the GIL released; a few microseconds for a
        narrow state."""
        kernels = native.KERNELS
        if kernels is None:
            return None
        found: tuple[bytes, bytes, tuple[tuple[bytes, bytes], ...] | None] = (
            kernels.r6narrow_walk_cut(
                self._compiled(kernels),
                table,
                dead,
                crossing,
                self.first_nodes,
                offsets,
                firsts,
                targets,
                _SMALL,
                cut,
                None if follow is None else np.ascontiguousarray(follow, dtype=np.bool_),
            )
        )
        return found

    def compiled(self, kernels: ModuleType) -> Any:
        """The levels as the compiled core's ``Trie`` (what its C walks read)."""
        return self._compiled(kernels)

    def _compiled(self, kernels: ModuleType) -> Any:
        """The levels as the compiled core's ``Trie`` (made on first use; two threads
        may both make one: equal, and either is kept)."""
        made = self._native
        if made is None:
            made = self._native = kernels.Trie(
                [(lv.lo, lv.hi, lv.term, lv.child_lo, lv.child_hi, lv.byte) for lv in self.levels]
            )
        return made

    def diverging(
        self,
        table: npt.NDArray[np.int32] | Ints,
        dead: int,
        crossing: Bools,
        nodes: list[int],
        ours: list[int],
        theirs: list[int],
        limit: int,
    ) -> list[tuple[int, int, int]] | None:
        """Where the walks from two states part, as ``(depth, node, our state)``.

        ``ours``/``theirs``: each depth-1 node's state after its byte from either
        state (``dead`` where it cannot be read). The two are followed together down
        the trie while they differ; a pair that meets in one state behaves alike from
        there on and is dropped. A node where one side is dead or only one side is
        crossing is where they part: every token below it may fare differently, all
        tokens elsewhere fare the same (inside, dead, or passing crossing states at the
        same columns). None when more than ``limit`` pairs must be followed at once.
        """
        steps = memoryview(table)  # type: ignore[arg-type]
        is_crossing = memoryview(crossing)  # type: ignore[arg-type]
        parted: list[tuple[int, int, int]] = []
        frontier = [(n, a, b) for n, a, b in zip(nodes, ours, theirs, strict=True) if a != b]
        # The bytes on which two states step apart (two states that differ on the
        # next bytes mostly go alike: a key's prefix and the plain key body part on
        # the name's next byte and the quote), by pair.
        apart: dict[tuple[int, int], list[int]] = {}
        depth = 1
        while frontier:
            if len(frontier) > limit:
                return None
            below = self._bytes[depth] if depth < len(self.levels) else None
            child_lo, child_hi = self._views[depth - 1][3:5]
            following: list[tuple[int, int, int]] = []
            for node, a, b in frontier:
                if a == dead or b == dead or is_crossing[a] != is_crossing[b]:
                    parted.append((depth, node, a))
                    continue
                if below is None:
                    continue
                first, end = child_lo[node], child_hi[node]
                if end - first > 16:
                    differ = apart.get((a, b))
                    if differ is None:
                        rows = table[a * 256 : a * 256 + 256] != table[b * 256 : b * 256 + 256]
                        differ = apart[a, b] = np.flatnonzero(rows).tolist()
                    if len(differ) < end - first:
                        for byte in differ:
                            child = bisect_left(below, byte, first, end)
                            if child < end and below[child] == byte:
                                following.append(
                                    (child, steps[a * 256 + byte], steps[b * 256 + byte])
                                )
                        continue
                for child in range(first, end):
                    byte = below[child]
                    a2, b2 = steps[a * 256 + byte], steps[b * 256 + byte]
                    if a2 != b2:
                        following.append((child, a2, b2))
            frontier = following
            depth += 1
        return parted

    def node_ranges(self) -> tuple[Ints, Ints]:
        """Per node (in the one numbering, see :meth:`replay`), the first position
        below it and one past the last."""
        return self._lo, self._hi

    def nodes(self, bounds: Boundaries) -> Ints:
        """The entries' nodes in the one numbering (see :meth:`replay`)."""
        return self._first[bounds.col - 1] + bounds.node

    def replay(
        self,
        table: npt.NDArray[np.int32] | Ints,
        state: int,
        weights: npt.NDArray[np.int16],
    ) -> tuple[Ints, npt.NDArray[np.int16]]:
        """Run an automaton over every node from ``state``: per node (in the one
        numbering: index with :attr:`end_nodes` or :meth:`nodes`), the state after its
        prefix and the sum of ``weights`` (per flat transition, like ``table``; int16,
        wrapping) along it. Dead prefixes are carried along (``table`` must map its
        dead state to itself, and hold no -1). In C where the compiled core runs
        (``r7count_replay``: one pass over the nodes, ~1 ms for Qwen2.5's trie), else
        one gather per level (~7 ms). ValueError from the core for a table entry
        outside the table."""
        states = np.empty(self._byte.size, dtype=np.int64)
        sums = np.empty(self._byte.size, dtype=np.int16)
        if native.KERNELS is not None:
            flat, add = (
                np.ascontiguousarray(a, dtype=t)
                for a, t in ((table, np.int32), (weights, np.int16))
            )
            native.KERNELS.r7count_replay(
                flat, state, add, self._parents(), self._byte, states, sums
            )
            return states, sums
        above_state = np.full(1, state, dtype=np.int64)
        above_sum = np.zeros(1, dtype=np.int16)
        for depth, level in enumerate(self.levels):
            parent = level.parent if depth else np.zeros(level.byte.size, dtype=np.int64)
            steps = above_state[parent] * 256 + level.byte
            above_state = table[steps].astype(np.int64)
            above_sum = above_sum[parent] + weights[steps]
            begin, end = self._first[depth], self._first[depth + 1]
            states[begin:end], sums[begin:end] = above_state, above_sum
        return states, sums

    def _parents(self) -> Ints:
        """Per node (one numbering), its parent's (-1 at depth 1); memoised."""
        if self._parent_memo is None:
            first = [np.full(self.levels[0].byte.size, -1, dtype=np.int64)] if self.levels else []
            pairs = zip(self.levels[1:], self._first[:-2].tolist(), strict=True)
            self._parent_memo = _joined(first + [lv.parent.astype(np.int64) + b for lv, b in pairs])
        return self._parent_memo

    def following(self, bounds: Boundaries) -> Following:
        """The tokens of ``bounds`` split by the byte their rest starts with (the
        entries' children in the trie)."""
        return self.following_split(bounds, [0, bounds.size])[0]

    def following_split(self, bounds: Boundaries, edges: list[int]) -> list[Following]:
        """:meth:`following` of each run ``bounds[edges[i]:edges[i + 1]]``, worked out in
        one pass over all of ``bounds`` and cut (views of one set of arrays): a
        structural walk's boundary entries, grouped by the state where they stop, cost
        a dozen vector operations in all rather than a dozen a group (one loop in the
        compiled core, ``Trie.following``, where it is loaded: ~2x less for a wide
        state's ~46 000 entries; its arrays are read-only)."""
        kernels = native.KERNELS
        if kernels is not None:
            found = self._compiled(kernels).following(
                np.ascontiguousarray(bounds.col, dtype=np.int64),
                np.ascontiguousarray(bounds.node, dtype=np.int64),
            )
            byte, lo, hi, col, counts = (np.frombuffer(part, dtype=np.int64) for part in found)
        else:
            nodes = self._first[bounds.col - 1] + bounds.node
            first, last = self._child_lo[nodes], self._child_hi[nodes]
            counts = last - first
            children = ranges(first, last)
            byte, lo, hi = self._byte[children], self._lo[children], self._hi[children]
            col = np.repeat(bounds.col, counts)
        cuts = np.concatenate((_ZERO, counts.cumsum()))[edges].tolist()
        return [
            Following(byte[begin:end], lo[begin:end], hi[begin:end], col[begin:end])
            for begin, end in itertools.pairwise(cuts)
        ]

    def _walk_levels(
        self,
        table: npt.NDArray[np.int32] | Ints,
        dead: int,
        crossing: Bools,
        first: Ints,
        found: _Found,
    ) -> tuple[Ints, Ints]:
        """The first ``_WIDE_LEVELS`` levels in full, one gather each (dead nodes too);
        returns the live nodes of the next level and their states (the deep levels
        hold few nodes: they are followed as a frontier)."""
        inside = np.zeros(self.count, dtype=np.bool_)
        state = first
        for depth, level in enumerate(self.levels[:_WIDE_LEVELS], start=1):
            if depth > 1:
                state = table[state[level.parent] * 256 + level.byte]
            if level.ends.size:
                inside[level.ends] = state[level.ends_node] != dead
            cross = crossing[state].nonzero()[0]
            if cross.size:
                found.boundaries(level, cross, depth)
        found.inside_bits = inside
        if len(self.levels) <= _WIDE_LEVELS:
            return _NONE
        below = self.levels[_WIDE_LEVELS]
        state = table[state[below.parent] * 256 + below.byte]
        alive = (state != dead).nonzero()[0]
        return alive, state[alive]

    def _big_level(
        self,
        depth: int,
        frontier: tuple[Ints, Ints],
        table: npt.NDArray[np.int32] | Ints,
        dead: int,
        crossing: npt.NDArray[np.bool_],
        found: _Found,
        last: bool,
    ) -> tuple[Ints, Ints]:
        """One level, vectorised: record the frontier's tokens, step to its children."""
        nodes, states = frontier
        level = self.levels[depth - 1]
        lo, term = level.lo[nodes], level.term[nodes]
        ended = term.nonzero()[0]
        if ended.size:
            found.in_lo.append(lo[ended])
            found.in_hi.append(lo[ended] + term[ended])
        cross = crossing[states].nonzero()[0]
        if cross.size:
            found.boundaries(level, nodes[cross], depth)
        first, counts = level.child_lo[nodes], level.child_hi[nodes] - level.child_lo[nodes]
        if last or not counts.any():
            return _NONE
        children = ranges(first, first + counts)
        below = self.levels[depth]
        states = table[np.repeat(states * 256, counts) + below.byte[children]]
        alive = states != dead
        return children[alive], states[alive]

    def _small_levels(
        self,
        depth: int,
        frontier: tuple[list[int], list[int]],
        table: npt.NDArray[np.int32] | Ints,
        dead: int,
        crossing: npt.NDArray[np.bool_],
        reads: Callable[[int], list[int]],
        found: _Found,
    ) -> tuple[tuple[list[int], list[int]], int]:
        """Levels in plain Python from ``depth`` on, as long as the frontier stays
        small: the same as :meth:`_big_level`, node by node (deep levels hold a few
        long tokens each: one loop for all of them, not a call per level). Returns the
        frontier (empty, or too big for this) and its depth."""
        steps = memoryview(table)  # type: ignore[arg-type]
        is_crossing = memoryview(crossing)  # type: ignore[arg-type]
        levels = len(self.levels)
        small_in, small_b = found.small_in, found.small_b
        nodes, states = frontier
        while nodes and len(nodes) <= _SMALL:
            lo_of, hi_of, term_of, child_lo, child_hi = self._views[depth - 1]
            below = self._bytes[depth] if depth < levels else None
            next_nodes: list[int] = []
            next_states: list[int] = []
            for node, state in zip(nodes, states, strict=True):
                lo, term = lo_of[node], term_of[node]
                if term:
                    small_in.append((lo, lo + term))
                if (
                    is_crossing[state]
                    and lo + term < hi_of[node]
                    and found.follows(below, child_lo[node], child_hi[node])
                ):
                    small_b.append((lo + term, hi_of[node], depth, node, state))
                if below is None:
                    continue
                first, end = child_lo[node], child_hi[node]
                base = state * 256
                readable = reads(state) if end - first > 16 else None
                if readable is not None and len(readable) < end - first:
                    for byte in readable:
                        child = bisect_left(below, byte, first, end)
                        if child < end and below[child] == byte:
                            next_nodes.append(child)
                            next_states.append(steps[base + byte])
                else:
                    for child in range(first, end):
                        target = steps[base + below[child]]
                        if target != dead:
                            next_nodes.append(child)
                            next_states.append(target)
            nodes, states = next_nodes, next_states
            depth += 1
        return (nodes, states), depth


def _joined(arrays: list[Ints]) -> Ints:
    return np.concatenate(arrays) if arrays else _EMPTY


def _as_list(values: Ints | list[int]) -> list[int]:
    return values if isinstance(values, list) else values.tolist()


_NONE: tuple[Ints, Ints] = (_EMPTY, _EMPTY)


class _Found:
    """What a walk records: ranges of inside positions and boundary entries, from
    vectorised levels (arrays) and small ones (tuples)."""

    def __init__(self, follow: tuple[TokenTrie, Bools] | None = None) -> None:
        # (With the trie and ``follow`` flags: only nodes with a child on a flagged byte
        # are entries; see TokenTrie.walk.)
        self._follow = follow
        self._follow_list = None if follow is None else follow[1].tolist()
        self.in_lo: list[Ints] = []
        self.in_hi: list[Ints] = []
        self.bounds: list[Boundaries] = []
        self.small_in: list[tuple[int, int]] = []
        self.small_b: list[tuple[int, int, int, int, int]] = []  # ..., state at the node
        self.inside_bits: Bools | None = None  # a wide walk's inside positions, as flags

    def boundaries(self, level: _Level, nodes: Ints, depth: int) -> None:
        """``nodes`` at ``depth`` pass a crossing state: their tokens past those equal to
        the prefix (which sort first and have no bytes left)."""
        if self._follow is not None:
            trie, follow = self._follow
            if depth < len(trie.levels):
                below = trie.levels[depth].byte
                first, end = level.child_lo[nodes], level.child_hi[nodes]
                hits = np.concatenate((_ZERO, follow[below[ranges(first, end)]].cumsum()))
                spans = np.concatenate((_ZERO, (end - first).cumsum()))
                nodes = nodes[hits[spans[1:]] > hits[spans[:-1]]]
        rest, hi = level.lo[nodes] + level.term[nodes], level.hi[nodes]
        keep = rest < hi
        if not keep.all():
            rest, hi, nodes = rest[keep], hi[keep], nodes[keep]
        self.bounds.append(Boundaries(rest, hi, np.full(rest.size, depth, np.int64), nodes))

    def follows(self, below: Any, first: int, end: int) -> bool:
        """Whether a node whose children are ``first .. end - 1`` of the next level
        (bytes ``below``; None at the last level) may be an entry (see ``__init__``)."""
        flags = self._follow_list
        if flags is None or below is None:
            return True
        return any(flags[below[child]] for child in range(first, end))

    def result(self) -> TrieWalk:
        bounds = self.bounds
        if self.small_b:
            small = np.array(self.small_b, dtype=np.int64)
            bounds = [*bounds, Boundaries(small[:, 0], small[:, 1], small[:, 2], small[:, 3])]
        joined = Boundaries.join(bounds)
        if joined.size > 1:
            joined = joined.take(np.argsort(joined.lo, kind="stable"))
        bits = self.inside_bits
        if not self.in_lo and bits is None and sum(hi - lo for lo, hi in self.small_in) <= 256:
            # Small levels only, few tokens: expand the ranges in plain Python.
            inside = sorted(p for lo, hi in self.small_in for p in range(lo, hi))
            return TrieWalk(np.array(inside, dtype=np.int64), joined)
        in_lo, in_hi = self.in_lo, self.in_hi
        if self.small_in:
            pairs = np.array(self.small_in, dtype=np.int64)
            in_lo, in_hi = [*in_lo, pairs[:, 0]], [*in_hi, pairs[:, 1]]
        if bits is None:
            return TrieWalk(np.sort(ranges(np.concatenate(in_lo), np.concatenate(in_hi))), joined)
        if in_lo:
            bits[ranges(np.concatenate(in_lo), np.concatenate(in_hi))] = True
        return TrieWalk(bits.nonzero()[0], joined)
