"""The token-level matcher: which tokens may come next, and advancing by one.

How a mask is computed (see ARCHITECTURE.md, "How the engine gets fast"):

1. A matcher state is the reference matcher's closed set of parse stacks. Masks
   are cached per state, across steps, sequences and requests (JSON generation
   revisits the same states constantly).
2. For a stack whose top frame is ``(rule, state)``, most tokens are decided by
   that rule's byte automaton alone. One vectorised NumPy walk per ``(rule,
   state)`` finds the tokens read entirely inside the rule and the few *boundary*
   tokens that pass a point where the rule could call another rule or return.
   A walk is assembled from per-first-byte *segments* (only the bytes the state
   can read), each keyed by a bounded-depth behaviour hash of the state after
   that byte: states of any rule or schema that act alike on the next bytes
   share segments and walks, process-wide. Missing segments are walked through
   the token trie (:mod:`~jsonmode.decoding.trie`) along live prefixes only, so a
   state that reads few bytes costs little; wide ones take one gather per level
   for the first levels. A state unlike any seen is walked whole, not split into
   segments. A wide state that differs from its *twin* (the state most of its
   bytes lead to) in few places, such as a key still spelling a declared name,
   takes the twin's walk and redoes only the trie subtrees where the two part.
   Boundary tokens are kept as trie subtrees (one entry per node where the walk
   passed a call or return point), so the work on them grows with the entries,
   not with the tokens: the tokens after a space that opens a value are one entry.
   A string with length bounds only is the plain string plus a count of its
   characters: a state between characters takes the plain string's walk less the
   tokens beyond its character budget (per-token counts from one trie replay per
   vocabulary), keyed by that budget, so the states far from their bounds share one
   walk whatever their lexeme.
3. Boundary tokens are finished from the real stack, one stack at a time: the
   stacks a boundary leads to (the caller's continuation after a return, the callee
   after a call) are numbered ``(context, rule state)`` pairs (:class:`_Stacks`),
   stepped by the rules' byte tables. The tokens of a boundary group whose rest
   starts with a byte those stacks can read are kept as a small trie of their
   *rests* (:class:`_Rests`; the same few dozen rests, such as ``",`` and ``"}``
   after a string, recur in every schema: memoised by content), and the stacks walk
   that trie: one step per distinct rest prefix.
4. A stack whose top state reads few bytes (a literal's next bytes, a number's
   digits, the ``:`` after a key) skips the walks, hashes and caches above: the
   stack itself follows the token trie in plain Python (:meth:`MaskEngine._direct`),
   stepping its top rule by table and, past a call or return point, the stacks
   that leads to, as in 3. NumPy's per-call overhead would cost several times such
   a walk.

Errors on the hot path are booleans and a sticky state, never exceptions.
Matchers are cheap and single-threaded; the caches they share are thread-safe.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import threading
import weakref
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from jsonmode.decoding.automaton import Network, RuleDFA, plain_string_rule, quoted_rule
from jsonmode.decoding.keys import extra_key_body, key_prefixes
from jsonmode.decoding.lru import Lru
from jsonmode.decoding.reference import END, ReferenceMatcher, Stack, State
from jsonmode.decoding.trie import (
    Boundaries,
    Following,
    TokenTrie,
    TrieWalk,
    lexicographic_order,
)
from jsonmode.decoding.vocabulary import Vocabulary

__all__ = ["MaskEngine", "Matcher", "configure_caches"]

Mask = npt.NDArray[np.bool_]
Rows = npt.NDArray[np.int64]

# Replaying at most this many bytes in all is done in plain Python (see _replay).
_FEW_BYTES = 512


@dataclass(frozen=True, slots=True)
class _Walk:
    """What one ``(rule automaton, state)`` decides for the whole vocabulary.

    ``inside``: tokens read entirely within the rule (allowed whatever the stack),
    bit-packed over ids when there are many (``dense``), else as ids. ``groups``: per state
    where boundary tokens pass a call or return point, those tokens split by the
    byte their rest starts with. A lexeme's walk has one group, stopping at
    ``_RETURN``: a lexeme calls nothing, so its boundary tokens return from it, and
    what reads their rest is the caller's continuation whichever state they pass (the
    lexeme's own continuation from that state is in the walk already: the inside
    tokens and the later boundary tokens). So a lexeme's walk is shared by every
    state that acts alike, of any lexeme.
    """

    inside: npt.NDArray[np.uint8] | npt.NDArray[np.int32]
    dense: bool
    groups: tuple[tuple[int, Following], ...]

    @property
    def nbytes(self) -> int:
        return int(self.inside.nbytes) + sum(split.nbytes + 64 for _, split in self.groups)

    def pack(self) -> tuple[object, ...]:
        """A plain tuple of arrays and numbers: the form the caches hold (see
        ``_walk_cache``)."""
        groups = tuple((stop, *split.pack()) for stop, split in self.groups)
        return self.inside, self.dense, groups

    @staticmethod
    def unpack(packed: tuple[Any, ...]) -> _Walk:
        inside, dense, groups = packed
        return _Walk(inside, dense, tuple((g[0], Following(*g[1:])) for g in groups))


@dataclass(frozen=True, slots=True)
class _SharedWalk:
    """The rule-independent part of a walk: tokens inside (as in :class:`_Walk`), and
    the boundary tokens (as trie subtrees, sorted by position)."""

    inside: npt.NDArray[np.uint8] | npt.NDArray[np.int32]
    dense: bool
    bounds: Boundaries

    @property
    def nbytes(self) -> int:
        return int(self.inside.nbytes) + self.bounds.nbytes

    def pack(self) -> tuple[object, ...]:
        return self.inside, self.dense, *self.bounds.pack()

    @staticmethod
    def unpack(packed: tuple[Any, ...]) -> _SharedWalk:
        return _SharedWalk(packed[0], packed[1], Boundaries(*packed[2:]))


class _TokenIndex:
    """The vocabulary's tokens in lexicographic byte order ("positions").

    ``matrix``/``lengths``/``ids`` are the vocabulary's, in position order; the
    tokens starting with byte ``b`` are positions ``offsets[b]:offsets[b + 1]``.
    Empty tokens are left out. Built once per vocabulary, with the token trie over the
    same positions (~20 MB and ~0.3 s for Qwen2.5), by the first engine for that
    vocabulary: per-vocabulary set-up, not left to the first mask.
    """

    def __init__(self, vocabulary: Vocabulary) -> None:
        lengths = vocabulary.lengths.astype(np.int64)
        nonempty = np.flatnonzero(lengths > 0)
        order = nonempty[lexicographic_order(vocabulary.matrix[nonempty], lengths[nonempty])]
        self.matrix = np.ascontiguousarray(vocabulary.matrix[order])
        self.lengths = lengths[order]
        self.ids = vocabulary.ids[order].astype(np.int64)
        self.offsets = np.searchsorted(self.matrix[:, 0], np.arange(257)).astype(np.int64)
        self.trie = TokenTrie(self.matrix, self.lengths)
        self.longest = int(self.lengths.max(initial=1))


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


@dataclass(frozen=True, slots=True)
class _RuleInfo:
    """What the walks need of one rule automaton: its content signature, its
    crossing states (accepting or calling), its flat transition table (-1: no
    transition), and per state bounded-depth behaviour hashes (None for automata too
    big to hash): row 0 looks as far as the longest token after its first byte, row 1
    as far as the longest token (each with a byte to spare). ``counted``: for a
    string with length bounds only, its states as the plain string's plus a count.
    What only some walks need is computed on first use (:meth:`reads`,
    :meth:`dead`)."""

    signature: bytes
    crossing: npt.NDArray[np.bool_]
    flat: npt.NDArray[np.int32]
    hashes: npt.NDArray[np.uint64] | None
    counted: _Counted | None = None
    readable: dict[int, list[int]] = field(default_factory=dict)  # memo of reads()
    dead_memo: list[tuple[npt.NDArray[np.int32], npt.NDArray[np.bool_]]] = field(
        default_factory=list
    )

    def reads(self, state: int) -> list[int]:
        """The bytes ``state`` can read, ascending."""
        known = self.readable.get(state)
        if known is None:
            row = self.flat[state * 256 : state * 256 + 256]
            bits = np.packbits(row >= 0, bitorder="little").tobytes()
            known = self.readable[state] = _byte_list(bits, row)
        return known

    def dead(self) -> tuple[npt.NDArray[np.int32], npt.NDArray[np.bool_]]:
        """The flat table with an absorbing dead state (dead = ``crossing.size``, for
        every missing transition), and the crossing flags with it (False): what the
        vectorised walks gather from, dead prefixes included."""
        if not self.dead_memo:
            flat, dead = self.flat, self.crossing.size
            table = np.full(flat.size + 256, dead, dtype=np.int32)
            table[: flat.size] = np.where(flat >= 0, flat, dead)
            self.dead_memo.append((table, np.append(self.crossing, False)))
        return self.dead_memo[0]


def _content(
    automaton: RuleDFA, signature: bytes | None = None
) -> tuple[bytes, npt.NDArray[np.bool_], npt.NDArray[np.int32]]:
    """A rule's content signature (``signature`` instead when given), crossing states
    (accepting or calling) and transitions."""
    crossing = _facts(automaton).crossing
    trans = np.ascontiguousarray(automaton.trans, dtype=np.int32)
    if signature is not None:
        return signature, crossing, trans
    digest = hashlib.blake2b(digest_size=16)
    big = trans.shape[0] > _BIG_TABLE
    digest.update(b"%d %d;" % (trans.shape[0], big))  # (which layout follows)
    if big:
        # The distinct columns and which byte has which (most bytes' columns repeat:
        # hashing those costs a fraction of hashing every byte's).
        first, inverse = _byte_classes(trans)
        digest.update(np.ascontiguousarray(trans[:, first]).tobytes())
        digest.update(inverse.astype(np.uint8).tobytes())
    else:  # (as 16-bit ints, half the bytes to hash: a table this small fits them)
        digest.update(trans.astype(np.int16).tobytes())
    digest.update(crossing.tobytes())
    return digest.digest(), crossing, trans


_BIG_TABLE = 256  # states: a table this big is hashed by its byte classes


def _crossing_states(automaton: RuleDFA) -> npt.NDArray[np.bool_]:
    """Per state, whether it accepts or calls: where a token passing it may go on in
    another rule."""
    calling = np.fromiter(map(bool, automaton.calls), dtype=np.bool_, count=automaton.n_states)
    crossing: npt.NDArray[np.bool_] = automaton.accepting | calling
    return crossing


@dataclass(frozen=True, slots=True)
class _Counted:
    """A string with length bounds only (``RuleDFA.lengths``) as the plain string
    (``plain``) plus a count: per state, the plain string's state it acts as
    (``plain_of``) and the characters begun so far (``chars``; capped at ``low``
    when there is no upper bound). From a state, a token fares as from its plain
    state, except that it dies once it begins more than ``high - chars`` characters,
    or closes the string after fewer than ``low - chars``."""

    plain: _RuleInfo
    plain_of: npt.NDArray[np.int64]
    chars: npt.NDArray[np.int64]
    low: int
    high: int | None

    @property
    def between(self) -> int:
        """The plain string's state between characters."""
        return int(self.plain.flat[_QUOTE])


