"""Stage 5: masks per matcher state, cached; :class:`MaskEngine` puts the stages together.

A matcher state is the reference matcher's closed set of parse stacks. Its mask is
the union over its stacks: a stack that reads few bytes walks the token trie itself
(:func:`~jsonmode.decoding.engine.boundary.direct`); any other takes its top
``(rule, state)``'s walk (:mod:`~jsonmode.decoding.engine.walk`), allows the tokens
inside, and finishes the boundary groups from the stack
(:mod:`~jsonmode.decoding.engine.boundary`). Masks are cached per engine and state,
process-wide (JSON generation revisits the same states constantly, across steps,
sequences and requests).

Masks are built and kept as bits (:func:`~jsonmode.decoding.engine.facts.pack_flags`:
a bit per token, 19 KB for Qwen2.5's vocabulary, where a bool array takes 152 KB):
a dense walk's tokens join by a bitwise or, a few ids are set one by one.
:meth:`MaskEngine.bits` hands them out as they are (what ``Matcher.fill_bitmask``
copies into a caller's token bitmask); :meth:`MaskEngine.mask` unpacks them into the
bool array ``Matcher.mask()`` returns, keeping the most recent.

With the compiled core (:mod:`jsonmode.native`), a miss assembles its bits in C
(``jsonmode._native.MissAssembler``, csrc/r3miss_assemble.c): the same stacks numbered,
the same direct walks, walks, groups and finishes, in the same order, into a C bit
buffer; what stays in Python is a walk the first time the engine needs its
``(rule, state)`` (kept after that in a per-engine memo of at most ``_MISS_WALK_BYTES``)
and a group's rests the first time per readable bytes. :meth:`MaskEngine._assemble`
stays the reference and the fallback.

Cost: a cached mask is a lookup (~1 us); over the decoder benchmark's sample, first
visits included, a bitmask takes ~50 us on average and ~0.5 ms at the 99th
percentile (Qwen2.5, this 2-core machine); a bool mask not kept as such costs an
unpack on top (~10-30 us). Memory is bounded by the process-wide budgets of
:func:`configure_caches`. Thread-safe: one engine serves any number of matchers on
any threads.
"""

from __future__ import annotations

import functools
import itertools
import threading
import weakref
from typing import Any

import numpy as np
import numpy.typing as npt

from jsonmode import native
from jsonmode.decoding.automata.network import Network
from jsonmode.decoding.engine.boundary import Rests, Stacks, direct, group_form, rests_lists
from jsonmode.decoding.engine.facts import (
    Bits,
    TokenIndex,
    bits_size,
    set_ids,
    token_index,
    unpack_bits,
)
from jsonmode.decoding.engine.rules import Rules
from jsonmode.decoding.engine.segments import segment_cache
from jsonmode.decoding.engine.walk import RETURN, Walk, Walks, local_walk_cache, walk_cache
from jsonmode.decoding.reference import END, ReferenceMatcher, Stack, State
from jsonmode.decoding.vocabulary import Vocabulary
from jsonmode.lru import Lru

__all__ = ["Mask", "MaskEngine", "configure_caches"]

Mask = npt.NDArray[np.bool_]

# Masks by engine and state, as bits (see facts.pack_flags: vocabulary.size / 8 bytes
# each); and the most recently asked of them as bool arrays, for ``mask()`` (8x more).
_bits_cache: Lru[tuple[int, State], Bits] = Lru(32 << 20)
_mask_cache: Lru[tuple[int, State], Mask] = Lru(64 << 20)
_engine_ids = itertools.count()
_primed: weakref.WeakSet[TokenIndex] = weakref.WeakSet()  # indexes of primed vocabularies
# A stack numbering holding more contexts and closures than this is replaced.
_STACKS = 1 << 15
# The walks a compiled miss keeps per engine by (rule, state), in bytes (see _walk_entry).
_MISS_WALK_BYTES = 4 << 20


