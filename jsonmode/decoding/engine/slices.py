"""Stage 2 (beside segments): the clean slice, tokens a string-like state takes whole.

Most of a vocabulary is *clean* text: tokens whose bytes are complete UTF-8
characters other than ``"``, ``\\``, DEL and the control characters U+0000..U+001F
(Qwen2.5: 146 705 of 151 665 ids; Llama-3: 122 892 of 128 256). A state of a
string-like lexeme (the body of a plain string, of an unanchored ``pattern`` still
searching, of an extra key that must not spell a declared name) often reads every clean
text and never dies or reaches a crossing state on one: then every clean token is
inside from it, and only the others (~5 000 in Qwen2.5, under ~12 000 of its 333 000
trie prefixes) need walking. Such a state's walk is those two parts joined; it equals
the full walk token for token, so the walk caches keep one meaning.

DEL is not clean: it is walked, as a quote or a backslash is. String grammars differ on
it: JSON allows it raw, where llama.cpp's JSON grammars (``[^"\\\x7f\x00-\x1f]``) do
not, and a slice that held it would leave their string bodies walked in full (~2.5 ms a
first walk, ~30 us sliced).

:func:`clean_slice` (per vocabulary) holds the clean tokens as flags over ids and, per
trie node, whether any token below it is not clean (the nodes a pruned walk enters).
:func:`is_safe` says whether a state reads every clean text: a fixed point over the
product of the automaton with the acceptor of clean UTF-8 text (nine states), run until
it settles or for as many steps as the longest token has bytes (a clean text longer
than any token cannot matter), over the states clean text reaches from that state. Any
rule's state may be safe, a structural rule's string body too (``"\"" char* "\"" ws``
with ``ws`` a rule).

Cost: the slice, ~5 ms once per vocabulary and process (one gather per trie level);
the safe states, one pass of ~470 gathers per state of the region per step until the
fixed point, once per region (memoised per automaton in its
:class:`~jsonmode.decoding.engine.facts.RuleInfo`; regions over ``_MAX_STATES`` states
are not tried); a sliced walk, a trie walk over the nodes above unclean tokens (~1/30
of a full one) and a copy of the slice's flags.
Thread-safe: memo writes are idempotent (equal values whoever computes them).
"""

from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from jsonmode.decoding.engine.entries import Boundaries
from jsonmode.decoding.engine.facts import RuleInfo, TokenIndex
from jsonmode.decoding.engine.trie import TokenTrie
from jsonmode.lru import Lru

__all__ = ["CleanSlice", "clean_slice", "is_safe", "sliced_walk"]

Bools = npt.NDArray[np.bool_]
Ints = npt.NDArray[np.int64]

# The acceptor of clean UTF-8 text, byte by byte: state 0 between characters, 1-3 a
# character with that many continuation bytes to go, 5-8 after the lead bytes E0, ED,
# F0, F4 (whose next byte is narrower), 4 dead (absorbing).
_BETWEEN, _DEAD = 0, 4
_ACCEPTOR = np.full((9, 256), _DEAD, dtype=np.int64)
_ACCEPTOR[0, [b for b in range(0x20, 0x7F) if b not in (0x22, 0x5C)]] = 0
_ACCEPTOR[0, 0xC2:0xE0] = 1
_ACCEPTOR[0, 0xE0] = 5
_ACCEPTOR[0, 0xE1:0xED] = 2
_ACCEPTOR[0, 0xED] = 6
_ACCEPTOR[0, 0xEE:0xF0] = 2
_ACCEPTOR[0, 0xF0] = 7
_ACCEPTOR[0, 0xF1:0xF4] = 3
_ACCEPTOR[0, 0xF4] = 8
_ACCEPTOR[1, 0x80:0xC0] = 0
_ACCEPTOR[2, 0x80:0xC0] = 1
_ACCEPTOR[3, 0x80:0xC0] = 2
_ACCEPTOR[5, 0xA0:0xC0] = 1
_ACCEPTOR[6, 0x80:0xA0] = 1
_ACCEPTOR[7, 0x90:0xC0] = 2
_ACCEPTOR[8, 0x80:0x90] = 2
# The clean one-byte characters (each a clean text: a safe state reads every one).
_ONE_BYTE = np.flatnonzero(_ACCEPTOR[_BETWEEN] == _BETWEEN)
# Where the acceptor fails on a quote, a backslash or DEL between characters (a token's
# rest is then walked), rather than on a control or non-UTF-8 byte (``_DEAD``):
# absorbing.
_QUOTED = 9
_WALKED = [0x22, 0x5C, 0x7F]
_CLASSES = np.full((10, 256), _DEAD, dtype=np.int64)
_CLASSES[:9] = _ACCEPTOR
_CLASSES[0, _WALKED] = _QUOTED
_CLASSES[_QUOTED] = _QUOTED
_LIVE = [u for u in range(9) if u != _DEAD]
# Per live acceptor state: the bytes it reads and the acceptor state after each.
_STEPS = [
    (cols, _ACCEPTOR[u, cols]) for u in _LIVE for cols in [np.flatnonzero(_ACCEPTOR[u] != _DEAD)]
]
# The bytes some clean text reads (what a safe state's region is closed under).
_CLEAN_BYTES = np.unique(np.concatenate([cols for cols, _ in _STEPS]))
# Per live acceptor state: the bytes that must be dead in the automaton too (all it
# rejects but for a quote, a backslash or DEL between characters).
_FORBIDDEN = [np.flatnonzero(_CLASSES[u] == _DEAD) for u in _LIVE]
_FORBIDDEN_BETWEEN = _FORBIDDEN[_LIVE.index(_BETWEEN)]

