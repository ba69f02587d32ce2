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
import numpy.typing as npt

from jsonmode import native
from jsonmode.decoding.engine.entries import NO_BOUNDARIES, Boundaries, TrieWalk
from jsonmode.decoding.engine.facts import Follow, Rows, RuleInfo, TokenIndex
from jsonmode.lru import Lru

# Missing segments with more live tokens than this (see _wide) are walked wide: every
# node of the first levels, in preorder (r4gram_wide.c), their inside tokens as flags,
# rather than by following the live frontier level by level. (Replaying the 274 trie
# walks of the three grammar sets and 60 MaskBench schemas both ways: under ~15 000
# live tokens the frontier costs ~0.02-0.08 ms where the wide walk costs ~0.1; from
# ~27 000 up it costs 3-26 ms where the wide walk costs 0.5-9, its inside ranges
# sorted and cut at the end.)
_WIDE = 20_000
# A state none of whose segments is cached, with more than this many first bytes, is
# walked whole: its segments are not split off and cached (they rarely serve again).
_UNSPLIT = 32
# Segments by vocabulary, the state-after-the-byte's hash (or the rule's content and
# that state) and the byte, held packed as a pair of bytes objects: the positions
# inside (int32, ascending), then the boundary entries as int64 rows ``lo, hi, col,
# node`` (sorted by ``lo``). (Bytes, not arrays: the compiled cut makes them directly,
# and segments join with one ``bytes.join``.)
Segment = tuple[bytes, bytes]
segment_cache: Lru[tuple[str, bytes, int, int], Segment] = Lru(64 << 20)