def configure_caches(
    *,
    walk_bytes: int | None = None,
    segment_bytes: int | None = None,
    mask_bytes: int | None = None,
) -> None:
    """Set the process-wide cache budgets (bytes). Defaults: 64 MiB of walks (a quarter
    shared across rules and schemas, the rest per rule state), 64 MiB of segments and 96
    MiB of masks (a third as bits, the rest as the bool arrays of the masks most
    recently asked for by :meth:`MaskEngine.mask`). With the compiler's lexeme caches
    (64 MiB each for expressions and finished lexeme automata, smaller budgets for key
    automata, structural rules and their parts), the fixed smaller ones here (lexeme
    tables and hashes, counted strings) and the per-engine maps, the decoder's memory
    stays bounded however many schemas a process serves (~400 MB peak over the
    300-schema benchmark with Qwen2.5's vocabulary; every cache of what schemas build
    is bounded by the bytes it holds, not by a count of entries).

    A cached mask costs ``vocabulary.size / 8`` bytes as bits (19 KB for Qwen2.5),
    ``vocabulary.size`` as a bool array; a cached walk as much as a mask as bits plus its
    boundary tokens; a segment about a byte per token that starts with its byte.
    Lowering a budget evicts at the next insert.
    """
    if walk_bytes is not None:
        walk_cache.budget = int(walk_bytes) // 4
        local_walk_cache.budget = int(walk_bytes) - int(walk_bytes) // 4
    if segment_bytes is not None:
        segment_cache.budget = int(segment_bytes)
    if mask_bytes is not None:
        _bits_cache.budget = int(mask_bytes) // 3
        _mask_cache.budget = int(mask_bytes) - int(mask_bytes) // 3