# Automata with more states than this are not tried (the fixed point costs per state),
# nor those whose fixed point takes more than _BUDGET state steps (~1 us each) to settle
# (a string with a long length bound settles in as many steps as its bound).
_MAX_STATES = 1024
_BUDGET = 8192
# Per state, by automaton content and longest token: 1 safe, 0 not, -1 not yet known.
_safe_cache: Lru[tuple[bytes, int], tuple[npt.NDArray[np.int8]]] = Lru(4 << 20)


@dataclass(frozen=True, slots=True)
class CleanSlice:
    """A vocabulary's clean tokens, and a trie of its quoted ones.

    ``ids`` flags by token id the tokens that are a prefix of clean text (they may end
    inside a character). ``quoted`` is the token trie of the tokens that leave clean
    text first at a quote, a backslash or DEL between characters (``positions``: each of
    its positions' position in the vocabulary's trie; ``nodes[d - 1]``: each of its
    depth-``d`` nodes' node there, the one with the same prefix). The other tokens
    leave clean text at a control byte or a byte no UTF-8 text has there.
    """

    ids: Bools
    quoted: TokenTrie
    positions: Ints
    nodes: tuple[Ints, ...]


_slices: weakref.WeakKeyDictionary[TokenIndex, CleanSlice] = weakref.WeakKeyDictionary()
_lock = threading.Lock()


def clean_slice(index: TokenIndex, size: int) -> CleanSlice:
    """The clean slice of ``index``'s vocabulary of ``size`` ids (built once per
    index)."""
    with _lock:
        known = _slices.get(index)
    if known is not None:
        return known
    trie = index.trie
    flat = _CLASSES.reshape(-1)
    states, _ = trie.replay(flat, _BETWEEN, np.zeros(flat.size, dtype=np.int16))
    fate = states[trie.end_nodes]  # by position
    ids = np.zeros(size, dtype=np.bool_)
    ids[index.ids[(fate != _DEAD) & (fate != _QUOTED)]] = True
    positions = np.flatnonzero(fate == _QUOTED)
    quoted = TokenTrie(index.matrix[positions], index.lengths[positions])
    nodes = tuple(
        np.searchsorted(trie.levels[depth].lo, positions[level.lo], side="right") - 1
        for depth, level in enumerate(quoted.levels)
    )
    known = CleanSlice(ids, quoted, positions, nodes)
    with _lock:
        return _slices.setdefault(index, known)


def is_safe(info: RuleInfo, longest: int, state: int) -> bool:
    """Whether ``state`` of ``info``'s automaton is *safe*: every clean text of at most
    ``longest`` bytes read from it keeps it alive without reaching a crossing state
    (nor is the state itself crossing), and on the way every byte that ends clean
    text, but for a quote, a backslash or DEL between characters, is dead.

    Worked out over the states clean text reaches from ``state`` only (a string body's
    few, not the whole rule around it), for all of them at once, and memoised per
    automaton content in ``info`` and process-wide. False (memoised for ``state``)
    where those states are more than ``_MAX_STATES`` or their fixed point does not
    settle within its budget (not known safe), and for a counted string's states."""
    if info.counted is not None:
        return False
    memo = info.safe_memo
    if not memo:
        key = (info.signature, longest)
        cached = _safe_cache.get(key)
        if cached is None:
            cached = (np.full(info.crossing.size, -1, dtype=np.int8),)
            _safe_cache.put(key, cached, 64 + info.crossing.size)
        memo.append(cached[0])
    verdicts = memo[0]
    known = int(verdicts[state])
    if known >= 0:
        return known == 1
    trans = info.flat.reshape(-1, 256)
    region = _clean_region(trans, state)
    if region is None:
        verdicts[state] = 0  # (not known safe: not asked again)
        return False
    # (The region is closed under clean bytes: its states' verdicts need no other.)
    number = np.zeros(trans.shape[0], dtype=np.int64)
    number[region] = np.arange(region.size)
    rows = trans[region]
    sub = np.where(rows >= 0, number[np.maximum(rows, 0)], -1).astype(np.int32)
    found = _safe_states(sub.reshape(-1), info.crossing[region], longest)
    if found is None:
        verdicts[state] = 0
        return False
    verdicts[region] = found
    return bool(verdicts[state])


