"""Stage 5: masks per matcher state, cached; :class:`MaskEngine` puts the stages together.

A matcher state is the reference matcher's closed set of parse stacks. Its mask is
the union over its stacks: a stack that reads few bytes walks the token trie itself
(:func:`~jsonmode.decoding.engine.boundary._direct`); any other takes its top
``(rule, state)``'s walk (:mod:`~jsonmode.decoding.engine.walk`), allows the tokens
inside, and finishes the boundary groups from the stack
(:mod:`~jsonmode.decoding.engine.boundary`). Masks are cached per engine and state,
process-wide (JSON generation revisits the same states constantly, across steps,
sequences and requests).

Cost: a cached mask is a lookup (~1 us); over the decoder benchmark's sample, first
visits included, a mask call takes ~50 us on average and ~0.5 ms at the 99th
percentile (Qwen2.5, this 2-core machine). Memory is bounded by the process-wide
budgets of :func:`configure_caches`. Thread-safe: one engine serves any number of
matchers on any threads.
"""

from __future__ import annotations

import itertools
import threading

import numpy as np
import numpy.typing as npt

from jsonmode.decoding.automaton import Network
from jsonmode.decoding.engine.boundary import _direct, _group_rests, _Stacks
from jsonmode.decoding.engine.facts import _token_index
from jsonmode.decoding.engine.rules import _Rules
from jsonmode.decoding.engine.segments import _segment_cache
from jsonmode.decoding.engine.walk import _RETURN, _local_walk_cache, _Walk, _walk_cache, _Walks
from jsonmode.decoding.lru import Lru
from jsonmode.decoding.reference import END, ReferenceMatcher, Stack, State
from jsonmode.decoding.vocabulary import Vocabulary

__all__ = ["Mask", "MaskEngine", "configure_caches"]

Mask = npt.NDArray[np.bool_]

# Masks by engine and state (a mask costs vocabulary.size bytes).
_mask_cache: Lru[tuple[int, State], Mask] = Lru(64 << 20)
_engine_ids = itertools.count()
# A stack numbering holding more contexts and closures than this is replaced.
_STACKS = 1 << 15


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


class MaskEngine:
    """Mask computation for one network and one vocabulary. Thread-safe.

    Its parts, one per stage: ``_rules`` (what the walks read of each rule, with its
    state hashes), ``_walks`` (each ``(rule, state)``'s walk, assembled from segments
    or patched), and the stack numbering that finishes boundary tokens (``_stacks``).

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
        self._ids = index.ids
        # (State hashes look as far as the longest token: see _Rules.)
        self._rules = _Rules(network, self._token, index.longest)
        self._walks = _Walks(self._rules, vocabulary, index)
        self._next: dict[tuple[State, int], State] = {}
        self._stacks = _Stacks(self.reference)
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def walk(self, rule: int, state: int) -> _Walk:
        """The vocabulary walk of ``(rule, state)`` (see :meth:`_Walks.walk`)."""
        return self._walks.walk(rule, state)

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
        if (END in state or (state and not allowed.any())) and self.eos.size:
            # (A live state no token continues: only where a grammar's recursion
            # must nest past max_nesting_depth. End-of-sequence lets the row end
            # there, the text judged incomplete, rather than leaving nothing to
            # sample from; see Matcher.advance.)
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
        found = _direct(self._index.trie, stacks, context, at)
        if found is not None:
            if allowed is None:
                allowed = np.zeros(self.vocabulary.size, dtype=np.bool_)
            if found:
                allowed[self._ids[found]] = True
            return allowed
        walk = self._walks.walk(rule, at)
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
                rests = _group_rests(self._index, split, stacks.readable(pairs))
                found = stacks.finish(rests, pairs)
                if found:
                    allowed[self._ids[found]] = True
        return allowed

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
