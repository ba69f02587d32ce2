"""Stage 3: what one ``(rule, state)`` decides for the whole vocabulary: its walk.

A :class:`Walk` says which tokens are read entirely inside the rule (allowed
whatever the stack) and which *boundary* tokens pass a point where the rule could
call another rule or return (left to :mod:`~jsonmode.decoding.engine.boundary`,
grouped by that point). Its rule-independent part, a :class:`_SharedWalk`, is shared
process-wide by every state that acts alike (keyed by the state's hash, see
:mod:`~jsonmode.decoding.engine.state`), and found in one of these ways:

- assembled from per-first-byte segments (:mod:`~jsonmode.decoding.engine.segments`);
- for an extra key still spelling a prefix of the declared names, as the plain
  string's walk less the tokens that spell a name's rest and its closing quote
  (:meth:`Walks._key_walk`);
- as a *patch* of its twin's walk, for a wide state that differs from the state most
  of its bytes lead to in few places: only the trie subtrees where the two part are
  walked again (:meth:`Walks._patched_walk`);
- for a state of a string-like lexeme that reads every clean text, as the clean
  slice plus a walk of the other tokens (:mod:`~jsonmode.decoding.engine.slices`);
- for a state that counts a class of bytes (a language tag's letters), by the tokens'
  leading runs of that class: the tokens of the class only by their length, the
  subtrees where a run ends walked alone (:mod:`~jsonmode.decoding.engine.runs`);
- for a string with length bounds only (or a GBNF counted repetition ``'"' X{m,n} '"'``),
  between characters: the plain automaton's walk less the tokens beyond its character
  budget, from per-token character counts (:class:`_CharCounts`, one trie replay per
  vocabulary and plain automaton), keyed by that budget.

Cost: a cached walk costs a lookup and an unpack; a new one a trie walk (up to ~10 ms
for a state that reads most bytes, with Qwen2.5's vocabulary) or, for a patch or a
counted string, a few vector operations over the vocabulary. Walks live in process-wide
byte-bounded caches (``walk_cache``: shared parts, ``local_walk_cache``: walks with
their groups; 64 MiB together by default, see ``configure_caches``). Thread-safe:
one :class:`Walks` per engine, read-only but for thread-safe caches.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from jsonmode import native
from jsonmode.decoding.engine.entries import Boundaries, Following, ranges
from jsonmode.decoding.engine.facts import (
    BIT,
    QUOTE,
    Counted,
    Follow,
    Rows,
    RuleInfo,
    TokenIndex,
    opening_quote,
    pack_flags,
    unpack_bits,
)
from jsonmode.decoding.engine.keyhashes import KeyHashes
from jsonmode.decoding.engine.rules import Rules, character_begins
from jsonmode.decoding.engine.runs import prime_runs, run_walk
from jsonmode.decoding.engine.segments import assemble
from jsonmode.decoding.engine.slices import sliced_walk
from jsonmode.decoding.vocabulary import Vocabulary
from jsonmode.lru import Lru

# Replaying at most this many bytes in all is done in plain Python (see _replay).
_FEW_BYTES = 512
# A lexeme walk's one boundary group stops here (see Walk): its boundary tokens all
# return from the lexeme, whichever of its states they pass.
RETURN = -1
# A state is walked as a patch of its twin's walk (see Walks._patched_walk) when
# it reads at least _PATCH_MIN_BYTES bytes, at most _PATCH_MAX_BYTES of them lead
# elsewhere than the twin's, and at most _PATCH_MAX_PAIRS trie nodes must be followed
# at once to find where the two walks part.
_PATCH_MIN_BYTES = 64
_PATCH_MAX_BYTES = 16
_PATCH_MAX_PAIRS = 64
# Key states memoised per engine as spelling no name's end (see _spells_no_name).
_NAMELESS_KEPT = 1 << 14


@dataclass(frozen=True, slots=True)
class Walk:
    """What one ``(rule automaton, state)`` decides for the whole vocabulary.

    ``inside``: tokens read entirely within the rule (allowed whatever the stack), as
    bits over ids when there are many (``dense``; see ``facts.pack_flags``), else as
    ids. ``groups``: per state where boundary tokens pass a call or return point, those
    tokens split by the byte their rest starts with. A lexeme's walk has one group,
    stopping at ``RETURN``: a lexeme calls nothing, so its boundary tokens return from
    it, and what reads their rest is the caller's continuation whichever state they pass
    (the lexeme's own continuation from that state is in the walk already: the inside
    tokens and the later boundary tokens). So a lexeme's walk is shared by every state
    that acts alike, of any lexeme.
    """

    inside: npt.NDArray[np.uint8] | npt.NDArray[np.int32]
    dense: bool
    groups: tuple[tuple[int, Following], ...]

    @property
    def nbytes(self) -> int:
        return int(self.inside.nbytes) + sum(split.nbytes + 64 for _, split in self.groups)

    def pack(self) -> tuple[object, ...]:
        """A plain tuple of arrays and numbers: the form the caches hold (see
        ``walk_cache``)."""
        groups = tuple((stop, *split.pack()) for stop, split in self.groups)
        return self.inside, self.dense, groups

    @staticmethod
    def unpack(packed: tuple[Any, ...]) -> Walk:
        inside, dense, groups = packed
        return Walk(inside, dense, tuple((g[0], Following(*g[1:])) for g in groups))


@dataclass(frozen=True, slots=True)
class _SharedWalk:
    """The rule-independent part of a walk: tokens inside (as in :class:`Walk`), and
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


