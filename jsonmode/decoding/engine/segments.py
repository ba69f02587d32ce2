"""Stage 2: a walk assembled from per-first-byte segments, shared process-wide.

The tokens starting with byte ``b`` fare, from a state, as the state after ``b`` makes
them: a :class:`_Segment` is their fate (inside the rule, or boundary entries), keyed
by that state's bounded-depth hash (:mod:`~jsonmode.decoding.engine.state`), so every
state, rule and schema that acts alike on the next bytes shares it. A walk is its
state's cached segments plus the missing ones, computed together in one walk of the
token trie (:mod:`~jsonmode.decoding.engine.trie`) along live prefixes only.

Cost: a cached segment costs a lookup; missing ones one trie walk for all of them (up
to ~10 ms for a state that reads most bytes, with Qwen2.5's vocabulary; far less for
a narrow one).
Segments live in a process-wide byte-bounded cache (``segment_cache``, 64 MiB by
default, see ``configure_caches``). Thread-safe: pure functions over shared read-only
indexes, and a thread-safe cache.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from jsonmode.decoding.engine.facts import Rows, RuleInfo, TokenIndex
from jsonmode.decoding.engine.trie import Boundaries, TrieWalk
from jsonmode.lru import Lru

# Missing segments with more tokens than this are walked level by level in full
# (one gather per level) rather than by following the live frontier. (Replaying the
# benchmark's 417 trie walks: 40k or 20k tokens take ~14 % less time than 100k, 10k
# ~28 % more: the full levels cost the same whatever is live, about what following
# a frontier over a quarter of the vocabulary costs.)
_WIDE = 40_000
# A state none of whose segments is cached, with more than this many first bytes, is
# walked whole: its segments are not split off and cached (they rarely serve again).
_UNSPLIT = 32
# Segments by vocabulary, the state-after-the-byte's hash (or the rule's content and
# that state) and the byte, held as plain tuples (see _Segment.pack).
segment_cache: Lru[tuple[str, bytes, int, int], tuple[Any, ...]] = Lru(64 << 20)


@dataclass(frozen=True, slots=True)
class _Segment:
    """The fate of the tokens starting with one byte, given the state after it.

    ``inside``: the positions of the tokens read entirely within the rule, sorted.
    ``bounds``: the tokens that pass a point where the rule could call or return.
    """

    inside: npt.NDArray[np.int32]
    bounds: Boundaries

    @property
    def nbytes(self) -> int:
        return 96 + self.inside.nbytes + self.bounds.nbytes

    def pack(self) -> tuple[object, ...]:
        return self.inside, *self.bounds.pack()

    @staticmethod
    def unpack(packed: tuple[Any, ...]) -> _Segment:
        return _Segment(packed[0], Boundaries(*packed[1:]))


def assemble(index: TokenIndex, info: RuleInfo, state: int) -> tuple[Rows, Boundaries]:
    """Assemble a walk from per-first-byte segments, computing the missing ones: the
    ids of the tokens inside and the boundary entries (sorted by position).

    The fate of a token depends only on its bytes and on what the automaton does
    from the state after its first byte, up to the longest token: segments are
    keyed by that state's bounded-depth hash (see ``state.state_hashes``), so they
    are shared by every state, rule and schema that behaves alike on the next
    bytes (a plain string body, the states of a key that left the declared names,
    a long ``maxLength`` string far from its bound, ...). Where a boundary token
    stops is recomputed in this rule's own states.
    """
    flat, hashes = info.flat, info.hashes
    row = flat[state * 256 : state * 256 + 256]
    fingerprint, offsets = index.fingerprint, index.offsets
    segments: list[tuple[int, int, _Segment]] = []
    missing: list[tuple[int, int]] = []
    keys: dict[int, tuple[str, bytes, int, int]] = {}
    # The bytes read that some token starts with, their targets and keys, vectorised
    # (one array step each, not a numpy scalar per byte).
    live = ((row >= 0) & (offsets[1:] != offsets[:-1])).nonzero()[0]
    targets = row[live]
    signature = info.signature
    if hashes is None:
        tags = [(signature, target) for target in targets.tolist()]
    elif isinstance(hashes, np.ndarray):
        tags = [(b"", tag) for tag in hashes[0, targets].tolist()]
    else:  # (a key lexeme's, worked out per state)
        tags = [(b"", hashes[0, target]) for target in targets.tolist()]
    get = segment_cache.get
    for byte, target, (content, tag) in zip(live.tolist(), targets.tolist(), tags, strict=True):
        key = keys[byte] = (fingerprint, content, tag, byte)
        packed = get(key)
        if packed is None:
            missing.append((byte, target))
        else:
            segments.append((byte, target, _Segment.unpack(packed)))
    if len(missing) > _UNSPLIT and not segments:
        # A state unlike any seen (a count state near its bound, say): its segments
        # would rarely serve again, so the walk is kept whole, not split and cached.
        found = _trie_walk(index, info, missing)
        return index.ids[found.inside], found.bounds
    if missing:
        for (byte, target), segment in zip(
            missing, _compute_segments(index, info, missing), strict=True
        ):
            segment_cache.put(keys[byte], segment.pack(), segment.nbytes)
            segments.append((byte, target, segment))
    inside: list[npt.NDArray[np.int32]] = []
    bounds: list[Boundaries] = []
    for _, _, segment in sorted(segments, key=lambda item: item[0]):
        inside.append(segment.inside)
        if segment.bounds.size:
            bounds.append(segment.bounds)
    ids = index.ids[np.concatenate(inside)] if inside else np.zeros(0, dtype=np.int64)
    return ids, Boundaries.join(bounds)


def _trie_walk(index: TokenIndex, info: RuleInfo, missing: list[tuple[int, int]]) -> TrieWalk:
    """One walk of the token trie for ``(first byte, state after it)`` pairs,
    following live prefixes only (every node of the first levels when wide)."""
    trie = index.trie
    firsts = np.array([byte for byte, _ in missing], dtype=np.int64)
    nodes = trie.first_nodes[firsts]
    states = np.array([target for _, target in missing], dtype=np.int64)
    offsets = index.offsets
    wide = int((offsets[firsts + 1] - offsets[firsts]).sum()) > _WIDE
    dead = info.crossing.size
    table, crossing = info.dead()
    return trie.walk(table, dead, crossing, nodes, states, info.reads, wide=wide)


def _compute_segments(
    index: TokenIndex, info: RuleInfo, missing: list[tuple[int, int]]
) -> list[_Segment]:
    """The segments of ``(first byte, state after it)`` pairs, from one trie walk."""
    found = _trie_walk(index, info, missing)
    offsets = index.offsets
    if len(missing) == 1:
        return [_Segment(found.inside.astype(np.int32), found.bounds)]
    firsts = np.array([b for b, _ in missing])
    spans = np.stack((offsets[firsts], offsets[firsts + 1]), axis=1)
    cut_in = np.searchsorted(found.inside, spans).tolist()
    inside = found.inside.astype(np.int32)
    bounds = found.bounds
    if not bounds.size:  # (the common case: every segment's entries are the same none)
        return [_Segment(inside[lo:hi], bounds) for lo, hi in cut_in]
    cut_b = np.searchsorted(bounds.lo, spans).tolist()
    return [
        _Segment(inside[lo:hi], bounds.take(slice(b_lo, b_hi)))
        for (lo, hi), (b_lo, b_hi) in zip(cut_in, cut_b, strict=True)
    ]