@dataclass(frozen=True, slots=True)
class _CharCounts:
    """The tokens read from the plain string's between-characters state: per
    position, the characters a token begins if it is read to its end (``chars``;
    -1: it is not) and whether it ends just after the closing quote (``closed``);
    per trie node, the characters begun along its prefix (``at_nodes``; where a
    boundary entry read the closing quote, those before it)."""

    chars: npt.NDArray[np.int16]
    closed: npt.NDArray[np.bool_]
    at_nodes: npt.NDArray[np.int16]

    @property
    def nbytes(self) -> int:
        return int(self.chars.nbytes + self.closed.nbytes + self.at_nodes.nbytes)


_QUOTE = ord('"')
_PLAIN_CHAR = ord("a")


def _begins(plain: npt.NDArray[np.int32]) -> npt.NDArray[np.bool_]:
    """Per plain-string state and byte: whether the byte begins a character (any
    byte the body's between-characters state reads, but the closing quote)."""
    between = int(plain[0, _QUOTE])
    begins = np.zeros(plain.shape, dtype=np.bool_)
    begins[between] = plain[between] >= 0
    begins[between, _QUOTE] = False
    return begins


def _count_states(
    rule: RuleDFA, plain: npt.NDArray[np.int32]
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]] | None:
    """Each state of a ``lengths`` rule as ``(plain string state, characters begun)``;
    None unless the rule is exactly the plain string with those bounds on the count.

    The states between characters are found first, one per count (from the opening
    quote, an ``a`` at a time); the others are paired with the plain string's in its
    order (the states inside a character form an acyclic graph between its
    between-characters states), all the states of one plain state at once. Every
    state and byte class is checked against the plain string and the bounds, so a
    rule built otherwise is refused, not mistaken.
    """
    assert rule.lengths is not None
    low, high = rule.lengths
    trans, size = rule.trans, rule.trans.shape[0]
    top = high if high is not None else low
    between, closing = int(plain[0, _QUOTE]), plain.shape[0] - 1
    chain = [int(trans[0, _QUOTE])]
    for _ in range(top):
        chain.append(int(trans[chain[-1], ord("a")]) if chain[-1] >= 0 else -1)
    if min(chain) < 0 or len(set(chain)) != top + 1:
        return None
    if high is None and trans[chain[-1], ord("a")] != chain[-1]:
        return None
    begins = _begins(plain)
    # Bytes that the plain string treats alike, as one class each: the rule must too.
    first, inverse = _byte_classes(np.concatenate([plain, begins.astype(np.int32)]))
    folds = _column_folds(trans)
    if (folds != folds[first[inverse]]).any():
        return None
    ours, theirs, weight = trans[:, first], plain[:, first], begins[:, first].astype(np.int64)
    quote = first == _QUOTE
    chains = np.array(chain, dtype=np.int64)
    plain_of = np.full(size, -1, dtype=np.int64)
    chars = np.full(size, -1, dtype=np.int64)
    plain_of[size - 1], chars[size - 1] = closing, 0
    arrivals: dict[int, list[tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]]] = {
        0: [(np.zeros(1, dtype=np.int64), np.zeros(1, dtype=np.int64))],
        between: [(chains, np.arange(top + 1, dtype=np.int64))],
    }
    order = _plain_order(plain)
    rank = {state: index for index, state in enumerate(order)}
    for here in order:
        parts = arrivals.pop(here, [])
        if not parts:
            continue
        states = np.concatenate([s for s, _ in parts])
        counts = np.concatenate([c for _, c in parts])
        states, index = np.unique(states, return_index=True)
        counts = counts[index]
        if (plain_of[states] >= 0).any():  # met before as another plain state
            return None
        plain_of[states], chars[states] = here, counts
        if (chars[states] != counts).any():
            return None
        targets, theirs_here = ours[states], theirs[here]
        if (targets[:, theirs_here < 0] >= 0).any():
            return None
        after = counts[:, None] + weight[here][None, :]
        if high is None:
            np.minimum(after, low, out=after)
        early = (counts[:, None] < low) & quote[None, :] & (here == between)
        full = (counts[:, None] >= top) & (weight[here][None, :] > 0) & (high is not None)
        missing = (targets < 0) & (theirs_here >= 0)[None, :]
        if (missing & ~(early | full)).any() or ((targets >= 0) & (early | full)).any():
            return None
        for target in np.unique(theirs_here[theirs_here >= 0]).tolist():
            columns = theirs_here == target
            reached, begun = targets[:, columns], after[:, columns]
            live = reached >= 0
            reached, begun = reached[live], begun[live]
            if target == closing:
                if (reached != size - 1).any():
                    return None
            elif target == between:
                if (begun > top).any() or (reached != chains[np.minimum(begun, top)]).any():
                    return None
            elif rank.get(target, -1) <= rank[here]:
                return None  # not in the plain string's order (never: see _plain_order)
            else:
                arrivals.setdefault(target, []).append((reached, begun))
    if arrivals or (plain_of < 0).any():
        return None
    return plain_of, chars


def _plain_order(plain: npt.NDArray[np.int32]) -> list[int]:
    """The plain string's states in an order where the states inside a character
    come after those that lead to them: 0, the between-characters state, then the
    rest topologically (Kahn's algorithm; states on a cycle inside a character, which
    the plain string has none of, are left out)."""
    between, closing = int(plain[0, _QUOTE]), plain.shape[0] - 1
    inner = [s for s in range(1, closing) if s != between]
    leads = {s: {int(t) for t in plain[s][plain[s] >= 0]} & set(inner) for s in inner}
    waiting = {s: sum(s in targets for targets in leads.values()) for s in inner}
    order, ready = [0, between], [s for s in inner if not waiting[s]]
    while ready:
        state = ready.pop()
        order.append(state)
        for target in sorted(leads[state]):
            waiting[target] -= 1
            if not waiting[target]:
                ready.append(target)
    return order


def _plain_loops(
    trans: npt.NDArray[np.int32], crossing: npt.NDArray[np.bool_]
) -> npt.NDArray[np.int64]:
    """The states that read like the plain string between characters: a loop on a
    plain character, the same bytes readable, the same crossing flag."""
    plain = plain_string_rule()
    between = int(plain.trans[0, _QUOTE])
    looping = trans[:, _PLAIN_CHAR] == np.arange(trans.shape[0])
    looping &= crossing == plain.accepting[between]
    candidates = np.flatnonzero(looping)
    if candidates.size:
        pattern = plain.trans[between] >= 0
        candidates = candidates[((trans[candidates] >= 0) == pattern).all(axis=1)]
    return candidates


@functools.cache
def _plain_paths() -> tuple[tuple[int, bytes], ...]:
    """Each plain string state reachable from the between-characters state, with a
    shortest byte string that leads there from it (the between state first)."""
    plain = plain_string_rule().trans
    between = int(plain[0, _QUOTE])
    paths = {between: b""}
    queue = [between]
    for state in queue:
        for byte in np.flatnonzero(plain[state] >= 0).tolist():
            target = int(plain[state, byte])
            if target not in paths:
                paths[target] = paths[state] + bytes([byte])
                queue.append(target)
    return tuple(paths.items())


def _plain_states(
    trans: npt.NDArray[np.int32], crossing: npt.NDArray[np.bool_]
) -> npt.NDArray[np.int64] | None:
    """Per state, the plain string's state it acts exactly as (-1: none); None when
    there are none.

    From each state of :func:`_plain_loops`, the plain string's states are paired
    with the states their paths (:func:`_plain_paths`) lead to here; the pairing
    stands if it is a bisimulation: paired states read the same bytes into paired
    states and have the same crossing flag (one vectorised check per candidate)."""
    plain = plain_string_rule()
    plain_trans, plain_crossing = plain.trans, plain.accepting
    paths = _plain_paths()
    theirs = np.array([state for state, _ in paths], dtype=np.int64)
    expected_rows = plain_trans[theirs]
    live = expected_rows >= 0
    plain_of = np.full(trans.shape[0], -1, dtype=np.int64)
    table = memoryview(np.ascontiguousarray(trans).reshape(-1))  # type: ignore[arg-type]
    found = False
    for candidate in _plain_loops(trans, crossing).tolist():
        ours = []
        for _, path in paths:
            here = candidate
            for byte in path:
                here = table[here * 256 + byte] if here >= 0 else -1
            ours.append(here)
        if min(ours) < 0:
            continue
        pairing = np.full(plain_trans.shape[0], -1, dtype=np.int64)
        pairing[theirs] = ours
        if len(set(ours)) != len(ours) or (plain_of[ours] >= 0).any():
            continue  # (not one to one, or met from another candidate)
        rows = trans[ours]
        if not np.array_equal(np.where(live, pairing[np.maximum(expected_rows, 0)], -1), rows):
            continue
        if not np.array_equal(crossing[ours], plain_crossing[theirs]):
            continue
        plain_of[ours] = theirs
        found = True
    return plain_of if found else None


