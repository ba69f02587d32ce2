"""Stage 2: a walk assembled from per-first-byte segments, shared process-wide.

The tokens starting with byte ``b`` fare, from a state, as the state after ``b`` makes
them: a segment is their fate (inside the rule, or boundary entries), keyed
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

from typing import Any

import numpy as np

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
# that state) and the byte, held packed as plain tuples: the positions inside (int32,
# sorted), then the boundary entries' fields (Boundaries.pack).
segment_cache: Lru[tuple[str, bytes, int, int], tuple[Any, ...]] = Lru(64 << 20)


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

    Cost: per live first byte a key and a cache lookup; the missing segments one trie
    walk, cut by first byte and cached in one go (their packed tuples, no object per
    segment); a state none of whose segments was cached is answered by that walk as
    it is (the segments, in byte order, are that walk cut up).
    """
    flat, hashes = info.flat, info.hashes
    row = flat[state * 256 : state * 256 + 256]
    fingerprint, offsets = index.fingerprint, index.offsets
    # The bytes read that some token starts with, their targets and keys, vectorised
    # (one array step each, not a numpy scalar per byte); in ascending byte order.
    live = ((row >= 0) & (offsets[1:] != offsets[:-1])).nonzero()[0]
    targets = row[live]
    firsts, afters = live.tolist(), targets.tolist()
    if hashes is None:
        signature = info.signature
        keys = [
            (fingerprint, signature, after, byte)
            for byte, after in zip(firsts, afters, strict=True)
        ]
    elif isinstance(hashes, np.ndarray):
        tags = hashes[0, targets].tolist()
        keys = [(fingerprint, b"", tag, byte) for byte, tag in zip(firsts, tags, strict=True)]
    else:  # (a key lexeme's, worked out per state)
        keys = [
            (fingerprint, b"", hashes[0, after], byte)
            for byte, after in zip(firsts, afters, strict=True)
        ]
    get = segment_cache.get
    packed = [get(key) for key in keys]
    missing = [k for k, segment in enumerate(packed) if segment is None]
    if not missing:
        return _joined(index, packed)
    whole = len(missing) == len(keys)
    found = _trie_walk(index, info, [(firsts[k], afters[k]) for k in missing])
    if whole and len(missing) > _UNSPLIT:
        # A state unlike any seen (a count state near its bound, say): its segments
        # would rarely serve again, so the walk is kept whole, not split and cached.
        return index.ids[found.inside], found.bounds
    cut = _split(index, found, [firsts[k] for k in missing])
    segment_cache.put_all(
        [
            (keys[k], segment, _packed_nbytes(segment))
            for k, segment in zip(missing, cut, strict=True)
        ]
    )
    if whole:  # (the segments joined in byte order: the walk itself)
        return index.ids[found.inside], found.bounds
    for k, segment in zip(missing, cut, strict=True):
        packed[k] = segment
    return _joined(index, packed)


def _joined(index: TokenIndex, packed: list[Any]) -> tuple[Rows, Boundaries]:
    """Packed segments (in byte order) as one walk: the ids inside, the entries."""
    inside = [segment[0] for segment in packed]
    bounds = [Boundaries(*segment[1:]) for segment in packed if segment[1].size]
    ids = index.ids[np.concatenate(inside)] if inside else np.zeros(0, dtype=np.int64)
    return ids, Boundaries.join(bounds)


def _packed_nbytes(packed: tuple[Any, ...]) -> int:
    """A packed segment's size in bytes, for the cache's budget (its arrays and ~96 bytes
    of tuple; the four boundary fields are alike in size)."""
    return 96 + int(packed[0].nbytes) + 4 * int(packed[1].nbytes)


def _trie_walk(index: TokenIndex, info: RuleInfo, missing: list[tuple[int, int]]) -> TrieWalk:
    """One walk of the token trie for ``(first byte, state after it)`` pairs,
    following live prefixes only (every node of the first levels when wide)."""
    trie = index.trie
    first_node, first_size = trie.first_node_list, trie.first_sizes
    nodes = [first_node[byte] for byte, _ in missing]
    # (The tokens below a first byte's node: those starting with the byte.)
    wide = sum(first_size[node] for node in nodes) > _WIDE
    table, crossing = info.dead()
    return trie.walk(
        table,
        info.crossing.size,
        crossing,
        np.array(nodes, dtype=np.int64),
        np.array([target for _, target in missing], dtype=np.int64),
        info.reads,
        wide=wide,
    )


def _split(index: TokenIndex, found: TrieWalk, firsts: list[int]) -> list[tuple[Any, ...]]:
    """A trie walk from the first bytes ``firsts`` (ascending) cut into their segments,
    packed (see ``segment_cache``): views of the walk's arrays, no copy. (Every
    position and entry of the walk lies below one of those bytes: the segments
    partition it, each ending where the next byte's tokens begin.)"""
    inside = found.inside.astype(np.int32)
    bounds = found.bounds
    if len(firsts) == 1:
        return [(inside, *bounds.pack())]
    ends = index.offsets[np.array(firsts) + 1]
    cut_in = np.searchsorted(found.inside, ends).tolist()
    in_spans = zip([0, *cut_in[:-1]], cut_in, strict=True)
    if not bounds.size:  # (the common case: every segment's entries are the same none)
        rest = bounds.pack()
        return [(inside[lo:hi], *rest) for lo, hi in in_spans]
    cut_b = np.searchsorted(bounds.lo, ends).tolist()
    b_lo, b_hi, b_col, b_node = bounds.pack()
    return [
        (inside[lo:hi], b_lo[blo:bhi], b_hi[blo:bhi], b_col[blo:bhi], b_node[blo:bhi])
        for (lo, hi), (blo, bhi) in zip(
            in_spans, zip([0, *cut_b[:-1]], cut_b, strict=True), strict=True
        )
    ]
