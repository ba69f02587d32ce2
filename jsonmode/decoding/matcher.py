"""The token-level matcher: one sequence's position in a compiled schema.

:class:`Matcher` is the per-sequence cursor (cheap, single-threaded): which tokens
may come next (:meth:`Matcher.mask`), advancing by one, rolling back, the bytes
forced next. It reads a shared, thread-safe :class:`MaskEngine`, the mask engine of
:mod:`jsonmode.decoding.engine` (how a mask is computed is drawn there).

Errors on the hot path are booleans and a sticky state, never exceptions, but for one
budget: a state that would hold more than ``MAX_STACKS`` parse stacks (an ambiguous
schema nested deep, see :class:`~jsonmode.decoding.reference.ReferenceMatcher`) raises
:class:`~jsonmode.errors.BudgetExceededError` from :meth:`Matcher.advance` (and from
``mask``/``fill_bitmask`` on such a state), where it would otherwise cost twice as
much with every level. The transformers backend and the vLLM adapter end that
sequence alone.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from jsonmode import native
from jsonmode.decoding.engine import Mask, MaskEngine, configure_caches
from jsonmode.decoding.engine.facts import Bits, bits_size, has_id
from jsonmode.decoding.reference import END, State

__all__ = ["Mask", "MaskEngine", "Matcher", "configure_caches", "fill_words"]


def fill_words(view: npt.NDArray[np.uint8], bits: Bits) -> None:
    """``bits`` to the start of ``view`` (the bytes of a checked token bitmask), the
    bytes past them cleared: the pure-Python form of the compiled core's
    ``r3hits_fill_words`` (:meth:`Matcher.fill_bitmask`'s copy), which gives the same
    bytes. ``view`` must hold at least ``bits.size`` bytes."""
    view[: bits.size] = bits
    if view.size > bits.size:
        view[bits.size :] = 0


class Matcher:
    """One sequence's position in the schema. Cheap to create; not thread-safe.

    ``mask()`` → which token ids may come next (EOS exactly when the document may
    end, or when no token can spell what must come, which the vocabulary decides:
    the nesting bound never leaves a matcher there); ``fill_bitmask(out)`` → the
    same as a token bitmask;
    ``advance(id)`` → False (state unchanged) if the token is not allowed;
    ``is_finished()`` → an end-of-sequence token was accepted; ``rollback(n)``
    undoes the last ``n`` advances; ``forced_bytes()`` → the bytes that must come
    next whatever the model does (for fast-forward).
    """

    def __init__(self, engine: MaskEngine) -> None:
        self._engine = engine
        self._history: list[State] = [engine.reference.initial()]
        self._finished: list[bool] = [False]
        # The last bitmask filled, as given and as bytes (see fill_bitmask).
        self._out: npt.NDArray[Any] | None = None
        self._view: npt.NDArray[np.uint8] = np.zeros(0, dtype=np.uint8)
        # The state last filled and its bits (see fill_bitmask).
        self._last: State | None = None
        self._bits: Bits = self._view

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

    def fill_bitmask(self, out: npt.NDArray[Any]) -> None:
        """Write :meth:`mask` into ``out`` as a token bitmask, the form serving engines
        (vLLM, SGLang) apply: token ``t`` may come next when bit ``t % 32`` of the
        32-bit word ``t // 32`` is set (words little-endian, as on x86 and ARM).

        ``out``: a writable, C-contiguous NumPy array of at least
        ``ceil(vocabulary.size / 32)`` words (``int32`` or ``uint32``, e.g. one row of
        a ``(batch, words)`` bitmask); words past those are cleared. Cost: a copy of
        ``vocabulary.size / 8`` bytes (one C call with the compiled core) when the
        state's mask is cached (~1 us for Qwen2.5 when memory is warm), with no cache
        lookup at all when the state is the one filled last (as after most tokens
        inside a string: the matcher keeps that state and its bits, one mask's
        memory, until the state changes); else the engine's first-visit cost; no
        bool array is built.

        Raises:
            ValueError: ``out`` is too small, not contiguous, or not 4-byte items.
        """
        if self._finished[-1]:
            view = self._view if out is self._out else self._checked(out)
            view[:] = 0
            return
        state = self._history[-1]
        if state is self._last or state == self._last:
            # (The state filled last time, as after most tokens inside a string: its
            # bits, with no cache lookup. Counted as the hit it is.)
            bits = self._bits
            self._engine.hits += 1
        else:
            bits = self._bits = self._engine.bits(state)
            self._last = state
        self._write(out, bits)

    def _write(self, out: npt.NDArray[Any], bits: Bits) -> None:
        """``bits`` into ``out``, the words past them cleared (see fill_bitmask)."""
        kernels = native.KERNELS
        if kernels is not None and kernels.r3hits_fill_words(out, bits):
            return
        # (The same buffer as last time was checked then.)
        view = self._view if out is self._out else self._checked(out)
        fill_words(view, bits)

    def _checked(self, out: npt.NDArray[Any]) -> npt.NDArray[np.uint8]:
        """``out`` as bytes, once it is known to hold a bitmask (kept for next time)."""
        size = bits_size(self._engine.vocabulary.size)
        if out.itemsize != 4 or not out.flags.c_contiguous or out.nbytes < size:
            raise ValueError(
                f"a token bitmask needs a C-contiguous array of at least {size // 4} "
                f"32-bit words; got {out.dtype} {out.shape}"
            )
        self._view = out.reshape(-1).view(np.uint8)
        self._out = out
        return self._view

    def advance(self, token: int) -> bool:
        if self._finished[-1]:
            return False
        if token in self._engine.vocabulary.eos_ids:
            if END not in self.state and not self._stranded():
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

    def _stranded(self) -> bool:
        """Whether no token continues this live state (no token spells what must
        follow): end-of-sequence is then allowed, and the text it ends is incomplete
        (``can_end`` stays False)."""
        eos = min(self._engine.vocabulary.eos_ids, default=None)
        return eos is not None and bool(self.state) and has_id(self._engine.bits(self.state), eos)

    def is_finished(self) -> bool:
        """An end-of-sequence token was accepted (the document is complete, unless
        the matcher was stranded: see :meth:`can_end`)."""
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