# Random weights per byte for the state hashes (fixed seed: hashes must agree
# across engines in one process; they never leave it).
_BYTE_WEIGHTS = np.random.default_rng(0x6A736F6E).integers(1, 2**63, size=256, dtype=np.uint64) | 1
_BYTE_WEIGHT_LIST: list[int] = _BYTE_WEIGHTS.tolist()
_DEAD = np.uint64(0x9E3779B97F4A7C15)
_HASH_BUDGET = 4_000_000  # states x depth (see _state_hashes); beyond it, no sharing
# A lexeme joins another's hashing pass (see MaskEngine._hash_lexemes) only when it
# has at most this many states: a small lexeme's pass costs mostly per depth step,
# which the batch shares, while a big one's costs per state, which batching does not
# save, only moves into the mask call that hashes the batch (a 130 ms first mask
# where an 8-state integer lexeme brought 6,000 states of strings along), and spends
# on lexemes that may never be walked.
_BATCH_STATES = 256
_FOLD_WEIGHTS = (
    np.random.default_rng(0x636C6173).integers(1, 2**31, size=(2, _HASH_BUDGET // 64)) | 1
).astype(np.int32)
_SHIFT_1, _SHIFT_2, _MULTIPLIER = np.uint64(31), np.uint64(29), np.uint64(0xBF58476D1CE4E5B9)
# The two values a state's own hash starts from in _grafted_hashes (not the depth
# hashes' own: its values must not meet theirs).
_TREE_CROSSING, _TREE_INNER = 0xD6E8FEB86659FD93, 0xA0761D6478BD642F
_WORD = (1 << 64) - 1
_INT_SHIFT_1, _INT_SHIFT_2, _INT_MULTIPLIER = int(_SHIFT_1), int(_SHIFT_2), int(_MULTIPLIER)


def _mix_int(value: int) -> int:
    """:func:`_mix` for one Python int (taken modulo 2**64 first)."""
    value &= _WORD
    value ^= value >> _INT_SHIFT_1
    value = (value * _INT_MULTIPLIER) & _WORD
    return value ^ (value >> _INT_SHIFT_2)


_PLAIN_SUMS: dict[bytes, tuple[list[int], list[int]]] = {}  # see _plain_sums (one per depth)


def _plain_sums(hashes: npt.NDArray[np.uint64]) -> tuple[list[int], list[int]]:
    """Per plain string state, for each of its two hash rows, the sum over bytes of
    the byte's weight times its target's hash (dead: ``_DEAD``), modulo 2**64: what
    :meth:`MaskEngine._grafted_hashes` corrects for a state that reads like it."""
    key = hashes.tobytes()
    known = _PLAIN_SUMS.get(key)
    if known is None:
        rows = plain_string_rule().trans
        extended = np.append(hashes, np.full((2, 1), _DEAD, dtype=np.uint64), axis=1)
        with np.errstate(over="ignore"):
            first = (extended[0][rows] * _BYTE_WEIGHTS).sum(axis=1, dtype=np.uint64)
            second = (extended[1][rows] * _BYTE_WEIGHTS).sum(axis=1, dtype=np.uint64)
        known = _PLAIN_SUMS[key] = (first.tolist(), second.tolist())
    return known


# A key lexeme's tree state differing from the plain between-characters state in more
# bytes than this is compared with every plain state (see MaskEngine._grafted_hashes).
_FEW_FIXES = 16
_BACKSLASH = ord("\\")
# The sum over bytes of each byte's weight times the dead state's hash (modulo 2**64:
# what _mix_int takes), and the escape states' hashes of key lexemes by hash depth (see
# MaskEngine._key_escapes).
_DEAD_SUM = (sum(_BYTE_WEIGHT_LIST) * int(_DEAD)) & _WORD
_KEY_ESCAPES: dict[int, tuple[list[int], list[int]]] = {}


def _mix(values: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
    """Scramble hash values (a 64-bit finaliser; wraps around, in place: NumPy
    integer arrays wrap silently, no error state to set)."""
    values ^= values >> _SHIFT_1
    values *= _MULTIPLIER
    values ^= values >> _SHIFT_2
    return values


def _byte_classes(
    trans: npt.NDArray[np.int32],
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """The bytes that every state treats alike, as classes: each class's first byte,
    and each byte's class. Columns are compared by a 64-bit fold (two 32-bit ones),
    so equal up to 64-bit collisions, like the state hashes themselves."""
    _, first, inverse = np.unique(_column_folds(trans), return_index=True, return_inverse=True)
    return first.astype(np.int64), inverse.reshape(-1).astype(np.int64)


def _column_folds(trans: npt.NDArray[np.int32]) -> npt.NDArray[np.int64]:
    """Per byte, a 64-bit fold of its column (two 32-bit weighted sums, wrapping)."""
    states = trans.shape[0]
    weights = _FOLD_WEIGHTS[:, np.arange(states) % _FOLD_WEIGHTS.shape[1]]
    high = np.einsum("i,ij->j", weights[0], trans).astype(np.int64)
    low = np.einsum("i,ij->j", weights[1], trans).astype(np.int64) & 0xFFFFFFFF
    folds: npt.NDArray[np.int64] = (high << 32) | low
    return folds


def _weighted_edges(
    trans: npt.NDArray[np.int32],
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.intp], npt.NDArray[np.uint64]] | None:
    """An automaton as weighted edges for hashing: per state (``source``, ascending),
    its distinct targets (``target``; dead: the extra slot ``states``) with the
    summed byte weights of the bytes that lead there
    (``summed``): a few per state, where bytes are 256. Bytes every state treats alike
    are folded into one class first. None when states x byte classes exceed
    ``_HASH_BUDGET // 2``."""
    states = trans.shape[0]
    first, inverse = _byte_classes(trans)
    if states * first.size > _HASH_BUDGET // 2:
        return None
    weights = np.zeros(first.size, dtype=np.uint64)
    np.add.at(weights, inverse.reshape(-1), _BYTE_WEIGHTS)
    targets = trans[:, first].astype(np.int64)
    targets[targets < 0] = states
    sources = np.arange(states, dtype=np.int64)
    pairs = (sources[:, None] * (states + 1) + targets).reshape(-1)
    order = np.argsort(pairs, kind="stable")
    pairs = pairs[order]
    fresh = np.ones(pairs.size, dtype=np.bool_)
    fresh[1:] = pairs[1:] != pairs[:-1]
    starts = np.flatnonzero(fresh)
    summed = np.add.reduceat(np.tile(weights, states)[order], starts)
    kept = pairs[starts]
    return kept // (states + 1), (kept % (states + 1)).astype(np.intp), summed


def _state_hashes(
    trans: npt.NDArray[np.int32], crossing: npt.NDArray[np.bool_], depths: tuple[int, ...]
) -> npt.NDArray[np.uint64] | None:
    """Per state, for each ``d`` of ``depths`` (ascending; one row each), a hash of
    everything the automaton does in the next ``d`` bytes.

    Two states (of any automata) with equal hashes at depth ``d`` behave alike on
    every byte string of at most ``d`` bytes: the same strings are read, crossing
    states are met at the same offsets (the hash is a depth-bounded bisimulation
    class, up to 64-bit collisions). Bytes that every state treats alike are folded
    into one class first, and the classes leading one state to one target into one
    weighted edge, so a step costs the distinct (state, target) pairs; None when states
    x depth, states x byte classes or pairs x depth exceed ``_HASH_BUDGET`` (or twice
    it; big structural rules, which rarely recur anyway).
    """
    states, deepest = trans.shape[0], depths[-1]
    if states * deepest > _HASH_BUDGET:
        return None
    edges = _weighted_edges(trans)
    if edges is None or edges[0].size * deepest > 2 * _HASH_BUDGET:
        return None
    source, target, summed = edges
    bounds = np.searchsorted(source, np.arange(states))
    base = np.where(crossing, np.uint64(0x5851F42D4C957F2D), np.uint64(0x14057B7EF767814F))
    hashes = base.copy()  # depth 0: is the state crossing
    extended = np.full(states + 1, _DEAD, dtype=np.uint64)
    rows: list[npt.NDArray[np.uint64]] = []
    with np.errstate(over="ignore"):
        for depth in range(1, deepest + 1):
            extended[:states] = hashes
            hashes = _mix(np.add.reduceat(extended[target] * summed, bounds) + base)
            if depth in depths:
                rows.append(hashes)
    result: npt.NDArray[np.uint64] = np.stack(rows)
    return result


# Caches shared by every engine in the process, budgets in bytes (see
# configure_caches). Walks are keyed by vocabulary and by a state's behaviour hash,
# a lexeme's content and state (equal lexemes of different schemas share them), a
# structural rule's engine and state, or a counted string's budget (see
# MaskEngine._shared_walk); masks by engine and state. Walks and segments are held
# as plain tuples of arrays and numbers (their ``pack``): the garbage collector stops
# tracking those, where tens of thousands of dataclass instances would be traversed
# by every full collection (~1 us each, inside mask calls).
_walk_cache: Lru[tuple[str, bytes, int], tuple[Any, ...]] = Lru(16 << 20)
_local_walk_cache: Lru[tuple[str, bytes, int], tuple[Any, ...]] = Lru(48 << 20)
_segment_cache: Lru[tuple[str, bytes, int, int], tuple[Any, ...]] = Lru(64 << 20)
_mask_cache: Lru[tuple[int, State], Mask] = Lru(64 << 20)
_hash_cache: Lru[tuple[bytes, int], npt.NDArray[np.uint64]] = Lru(16 << 20)
_count_cache: Lru[bytes, tuple[tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]] | None]] = Lru(
    8 << 20
)
_char_counts: Lru[str, _CharCounts] = Lru(16 << 20)
# Per lexeme (the automata are built once per process and shared by the networks
# that use them): content signatures by table identity, and rule information.
_lexeme_contents: dict[
    int, tuple[weakref.ref[Any], tuple[bytes, npt.NDArray[np.bool_], npt.NDArray[np.int32]]]
] = {}
_lexeme_infos: Lru[tuple[bytes, int], _RuleInfo] = Lru(32 << 20)
_indexes: dict[str, _TokenIndex] = {}
_plain_infos: dict[int, _RuleInfo] = {}  # by hash depth (see MaskEngine._plain)
_indexes_lock = threading.Lock()
_engine_ids = itertools.count()
# A stack whose top state reads at most _SMALL_BYTES first bytes is walked through
# the token trie in plain Python with the whole stack (see MaskEngine._direct), while
# at most _DIRECT_NODES (trie node, stack) pairs are live in all; past that, the
# vectorised walk takes over.
_SMALL_BYTES = 8
_DIRECT_NODES = 256
# A lexeme walk's one boundary group stops here (see _Walk): its boundary tokens all
# return from the lexeme, whichever of its states they pass.
_RETURN = -1
# Missing segments with more tokens than this are walked level by level in full
# (one gather per level) rather than by following the live frontier. (Replaying the
# benchmark's 417 trie walks: 40k or 20k tokens take ~14 % less time than 100k, 10k
# ~28 % more: the full levels cost the same whatever is live, about what following
# a frontier over a quarter of the vocabulary costs.)
_WIDE = 40_000
# A state none of whose segments is cached, with more than this many first bytes, is
# walked whole: its segments are not split off and cached (they rarely serve again).
_UNSPLIT = 32
# A state is walked as a patch of its twin's walk (see MaskEngine._patched_walk) when
# it reads at least _PATCH_MIN_BYTES bytes, at most _PATCH_MAX_BYTES of them lead
# elsewhere than the twin's, and at most _PATCH_MAX_PAIRS trie nodes must be followed
# at once to find where the two walks part.
_PATCH_MIN_BYTES = 64
_PATCH_MAX_BYTES = 16
_PATCH_MAX_PAIRS = 64


def configure_caches(
    *,
    walk_bytes: int | None = None,
    segment_bytes: int | None = None,
    mask_bytes: int | None = None,
) -> None:
    """Set the process-wide cache budgets (bytes). Defaults: 64 MiB of walks (a
    quarter shared across rules and schemas, the rest per rule state), 64 MiB of
    segments and 64 MiB of masks. With the compiler's lexeme caches (64 MiB each for
    expressions and finished lexeme automata), the fixed smaller ones here (lexeme
    tables and hashes, counted strings) and the per-engine maps, the decoder's memory
    stays bounded however many schemas a process serves (~400 MB peak over the
    300-schema benchmark with Qwen2.5's vocabulary).

    A cached mask costs ``vocabulary.size`` bytes (152 KB for Qwen2.5); a cached walk
    an eighth of that (bit-packed) plus its boundary tokens; a segment about a byte per
    token that starts with its byte. Lowering a budget evicts at the next insert.
    """
    if walk_bytes is not None:
        _walk_cache.budget = int(walk_bytes) // 4
        _local_walk_cache.budget = int(walk_bytes) - int(walk_bytes) // 4
    if segment_bytes is not None:
        _segment_cache.budget = int(segment_bytes)
    if mask_bytes is not None:
        _mask_cache.budget = int(mask_bytes)


@dataclass(frozen=True, slots=True)
class _Rests:
    """The rests of a boundary group's tokens (their bytes from the boundary on), as a
    trie: node ``n`` (0: the root) has the byte ``byte[n]`` that leads to it, its
    children ``kids[n]`` and the positions of the tokens whose rest ends there
    (``ends[n]``)."""

    byte: list[int]
    kids: list[list[int]]
    ends: list[list[int]]

    @staticmethod
    def of(tokens: list[bytes], positions: list[int]) -> _Rests:
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
        return _Rests(byte, kids, ends)


# Rests by group content and readable bytes (see MaskEngine._rests): ~90 distinct ones
# serve the benchmark's 7,000 boundary groups.
_rests: Lru[tuple[bytes, bytes, bytes], _Rests] = Lru(8 << 20)


def _forget_table(contents: dict[int, Any], key: int, _: object) -> None:
    """A lexeme table was freed: drop its memoised content (``contents`` is bound, not
    looked up: the callback may run while the interpreter tears the module down)."""
    contents.pop(key, None)


def _token_index(vocabulary: Vocabulary) -> _TokenIndex:
    with _indexes_lock:
        index = _indexes.get(vocabulary.fingerprint)
        if index is None:
            if len(_indexes) >= 8:
                _indexes.pop(next(iter(_indexes)))
            index = _indexes[vocabulary.fingerprint] = _TokenIndex(vocabulary)
        return index


class MaskEngine:
    """Mask computation for one network and one vocabulary. Thread-safe.

    Memory is bounded by the process-wide budgets of :func:`configure_caches`; the
    per-engine maps (``advance`` transitions, rule signatures) are bounded too.
    ``hits`` / ``misses`` count mask-cache lookups.
    """

    def __init__(self, network: Network, vocabulary: Vocabulary, *, max_depth: int = 64) -> None:
        self.network = network
        self.vocabulary = vocabulary
        self.reference = ReferenceMatcher(network, max_depth=max_depth)
        self.eos = np.array(sorted(vocabulary.eos_ids), dtype=np.int64)
        self._token = next(_engine_ids)
        index = _token_index(vocabulary)
        self._index = index
        self._offsets = index.offsets
        self._matrix = index.matrix
        # The same, for plain-Python reads (an int per index, no NumPy scalar).
        self._flat_bytes = memoryview(index.matrix).cast("B")  # type: ignore[arg-type]
        self._width = int(index.matrix.shape[1])
        self._lengths_view = memoryview(index.lengths)  # type: ignore[arg-type]
        self._lengths = index.lengths
        self._ids = index.ids
        self._rule_keys: dict[int, _RuleInfo] = {}
        self._signatures: dict[int, tuple[bytes, npt.NDArray[np.bool_], npt.NDArray[np.int32]]] = {}
        self._lexemes = [k for k, rule in enumerate(network.rules) if not any(rule.calls)]
        self._lexeme_set = set(self._lexemes)
        self._hashed: set[int] = set()  # lexemes whose hashes were computed (or refused)
        # Hash depths: a token after its first byte, and a whole token (a byte to spare).
        self._depth = index.longest
        self._next: dict[tuple[State, int], State] = {}
        self._stacks = _Stacks(self.reference)
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    # -- per rule automaton ---------------------------------------------------------------

    def _rule_key(self, rule: int) -> _RuleInfo:
        """Content signature, crossing states, transitions and state hashes of a rule."""
        known = self._rule_keys.get(rule)
        if known is not None:
            return known
        signature, crossing, trans = self._signature(rule)
        automaton = self.network.rules[rule]
        lexeme = not any(automaton.calls)
        if lexeme:
            shared = _lexeme_infos.get((signature, self._depth))
            if shared is not None:
                self._rule_keys[rule] = shared
                return shared
        # Lexemes (call-free rules) recur across properties and schemas: their
        # information is shared by content; a structural rule is its engine's own.
        counted = None
        if automaton.lengths is not None:
            known_states = _count_cache.get(signature)
            if known_states is None:
                known_states = (_count_states(automaton, self._plain().flat.reshape(-1, 256)),)
                size = 64 + 16 * trans.shape[0]
                _count_cache.put(signature, known_states, size)
            if known_states[0] is not None:
                plain_of, chars = known_states[0]
                low, high = automaton.lengths
                counted = _Counted(self._plain(), plain_of, chars, low, high)
        hashes = None
        if counted is None and lexeme:
            # A counted string's states need no hashes: those between characters are
            # keyed by their budget, the others read few bytes.
            hashes = _hash_cache.get((signature, self._depth))
            if hashes is None and rule not in self._hashed:
                hashes = self._hash_lexemes(rule)
        known = _RuleInfo(signature, crossing, trans.reshape(-1), hashes, counted)
        self._rule_keys[rule] = known
        if lexeme and (hashes is not None or counted is not None):
            # (Not without hashes: they may just have been evicted, or be another
            # engine's to compute.)
            _lexeme_infos.put((signature, self._depth), known, 3 * known.flat.nbytes)
        return known

    def _plain(self) -> _RuleInfo:
        """The plain string's rule information (what ``lengths`` rules count over, and
        key lexemes graft onto): one per process and hash depth."""
        known = _plain_infos.get(self._depth)
        if known is None:
            signature, crossing, trans = _content(plain_string_rule())
            hashes = _state_hashes(trans, crossing, (self._depth, self._depth + 1))
            known = _plain_infos[self._depth] = _RuleInfo(
                signature, crossing, trans.reshape(-1), hashes
            )
        return known

    def _signature(self, rule: int) -> tuple[bytes, npt.NDArray[np.bool_], npt.NDArray[np.int32]]:
        """A rule's content signature, crossing states and transitions (memoised)."""
        known = self._signatures.get(rule)
        if known is None:
            automaton = self.network.rules[rule]
            if any(automaton.calls):
                # A structural rule is this schema's own (its calls name this network's
                # rules): it is keyed by engine and rule, not by hashing its table.
                known = _content(automaton, b"rule %d %d" % (self._token, rule))
            else:  # a lexeme's table is shared by every network that uses it
                table = automaton.trans
                memo = _lexeme_contents.get(id(table))
                if memo is not None and memo[0]() is table:
                    known = memo[1]
                else:
                    known = _content(automaton)
                    key = id(table)
                    gone = functools.partial(_forget_table, _lexeme_contents, key)
                    _lexeme_contents[key] = (weakref.ref(table, gone), known)
            self._signatures[rule] = known
        return known

    def _grafted_hashes(
        self, crossing: npt.NDArray[np.bool_], trans: npt.NDArray[np.int32]
    ) -> npt.NDArray[np.uint64] | None:
        """State hashes for a lexeme whose states act exactly as the plain string's
        (:func:`_plain_states`) but for an acyclic part in front of them: a key that
        is not one of the declared names spells a prefix of them (a tree) until it
        falls into the plain string body. The plain part takes the plain string's
        hashes; each other state, from the leaves up, a hash of whether it is
        crossing and of its targets' hashes by byte. That hash says "acts exactly
        alike" (not only for a bounded depth): equal values still mean equal walks,
        shared with the plain string and with equal states of other key lexemes
        ("nam" where only "name" goes on, in any schema). None when no state acts as
        the plain string's, or the rest has a cycle.

        A state's hash sums, over the bytes, the byte's weight times its target's
        hash. A tree state reads like some plain string state (its *model*: the one
        its row agrees with most) but for a few bytes (the next letters of the names,
        the closing quote), so its sum is the model's, taken from a table, corrected
        on those bytes only: the work grows with the tree, not with tree states times
        256 bytes. One pass in plain Python, where hashing takes a pass per depth
        (~130 for Qwen2.5) and was the slowest part of the slowest masks: over the
        benchmark, three networks in four had a key lexeme as the only lexeme left
        to hash.
        """
        plain = self._plain()
        if plain.hashes is None:
            return None
        plain_of = _plain_states(trans, crossing)
        if plain_of is None:
            return None
        sums = _plain_sums(plain.hashes)
        plain_rows = plain.flat.reshape(-1, 256)
        states, count = trans.shape[0], plain_rows.shape[0]
        rest = np.flatnonzero(plain_of < 0)
        # Each target as the plain state it acts as; a tree state as count + itself
        # (never equal to a plain row's entry); dead stays -1.
        as_plain = np.where(plain_of >= 0, plain_of, count + np.arange(states))
        rows = trans[rest]
        mapped = np.where(rows >= 0, as_plain[np.maximum(rows, 0)], -1)
        # The model: the between-characters state, unless the row differs from it in
        # many bytes (the opening quote's state, or inside a multibyte character):
        # then the plain state it agrees with most.
        models = np.full(rest.size, int(plain.flat[_QUOTE]), dtype=np.int64)
        differ = mapped != plain_rows[models]
        far = np.flatnonzero(differ.sum(axis=1) > _FEW_FIXES)
        if far.size:
            agree = (mapped[far, None, :] == plain_rows[None, :, :]).sum(axis=2)
            models[far] = agree.argmax(axis=1)
            differ[far] = mapped[far] != plain_rows[models[far]]
        which, where = np.nonzero(differ)
        # Per state, its two hashes (the plain part's and the dead slot's known).
        extended = np.full((2, states + 1), _DEAD, dtype=np.uint64)
        known = np.flatnonzero(plain_of >= 0)
        extended[:, known] = plain.hashes[:, plain_of[known]]
        low, high = extended.tolist()
        plain_low, plain_high = np.append(plain.hashes, extended[:, -1:], axis=1).tolist()
        # Per tree state: (target, byte weight, the model's target) where they differ.
        fixes: dict[int, list[tuple[int, int, int]]] = {state: [] for state in rest.tolist()}
        rest_list, weights = rest.tolist(), _BYTE_WEIGHT_LIST
        targets, theirs = rows[which, where].tolist(), plain_rows[models[which], where].tolist()
        for index, byte, target, their in zip(
            which.tolist(), where.tolist(), targets, theirs, strict=True
        ):
            fixes[rest_list[index]].append((target, weights[byte], their))
        model_of = dict(zip(rest_list, models.tolist(), strict=True))
        done = bytearray(states + 1)
        done[states] = 1
        for state in known.tolist():
            done[state] = 1
        flags = crossing.tolist()
        for root in rest_list:
            work, busy = [root], set()
            while work:
                state = work[-1]
                if done[state]:
                    work.pop()
                    continue
                waiting = [target for target, _, _ in fixes[state] if not done[target]]
                if waiting:
                    if state in busy:
                        return None  # a cycle outside the part that acts as the plain string
                    busy.add(state)
                    work.extend(waiting)
                    continue
                start = _TREE_CROSSING if flags[state] else _TREE_INNER
                model = model_of[state]
                first, second = sums[0][model] + start, sums[1][model] + start
                for target, weight, their in fixes[state]:
                    first += weight * (low[target] - plain_low[their])
                    second += weight * (high[target] - plain_high[their])
                low[state], high[state] = _mix_int(first), _mix_int(second)
                done[state] = 1
                work.pop()
        return np.array([low[:states], high[:states]], dtype=np.uint64)

    def _key_hashes(
        self, names: tuple[str, ...], crossing: npt.NDArray[np.bool_], trans: npt.NDArray[np.int32]
    ) -> npt.NDArray[np.uint64] | None:
        """:meth:`_grafted_hashes` of a key lexeme (``RuleDFA.keys``), the same values
        worked out from its names: none of that method's search for the part acting as
        the plain string, nor its comparison of every row with a plain one. The layout
        is :func:`extra_key_body`'s (checked by the size, the plain body's
        between-characters row and each name's letters; None where it is not there):
        the plain part takes the plain string's hashes, the escape states the
        values they have in every key lexeme (:meth:`_key_escapes`), and each prefix's
        state, from the longest prefixes up, the between-characters state's sum
        corrected on the bytes where a prefix reads otherwise (a state's hash does not
        depend on the plain state its sum is corrected from, see
        :meth:`_grafted_hashes`): the next letters of the names, the backslash, and the
        closing quote after a declared name.
        """
        plain = self._plain()
        escapes = self._key_escapes()
        if plain.hashes is None or escapes is None:
            return None
        rows = plain.flat.reshape(-1, 256)
        prefixes = key_prefixes(names)
        shift = len(prefixes) + 4  # (a rule state k of the plain body is k + shift here)
        states, closing = trans.shape[0], rows.shape[0] - 1
        if states != closing + shift + 1:
            return None
        between = int(rows[0, _QUOTE])
        ours = trans[between + shift]
        if not np.array_equal(ours, np.where(rows[between] >= 0, rows[between] + shift, -1)):
            return None
        backslash, after = int(rows[between, _BACKSLASH]), int(rows[between, _QUOTE])
        plain_low, plain_high = plain.hashes.tolist()
        sums = _plain_sums(plain.hashes)
        low = [0] * (shift + 1) + plain_low[1:]
        high = [0] * (shift + 1) + plain_high[1:]
        low[shift - 3 : shift + 1], high[shift - 3 : shift + 1] = escapes
        node = {prefix: index + 1 for index, prefix in enumerate(prefixes)}
        declared = set(names)
        letters: dict[str, set[str]] = {}  # per prefix, the letters that go on in a name
        table = memoryview(trans.reshape(-1))  # type: ignore[arg-type]
        for name in names:
            for length in range(len(name)):
                prefix, letter = name[:length], name[length]
                if table[node[prefix] * 256 + ord(letter)] != node[prefix + letter]:
                    return None
                letters.setdefault(prefix, set()).add(letter)
        weights, flags = _BYTE_WEIGHT_LIST, crossing.tolist()
        fixed_low = weights[_BACKSLASH] * (low[shift - 3] - plain_low[backslash])
        fixed_high = weights[_BACKSLASH] * (high[shift - 3] - plain_high[backslash])
        ended_low = weights[_QUOTE] * (int(_DEAD) - plain_low[after])
        ended_high = weights[_QUOTE] * (int(_DEAD) - plain_high[after])
        # (Longest first: a prefix's next states are hashed before it.)
        for prefix in sorted(prefixes, key=len, reverse=True):
            state = node[prefix]
            start = _TREE_CROSSING if flags[state] else _TREE_INNER
            first = sums[0][between] + start + fixed_low
            second = sums[1][between] + start + fixed_high
            if prefix in declared:
                first += ended_low
                second += ended_high
            for letter in letters.get(prefix, ()):
                child, weight = node[prefix + letter], weights[ord(letter)]
                first += weight * (low[child] - plain_low[between])
                second += weight * (high[child] - plain_high[between])
            low[state], high[state] = _mix_int(first), _mix_int(second)
        # State 0 reads the opening quote only, into the empty prefix's state.
        start = _TREE_CROSSING if flags[0] else _TREE_INNER
        low[0] = _mix_int(start + _DEAD_SUM + weights[_QUOTE] * (low[1] - int(_DEAD)))
        high[0] = _mix_int(start + _DEAD_SUM + weights[_QUOTE] * (high[1] - int(_DEAD)))
        return np.array([low, high], dtype=np.uint64)

    def _key_escapes(self) -> tuple[list[int], list[int]] | None:
        """The hashes of the four escape states of a key lexeme (after ``\\``,
        ``\\u``, ``\\u0``, ``\\u00``): alike in every key lexeme, they are those of the
        key lexeme of no names, grafted once per process and hash depth."""
        known = _KEY_ESCAPES.get(self._depth)
        if known is None:
            body = extra_key_body(())
            if body is None:  # pragma: no cover - no names are always plain
                return None
            lexeme = quoted_rule("key", body)
            hashes = self._grafted_hashes(_facts(lexeme).crossing, lexeme.trans)
            if hashes is None:
                return None
            low, high = hashes[:, 2:6].tolist()
            known = _KEY_ESCAPES[self._depth] = (low, high)
        return known

    def _hash_lexemes(self, rule: int) -> npt.NDArray[np.uint64] | None:
        """The state hashes of lexeme ``rule``, computed in one pass with those of the
        network's other lexemes not hashed yet (within ``_HASH_BUDGET``): a pass costs
        mostly per depth step, so one for all of a schema's lexemes beats one each
        (~20 % less hashing time over the benchmark). Each lexeme's hashes are cached
        by its signature; None when ``rule`` is too big to hash. A lexeme that acts
        as the plain string but for an acyclic part is hashed alone, without a pass
        per depth: from its names when the compiler marked it as a key lexeme
        (:meth:`_key_hashes`), else by a graft (:meth:`_grafted_hashes`)."""
        depths = (self._depth, self._depth + 1)
        signature, crossing, trans = self._signature(rule)
        names = self.network.rules[rule].keys
        grafted = None if names is None else self._key_hashes(names, crossing, trans)
        if grafted is None:
            grafted = self._grafted_hashes(crossing, trans)
        if grafted is not None:
            self._hashed.add(rule)
            _hash_cache.put((signature, self._depth), grafted, grafted.nbytes + 64)
            return grafted
        batch, total = [rule], trans.shape[0]
        for other in self._lexemes:
            automaton = self.network.rules[other]
            if other == rule or other in self._hashed or automaton.lengths:
                continue  # (counted strings are not hashed, see _rule_key)
            if automaton.n_states > _BATCH_STATES:
                continue  # (hashed when it needs them: see _BATCH_STATES)
            signature, crossing, trans = self._signature(other)
            if _plain_loops(trans, crossing).size:
                continue  # (its hashes are grafted when it needs them)
            fits = (total + trans.shape[0]) * depths[-1] <= _HASH_BUDGET
            if fits and _hash_cache.get((signature, self._depth)) is None:
                batch.append(other)
                total += trans.shape[0]
        parts = [self._signature(member) for member in batch]
        starts = np.cumsum([0, *(trans.shape[0] for _, _, trans in parts)])
        # (int32 throughout: the tables are copied once each, not widened and narrowed.)
        joined = [
            np.where(t >= 0, t + np.int32(start), np.int32(-1))
            for (_, _, t), start in zip(parts, starts[:-1].tolist(), strict=True)
        ]
        crossing = np.concatenate([c for _, c, _ in parts])
        hashes = _state_hashes(np.concatenate(joined), crossing, depths)
        if hashes is None:  # the batch is too big for another bound: this lexeme alone
            batch, parts = [rule], parts[:1]
            hashes = _state_hashes(parts[0][2], parts[0][1], depths)
        self._hashed.update(batch)
        if hashes is None:
            return None
        own = [
            np.ascontiguousarray(hashes[:, starts[k] : starts[k + 1]]) for k in range(len(parts))
        ]
        for (signature, _, _), values in zip(parts, own, strict=True):
            _hash_cache.put((signature, self._depth), values, values.nbytes + 64)
        return own[0]

    def walk(self, rule: int, state: int) -> _Walk:
        """The vocabulary walk of ``(rule, state)``.

        The rule-independent part (which tokens stay inside, which pass a call or
        return point and where) is cached process-wide by the state's behaviour hash
        (or the rule's content). A lexeme's walk is that part with all its boundary
        tokens in one group (see :class:`_Walk`), cached by the same key: shared by
        every state of any lexeme that acts alike. A structural rule's boundary tokens
        are grouped by the state where each passed its call or return point, replayed
        in this rule, and its walk is this engine's own.
        """
        info = self._rule_key(rule)
        lexeme = rule in self._lexeme_set
        if lexeme:
            shared_key, _ = self._shared_key(info, state)
            local_key = (shared_key[0], b"return " + shared_key[1], shared_key[2])
        else:
            local_key = (self.vocabulary.fingerprint, info.signature, state)
        local = _local_walk_cache.get(local_key)
        if local is not None:
            return _Walk.unpack(local)
        shared = self._shared_walk(info, state, patch=True)
        bounds, trie = shared.bounds, self._index.trie
        groups: list[tuple[int, Following]] = []
        if bounds.size and lexeme:
            groups.append((_RETURN, trie.following(bounds)))
        elif bounds.size:
            stops = self._replay(info.flat, state, bounds.lo, bounds.col)
            order = np.argsort(stops, kind="stable")
            stops = stops[order]
            edges = [0, *(np.diff(stops).nonzero()[0] + 1).tolist(), stops.size]
            for begin, end in itertools.pairwise(edges):
                part = bounds.take(order[begin:end])
                groups.append((int(stops[begin]), trie.following(part)))
        walk = _Walk(shared.inside, shared.dense, tuple(groups))
        _local_walk_cache.put(local_key, walk.pack(), walk.nbytes)
        return walk

    def _shared_walk(self, info: _RuleInfo, state: int, *, patch: bool) -> _SharedWalk:
        """The rule-independent part of a walk, from the cache or computed (``patch``:
        from a neighbour state's walk when the two differ on few tokens)."""
        key, budget = self._shared_key(info, state)
        packed = _walk_cache.get(key)
        if packed is not None:
            return _SharedWalk.unpack(packed)
        if budget is not None:
            assert info.counted is not None
            shared = self._counted_walk(info.counted.plain, *budget)
        else:
            shared = (self._patched_walk(info, state) if patch else None) or self._compute_walk(
                info, state
            )
        _walk_cache.put(key, shared.pack(), shared.nbytes)
        return shared

    def _shared_key(
        self, info: _RuleInfo, state: int
    ) -> tuple[tuple[str, bytes, int], tuple[int, int] | None]:
        """The key of a state's shared walk, and its character budget (see
        :meth:`_budget`) for a state of a counted string."""
        fingerprint = self.vocabulary.fingerprint
        budget = None if info.counted is None else self._budget(info.counted, state)
        if budget is not None:
            return (fingerprint, b"chars", budget[0] * 1024 + budget[1]), budget
        if info.hashes is None:
            return (fingerprint, info.signature, state), None
        return (fingerprint, b"", int(info.hashes[1, state])), None

    def _budget(self, counted: _Counted, state: int) -> tuple[int, int] | None:
        """For a state of a string with length bounds that is between characters: the
        most characters a token may still begin, and the fewest it must begin before
        closing the string (clipped to what a token can hold: states far from their
        bounds share one walk, whatever their lexeme). None for the other states."""
        if counted.plain_of[state] != counted.between:
            return None
        begun, cap = int(counted.chars[state]), self._depth
        most = cap if counted.high is None else min(counted.high - begun, cap)
        return most, min(max(counted.low - begun, 0), cap + 1)

    def _counted_walk(self, plain: _RuleInfo, most: int, least: int) -> _SharedWalk:
        """The walk of a between-characters state of a string with length bounds (see
        :meth:`_budget`): the plain string's walk less the tokens that begin more than
        ``most`` characters or close the string after fewer than ``least``. A few
        vector operations over the vocabulary: a trie walk costs ~10x more, and every
        state within a token's length of a bound needs its own."""
        between = int(plain.flat[_QUOTE])
        base = self._shared_walk(plain, between, patch=True)
        counts = self._char_counts(plain)
        keep = (counts.chars >= 0) & (counts.chars <= most)
        if least > 0:
            keep &= ~counts.closed | (counts.chars >= least)
        at_close = counts.at_nodes[self._index.trie.nodes(base.bounds)]
        bounds = (at_close >= least) & (at_close <= most)
        return self._shared(self._ids[keep.nonzero()[0]], base.bounds.take(bounds))

    def _char_counts(self, plain: _RuleInfo) -> _CharCounts:
        """What every token does from the plain string's between-characters state (see
        :class:`_CharCounts`): one replay of the token trie, cached per vocabulary."""
        key = self.vocabulary.fingerprint
        known = _char_counts.get(key)
        if known is not None:
            return known
        dead = plain.crossing.size
        closing = dead - 1  # the plain string's last state: after the closing quote
        table, _ = plain.dead()
        begins = np.zeros(table.size, dtype=np.int16)
        begins[: plain.flat.size] = _begins(plain.flat.reshape(-1, 256)).reshape(-1)
        trie = self._index.trie
        states, chars = trie.replay(table, int(plain.flat[_QUOTE]), begins)
        ends = trie.end_nodes
        at_end = states[ends]
        inside = np.where(at_end != dead, chars[ends], -1).astype(np.int16)
        known = _CharCounts(inside, at_end == closing, chars)
        _char_counts.put(key, known, known.nbytes)
        return known

    def _patched_walk(self, info: _RuleInfo, state: int) -> _SharedWalk | None:
        """The walk of a wide state as its *twin*'s walk with a few subtrees redone.

        The twin is the state most of this state's bytes lead to (a key still
        spelling a declared name, say, goes where the plain key body goes on every
        byte but the name's next one and the closing quote). Tokens whose first byte
        leads both to one state fare alike; the token trie is followed from the
        others, two states in step, down to where the two walks part
        (:meth:`TokenTrie.diverging`), and only the tokens below those nodes are
        walked again. None where that does not pay (a narrow state, no twin, many
        differing bytes or a wide parting).
        """
        flat, offsets = info.flat, self._offsets
        row = flat[state * 256 : state * 256 + 256]
        live = row[row >= 0]
        if live.size < _PATCH_MIN_BYTES:
            return None
        twin = int(np.bincount(live).argmax())  # (the smallest of the most frequent)
        if twin == state:
            return None
        twin_row = flat[twin * 256 : twin * 256 + 256]
        differ = ((row != twin_row) & (offsets[1:] > offsets[:-1])).nonzero()[0]
        if differ.size > _PATCH_MAX_BYTES:
            return None
        trie, dead = self._index.trie, info.crossing.size
        table, crossing = info.dead()
        parted = trie.diverging(
            table,
            dead,
            crossing,
            trie.first_nodes[differ].tolist(),
            np.where(row[differ] >= 0, row[differ], dead).tolist(),
            np.where(twin_row[differ] >= 0, twin_row[differ], dead).tolist(),
            _PATCH_MAX_PAIRS,
        )
        if parted is None:
            return None
        base = self._shared_walk(info, twin, patch=False)
        return self._patch(base, info, parted) if parted else base

    def _patch(
        self, base: _SharedWalk, info: _RuleInfo, parted: list[tuple[int, int, int]]
    ) -> _SharedWalk:
        """``base`` with the tokens below each parting node walked again from our state
        there: their inside bits and their boundary entries from the node's depth on
        are replaced (entries above it are on the shared path, hence equal)."""
        trie, dead = self._index.trie, info.crossing.size
        removed: list[Rows] = []
        added: list[Rows] = []
        bounds = base.bounds
        keep = np.ones(bounds.size, dtype=np.bool_)
        found_bounds: list[Boundaries] = []
        by_depth: dict[int, tuple[list[int], list[int]]] = {}
        for depth, node, ours in parted:
            level = trie.levels[depth - 1]
            lo, hi = int(level.lo[node]), int(level.hi[node])
            removed.append(self._ids[lo:hi])
            keep &= ~((bounds.lo >= lo) & (bounds.lo < hi) & (bounds.col >= depth))
            if ours != dead:
                nodes, states = by_depth.setdefault(depth, ([], []))
                nodes.append(node)
                states.append(ours)
        table, crossing = info.dead()
        for depth, (nodes, states) in by_depth.items():
            found = trie.walk(
                table,
                dead,
                crossing,
                np.array(nodes, dtype=np.int64),
                np.array(states, dtype=np.int64),
                info.reads,
                depth=depth,
            )
            added.append(self._ids[found.inside])
            found_bounds.append(found.bounds)
        size = self.vocabulary.size
        gone = np.concatenate(removed)
        new = np.concatenate(added) if added else np.zeros(0, dtype=np.int64)
        inside: npt.NDArray[np.uint8] | npt.NDArray[np.int32]
        if base.dense:
            packed: npt.NDArray[np.uint8] = base.inside  # type: ignore[assignment]
            bits = np.unpackbits(packed, count=size).view(np.bool_)
            bits[gone] = False
            bits[new] = True
            inside = np.packbits(bits)
        else:
            kept = np.setdiff1d(base.inside, gone.astype(np.int32), assume_unique=True)
            inside = np.union1d(kept, new.astype(np.int32)).astype(np.int32)
        joined = Boundaries.join([bounds.take(keep), *found_bounds])
        if found_bounds:
            joined = joined.take(np.argsort(joined.lo, kind="stable"))
        return _SharedWalk(inside, base.dense, joined)

    def _compute_walk(self, info: _RuleInfo, state: int) -> _SharedWalk:
        """Assemble a walk from per-first-byte segments, computing the missing ones.

        The fate of a token depends only on its bytes and on what the automaton does
        from the state after its first byte, up to the longest token: segments are
        keyed by that state's bounded-depth hash (see :func:`_state_hashes`), so they
        are shared by every state, rule and schema that behaves alike on the next
        bytes (a plain string body, the states of a key that left the declared names,
        a long ``maxLength`` string far from its bound, ...). Where a boundary token
        stops is recomputed in this rule's own states.
        """
        flat, hashes = info.flat, info.hashes
        row = flat[state * 256 : state * 256 + 256]
        fingerprint = self.vocabulary.fingerprint
        segments: list[tuple[int, int, _Segment]] = []
        missing: list[tuple[int, int]] = []
        keys: dict[int, tuple[str, bytes, int, int]] = {}
        for byte in (row >= 0).nonzero()[0].tolist():
            if self._offsets[byte] == self._offsets[byte + 1]:
                continue
            target = int(row[byte])
            if hashes is None:
                keys[byte] = (fingerprint, info.signature, target, byte)
            else:
                keys[byte] = (fingerprint, b"", int(hashes[0, target]), byte)
            packed = _segment_cache.get(keys[byte])
            if packed is None:
                missing.append((byte, target))
            else:
                segments.append((byte, target, _Segment.unpack(packed)))
        if len(missing) > _UNSPLIT and not segments:
            # A state unlike any seen (a count state near its bound, say): its segments
            # would rarely serve again, so the walk is kept whole, not split and cached.
            found = self._trie_walk(info, missing)
            return self._shared(self._ids[found.inside], found.bounds)
        if missing:
            for (byte, target), segment in zip(
                missing, self._compute_segments(info, missing), strict=True
            ):
                _segment_cache.put(keys[byte], segment.pack(), segment.nbytes)
                segments.append((byte, target, segment))
        inside: list[npt.NDArray[np.int32]] = []
        bounds: list[Boundaries] = []
        for _, _, segment in sorted(segments, key=lambda item: item[0]):
            inside.append(segment.inside)
            if segment.bounds.size:
                bounds.append(segment.bounds)
        ids = self._ids[np.concatenate(inside)] if inside else np.zeros(0, dtype=np.int64)
        return self._shared(ids, Boundaries.join(bounds))

    def _shared(self, ids: Rows, bounds: Boundaries) -> _SharedWalk:
        """A walk from the ids of the tokens inside and the boundary entries (sorted)."""
        size = self.vocabulary.size
        dense = ids.size * 32 > size  # a bit per id beats 4 bytes per listed id
        packed: npt.NDArray[np.uint8] | npt.NDArray[np.int32]
        if dense:
            bits = np.zeros(size, dtype=np.bool_)
            bits[ids] = True
            packed = np.packbits(bits)
        else:
            packed = np.sort(ids).astype(np.int32)
        return _SharedWalk(packed, dense, bounds)

    def _replay(self, flat: npt.NDArray[np.int32], state: int, positions: Rows, cols: Rows) -> Rows:
        """The states reached from ``state`` reading columns ``0 .. cols - 1`` of each
        token (few bytes in all: stepped in plain Python, cheaper than a vectorised
        step per column)."""
        if int(cols.sum()) <= _FEW_BYTES:
            table = memoryview(flat)  # type: ignore[arg-type]
            data, width = self._flat_bytes, self._width
            reached = []
            for position, col in zip(positions.tolist(), cols.tolist(), strict=True):
                here = state
                for byte in data[position * width : position * width + col]:
                    here = table[here * 256 + byte]
                reached.append(here)
            return np.array(reached, dtype=np.int64)
        states = np.full(positions.size, state, dtype=np.int64)
        for column in range(int(cols.max(initial=1))):
            going = (cols > column).nonzero()[0]
            if not going.size:
                break
            states[going] = flat[states[going] * 256 + self._matrix[positions[going], column]]
        return states

    def _trie_walk(self, info: _RuleInfo, missing: list[tuple[int, int]]) -> TrieWalk:
        """One walk of the token trie for ``(first byte, state after it)`` pairs,
        following live prefixes only (every node of the first levels when wide)."""
        trie = self._index.trie
        nodes = trie.first_nodes[[byte for byte, _ in missing]]
        states = np.array([target for _, target in missing], dtype=np.int64)
        offsets = self._offsets
        wide = sum(int(offsets[byte + 1] - offsets[byte]) for byte, _ in missing) > _WIDE
        dead = info.crossing.size
        table, crossing = info.dead()
        return trie.walk(table, dead, crossing, nodes, states, info.reads, wide=wide)

    def _compute_segments(self, info: _RuleInfo, missing: list[tuple[int, int]]) -> list[_Segment]:
        """The segments of ``(first byte, state after it)`` pairs, from one trie walk."""
        found = self._trie_walk(info, missing)
        offsets = self._offsets
        if len(missing) == 1:
            return [_Segment(found.inside.astype(np.int32), found.bounds)]
        spans = np.array([[offsets[b], offsets[b + 1]] for b, _ in missing])
        cut_in = np.searchsorted(found.inside, spans)
        cut_b = np.searchsorted(found.bounds.lo, spans)
        inside = found.inside.astype(np.int32)
        return [
            _Segment(
                inside[cut_in[k, 0] : cut_in[k, 1]],
                found.bounds.take(slice(cut_b[k, 0], cut_b[k, 1])),
            )
            for k in range(len(missing))
        ]

    # -- per matcher state ----------------------------------------------------------------

    def mask(self, state: State) -> Mask:
        """Allowed token ids for ``state`` as a read-only bool array of ``vocabulary.size``."""
        key = (self._token, state)
        cached = _mask_cache.get(key)
        if cached is not None:
            self.hits += 1
            return cached
        self.misses += 1
        # (Walks list non-empty tokens only, exactly the vocabulary's allowed_base:
        # special and padded ids are never set, but for eos below.)
        allowed: Mask | None = None
        for stack in state:
            if stack:
                allowed = self._add_stack(allowed, stack)
        if allowed is None:
            allowed = np.zeros(self.vocabulary.size, dtype=np.bool_)
        if END in state and self.eos.size:
            allowed[self.eos] = True
        allowed.setflags(write=False)
        _mask_cache.put(key, allowed, allowed.nbytes)
        return allowed

    def _add_stack(self, allowed: Mask | None, stack: Stack) -> Mask:
        """Allow the tokens ``stack`` can read (into ``allowed``; a new mask when
        None, for the first stack of a state), and return the mask."""
        rule, at = stack[-1]
        stacks = self._current_stacks()
        context = stacks.context(stack[:-1], rule)
        found = self._direct(stacks, context, at)
        if found is not None:
            if allowed is None:
                allowed = np.zeros(self.vocabulary.size, dtype=np.bool_)
            if found:
                allowed[self._ids[found]] = True
            return allowed
        walk = self.walk(rule, at)
        if walk.dense:
            bits: npt.NDArray[np.uint8] = walk.inside  # type: ignore[assignment]
            inside = np.unpackbits(bits, count=self.vocabulary.size).view(np.bool_)
            if allowed is None:
                allowed = inside  # (a fresh array: unpackbits copies)
            else:
                np.logical_or(allowed, inside, out=allowed)
        else:
            if allowed is None:
                allowed = np.zeros(self.vocabulary.size, dtype=np.bool_)
            allowed[walk.inside] = True
        for stop, split in walk.groups:
            pairs = stacks.returns(context) if stop == _RETURN else stacks.readers(context, stop)
            if pairs:
                found = stacks.finish(self._rests(split, stacks.readable(pairs)), pairs)
                if found:
                    allowed[self._ids[found]] = True
        return allowed

    def _direct(self, stacks: _Stacks, context: int, state: int) -> list[int] | None:
        """The positions of the tokens the stack ``(context, state)`` reads, when its
        top state reads few bytes: the stack follows the token trie itself (see
        :meth:`TokenTrie.walk_stacks`). None for a wider stack, or when more than
        ``_DIRECT_NODES`` trie nodes and stacks would be live."""
        reads = stacks.reads(context, state)
        if len(reads) > _SMALL_BYTES:
            return None
        trie = self._index.trie
        first = trie.first_node_list
        seeds = [
            (first[byte], *pair)
            for byte in reads
            if first[byte] >= 0
            for pair in stacks.step(context, state, byte)
        ]
        return trie.walk_stacks(
            stacks.tables, stacks.crossings, stacks.reads, stacks.expand, seeds, _DIRECT_NODES
        )

    def _current_stacks(self) -> _Stacks:
        """The engine's stack numbering, replaced by a fresh one once it holds more
        than ``_STACKS`` entries (a caller keeps the one it started with: numbers from
        two numberings are never mixed)."""
        stacks = self._stacks
        if stacks.size > _STACKS:
            with self._lock:
                if self._stacks is stacks:
                    self._stacks = _Stacks(self.reference)
                stacks = self._stacks
        return stacks

    def _rests(self, split: Following, readable: npt.NDArray[np.bool_]) -> _Rests:
        """The rests of the tokens of ``split`` whose rest starts with a ``readable``
        byte, memoised by content (the same groups recur across rules and schemas)."""
        key = (split.lo.tobytes(), split.col.tobytes(), readable.tobytes())
        known = _rests.get(key)
        if known is None:
            kept = readable[split.byte].nonzero()[0]
            data, width, lengths = self._flat_bytes, self._width, self._lengths_view
            tokens: list[bytes] = []
            positions: list[int] = []
            for lo, hi, col in zip(
                split.lo[kept].tolist(),
                split.hi[kept].tolist(),
                split.col[kept].tolist(),
                strict=True,
            ):
                for position in range(lo, hi):
                    base = position * width
                    tokens.append(bytes(data[base + col : base + lengths[position]]))
                    positions.append(position)
            known = _Rests.of(tokens, positions)
            size = sum(len(part) for part in key) + 64 * len(known.byte) + 8 * len(positions)
            _rests.put(key, known, size + 64)
        return known

    def advance(self, state: State, token: int) -> State:
        """The state after ``token`` (the empty state: not allowed)."""
        key = (state, token)
        cached = self._next.get(key)
        if cached is not None:
            return cached
        data = self.vocabulary.token_bytes(token)
        nxt = self.reference.feed(state, data) if data else ()
        with self._lock:
            if len(self._next) > 1 << 16:
                self._next.clear()
            self._next[key] = nxt
        return nxt


Pair = tuple[int, int]  # (context, rule state): one parse stack, see _Stacks


class _ReadLists(dict[int, list[int]]):
    """The bytes each state of one automaton reads, ascending (lists shared: never
    to be changed), worked out on first lookup from the state's row as 256 bits.
    A small automaton's rows are bit-packed at once, a big one's row by row (a walk
    visits few of its states). Rows recur (a string body's, a digit's), so the
    lists are memoised by row, process-wide; a new row with few bytes (a structural
    state reads one or two) is read off the bits of one int, others by a NumPy scan
    (~10 us, where the rest takes ~1 us)."""

    def __init__(self, trans: npt.NDArray[np.int32]) -> None:
        super().__init__()
        self.trans = trans
        self.bits: bytes | None = None  # (packed on the first lookup)

    def __missing__(self, state: int) -> list[int]:
        trans = self.trans
        if trans.shape[0] > _PACKED_STATES:
            row = np.packbits(trans[state] >= 0, bitorder="little").tobytes()
        else:
            if self.bits is None:
                self.bits = np.packbits(trans >= 0, axis=1, bitorder="little").tobytes()
            row = self.bits[state * 32 : state * 32 + 32]
        found = self[state] = _byte_list(row, trans[state])
        return found


def _byte_list(bits: bytes, row: npt.NDArray[np.int32]) -> list[int]:
    """The bytes a state reads, ascending, from its row (``row``) packed as 256 bits
    (``bits``, little-endian): memoised by ``bits`` process-wide (shared lists, never
    to be changed); few bytes are read off the bits of one int, more by a NumPy scan."""
    found = _row_reads.get(bits)
    if found is None:
        word = int.from_bytes(bits, "little")
        if word.bit_count() <= _FEW_READS:
            found = []
            while word:
                low = word & -word
                found.append(low.bit_length() - 1)
                word ^= low
        else:
            found = (row >= 0).nonzero()[0].tolist()
        if len(_row_reads) >= _ROWS_KEPT:
            _row_reads.clear()
        _row_reads[bits] = found
    return found


_PACKED_STATES = 512  # automata up to this size have all their rows packed at once
_FEW_READS = 24  # bytes read off a packed row one bit at a time; more: a NumPy scan
_ROWS_KEPT = 1 << 14  # distinct rows memoised (_row_reads; cleared when full)
_row_reads: dict[bytes, list[int]] = {}


@dataclass(frozen=True, slots=True)
class _Facts:
    """What the walks read of one automaton: its crossing states (as flags and as
    0/1 bytes, see :func:`_crossing_states`) and its read lists."""

    crossing: npt.NDArray[np.bool_]
    flags: bytes
    reads: _ReadLists


# Per automaton (lexemes are shared by the networks that use them), its facts.
_facts_of: weakref.WeakKeyDictionary[RuleDFA, _Facts] = weakref.WeakKeyDictionary()
_facts_lock = threading.Lock()


def _facts(rule: RuleDFA) -> _Facts:
    """The automaton's :class:`_Facts`, worked out once per process."""
    with _facts_lock:
        known = _facts_of.get(rule)
    if known is None:
        crossing = _crossing_states(rule)
        crossing.flags.writeable = False  # (shared)
        known = _Facts(crossing, crossing.astype(np.uint8).tobytes(), _ReadLists(rule.trans))
        with _facts_lock:
            known = _facts_of.setdefault(rule, known)
    return known


class _Stacks:
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
        self._reads: list[_ReadLists] = []  # per context, its rule's
        self._readable: dict[tuple[Pair, ...], npt.NDArray[np.bool_]] = {}
        self._facts: dict[int, _Facts] = {}
        self._lock = threading.Lock()

    @property
    def size(self) -> int:
        """Contexts numbered and closures memoised so far."""
        return len(self._rule) + len(self._expanded)

    def context(self, lower: Stack, rule: int) -> int:
        """The number of the context of a stack ``(*lower, (rule, state))``."""
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
            with self._lock:
                known = self._children.get(key)
                if known is None:
                    known = len(self._rule)
                    self.tables.append(self.reference.table(rule))
                    self.crossings.append(facts.flags)
                    self._reads.append(facts.reads)
                    self._parent.append(parent)
                    self._back.append(back)
                    self._depth.append(self._depth[parent] + 1 if parent >= 0 else 1)
                    self._rule.append(rule)
                    self._children[key] = known
        return known

    def stack(self, context: int, state: int) -> Stack:
        """The stack a pair stands for (``()``: the end of the document)."""
        frames: list[tuple[int, int]] = []
        while context >= 0:
            frames.append((self._rule[context], state))
            context, state = self._parent[context], self._back[context]
        return tuple(reversed(frames))

    def _rule_facts(self, rule: int) -> _Facts:
        known = self._facts.get(rule)
        if known is None:
            known = self._facts[rule] = _facts(self.reference.network.rules[rule])
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
        key = (context, state)
        known = self._expanded.get(key)
        if known is None:
            reads, calls, accepting = self.reference.rule_lists()
            limit = self.reference.max_depth
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
                if self._depth[here] < limit:
                    for callee, back in calls[rule][at]:
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
        own = (context, state)
        return tuple(pair for pair in self.expand(context, state) if pair[0] >= 0 and pair != own)

    def returns(self, context: int) -> tuple[Pair, ...]:
        """The stacks that read on after the top rule of the context returns: the
        parent's stack, closed (the end of the document left out)."""
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

    def finish(self, rests: _Rests, pairs: tuple[Pair, ...]) -> list[int]:
        """The positions of the tokens whose rest one of ``pairs`` reads to its end:
        the stacks walk the rests' trie, one step per node for all the tokens below."""
        tables, crossings, expand = self.tables, self.crossings, self.expand
        byte_of, kids, ends = rests.byte, rests.kids, rests.ends
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


# A stack numbering holding more contexts and closures than this is replaced.
_STACKS = 1 << 15


class Matcher:
    """One sequence's position in the schema. Cheap to create; not thread-safe.

    ``mask()`` → which token ids may come next (EOS exactly when the document may
    end); ``advance(id)`` → False (state unchanged) if the token is not allowed;
    ``is_finished()`` → an end-of-sequence token was accepted; ``rollback(n)``
    undoes the last ``n`` advances; ``forced_bytes()`` → the bytes that must come
    next whatever the model does (for fast-forward).
    """

    def __init__(self, engine: MaskEngine) -> None:
        self._engine = engine
        self._history: list[State] = [engine.reference.initial()]
        self._finished: list[bool] = [False]

    @property
    def state(self) -> State:
        return self._history[-1]

    @property
    def engine(self) -> MaskEngine:
        """The mask engine this matcher reads (shared by its schema's matchers)."""
        return self._engine

    def mask(self) -> Mask:
        if self._finished[-1]:
            return np.zeros(self._engine.vocabulary.size, dtype=np.bool_)
        return self._engine.mask(self.state)

    def advance(self, token: int) -> bool:
        if self._finished[-1]:
            return False
        if token in self._engine.vocabulary.eos_ids:
            if END not in self.state:
                return False
            self._history.append(self.state)
            self._finished.append(True)
            return True
        nxt = self._engine.advance(self.state, token)
        if not nxt:
            return False
        self._history.append(nxt)
        self._finished.append(False)
        return True

    def is_finished(self) -> bool:
        return self._finished[-1]

    def can_end(self) -> bool:
        """A complete document has been produced (EOS would be accepted now)."""
        return END in self.state

    def rollback(self, count: int = 1) -> None:
        if count < 0 or count >= len(self._history):
            raise ValueError(f"cannot roll back {count} of {len(self._history) - 1} tokens")
        if count:
            del self._history[-count:]
            del self._finished[-count:]

    def forced_bytes(self) -> bytes:
        """The bytes every continuation starts with (empty when there is a choice)."""
        reference = self._engine.reference
        state, out = self.state, bytearray()
        while state and END not in state:
            allowed = np.flatnonzero(reference.allowed_bytes(state))
            if allowed.size != 1:
                break
            out.append(int(allowed[0]))
            state = reference.step(state, int(allowed[0]))
        return bytes(out)
