"""The token-level matcher: which tokens may come next, and advancing by one.

How a mask is computed (see ARCHITECTURE.md, "How the engine gets fast"):

1. A matcher state is the reference matcher's closed set of parse stacks. Masks
   are cached per state, across steps, sequences and requests (JSON generation
   revisits the same states constantly).
2. For a stack whose top frame is ``(rule, state)``, most tokens are decided by
   that rule's byte automaton alone. One vectorised NumPy walk per ``(rule,
   state)`` finds the tokens read entirely inside the rule and the few *boundary*
   tokens that pass a point where the rule could call another rule or return.
   The walk starts only from tokens whose first byte the state can read (an index
   per vocabulary), and it is cached by the rule automaton's content, not its
   name: lexemes are rules of their own, so every schema's plain strings,
   integers and formats share one walk per vocabulary, in this process.
3. Boundary tokens are finished from the real stack by the reference matcher,
   grouped by the bytes they still have to read: one reference step per distinct
   prefix (a trie walk over the boundary tokens), so a prefix that dies kills all
   the tokens that share it at once.

Errors on the hot path are booleans and a sticky state, never exceptions.
Matchers are cheap and single-threaded; the caches they share are thread-safe.
"""

from __future__ import annotations

import hashlib
import itertools
import threading
from collections import OrderedDict
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Generic, TypeVar

import numpy as np
import numpy.typing as npt

from jsonmode.decoding.automaton import Network
from jsonmode.decoding.reference import END, ReferenceMatcher, Stack, State
from jsonmode.decoding.vocabulary import Vocabulary

__all__ = ["MaskEngine", "Matcher", "configure_caches"]

Mask = npt.NDArray[np.bool_]
Rows = npt.NDArray[np.int64]
K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

# Boundary groups at most this big are finished token by token (numpy's per-call
# overhead beats the vectorised trie step below this size).
_SMALL_GROUP = 8


