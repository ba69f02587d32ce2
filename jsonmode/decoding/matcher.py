"""The token-level matcher: which tokens may come next, and advancing by one.

How a mask is computed (see ARCHITECTURE.md, "How the engine gets fast"):

1. A matcher state is the reference matcher's closed set of parse stacks. Masks
   are cached per state in the compiled schema, across steps, sequences and
   requests (JSON generation revisits the same states constantly).
2. For a stack whose top frame is ``(rule, state)``, most tokens are decided by
   that rule's byte automaton alone. One vectorised NumPy walk of the whole
   vocabulary matrix per ``(rule, state)`` (cached) finds the tokens read entirely
   inside the rule, the tokens that die, and the few *boundary* tokens that reach
   a point where the rule would call another rule or return to its caller.
3. Boundary tokens are finished by the reference matcher from the real stack,
   once per distinct ``(state, remaining bytes)`` — there are far fewer of those
   than tokens.

Errors on the hot path are booleans and a sticky state, never exceptions.
Matchers are cheap and single-threaded; the caches they share live in the
compiled schema and are thread-safe.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from jsonmode.decoding.automaton import Network
from jsonmode.decoding.reference import END, ReferenceMatcher, State
from jsonmode.decoding.vocabulary import Vocabulary

__all__ = ["MaskEngine", "Matcher"]

Mask = npt.NDArray[np.bool_]


@dataclass(frozen=True, slots=True)
class _Walk:
    """What one ``(rule, state)`` decides for the whole vocabulary.

    ``inside``: token ids read entirely within the rule (allowed whatever the stack).
    ``boundary``: ``(state reached, remaining bytes) -> token ids`` for tokens that
    pass a point where the rule could call or return: whether the rest of such a
    token fits what follows is for the stack to decide.
    """

    inside: npt.NDArray[np.int64]
    boundary: dict[tuple[int, bytes], npt.NDArray[np.int64]]


class MaskEngine:
    """Shared, thread-safe mask computation for one network and one vocabulary.

    Memory: one cached mask costs ``vocabulary.size`` bytes (152 KB for Qwen2.5);
    ``max_cached_masks`` bounds them (default 4096, ~600 MB worst case for a
    150k vocabulary; typical schemas use a few hundred states).
    """

    def __init__(
        self,
        network: Network,
        vocabulary: Vocabulary,
        *,
        max_depth: int = 64,
        max_cached_masks: int = 4096,
    ) -> None:
        self.network = network
        self.vocabulary = vocabulary
        self.reference = ReferenceMatcher(network, max_depth=max_depth)
        self.eos = np.array(sorted(vocabulary.eos_ids), dtype=np.int64)
        self._walks: dict[tuple[int, int], _Walk] = {}
        self._masks: OrderedDict[State, Mask] = OrderedDict()
        self._next: dict[tuple[State, int], State] = {}
        self._limit = max_cached_masks
        self._lock = threading.Lock()
        self._matrix = vocabulary.matrix
        self._lengths = vocabulary.lengths
        self._ids = vocabulary.ids.astype(np.int64)
        # Rows are sorted by length: tokens longer than c start at _first_longer[c].
        self._first_longer = np.searchsorted(
            self._lengths, np.arange(self._matrix.shape[1] + 1), side="right"
        )
        self.hits = 0
        self.misses = 0

    # -- per (rule, state): one vectorised walk ---------------------------------------

    def walk(self, rule: int, state: int) -> _Walk:
        key = (rule, state)
        cached = self._walks.get(key)
        if cached is not None:
            return cached
        automaton = self.network.rules[rule]
        trans = automaton.trans
        crossing = np.zeros(automaton.n_states, dtype=np.bool_)
        crossing[automaton.accepting] = True
        for index, calls in enumerate(automaton.calls):
            if calls:
                crossing[index] = True
        rows = self._matrix.shape[0]
        current = np.full(rows, state, dtype=np.int32)
        live = np.ones(rows, dtype=np.bool_)
        boundary: dict[tuple[int, bytes], list[int]] = {}
        for column in range(self._matrix.shape[1]):
            begin = int(self._first_longer[column])
            if begin >= rows:
                break
            window = slice(begin, rows)
            active = np.flatnonzero(live[window]) + begin
            if active.size == 0:
                break
            here = current[active]
            if column:
                # Passing a point where the rule could return or call: the rest of the
                # token may belong to the caller or callee (the closure covers column 0).
                at_cross = crossing[here]
                for row, at in zip(active[at_cross].tolist(), here[at_cross].tolist(), strict=True):
                    rest = self._matrix[row, column : self._lengths[row]].tobytes()
                    boundary.setdefault((at, rest), []).append(int(self._ids[row]))
            there = trans[here, self._matrix[active, column]]
            stopped = there < 0
            live[active[stopped]] = False
            current[active[~stopped]] = there[~stopped]
        inside = self._ids[live]
        result = _Walk(inside, {k: np.array(v, dtype=np.int64) for k, v in boundary.items()})
        with self._lock:
            self._walks[key] = result
        return result

    # -- per matcher state --------------------------------------------------------------

    def mask(self, state: State) -> Mask:
        """Allowed token ids for ``state`` as a bool array of ``vocabulary.size``."""
        with self._lock:
            cached = self._masks.get(state)
            if cached is not None:
                self._masks.move_to_end(state)
                self.hits += 1
                return cached
        self.misses += 1
        allowed = np.zeros(self.vocabulary.size, dtype=np.bool_)
        for stack in state:
            if not stack:
                continue
            rule, at = stack[-1]
            walk = self.walk(rule, at)
            allowed[walk.inside] = True
            for (stop, rest), ids in walk.boundary.items():
                if allowed[ids[0]] and allowed[ids].all():
                    continue
                moved = self.reference.close([(*stack[:-1], (rule, stop))])
                if self.reference.feed(moved, rest):
                    allowed[ids] = True
        if END in state and self.eos.size:
            allowed[self.eos] = True
        allowed &= self.vocabulary.allowed_base | _eos_mask(self.vocabulary, self.eos)
        allowed.flags.writeable = False
        with self._lock:
            self._masks[state] = allowed
            if len(self._masks) > self._limit:
                self._masks.popitem(last=False)
        return allowed

    def advance(self, state: State, token: int) -> State:
        """The state after ``token`` (empty frozenset: not allowed)."""
        key = (state, token)
        cached = self._next.get(key)
        if cached is not None:
            return cached
        data = self.vocabulary.token_bytes(token)
        nxt = self.reference.feed(state, data) if data else frozenset()
        with self._lock:
            if len(self._next) > self._limit * 16:
                self._next.clear()
            self._next[key] = nxt
        return nxt


def _eos_mask(vocabulary: Vocabulary, eos: npt.NDArray[np.int64]) -> Mask:
    mask = np.zeros(vocabulary.size, dtype=np.bool_)
    mask[eos] = True
    return mask


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