class MaskEngine:
    """Mask computation for one network and one vocabulary. Thread-safe.

    Its parts, one per stage: ``_rules`` (what the walks read of each rule, with its
    state hashes), ``_walks`` (each ``(rule, state)``'s walk, assembled from segments
    or patched), and the stack numbering that finishes boundary tokens (``_stacks``).

    Memory is bounded by the process-wide budgets of :func:`configure_caches`; the
    per-engine maps (``advance`` transitions, rule signatures) are bounded too.
    ``hits`` / ``misses`` count mask-cache lookups.
    """

    def __init__(
        self,
        network: Network,
        vocabulary: Vocabulary,
        *,
        max_depth: int = 64,
        levels: bool = False,
    ) -> None:
        self.network = network
        self.vocabulary = vocabulary
        self.reference = ReferenceMatcher(network, max_depth=max_depth, levels=levels)
        self.eos = np.array(sorted(vocabulary.eos_ids), dtype=np.int64)
        self._token = next(_engine_ids)
        index = token_index(vocabulary)
        self._index = index
        self._ids = index.ids
        self._size = bits_size(vocabulary.size)
        # (State hashes look as far as the longest token: see Rules.)
        self._rules = Rules(network, index.longest)
        self._walks = Walks(self._rules, vocabulary, index)
        if index not in _primed:
            # Per-vocabulary set-up, with the token index, not left to a first mask:
            # the plain string's walk (what every string and key shares) and what it
            # needs (the clean slice, the per-token character counts), and the run
            # tables of letters (see engine.runs).
            self._walks.prime()
            _primed.add(index)
        self._next: dict[tuple[State, int], State] = {}
        self._stacks = Stacks(self.reference)
        self._lock = threading.Lock()
        self._miss: Any = None  # (the compiled miss, made on first use: see _compiled)
        self.hits = 0
        self.misses = 0

    def walk(self, rule: int, state: int) -> Walk:
        """The vocabulary walk of ``(rule, state)`` (see :meth:`Walks.walk`)."""
        return self._walks.walk(rule, state)

    # -- per matcher state ----------------------------------------------------------------

    def bits(self, state: State) -> Bits:
        """Allowed token ids for ``state`` as read-only bits (see
        :func:`~jsonmode.decoding.engine.facts.pack_flags`: token ``t`` is bit ``t % 32``
        of little-endian 32-bit word ``t // 32``). Cached per state: a hit is a lookup."""
        key = (self._token, state)
        cached = _bits_cache.get(key)
        if cached is not None:
            self.hits += 1
            return cached
        self.misses += 1
        allowed: Bits = self._assemble_bits(state)
        _bits_cache.put(key, allowed, allowed.nbytes)
        return allowed

    def mask(self, state: State) -> Mask:
        """Allowed token ids for ``state`` as a read-only bool array of
        ``vocabulary.size``: kept for the most recent states; else :meth:`bits` unpacked
        when cached; else assembled as bools (a bool array is 8x the memory of bits:
        assembling it directly beats assembling bits and unpacking them)."""
        key = (self._token, state)
        cached = _mask_cache.get(key)
        if cached is not None:
            self.hits += 1
            return cached
        bits = _bits_cache.get((self._token, state))
        if bits is not None:
            self.hits += 1
            allowed = unpack_bits(bits, self.vocabulary.size)
            allowed.setflags(write=False)
        else:
            self.misses += 1
            if self._compiled() is not None:
                allowed = unpack_bits(self._assemble_bits(state), self.vocabulary.size)
                allowed.setflags(write=False)
            else:
                allowed = self._assemble(state, _Flags(self.vocabulary.size, self._ids))
        _mask_cache.put(key, allowed, allowed.nbytes)
        return allowed

    def _compiled(self) -> Any:
        """The compiled miss (``jsonmode._native.MissAssembler``), or None: the
        compiled core is off, or the stack numbering is the pure-Python one."""
        kernels = native.KERNELS
        if kernels is None or self._stacks.core is None:
            return None
        made = self._miss
        if made is None:  # (two threads may both make one: either is kept)
            made = self._miss = kernels.MissAssembler(
                self._index.trie.compiled(kernels),
                self._ids,
                self._size,
                self.eos,
                functools.partial(_walk_entry, self._walks),
                functools.partial(rests_lists, self._index),
                _MISS_WALK_BYTES,
            )
        return made

    def _assemble_bits(self, state: State) -> Bits:
        """The union over ``state``'s stacks as read-only bits: in C where the compiled
        core runs (the same stacks numbered and walks asked for, in the same order, as
        :meth:`_assemble`, which stays the reference), else :meth:`_assemble`."""
        stacks = self._current_stacks()
        compiled = None if stacks.core is None else self._compiled()
        if compiled is None:
            bits: Bits = self._assemble(state, _Bits(self._size, self._ids))
            return bits
        return np.frombuffer(compiled.assemble(stacks.core, state), dtype=np.uint8)

    def _assemble(self, state: State, into: _Union) -> Any:
        """The union over ``state``'s stacks, in ``into``'s form, read-only."""
        # (Walks list non-empty tokens only, exactly the vocabulary's allowed_base:
        # special and padded ids are never set, but for eos below.)
        for stack in state:
            if stack:
                self._add_stack(into, stack)
        if (END in state or (state and not into.set)) and self.eos.size:
            # (A live state no token continues: the nesting bound no longer makes
            # one (no stack is kept that cannot finish within it, see
            # jsonmode.decoding.automata.headroom), but a vocabulary that cannot spell what
            # must follow could. End-of-sequence lets the row end there, the text
            # judged incomplete, rather than leaving nothing to sample from; see
            # Matcher.advance.)
            into.ids(self.eos)
        return into.done()

    def _add_stack(self, into: _Union, stack: Stack) -> None:
        """Allow the tokens ``stack`` can read."""
        rule, at = stack[-1]
        stacks = self._current_stacks()
        context = stacks.context(stack[:-1], rule)
        found = direct(self._index.trie, stacks, context, at, stacks.near[context])
        if found is not None:
            into.positions(found)
            return
        walk = self._walks.walk(rule, at)
        if walk.dense:
            into.dense(walk.inside)  # type: ignore[arg-type]
        else:
            into.ids(walk.inside)
        for stop, split in walk.groups:
            pairs = stacks.returns(context) if stop == RETURN else stacks.readers(context, stop)
            if pairs:
                form = group_form(self._index, split, stacks.readable(pairs))
                if isinstance(form, Rests):
                    found = stacks.finish(form, pairs)
                else:
                    found = stacks.finish_in_trie(self._index.trie, form, pairs)
                into.positions(found)

    def _current_stacks(self) -> Stacks:
        """The engine's stack numbering, replaced by a fresh one once it holds more
        than ``_STACKS`` entries (a caller keeps the one it started with: numbers from
        two numberings are never mixed)."""
        stacks = self._stacks
        if stacks.size > _STACKS:
            with self._lock:
                if self._stacks is stacks:
                    self._stacks = Stacks(self.reference)
                stacks = self._stacks
        return stacks

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