class _Lru(Generic[K, V]):
    """A thread-safe least-recently-used map bounded by the bytes of its values."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.used = 0
        self._items: OrderedDict[K, tuple[V, int]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: K) -> V | None:
        with self._lock:
            item = self._items.get(key)
            if item is None:
                return None
            self._items.move_to_end(key)
            return item[0]

    def put(self, key: K, value: V, size: int) -> None:
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self.used -= old[1]
            self._items[key] = (value, size)
            self.used += size
            while self.used > self.budget and len(self._items) > 1:
                _, (_, freed) = self._items.popitem(last=False)
                self.used -= freed

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self.used = 0

    def __len__(self) -> int:
        return len(self._items)


@dataclass(frozen=True, slots=True)
class _Walk:
    """What one ``(rule automaton, state)`` decides for the whole vocabulary.

    ``inside``: tokens read entirely within the rule (allowed whatever the stack),
    as a bool mask over ids when there are many, else as ids. ``groups``: per state
    where a boundary token passes a call or return point, the matrix rows of those
    tokens and the column where the rest of each token starts.
    """

    inside: npt.NDArray[np.bool_] | npt.NDArray[np.int64]
    dense: bool
    groups: tuple[tuple[int, Rows, Rows], ...]

    @property
    def nbytes(self) -> int:
        return int(self.inside.nbytes) + sum(r.nbytes + c.nbytes for _, r, c in self.groups)


class _FirstByteIndex:
    """The vocabulary's tokens reordered by first byte ("positions").

    ``matrix``/``lengths``/``ids`` are the vocabulary's, in position order; the
    tokens starting with byte ``b`` are positions ``offsets[b]:offsets[b + 1]``.
    Empty tokens are left out. Built once per vocabulary (~20 MB for Qwen2.5).
    """

    def __init__(self, vocabulary: Vocabulary) -> None:
        lengths = vocabulary.lengths
        nonempty = np.flatnonzero(lengths > 0)
        first = vocabulary.matrix[nonempty, 0].astype(np.int64)
        order = nonempty[np.argsort(first, kind="stable")]
        self.matrix = np.ascontiguousarray(vocabulary.matrix[order])
        self.lengths = lengths[order].astype(np.int64)
        self.ids = vocabulary.ids[order].astype(np.int64)
        self.offsets = np.searchsorted(self.matrix[:, 0], np.arange(257)).astype(np.int64)


@dataclass(frozen=True, slots=True)
class _Segment:
    """The fate of the tokens starting with one byte, given the state after it.

    ``inside``: per token of the segment, read entirely within the rule. Boundary
    tokens: their positions, the state where they pass a call or return point, and
    the column where their rest starts.
    """

    inside: npt.NDArray[np.bool_]
    positions: Rows
    stops: Rows
    cols: Rows

    @property
    def nbytes(self) -> int:
        return 96 + self.inside.nbytes + 3 * self.positions.nbytes


# Caches shared by every engine in the process. Walks are keyed by vocabulary and
# automaton content, so equal lexemes in different schemas share them; masks are
# keyed by engine and state. Budgets in bytes (see configure_caches).
_walk_cache: _Lru[tuple[str, bytes, int], _Walk] = _Lru(256 << 20)
_segment_cache: _Lru[tuple[str, bytes, int, int], _Segment] = _Lru(128 << 20)
_mask_cache: _Lru[tuple[int, State], Mask] = _Lru(256 << 20)
_indexes: dict[str, _FirstByteIndex] = {}
_indexes_lock = threading.Lock()
_engine_ids = itertools.count()


def configure_caches(
    *,
    walk_bytes: int | None = None,
    segment_bytes: int | None = None,
    mask_bytes: int | None = None,
) -> None:
    """Set the process-wide cache budgets (bytes). Defaults: 256, 128 and 256 MiB.

    A cached mask costs ``vocabulary.size`` bytes (152 KB for Qwen2.5); a cached walk
    up to that plus its boundary tokens; a segment about a byte per token that starts
    with its byte. Lowering a budget evicts at the next insert.
    """
    if walk_bytes is not None:
        _walk_cache.budget = int(walk_bytes)
    if segment_bytes is not None:
        _segment_cache.budget = int(segment_bytes)
    if mask_bytes is not None:
        _mask_cache.budget = int(mask_bytes)


def _first_byte_index(vocabulary: Vocabulary) -> _FirstByteIndex:
    with _indexes_lock:
        index = _indexes.get(vocabulary.fingerprint)
        if index is None:
            if len(_indexes) >= 8:
                _indexes.pop(next(iter(_indexes)))
            index = _indexes[vocabulary.fingerprint] = _FirstByteIndex(vocabulary)
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
        index = _first_byte_index(vocabulary)
        self._offsets = index.offsets
        self._matrix = index.matrix
        self._lengths = index.lengths
        self._ids = index.ids
        self._base = vocabulary.allowed_base.copy()
        self._base[self.eos] = True
        self._walks: dict[tuple[int, int], _Walk] = {}
        self._rule_keys: dict[int, tuple[bytes, npt.NDArray[np.bool_], npt.NDArray[np.int32]]] = {}
        self._next: dict[tuple[State, int], State] = {}
        self._steps: dict[tuple[State, int], State] = {}
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    # -- per rule automaton ---------------------------------------------------------------

    def _rule_key(self, rule: int) -> tuple[bytes, npt.NDArray[np.bool_], npt.NDArray[np.int32]]:
        """(content signature, crossing states, flat transitions) of one rule."""
        known = self._rule_keys.get(rule)
        if known is not None:
            return known
        automaton = self.network.rules[rule]
        crossing = automaton.accepting.copy()
        for index, calls in enumerate(automaton.calls):
            if calls:
                crossing[index] = True
        trans = np.ascontiguousarray(automaton.trans, dtype=np.int32)
        digest = hashlib.blake2b(digest_size=16)
        digest.update(trans.tobytes())
        digest.update(crossing.tobytes())
        known = (digest.digest(), crossing, trans.reshape(-1))
        self._rule_keys[rule] = known
        return known

    def walk(self, rule: int, state: int) -> _Walk:
        """The vocabulary walk of ``(rule, state)`` (cached by automaton content)."""
        local = self._walks.get((rule, state))
        if local is not None:
            return local
        signature, crossing, flat = self._rule_key(rule)
        key = (self.vocabulary.fingerprint, signature, state)
        walk = _walk_cache.get(key)
        if walk is None:
            walk = self._compute_walk(signature, flat, crossing, state)
            _walk_cache.put(key, walk, walk.nbytes)
        with self._lock:
            if len(self._walks) > 65536:
                self._walks.clear()
            self._walks[(rule, state)] = walk
        return walk

    def _compute_walk(
        self,
        signature: bytes,
        flat: npt.NDArray[np.int32],
        crossing: npt.NDArray[np.bool_],
        state: int,
    ) -> _Walk:
        """Assemble a walk from per-first-byte segments, computing the missing ones.

        The fate of a token depends only on its bytes and the state after its first
        byte, so segments are shared by every state that moves to the same state on
        the same byte (the states inside a key that must differ from a few declared
        names, the positions of a plain string body, ...).
        """
        row = flat[state * 256 : state * 256 + 256]
        fingerprint = self.vocabulary.fingerprint
        segments: list[tuple[int, _Segment]] = []
        missing: list[tuple[int, int]] = []
        for byte in np.flatnonzero(row >= 0).tolist():
            if self._offsets[byte] == self._offsets[byte + 1]:
                continue
            target = int(row[byte])
            segment = _segment_cache.get((fingerprint, signature, target, byte))
            if segment is None:
                missing.append((byte, target))
            else:
                segments.append((byte, segment))
        if missing:
            for byte, segment in self._compute_segments(flat, crossing, missing):
                _segment_cache.put(
                    (fingerprint, signature, int(row[byte]), byte), segment, segment.nbytes
                )
                segments.append((byte, segment))
        inside = np.zeros(self._ids.size, dtype=np.bool_)
        positions: list[Rows] = []
        stops: list[Rows] = []
        cols: list[Rows] = []
        for byte, segment in segments:
            inside[self._offsets[byte] : self._offsets[byte + 1]] = segment.inside
            if segment.positions.size:
                positions.append(segment.positions)
                stops.append(segment.stops)
                cols.append(segment.cols)
        ids = self._ids[inside]
        size = self.vocabulary.size
        dense = ids.size * 8 > size
        packed: npt.NDArray[np.bool_] | npt.NDArray[np.int64]
        if dense:
            packed = np.zeros(size, dtype=np.bool_)
            packed[ids] = True
        else:
            packed = np.sort(ids)
        groups: list[tuple[int, Rows, Rows]] = []
        if positions:
            all_positions = np.concatenate(positions)
            all_stops = np.concatenate(stops)
            all_cols = np.concatenate(cols)
            order = np.argsort(all_stops, kind="stable")
            all_positions, all_stops, all_cols = (
                all_positions[order],
                all_stops[order],
                all_cols[order],
            )
            cuts = np.flatnonzero(np.diff(all_stops)) + 1
            for part in np.split(np.arange(all_stops.size), cuts):
                groups.append((int(all_stops[part[0]]), all_positions[part], all_cols[part]))
        return _Walk(packed, dense, tuple(groups))

    def _compute_segments(
        self,
        flat: npt.NDArray[np.int32],
        crossing: npt.NDArray[np.bool_],
        missing: list[tuple[int, int]],
    ) -> list[tuple[int, _Segment]]:
        """One vectorised walk of every token of the missing segments, from column 1."""
        matrix, lengths, offsets = self._matrix, self._lengths, self._offsets
        starts = np.array([offsets[byte] for byte, _ in missing], dtype=np.int64)
        sizes = np.array([offsets[byte + 1] - offsets[byte] for byte, _ in missing])
        bounds = np.concatenate(([0], np.cumsum(sizes)))
        total = int(bounds[-1])
        # Candidate k is position base[k]; it starts in the state after its first byte.
        base = np.repeat(starts - bounds[:-1], sizes) + np.arange(total)
        current = np.repeat(np.array([t for _, t in missing], dtype=np.int64), sizes)
        alive = np.arange(total)
        inside = np.zeros(total, dtype=np.bool_)
        b_k: list[Rows] = []
        b_stops: list[Rows] = []
        b_cols: list[Rows] = []
        column = 1
        while alive.size:
            where = base[alive]
            ended = lengths[where] == column
            if ended.any():
                inside[alive[ended]] = True
                going = ~ended
                alive, current, where = alive[going], current[going], where[going]
                if not alive.size:
                    break
            # Passing a point where the rule could return or call: the rest of the token
            # may belong to the caller or callee (the closure covers column 0).
            at_cross = crossing[current]
            if at_cross.any():
                b_k.append(alive[at_cross])
                b_stops.append(current[at_cross])
                b_cols.append(np.full(int(at_cross.sum()), column, dtype=np.int64))
            there = flat[current * 256 + matrix[where, column]]
            keep = there >= 0
            if keep.all():
                current = there.astype(np.int64)
            else:
                alive, current = alive[keep], there[keep].astype(np.int64)
            column += 1
        if b_k:
            k = np.concatenate(b_k)
            order = np.argsort(k, kind="stable")
            k, k_stops, k_cols = (
                k[order],
                np.concatenate(b_stops)[order],
                np.concatenate(b_cols)[order],
            )
            cut = np.searchsorted(k, bounds)
        else:
            k = k_stops = k_cols = np.zeros(0, dtype=np.int64)
            cut = np.zeros(bounds.size, dtype=np.int64)
        out: list[tuple[int, _Segment]] = []
        for index, (byte, _) in enumerate(missing):
            lo, hi = int(cut[index]), int(cut[index + 1])
            out.append(
                (
                    byte,
                    _Segment(
                        inside[bounds[index] : bounds[index + 1]].copy(),
                        base[k[lo:hi]],
                        k_stops[lo:hi],
                        k_cols[lo:hi],
                    ),
                )
            )
        return out

    # -- per matcher state ----------------------------------------------------------------

    def mask(self, state: State) -> Mask:
        """Allowed token ids for ``state`` as a read-only bool array of ``vocabulary.size``."""
        key = (self._token, state)
        cached = _mask_cache.get(key)
        if cached is not None:
            self.hits += 1
            return cached
        self.misses += 1
        allowed = np.zeros(self.vocabulary.size, dtype=np.bool_)
        for stack in state:
            if stack:
                self._add_stack(allowed, stack)
        if END in state and self.eos.size:
            allowed[self.eos] = True
        allowed &= self._base
        allowed.flags.writeable = False
        _mask_cache.put(key, allowed, allowed.nbytes)
        return allowed

    def _add_stack(self, allowed: Mask, stack: Stack) -> None:
        rule, at = stack[-1]
        walk = self.walk(rule, at)
        if walk.dense:
            np.logical_or(allowed, walk.inside, out=allowed)
        else:
            allowed[walk.inside] = True
        for stop, rows, cols in walk.groups:
            pending = ~allowed[self._ids[rows]]
            if not pending.any():
                continue
            moved = self.reference.close([(*stack[:-1], (rule, stop))])
            if moved:
                accepted = self._finish(moved, rows[pending], cols[pending])
                if accepted.size:
                    allowed[self._ids[accepted]] = True

    def _step(self, state: State, byte: int) -> State:
        key = (state, byte)
        nxt = self._steps.get(key)
        if nxt is None:
            nxt = self.reference.step(state, byte)
            with self._lock:
                if len(self._steps) > 1 << 18:
                    self._steps.clear()
                self._steps[key] = nxt
        return nxt

    def _finish(self, start: State, rows: Rows, cols: Rows) -> Rows:
        """The rows whose remaining bytes (from ``cols``) ``start`` can read.

        A trie walk: rows are split by their next byte and the reference steps once
        per distinct prefix; small groups go token by token.
        """
        matrix, lengths = self._matrix, self._lengths
        accepted: list[Rows] = []
        few: list[int] = []
        work: list[tuple[State, Rows, Rows]] = [(start, rows, cols)]
        while work:
            state, rows, cols = work.pop()
            ends = lengths[rows]
            done = ends == cols
            if done.any():
                accepted.append(rows[done])
                going = ~done
                rows, cols, ends = rows[going], cols[going], ends[going]
            if rows.size <= _SMALL_GROUP:
                for row, col, end in zip(rows.tolist(), cols.tolist(), ends.tolist(), strict=True):
                    here = state
                    for byte in matrix[row, col:end].tolist():
                        here = self._step(here, byte)
                        if not here:
                            break
                    if here:
                        few.append(row)
                continue
            data = matrix[rows, cols]
            values = np.unique(data)
            for byte in values.tolist():
                nxt = self._step(state, byte)
                if not nxt:
                    continue
                if values.size == 1:
                    work.append((nxt, rows, cols + 1))
                else:
                    chosen = data == byte
                    work.append((nxt, rows[chosen], cols[chosen] + 1))
        if few:
            accepted.append(np.array(few, dtype=np.int64))
        return np.concatenate(accepted) if accepted else np.zeros(0, dtype=np.int64)

    def advance(self, state: State, token: int) -> State:
        """The state after ``token`` (empty frozenset: not allowed)."""
        key = (state, token)
        cached = self._next.get(key)
        if cached is not None:
            return cached
        data = self.vocabulary.token_bytes(token)
        nxt = self.reference.feed(state, data) if data else frozenset()
        with self._lock:
            if len(self._next) > 1 << 16:
                self._next.clear()
            self._next[key] = nxt
        return nxt


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