@dataclass(frozen=True, slots=True)
class _CharCounts:
    """The tokens read from the plain string's between-characters state: per token
    id, the characters a token begins if it is read to its end (``chars``; -1: it is
    not, or the id is no token of the index) and whether it ends just after the
    closing quote (``closed``); per trie node, the characters begun along its prefix
    (``at_nodes``; where a boundary entry read the closing quote, those before it)."""

    chars: npt.NDArray[np.int16]
    closed: npt.NDArray[np.bool_]
    at_nodes: npt.NDArray[np.int16]

    @property
    def nbytes(self) -> int:
        return int(self.chars.nbytes + self.closed.nbytes + self.at_nodes.nbytes)


# Walks are keyed by vocabulary and by a state's behaviour hash, a lexeme's content and
# state (equal lexemes of different schemas share them), a structural rule's signature
# (its table and crossing states: see Rules.signature) and state, or a counted string's
# budget (see Walks._shared_walk). Walks and segments are held as plain tuples of
# arrays and numbers (their ``pack``): the garbage collector stops tracking those, where
# tens of thousands of dataclass instances would be traversed by every full collection
# (~1 us each, inside mask calls).
walk_cache: Lru[tuple[str, bytes, int], tuple[Any, ...]] = Lru(16 << 20)
local_walk_cache: Lru[tuple[str, bytes, int], tuple[Any, ...]] = Lru(48 << 20)
# By vocabulary and plain automaton (the JSON plain string's, or a counted repetition's).
_char_counts: Lru[tuple[str, bytes], _CharCounts] = Lru(16 << 20)
# By vocabulary: each token id's end node in the trie, and whether the index holds it.
_id_nodes: Lru[str, tuple[Rows, npt.NDArray[np.bool_]]] = Lru(8 << 20)