def assemble(
    index: TokenIndex, info: RuleInfo, state: int, follow: Follow | None = None
) -> tuple[Rows, Boundaries]:
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
    walk, cut by first byte and cached in one go (a pair of bytes per segment); a state
    none of whose segments was cached is answered by that walk as it is (the segments,
    in byte order, are that walk cut up). Where the compiled core runs, the keys are
    made in one call and a walk that is not wide is walked and cut in another (~10 us
    for a chess state, where the NumPy glue around the walk took ~60 us).

    ``follow``: a lexeme's :class:`Follow`, whose walks keep only the boundary entries
    a byte it flags can follow (see ``TokenTrie.walk``); its segments are keyed by it
    too.
    """
    firsts, afters, keys = _live_keys(index, info, state, b"" if follow is None else follow.tag)
    get = segment_cache.get
    packed = [get(key) for key in keys]
    missing = [k for k, segment in enumerate(packed) if segment is None]
    if not missing:
        return _joined(index, packed)
    whole = len(missing) == len(keys)
    # (A state unlike any seen, reading many first bytes (a count state near its bound,
    # say): its segments would rarely serve again, so the walk is kept whole, not cut
    # and cached.)
    kept_whole = whole and len(missing) > _UNSPLIT
    found, cut = _walk_cut(
        index,
        info,
        [(firsts[k], afters[k]) for k in missing],
        None if kept_whole else [firsts[k] for k in missing],
        None if follow is None else follow.flags,
    )
    if cut is None:
        return index.ids[found.inside], found.bounds
    segment_cache.put_all(
        [
            (keys[k], segment, 96 + len(segment[0]) + len(segment[1]))
            for k, segment in zip(missing, cut, strict=True)
        ]
    )
    if whole:  # (the segments joined in byte order: the walk itself)
        return index.ids[found.inside], found.bounds
    for k, segment in zip(missing, cut, strict=True):
        packed[k] = segment
    return _joined(index, packed)


def _live_keys(
    index: TokenIndex, info: RuleInfo, state: int, tag: bytes = b""
) -> tuple[list[int], list[int], list[tuple[str, bytes, int, int]]]:
    """The bytes ``state`` reads that some token starts with (ascending), the state after
    each, and each one's segment key (its bytes end in ``tag``: see :class:`Follow`):
    by the compiled core (``r6narrow_live_keys``) where it runs and the state hashes are
    an array (or absent), else vectorised here (the reference: one array step each, not
    a NumPy scalar per byte)."""
    flat, hashes = info.flat, info.hashes
    fingerprint = index.fingerprint
    kernels = native.KERNELS
    # (The kernel reads C-contiguous int32 rows and uint64 hashes, what Rules makes.)
    if (
        kernels is not None
        and flat.dtype == np.int32
        and flat.flags.c_contiguous
        and (
            hashes is None
            or (
                isinstance(hashes, np.ndarray)
                and hashes.dtype == np.uint64
                and hashes.flags.c_contiguous
            )
        )
    ):
        found: tuple[list[int], list[int], list[tuple[str, bytes, int, int]]] = (
            kernels.r6narrow_live_keys(
                flat,
                state,
                index.offsets,
                None if hashes is None else hashes[0],
                fingerprint,
                (info.signature if hashes is None else b"") + tag,
            )
        )
        return found
    row = flat[state * 256 : state * 256 + 256]
    offsets = index.offsets
    live = ((row >= 0) & (offsets[1:] != offsets[:-1])).nonzero()[0]
    targets = row[live]
    firsts, afters = live.tolist(), targets.tolist()
    if hashes is None:
        signature = info.signature + tag
        keys = [
            (fingerprint, signature, after, byte)
            for byte, after in zip(firsts, afters, strict=True)
        ]
    elif isinstance(hashes, np.ndarray):
        tags = hashes[0, targets].tolist()
        keys = [(fingerprint, tag, hashed, byte) for byte, hashed in zip(firsts, tags, strict=True)]
    else:  # (a key lexeme's, worked out per state)
        keys = [
            (fingerprint, tag, hashes[0, after], byte)
            for byte, after in zip(firsts, afters, strict=True)
        ]
    return firsts, afters, keys


def _joined(index: TokenIndex, packed: list[Any]) -> tuple[Rows, Boundaries]:
    """Packed segments (in byte order) as one walk: the ids inside, the entries (the
    segments partition the positions in byte order: joined, they stay sorted)."""
    inside = b"".join([segment[0] for segment in packed])
    ids = index.ids[np.frombuffer(inside, dtype=np.int32)]
    return ids, _entries(b"".join([segment[1] for segment in packed]))


def _entries(rows: bytes) -> Boundaries:
    """Boundary entries packed as int64 rows ``lo, hi, col, node`` (see ``segment_cache``)
    as :class:`Boundaries` (contiguous fields)."""
    if not rows:
        return NO_BOUNDARIES
    lo, hi, col, node = np.frombuffer(rows, dtype=np.int64).reshape(-1, 4).T.copy()
    return Boundaries(lo, hi, col, node)


def _walk_cut(
    index: TokenIndex,
    info: RuleInfo,
    missing: list[tuple[int, int]],
    firsts: list[int] | None,
    follow: npt.NDArray[np.bool_] | None = None,
) -> tuple[TrieWalk, list[Segment] | tuple[Segment, ...] | None]:
    """The trie walk of the ``(first byte, state after it)`` pairs ``missing`` and, unless
    ``firsts`` (their bytes, ascending) is None, its cut into their packed segments: in
    one compiled call (``TokenTrie.walk_cut``) for a walk that is not wide, else (or
    where the compiled core is off) :func:`_trie_walk` then :func:`_split`, the
    reference (the same walk, positions and bytes)."""
    trie = index.trie
    wide = _wide(index, info, missing)
    if not wide:
        table, crossing = info.dead()
        found = trie.walk_cut(
            table,
            info.crossing.size,
            crossing,
            [byte for byte, _ in missing],
            [target for _, target in missing],
            index.offsets,
            firsts is not None,
            follow,
        )
        if found is not None:
            inside, rows, cut = found
            return TrieWalk(np.frombuffer(inside, dtype=np.int32), _entries(rows)), cut
    walked = _trie_walk(index, info, missing, wide, follow)
    return walked, None if firsts is None else _split(index, walked, firsts)


def _wide(index: TokenIndex, info: RuleInfo, missing: list[tuple[int, int]]) -> bool:
    """Whether the walk of ``missing`` is wide: more than ``_WIDE`` tokens lie below its
    first bytes and below the second bytes their states read (a state after a space
    that reads a few letters is narrow, though ~50 000 tokens start with a space)."""
    trie = index.trie
    first_node, first_size = trie.first_node_list, trie.first_sizes
    # (The tokens below a first byte's node: those starting with the byte.)
    if sum(first_size[first_node[byte]] for byte, _ in missing) <= _WIDE:
        return False
    table, _ = info.dead()
    return trie.live_below(table, info.crossing.size, missing) > _WIDE


def _trie_walk(
    index: TokenIndex,
    info: RuleInfo,
    missing: list[tuple[int, int]],
    wide: bool | None = None,
    follow: npt.NDArray[np.bool_] | None = None,
) -> TrieWalk:
    """One walk of the token trie for ``(first byte, state after it)`` pairs,
    following live prefixes only (every node of the first levels when ``wide``: by
    default, as :func:`_wide` says); ``follow``: as ``TokenTrie.walk``'s."""
    trie = index.trie
    first_node = trie.first_node_list
    nodes = [first_node[byte] for byte, _ in missing]
    if wide is None:
        wide = _wide(index, info, missing)
    table, crossing = info.dead()
    return trie.walk(
        table,
        info.crossing.size,
        crossing,
        np.array(nodes, dtype=np.int64),
        np.array([target for _, target in missing], dtype=np.int64),
        info.reads,
        wide=wide,
        follow=follow,
    )


def _split(index: TokenIndex, found: TrieWalk, firsts: list[int]) -> list[Segment]:
    """A trie walk from the first bytes ``firsts`` (ascending) cut into their segments,
    packed (see ``segment_cache``). (Every position and entry of the walk lies below one
    of those bytes: the segments partition it, each ending where the next byte's tokens
    begin.)"""
    inside = found.inside.astype(np.int32)
    bounds = found.bounds
    rows = np.stack(bounds.pack(), axis=1).astype(np.int64) if bounds.size else None
    if len(firsts) == 1:
        return [(inside.tobytes(), b"" if rows is None else rows.tobytes())]
    ends = index.offsets[np.array(firsts) + 1]
    cut_in = np.searchsorted(found.inside, ends).tolist()
    in_spans = zip([0, *cut_in[:-1]], cut_in, strict=True)
    if rows is None:  # (the common case: no segment has entries)
        return [(inside[lo:hi].tobytes(), b"") for lo, hi in in_spans]
    cut_b = np.searchsorted(bounds.lo, ends).tolist()
    return [
        (inside[lo:hi].tobytes(), rows[blo:bhi].tobytes())
        for (lo, hi), (blo, bhi) in zip(
            in_spans, zip([0, *cut_b[:-1]], cut_b, strict=True), strict=True
        )
    ]