def _walk_entry(
    walks: Walks, rule: int, state: int
) -> tuple[Any, bool, tuple[tuple[int, Any], ...], int]:
    """What the compiled miss keeps of ``(rule, state)``'s walk: its inside tokens,
    whether they are bits, its groups and its size in bytes."""
    walk = walks.walk(rule, state)
    return walk.inside, walk.dense, walk.groups, walk.nbytes


class _Union:
    """A mask assembled stack by stack (``set``: whether anything is allowed yet), as
    a bool per token (:class:`_Flags`) or as bits (:class:`_Bits`).

    Token ids (arrays) and trie positions (lists, mapped to ids through ``table``)
    are gathered and set once, in :meth:`done`: a mask takes a few small sets of ids,
    and each NumPy call costs microseconds whatever its size."""

    dtype: type[np.generic] = np.bool_

    def __init__(self, size: int, table: npt.NDArray[np.int64]) -> None:
        self.size = size
        self.table = table
        self.array: npt.NDArray[Any] | None = None
        self.set = False
        self._ids: list[npt.NDArray[np.integer[Any]]] = []
        self._positions: list[int] = []

    def empty(self) -> npt.NDArray[Any]:
        if self.array is None:
            self.array = np.zeros(self.size, dtype=self.dtype)
        return self.array

    def ids(self, ids: npt.NDArray[np.integer[Any]]) -> None:
        """Allow ``ids``."""
        if ids.size:
            self._ids.append(ids)
            self.set = True

    def positions(self, positions: list[int]) -> None:
        """Allow the tokens at ``positions`` of the token index (ids ``table[positions]``)."""
        if positions:
            self._positions += positions
            self.set = True

    def dense(self, bits: Bits) -> None:
        """Allow the tokens of a dense walk (its bits)."""
        raise NotImplementedError

    def _set(self, array: npt.NDArray[Any], ids: npt.NDArray[np.integer[Any]]) -> None:
        raise NotImplementedError

    def done(self) -> npt.NDArray[Any]:
        array = self.empty()
        gathered = self._ids
        if self._positions:
            gathered.append(self.table[self._positions])
        if gathered:
            self._set(array, gathered[0] if len(gathered) == 1 else np.concatenate(gathered))
        array.setflags(write=False)
        return array


class _Flags(_Union):
    def _set(self, array: npt.NDArray[Any], ids: npt.NDArray[np.integer[Any]]) -> None:
        array[ids] = True

    def dense(self, bits: Bits) -> None:
        flags = unpack_bits(bits, self.size)
        if self.array is None:
            self.array = flags  # (a fresh array: unpacking copies)
        else:
            np.logical_or(self.array, flags, out=self.array)
        self.set = True  # (a dense walk has many tokens)


class _Bits(_Union):
    dtype = np.uint8

    def _set(self, array: npt.NDArray[Any], ids: npt.NDArray[np.integer[Any]]) -> None:
        set_ids(array, ids)

    def dense(self, bits: Bits) -> None:
        if self.array is None:
            self.array = bits.copy()
        else:
            np.bitwise_or(self.array, bits, out=self.array)
        self.set = True  # (a dense walk has many tokens)
