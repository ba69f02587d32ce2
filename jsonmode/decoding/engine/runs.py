"""A walk split by runs of one byte class: the walks of counting states, cheaply.

A state that counts letters (a language tag's ``[a-zA-Z]{2,8}``, say) sends every
letter to one next state, and that one sends every letter to the next, up to where
the count runs out. A plain trie walk from such a state follows every letter token
to its end (~21 000 of them with Qwen2.5, each its own range: ~2 ms), and each count
state needs its own walk. Split by the leading *run* of the class instead:

- a token made of the class only, ``n`` bytes long, is read inside exactly when
  ``n`` steps along the chain stay alive (a vector comparison by token id, from
  per-token run lengths computed once per vocabulary and class);
- a token whose run of ``r`` class bytes ends before it does goes on from the chain's
  ``r``-th state with a byte outside the class: only the trie subtrees below such
  nodes (few: letters followed by ``-``, a quote, a digit) are walked, per ``r``.

Exact when no chain state but the first is crossing (a boundary entry inside the run
would be missed), or when what follows the rule reads no byte of the class (the
entries inside the run are then the parents of run ends on a byte that follows):
:func:`run_walk` returns None otherwise, and for a state with no
big class of ASCII bytes, whose chain does not send a whole class one way, or whose
count has no bound (a loop back).

Cost: per vocabulary and class, one pass over the trie's levels (a few ms, cached);
per state, a few vector operations and one small trie walk per run length. Thread-
safe: pure functions over read-only indexes and a thread-safe cache.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from jsonmode.decoding.engine.entries import Boundaries, ranges
from jsonmode.decoding.engine.facts import Rows, RuleInfo, TokenIndex
from jsonmode.lru import Lru

# A state is walked by runs only when its biggest class (bytes leading to one state)
# has at least this many bytes with tokens below them.
_MIN_CLASS = 16
# A state reading at most this many bytes has its biggest class counted in plain Python
# first (about a quarter of the eight NumPy calls that count it otherwise).
_FEW_READS = 48
# ... and when at most this many subtrees are left to walk (runs that end before their
# token does, in a byte the chain's state reads): a state whose class leaves out common
# letters (a tag's first letter, where ``e`` may begin ``en-GB-oed``) would walk
# thousands, more than a plain walk costs.
_MAX_STARTS = 1024


@dataclass(frozen=True, slots=True)
class _Runs:
    """Per class of bytes: the ids of the tokens made of the class only, shortest first
    (``whole``; those at most ``n`` bytes long before ``whole[cuts[n + 1]]``, ``n`` below
    ``cuts.size - 1``: all of them beyond); per trie depth ``d`` (up to the longest
    prefix in the class, plus one), the nodes whose first ``d - 1`` bytes are in the
    class and whose last byte is not (``nodes[d - 1]``, their last bytes ``bytes_[d - 1]``).
    ``whole_first`` and ``firsts``: the first byte of each token or node listed."""

    whole: Rows
    whole_first: Rows
    cuts: Rows
    nodes: tuple[Rows, ...]
    bytes_: tuple[Rows, ...]
    firsts: tuple[Rows, ...]

    @property
    def nbytes(self) -> int:
        return 2 * int(self.whole.nbytes) + sum(3 * int(n.nbytes) + 96 for n in self.nodes)


_runs_cache: Lru[tuple[str, bytes], _Runs] = Lru(16 << 20)


def _class(text: bytes) -> npt.NDArray[np.bool_]:
    members = np.zeros(256, dtype=np.bool_)
    members[list(text)] = True
    return members


_LOWER = bytes(range(ord("a"), ord("z") + 1))
# The classes of most counted patterns (language tags and country codes count letters),
# their tables made with the vocabulary's (see prime_runs).
_COMMON = (_class(_LOWER + _LOWER.upper()), _class(_LOWER))


def prime_runs(index: TokenIndex) -> None:
    """Make the run tables of the common classes (letters; lower-case letters) for a
    vocabulary, at its set-up: ~5 ms each with Qwen2.5, paid once per process rather
    than in the first mask that counts letters."""
    for members in _COMMON:
        _runs(index, members)


def _runs(index: TokenIndex, members: npt.NDArray[np.bool_]) -> _Runs:
    """The :class:`_Runs` of the class ``members`` (256 flags), cached per vocabulary."""
    key = (index.fingerprint, np.packbits(members).tobytes())
    known = _runs_cache.get(key)
    if known is not None:
        return known
    trie = index.trie
    nodes: list[Rows] = []
    bytes_: list[Rows] = []
    whole: list[Rows] = []  # positions
    # The nodes whose prefix is in the class, a level at a time (their children only
    # are looked at: a small part of the trie's deeper levels).
    clean: Rows | list[int] = np.arange(
        trie.levels[0].byte.size if trie.levels else 0, dtype=np.int64
    )
    for depth, level in enumerate(trie.levels):
        if depth and not len(clean):
            break  # (no longer prefix is in the class: the deeper levels hold none)
        if depth:
            above = trie.levels[depth - 1]
            if len(clean) <= _FEW_NODES:
                # Few prefixes left in the class (the long runs of spaces or letters
                # some tokens hold, up to ~128 levels deep): plain Python, a level
                # costing microseconds where a dozen NumPy calls cost ~0.1 ms.
                small = _few_level(above, level, members, list(clean), nodes, bytes_, whole)
                if small is not None:
                    clean = small
                    continue
            clean = ranges(above.child_lo[clean], above.child_hi[clean])
        assert isinstance(clean, np.ndarray)
        inside = members[level.byte[clean]]
        mixed = clean[~inside]
        nodes.append(mixed)
        bytes_.append(level.byte[mixed])
        clean = clean[inside]
        lo = level.lo[clean]
        whole.append(ranges(lo, lo + level.term[clean]))
    cuts = np.cumsum([0, 0, *(len(ids) for ids in whole)]).astype(np.int64)
    joined = np.concatenate(whole) if whole else np.zeros(0, dtype=np.int64)
    # (A position's first byte: the range of ``offsets`` it falls in; one search for
    # every level's nodes.)
    offsets = index.offsets
    firsts: tuple[Rows, ...] = ()
    if nodes:
        starts = np.concatenate([trie.levels[d].lo[n] for d, n in enumerate(nodes)])
        found = np.searchsorted(offsets, starts, side="right") - 1
        firsts = tuple(np.split(found, np.cumsum([n.size for n in nodes])[:-1]))
    known = _Runs(
        index.ids[joined],
        np.searchsorted(offsets, joined, side="right") - 1,
        cuts,
        tuple(nodes),
        tuple(bytes_),
        firsts,
    )
    _runs_cache.put(key, known, known.nbytes)
    return known


# A state whose class (what the state after its first byte counts) has more than this
# many times the bytes the state itself sends along it is not walked by runs.
_WIDER = 2
# A level's prefixes in the class are looked at in plain Python once at most this many
# are left, with at most _FEW_CHILDREN children in all (see _runs).
_FEW_NODES = 64
_FEW_CHILDREN = 256


def _few_level(
    above: Any,
    level: Any,
    members: npt.NDArray[np.bool_],
    clean: list[int],
    nodes: list[Rows],
    bytes_: list[Rows],
    whole: list[Rows],
) -> list[int] | None:
    """One level of :func:`_runs` below the few ``clean`` nodes of the level ``above``
    (trie levels): appends the level's nodes out of the class, their bytes and the
    positions of the tokens of the class only that end there; returns the nodes in
    the class. Plain Python over the nodes' children; None (nothing appended) when
    they are more than :data:`_FEW_CHILDREN`."""
    spans = [(int(above.child_lo[node]), int(above.child_hi[node])) for node in clean]
    if sum(hi - lo for lo, hi in spans) > _FEW_CHILDREN:
        return None
    children = [child for lo, hi in spans for child in range(lo, hi)]
    byte = level.byte
    inside: list[int] = []
    mixed: list[int] = []
    for child in children:
        (inside if members[byte[child]] else mixed).append(child)
    out = np.array(mixed, dtype=np.int64)
    nodes.append(out)
    bytes_.append(byte[out])
    ends = [
        position
        for node in inside
        for position in range(int(level.lo[node]), int(level.lo[node] + level.term[node]))
    ]
    whole.append(np.array(ends, dtype=np.int64))
    return inside


def _biggest_class(
    flat: npt.NDArray[np.int32], offsets: npt.NDArray[np.int64], state: int, reads: list[int]
) -> int:
    """How many of the bytes ``reads`` (those ``state`` reads) that some token starts
    with lead to the state most of them lead to: the class :func:`run_walk` would split
    by (its size, counted as there with arrays). Plain Python over the few bytes."""
    # (Memoryviews: indexing one gives a plain int, without NumPy's per-item cost.)
    row = memoryview(flat[state * 256 : state * 256 + 256])  # type: ignore[arg-type]
    starts = memoryview(offsets)  # type: ignore[arg-type]
    counts: dict[int, int] = {}
    for byte in reads:
        if starts[byte] != starts[byte + 1]:
            target = row[byte]
            counts[target] = counts.get(target, 0) + 1
    return max(counts.values(), default=0)


def run_walk(
    index: TokenIndex,
    size: int,
    info: RuleInfo,
    state: int,
    follow: npt.NDArray[np.bool_] | None = None,
) -> tuple[npt.NDArray[np.bool_], Boundaries] | None:
    """The walk of ``state`` split by runs of its biggest byte class (see the module
    docstring): flags over token ids for the tokens inside, and the boundary entries
    sorted by position (equal to a plain trie walk's, with ``follow`` as
    ``TokenTrie.walk``'s). None where the split does not apply or would not pay.

    With ``follow`` flags that share no byte with the class, a chain may cross inside
    its run (a free-text message that may end after any character): a node there is an
    entry only with a child on a flagged byte, so outside the class, and those are the
    parents of the run ends on such a byte, listed here from the run tables."""
    reads = info.reads(state)
    if len(reads) < _MIN_CLASS:
        return None  # (too few bytes read for a class: the test below, without arrays)
    flat, offsets = info.flat, index.offsets
    if len(reads) <= _FEW_READS and _biggest_class(flat, offsets, state, reads) < _MIN_CLASS:
        return None  # (the tests below in plain Python: a narrow state's first walk)
    row = flat[state * 256 : state * 256 + 256]
    has_tokens = offsets[1:] > offsets[:-1]
    live = row[(row >= 0) & has_tokens]
    if live.size < _MIN_CLASS:
        return None
    target = int(np.bincount(live).argmax())
    firsts = row == target
    if int(np.count_nonzero(firsts & has_tokens)) < _MIN_CLASS:
        return None
    trie, dead = index.trie, info.crossing.size
    table, crossing = info.dead()
    if target == state:
        return None  # (a loop, not a count)
    # The class: what the state after the first byte sends on as one (the first bytes
    # among it, and more: a tag's first letter leaves out ``e``, which may begin
    # ``en-GB-oed``, but its second takes every letter alike).
    after = table[target * 256 : target * 256 + 256]
    onward = after[firsts]
    if onward[0] < 0 or (onward != onward[0]).any():
        return None
    members = after == onward[0]
    # (A boundary inside the run is found from the run ends only when what follows the
    # rule reads no byte of the class.)
    crosses = follow is not None and not (follow & members).any()
    if crossing[target] and not crosses:
        return None  # (a boundary after the first byte)
    if (firsts & ~members).any() or members[128:].any():
        # (Not a class of ASCII bytes: the continuation bytes of a UTF-8 character, whose
        # states' walks are cheap, shared by every string and not worth a class table.)
        return None
    if int(np.count_nonzero(members & has_tokens)) > _WIDER * int(
        np.count_nonzero(firsts & has_tokens)
    ):
        # (The state reads a few of the bytes the chain counts: an escape's last hex
        # digit before a string's characters. Its plain walk is cheap, where the class's
        # table, a wide one, costs ~10 ms; a state that counts the class itself, as a
        # pattern's ``[ -~]{0,100}`` does, reads it whole.)
        return None
    # First bytes of the class that the state does not send on with it: their tokens
    # are walked whole from the first byte (``odd``), and left out of the runs below.
    odd = members & ~firsts
    levels = len(trie.levels)
    # The chain: chain[k] is the state after k class bytes (dead once any leaves it).
    chain = [state, target]
    cols = np.flatnonzero(members)
    seen: dict[int, int] = {}
    while len(chain) <= levels:
        here = chain[-1]
        if here == dead:
            break
        following = seen.get(here)
        if following is None:
            nexts = table[here * 256 + cols]
            if (nexts != nexts[0]).any():
                return None  # (the class does not go one way from here)
            following = seen[here] = int(nexts[0])
            if following != dead and crossing[following] and not crosses:
                return None  # (a boundary inside a run)
        chain.append(following)
    chain.extend([dead] * (levels + 1 - len(chain)))
    if dead not in chain:
        return None  # (no bound: a loop back, as ``\\u`` and four hex digits make)
    runs = _runs(index, members)
    # Tokens of the class only: inside while the chain is alive at their length.
    longest = chain.index(dead) - 1
    whole = runs.cuts[min(longest + 1, runs.cuts.size - 1)]
    ids = runs.whole[:whole]
    if odd.any():
        ids = ids[~odd[runs.whole_first[:whole]]]
    flags = np.zeros(size, dtype=np.bool_)
    flags[ids] = True
    starts: list[tuple[int, Rows, Rows]] = []
    total = 0
    for depth in range(1, longest + 2):
        nodes = runs.nodes[depth - 1] if depth <= len(runs.nodes) else None
        if nodes is None:
            break
        steps = runs.bytes_[depth - 1]
        if depth == 1 and odd.any():
            more = np.flatnonzero(odd & (trie.first_nodes >= 0))
            nodes = np.concatenate([nodes, trie.first_nodes[more]])
            steps = np.concatenate([steps, more])
        elif odd.any():
            kept = ~odd[runs.firsts[depth - 1]]
            nodes, steps = nodes[kept], steps[kept]
        states = table[chain[depth - 1] * 256 + steps].astype(np.int64)
        going = states != dead
        count = int(np.count_nonzero(going))
        if count:
            order = np.argsort(nodes[going], kind="stable")
            starts.append((depth, nodes[going][order], states[going][order]))
            total += count
    if total > _MAX_STARTS:
        return None  # (many runs end in a byte that goes on: a plain walk costs less)
    found: list[Boundaries] = []
    for depth, nodes, states in starts:
        walked = trie.walk(
            table, dead, crossing, nodes, states, info.reads, depth=depth, follow=follow
        )
        flags[index.ids[walked.inside]] = True
        if walked.bounds.size:
            found.append(walked.bounds)
    if crosses:
        assert follow is not None
        found.extend(_run_end_entries(index, runs, chain, crossing, follow, odd, longest))
    bounds = Boundaries.join(found)
    if bounds.size > 1:
        bounds = bounds.take(np.lexsort((bounds.col, bounds.lo)))
    return flags, bounds


def _run_end_entries(
    index: TokenIndex,
    runs: _Runs,
    chain: list[int],
    crossing: npt.NDArray[np.bool_],
    follow: npt.NDArray[np.bool_],
    odd: npt.NDArray[np.bool_],
    longest: int,
) -> list[Boundaries]:
    """The boundary entries inside the runs (see :func:`run_walk`): each node of ``d``
    class bytes (``d >= 1``, the chain alive and crossing there) with a child on a byte
    ``follow`` flags, that is, the parent of such a run end (a token whose first byte is
    ``odd`` is walked whole, its entries found there)."""
    levels = index.trie.levels
    found: list[Boundaries] = []
    for depth in range(2, min(longest + 1, len(runs.nodes)) + 1):
        here = chain[depth - 1]
        if not crossing[here]:
            continue
        ends = runs.nodes[depth - 1]
        keep = follow[runs.bytes_[depth - 1]]
        if odd.any():
            keep &= ~odd[runs.firsts[depth - 1]]
        if not keep.any():
            continue
        parents = np.unique(levels[depth - 1].parent[ends[keep]])
        above = levels[depth - 2]
        rest = above.lo[parents] + above.term[parents]
        col = np.full(parents.size, depth - 1, dtype=np.int64)
        found.append(Boundaries(rest, above.hi[parents], col, parents))
    return found