class Walks:
    """The walks of one network's ``(rule, state)`` pairs over one vocabulary."""

    def __init__(self, rules: Rules, vocabulary: Vocabulary, index: TokenIndex) -> None:
        self._rules = rules
        self.vocabulary = vocabulary
        self._index = index
        self._offsets = index.offsets
        self._matrix = index.matrix
        self._ids = index.ids
        self._nameless: dict[tuple[int, int], bool] = {}  # see _spells_no_name

    def prime(self) -> None:
        """Walk what every schema's strings share, once per vocabulary (set-up): the
        plain string between characters, its clean slice and its per-token character
        counts, the run tables of letters (see :func:`prime_runs`), and the tokens with a
        quote by their text before it (~40 ms for Qwen2.5; they stay in the
        process-wide caches)."""
        plain = self._rules.plain()
        self._shared_walk(plain, int(plain.flat[QUOTE]), patch=True, lexeme=True)
        self._char_counts(plain)
        prime_runs(self._index)
        self._index.quoted  # noqa: B018 (what key lexemes' walks look up)

    def walk(self, rule: int, state: int) -> Walk:
        """The vocabulary walk of ``(rule, state)``.

        The rule-independent part (which tokens stay inside, which pass a call or
        return point and where) is cached process-wide by the state's behaviour hash
        (or the rule's signature). A lexeme's walk is that part with all its boundary
        tokens in one group (see :class:`Walk`), cached by the same key: shared by
        every state of any lexeme that acts alike. A structural rule's boundary tokens
        are grouped by the state where each passed its call or return point, replayed
        in this rule; its walk is cached by its signature and state, shared by every
        network with a rule of its table (the stack it finishes on is the engine's).

        A lexeme whose :meth:`Rules.follow` is known keeps only the boundary tokens
        whose rest starts with a byte that can follow it (a free-text message followed
        by ``"\n"``: ~180 of ~180 000), and its walks are keyed by that set too.
        """
        info = self._rules.info(rule)
        lexeme = rule in self._rules.lexeme_set
        follow = self._rules.follow(rule) if lexeme else None
        if lexeme and isinstance(info.hashes, KeyHashes) and self._spells_no_name(rule, state):
            # (The plain string's walk between characters, less nothing: its own.)
            info = self._rules.plain()
            state = int(info.flat[QUOTE])
            follow = None
        if lexeme:
            shared_key, _ = self._shared_key(info, state, follow)
            local_key = (shared_key[0], b"return " + shared_key[1], shared_key[2])
        else:
            local_key = (self.vocabulary.fingerprint, info.signature, state)
        local = local_walk_cache.get(local_key)
        if local is not None:
            return Walk.unpack(local)
        shared = self._shared_walk(info, state, patch=True, lexeme=lexeme, follow=follow)
        bounds, trie = shared.bounds, self._index.trie
        groups: list[tuple[int, Following]] = []
        if bounds.size and lexeme:
            split = trie.following(bounds)
            if follow is not None:
                split = split.only(follow.flags)
            groups.append((RETURN, split))
        elif bounds.size:
            stops = self._replay(info.flat, state, bounds.lo, bounds.col)
            order = np.argsort(stops, kind="stable")
            stops = stops[order]
            edges = [0, *(np.diff(stops).nonzero()[0] + 1).tolist(), stops.size]
            parts = trie.following_split(bounds.take(order), edges)
            groups.extend(zip(stops[edges[:-1]].tolist(), parts, strict=True))
        walk = Walk(shared.inside, shared.dense, tuple(groups))
        local_walk_cache.put(local_key, walk.pack(), walk.nbytes)
        return walk

    def _shared_walk(
        self,
        info: RuleInfo,
        state: int,
        *,
        patch: bool,
        lexeme: bool,
        follow: Follow | None = None,
    ) -> _SharedWalk:
        """The rule-independent part of a walk, from the cache or computed: for a key
        lexeme's state still spelling a prefix of its names, from the plain string's
        walk (a few vector operations); (``patch``) from a neighbour state's walk when
        the two differ on few tokens (~0.1 ms); else, for a state that takes every
        clean token (a string body, in a lexeme or a structural rule), as the clean
        slice plus a walk of the quoted tokens (~0.3 ms); else, for a state counting a
        class of bytes, by runs (~0.3-0.6 ms where a plain walk takes ~2.5 ms); else
        from segments (up to ~10 ms). With ``follow``, keyed by it, and a walk by runs
        or from segments keeps only the boundary entries it allows (the other ways keep
        every entry: more than needed is never wrong); a counted string's ignores it."""
        key, budget = self._shared_key(info, state, follow)
        packed = walk_cache.get(key)
        if packed is not None:
            return _SharedWalk.unpack(packed)
        if budget is not None:
            assert info.counted is not None
            shared = self._counted_walk(info.counted.plain, *budget)
        else:
            shared = (
                (self._key_walk(info, state) if isinstance(info.hashes, KeyHashes) else None)
                or (self._patched_walk(info, state, lexeme) if patch else None)
                or self._sliced_walk(info, state)
                or self._run_walk(info, state, follow)
                or self._compute_walk(info, state, follow)
            )
        walk_cache.put(key, shared.pack(), shared.nbytes)
        return shared

    def _shared_key(
        self, info: RuleInfo, state: int, follow: Follow | None = None
    ) -> tuple[tuple[str, bytes, int], tuple[int, int] | None]:
        """The key of a state's shared walk (with ``follow``'s tag), and its character
        budget (see :meth:`_budget`) for a state of a counted string (whose key takes no
        tag: its walk keeps every entry)."""
        fingerprint = self.vocabulary.fingerprint
        budget = None if info.counted is None else self._budget(info.counted, state)
        if budget is not None:
            assert info.counted is not None
            chars = b"chars " + info.counted.plain.signature
            return (fingerprint, chars, budget[0] * 1024 + budget[1]), budget
        tag = b"" if follow is None else follow.tag
        if info.hashes is None:
            return (fingerprint, info.signature + tag, state), None
        return (fingerprint, tag, int(info.hashes[1, state])), None

    def _budget(self, counted: Counted, state: int) -> tuple[int, int] | None:
        """For a state of a string with length bounds that is between characters: the
        most characters a token may still begin, and the fewest it must begin before
        closing the string (clipped to what a token can hold: states far from their
        bounds share one walk, whatever their lexeme). None for the other states."""
        if counted.plain_of[state] != counted.between:
            return None
        begun, cap = int(counted.chars[state]), self._rules.depth
        most = cap if counted.high is None else min(counted.high - begun, cap)
        return most, min(max(counted.low - begun, 0), cap + 1)

    def _counted_walk(self, plain: RuleInfo, most: int, least: int) -> _SharedWalk:
        """The walk of a between-characters state of a string with length bounds (see
        :meth:`_budget`): the plain string's walk less the tokens that begin more than
        ``most`` characters or close the string after fewer than ``least``. A few
        vector operations over the vocabulary: a trie walk costs ~10x more, and every
        state within a token's length of a bound needs its own."""
        between = int(plain.flat[opening_quote(plain.flat)])
        base = self._shared_walk(plain, between, patch=True, lexeme=True)
        counts = self._char_counts(plain)
        # (Flags by token id: no gather of the ~130,000 ids kept, no scatter of them.)
        keep = (counts.chars >= 0) & (counts.chars <= most)
        if least > 0:
            keep &= ~counts.closed | (counts.chars >= least)
        at_close = counts.at_nodes[self._index.trie.nodes(base.bounds)]
        bounds = (at_close >= least) & (at_close <= most)
        return self._shared(keep, base.bounds.take(bounds))

    def _char_counts(self, plain: RuleInfo) -> _CharCounts:
        """What every token does from the plain automaton's between-characters state (see
        :class:`_CharCounts`): one replay of the token trie, cached per vocabulary and
        plain automaton (the JSON plain string's, or a counted repetition's)."""
        key = (self.vocabulary.fingerprint, plain.signature)
        known = _char_counts.get(key)
        if known is not None:
            return known
        dead = plain.crossing.size
        closing = dead - 1  # the plain string's last state: after the closing quote
        table, _ = plain.dead()
        begins = np.zeros(table.size, dtype=np.int16)
        begins[: plain.flat.size] = character_begins(plain.flat.reshape(-1, 256)).reshape(-1)
        trie = self._index.trie
        states, chars = trie.replay(table, int(plain.flat[opening_quote(plain.flat)]), begins)
        # (NumPy: gathered straight into token-id order, no scatter of the ~150,000
        # ids. The compiled core scatters them by position in one pass, ~0.7 ms where
        # those gathers and selects cost ~2 ms.)
        kernels = native.KERNELS
        if kernels is not None:
            by_id = np.empty(self.vocabulary.size, dtype=np.int16)
            closed = np.empty(self.vocabulary.size, dtype=np.bool_)
            kernels.r7count_ids(
                states, chars, trie.end_nodes, self._ids, dead, closing, by_id, closed
            )
        else:
            nodes, present = self._id_nodes()
            at_end = states[nodes]
            by_id = np.where(present & (at_end != dead), chars[nodes], np.int16(-1))
            closed = present & (at_end == closing)
        known = _CharCounts(by_id, closed, chars)
        _char_counts.put(key, known, known.nbytes)
        return known

    def _id_nodes(self) -> tuple[Rows, npt.NDArray[np.bool_]]:
        """Per token id, the trie node where the token ends (0 for an id the index
        does not hold) and whether the index holds it: cached per vocabulary (made
        with the plain string's counts at set-up, see :meth:`prime`; the pure-Python
        path's, the compiled core reads the index by position instead)."""
        key = self.vocabulary.fingerprint
        known = _id_nodes.get(key)
        if known is None:
            nodes = np.zeros(self.vocabulary.size, dtype=np.int64)
            nodes[self._ids] = self._index.trie.end_nodes
            present = np.zeros(self.vocabulary.size, dtype=np.bool_)
            present[self._ids] = True
            known = (nodes, present)
            _id_nodes.put(key, known, nodes.nbytes + present.nbytes)
        return known

    def _spells_no_name(self, rule: int, state: int) -> bool:
        """Whether key lexeme ``rule``'s ``state`` still spells a prefix of its names
        but no token spells a name's rest and its closing quote from there: then its
        walk is the plain string's between characters (see :meth:`_key_walk`), and
        shares that walk's cache entries rather than making two of its own (most
        states partway into a name: ~18 us a walk over the benchmark, 3 000 of them).
        Memoised per engine."""
        known = self._nameless.get((rule, state))
        if known is None:
            hashes = self._rules.info(rule).hashes
            assert isinstance(hashes, KeyHashes)
            suffixes = hashes.suffixes(state)
            quoted = self._index.quoted
            known = suffixes is not None and not any(rest in quoted for rest in suffixes)
            if len(self._nameless) >= _NAMELESS_KEPT:
                self._nameless.clear()
            self._nameless[(rule, state)] = known
        return known

    def _key_walk(self, info: RuleInfo, state: int) -> _SharedWalk | None:
        """The walk of a key lexeme's state that still spells a prefix of its names:
        the plain string's walk between characters less the tokens that spell the
        rest of a name and then the closing quote. None for its other states.

        Such a state reads as the plain body between characters but for the names'
        next letters (to the prefixes one letter longer, which read alike) and the
        quote refused after a name (see :class:`KeyHashes`: the table is known to be
        laid out so, by how it was built or checked whole, whenever a lexeme has
        such hashes). So a token fares as from the plain state (the
        same inside, the same boundary point) unless it spells a name's rest and a
        quote: those, found by the text before their first quote, are the whole
        difference. A few vector operations; a patch of the plain walk costs ~0.1 ms.
        """
        hashes = info.hashes
        assert isinstance(hashes, KeyHashes)
        suffixes = hashes.suffixes(state)
        if suffixes is None:
            return None
        plain = self._rules.plain()
        base = self._shared_walk(plain, int(plain.flat[QUOTE]), patch=True, lexeme=True)
        quoted = self._index.quoted
        refused = sorted((*quoted[rest], len(rest) + 1) for rest in suffixes if rest in quoted)
        if not refused:
            return base
        starts, ends, depths = np.array(refused, dtype=np.int64).T
        bounds = base.bounds
        first = np.searchsorted(bounds.lo, starts)
        last = np.searchsorted(bounds.lo, ends)
        # A refused token passes the plain walk's return point just after its first
        # quote: its entries lie within its range, that deep or deeper. Anything else
        # (an entry across a range's edge) is left to the general path.
        before = first[first > 0] - 1
        if (bounds.hi[before] > starts[first > 0]).any():
            return None
        marks = np.zeros(bounds.size + 1, dtype=np.int64)
        np.add.at(marks, first, 1)
        np.add.at(marks, last, -1)
        gone = np.cumsum(marks[:-1]) > 0
        if (bounds.hi[gone] > np.repeat(ends, last - first)).any():
            return None
        if (bounds.col[gone] < np.repeat(depths, last - first)).any():
            return None
        # A refused token that ends at its quote is no boundary token: it is inside.
        positions = ranges(starts, ends)
        whole = self._ids[positions[self._index.lengths[positions] == depths.repeat(ends - starts)]]
        inside = base.inside
        if whole.size and base.dense:
            inside = inside.copy()
            np.bitwise_and.at(inside, whole >> 3, ~BIT[whole & 7])
        elif whole.size:
            inside = np.setdiff1d(inside, whole.astype(np.int32), assume_unique=True)
        return _SharedWalk(inside, base.dense, bounds.take(~gone))

    def _patched_walk(self, info: RuleInfo, state: int, lexeme: bool) -> _SharedWalk | None:
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
        if len(info.reads(state)) < _PATCH_MIN_BYTES:
            return None  # (a narrow state: the bytes it reads, memoised per state)
        flat, offsets = info.flat, self._offsets
        row = flat[state * 256 : state * 256 + 256]
        live = row[row >= 0]
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
        base = self._shared_walk(info, twin, patch=False, lexeme=lexeme)
        return self._patch(base, info, parted) if parted else base

    def _patch(
        self, base: _SharedWalk, info: RuleInfo, parted: list[tuple[int, int, int]]
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
            bits = unpack_bits(packed, size)
            bits[gone] = False
            bits[new] = True
            inside = pack_flags(bits)
        else:
            kept = np.setdiff1d(base.inside, gone.astype(np.int32), assume_unique=True)
            inside = np.union1d(kept, new.astype(np.int32)).astype(np.int32)
        joined = Boundaries.join([bounds.take(keep), *found_bounds])
        if found_bounds:
            joined = joined.take(np.argsort(joined.lo, kind="stable"))
        return _SharedWalk(inside, base.dense, joined)

    def _sliced_walk(self, info: RuleInfo, state: int) -> _SharedWalk | None:
        """The walk of a state that takes every clean token (see
        :mod:`~jsonmode.decoding.engine.slices`): the clean slice plus a walk of the
        others. None for any other state."""
        found = sliced_walk(self._index, self.vocabulary.size, info, state)
        if found is None:
            return None
        flags, bounds = found
        return _SharedWalk(pack_flags(flags), True, bounds)

    def _run_walk(
        self, info: RuleInfo, state: int, follow: Follow | None = None
    ) -> _SharedWalk | None:
        """The walk of a state that counts a class of bytes (a language tag's letters),
        split by the tokens' leading runs of that class (see
        :mod:`~jsonmode.decoding.engine.runs`). None for any other state."""
        flags = None if follow is None else follow.flags
        found = run_walk(self._index, self.vocabulary.size, info, state, flags)
        return None if found is None else self._shared(*found)

    def _compute_walk(
        self, info: RuleInfo, state: int, follow: Follow | None = None
    ) -> _SharedWalk:
        """A walk assembled from per-first-byte segments (:func:`assemble`)."""
        return self._shared(*assemble(self._index, info, state, follow))

    def _shared(self, inside: Rows | npt.NDArray[np.bool_], bounds: Boundaries) -> _SharedWalk:
        """A walk from the tokens inside (their ids, or flags over ids) and the boundary
        entries (sorted): the inside tokens as bits when there are many, as ids when
        few (a bit per id beats 4 bytes per listed id)."""
        size = self.vocabulary.size
        flags = inside.dtype == np.bool_
        count = int(np.count_nonzero(inside)) if flags else int(inside.size)
        if count * 32 <= size:
            ids = np.flatnonzero(inside) if flags else np.sort(inside)
            return _SharedWalk(ids.astype(np.int32), False, bounds)
        if flags:
            bits: npt.NDArray[np.bool_] = inside  # type: ignore[assignment]
        else:
            bits = np.zeros(size, dtype=np.bool_)
            bits[inside] = True
        return _SharedWalk(pack_flags(bits), True, bounds)

    def _replay(self, flat: npt.NDArray[np.int32], state: int, positions: Rows, cols: Rows) -> Rows:
        """The states reached from ``state`` reading columns ``0 .. cols - 1`` of each
        token: in C with the compiled core (``r6replay_states``, one table read a byte);
        else, few bytes in all, stepped in plain Python (cheaper than a vectorised step
        per column), or a vectorised step per column."""
        kernels = native.KERNELS
        if kernels is not None:
            stops = np.empty(positions.size, dtype=np.int64)
            kernels.r6replay_states(
                np.ascontiguousarray(flat, dtype=np.int32),
                state,
                self._matrix,
                np.ascontiguousarray(positions, dtype=np.int64),
                np.ascontiguousarray(cols, dtype=np.int64),
                stops,
            )
            return stops
        if int(cols.sum()) <= _FEW_BYTES:
            table = memoryview(flat)  # type: ignore[arg-type]
            data, width = self._index.flat_bytes, self._index.width
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