def _clean_region(trans: npt.NDArray[np.int32], state: int) -> Ints | None:
    """The states reached from ``state`` by bytes of clean text (sorted), or None past
    ``_MAX_STATES``."""
    seen = np.zeros(trans.shape[0], dtype=np.bool_)
    seen[state] = True
    frontier = np.array([state], dtype=np.int64)
    while frontier.size:
        reached = trans[frontier][:, _CLEAN_BYTES].reshape(-1)
        targets = np.unique(reached[reached >= 0]).astype(np.int64)
        frontier = targets[~seen[targets]]
        seen[frontier] = True
        if frontier.size and np.count_nonzero(seen) > _MAX_STATES:
            return None
    return np.flatnonzero(seen)


def _safe_states(flat: npt.NDArray[np.int32], crossing: Bools, longest: int) -> Bools | None:
    n = crossing.size
    if n > _MAX_STATES or not n:
        return None
    trans = flat.reshape(n, 256)
    # bad[s, u]: from automaton state s with the acceptor in u, some clean continuation
    # (of at most as many bytes as steps taken) dies, crosses, or reaches a pair where
    # a forbidden byte is alive. Row n: dead.
    budget = _BUDGET
    bad = np.zeros((n + 1, 9), dtype=np.bool_)
    bad[n] = True
    bad[:n] = crossing[:, None]
    steps = []
    for u, (cols, after), forbidden in zip(_LIVE, _STEPS, _FORBIDDEN, strict=True):
        bad[:n, u] |= (trans[:, forbidden] >= 0).any(axis=1)
        targets = trans[:, cols].astype(np.int64)
        steps.append((u, np.where(targets >= 0, targets, n), after))
    for _ in range(max(longest, 1)):
        grown = bad.copy()
        for u, targets, after in steps:
            grown[:n, u] |= bad[targets, after].any(axis=1)
        if np.array_equal(grown, bad):
            break
        bad = grown
        budget -= n
        if budget < 0:
            return None  # (not settled within its budget: no state is known safe)
    safe: Bools = ~bad[:n, _BETWEEN]
    safe.flags.writeable = False
    return safe


def sliced_walk(
    index: TokenIndex, size: int, info: RuleInfo, state: int
) -> tuple[Bools, Boundaries] | None:
    """The walk of ``state`` as the clean slice plus a walk of the quoted tokens'
    trie: the inside tokens as flags over ids (a fresh array) and the boundary entries
    in the vocabulary's trie (sorted by position). None when ``state`` is not safe
    (see :func:`is_safe`; a state that cannot read some clean one-byte character,
    or that reads a byte clean text must die on (free text's tab or newline), or
    that is crossing, is not, and is refused without working out the automaton's
    safe states, a fixed point that costs up to milliseconds)."""
    if len(info.reads(state)) < _ONE_BYTE.size:
        return None  # (some one-byte character unread: the test below, without arrays)
    row = info.flat[state * 256 : state * 256 + 256]
    if (row[_ONE_BYTE] < 0).any() or (row[_FORBIDDEN_BETWEEN] >= 0).any():
        return None  # (and reading a byte clean text may not: a tab, a newline)
    if info.crossing[state] or not is_safe(info, index.longest, state):
        return None
    piece = clean_slice(index, size)
    sub = piece.quoted
    firsts = np.flatnonzero((row >= 0) & (sub.first_nodes >= 0))
    table, crossing = info.dead()
    found = sub.walk(
        table,
        info.crossing.size,
        crossing,
        sub.first_nodes[firsts],
        row[firsts].astype(np.int64),
        info.reads,
    )
    inside = piece.ids.copy()
    inside[index.ids[piece.positions[found.inside]]] = True
    bounds = found.bounds
    if not bounds.size:
        return inside, bounds
    # A boundary entry's node has quoted tokens only below it (from a safe state a
    # clean prefix never crosses, and the rest die before): the same positions in
    # either trie.
    node = np.empty(bounds.size, dtype=np.int64)
    for col in np.unique(bounds.col).tolist():
        at = bounds.col == col
        node[at] = piece.nodes[col - 1][bounds.node[at]]
    trie = index.trie
    lo, hi = trie.node_ranges()
    ones = trie.nodes(Boundaries(bounds.lo, bounds.hi, bounds.col, node))
    term = bounds.lo - sub.node_ranges()[0][sub.nodes(bounds)]
    mapped = Boundaries(lo[ones] + term, hi[ones], bounds.col, node)
    if not np.array_equal(mapped.hi - mapped.lo, bounds.hi - bounds.lo):
        return None  # (not expected: the full walk decides)
    return inside, mapped
