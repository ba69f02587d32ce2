"""The reasoning gate: free thinking, an end marker, then the constrained document.

``compile_schema(schema, vocabulary, reasoning=Reasoning("</think>", ...))`` (and the same
keyword on ``compile_grammar``) wraps the compiled constraint in a
:class:`GatedConstraint`, whose text is *the thinking, the end marker, then the document*:

- **Thinking** is any text that does not contain the end marker, written by any
  ordinary token (control tokens other than the markers and end-of-sequence are
  never allowed: a reply that ends inside its thinking is not a document). The end
  marker ends it, spelled either as one added control token (Qwen3's ``</think>``,
  id 151668) or by ordinary tokens (``</``, ``think``, ``>`` on Llama-3): the
  marker's bytes are matched across token boundaries by a KMP automaton, so no
  token may complete the marker anywhere but as the end of the thinking. Control
  tokens whose text is a part of the marker (not end-of-sequence ones) may write that
  part where the match has reached it (a marker such as
  ``<|start|>assistant<|channel|>final<|message|>``), nowhere else; an end-of-sequence
  token inside a marker (harmony's ``<|end|>``) would stop generation, so that part
  is written as text.
- **Start marker** (``Reasoning.start``). The thinking is free text, so a reply
  that begins with the start marker's text and one that begins already inside the
  thinking (the chat template pre-filled the start) are both accepted. When the start
  marker is an added control token (Qwen3's ``<think>``), that token is allowed as
  the very first token only.
- **Cap** (``Reasoning.max_tokens``): once the thinking holds that many tokens (the
  start token included), only the end marker may follow: its control token alone
  where the vocabulary has one (and no part of the marker's text is pending), else
  ordinary tokens spelling the rest of its bytes, which are then
  :meth:`GateMatcher.forced_bytes`, so fast-forward can write them.
- **After the marker** the document's own matcher applies from its start: no
  end-of-sequence until the document may end. A token that spans the end of the
  marker and the document's first bytes is allowed exactly when those bytes are a
  prefix the document allows.

``accepts(text)`` judges the whole text: it finds the first occurrence of the end
marker and asks the document's ``accepts`` about what follows (the cap counts tokens,
so a text alone cannot break it).

Cost. Per (vocabulary, end marker), each marker-match state's thinking mask is built
once, on first visit, by one vectorised KMP walk of the vocabulary's byte matrix (~10-
30 ms for Qwen2.5) and cached (:func:`marker_table`); the few tokens that cross into
the document are checked once per gated constraint. A thinking step's ``mask()`` is then a
dictionary lookup returning a cached array, and ``advance`` an array read.

Errors. An end marker longer than :data:`MAX_MARKER_BYTES` bytes, or one that the
vocabulary cannot spell (neither a control token nor ordinary tokens), raises
:class:`~jsonmode.errors.UnsupportedSchemaError`; a start marker that contains the end
marker, or a ``reasoning`` that is not a :class:`~jsonmode.reasoning.Reasoning`, raises
:class:`~jsonmode.errors.UsageError`.

Thread-safety: tables and gated constraints are immutable once built (built under a
lock); a :class:`GateMatcher` is one sequence's and not thread-safe.
"""

from __future__ import annotations

import functools
import itertools
import threading
import weakref
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from jsonmode.decoding.engine.facts import pack_flags
from jsonmode.decoding.matcher import Mask, MaskEngine, Matcher
from jsonmode.decoding.reference import END, State
from jsonmode.errors import UnsupportedSchemaError, UsageError
from jsonmode.reasoning import Reasoning

if TYPE_CHECKING:
    from jsonmode.decoding.vocabulary import Vocabulary

__all__ = [
    "MAX_MARKER_BYTES",
    "EngineConstraint",
    "GateMatcher",
    "GatedConstraint",
    "MarkerTable",
    "gate",
    "marker_spellings",
    "marker_table",
]

#: An end marker longer than this many UTF-8 bytes is refused (harmony's 51 fit).
MAX_MARKER_BYTES = 64

# Codes of a MarkerTable step: a token that leaves the thinking, or is not allowed.
_DONE = -2  # completes the marker with its last byte
_CROSS = -3  # completes the marker before its last byte: the rest is document
_NO = -1  # not an ordinary token (control, unused, padded)

_TABLES: OrderedDict[tuple[str, bytes, int | None], MarkerTable] = OrderedDict()
_TABLES_LIMIT = 8
_lock = threading.Lock()
_serials = itertools.count(1)
# Gated constraints by inner constraint (weakly) and Reasoning: the same gate for the
# same pair, so its masks are built once however often it is asked for.
_gated: weakref.WeakKeyDictionary[Any, dict[Any, GatedConstraint]] = weakref.WeakKeyDictionary()


def _kmp(marker: bytes) -> npt.NDArray[np.int16]:
    """The marker's KMP automaton: ``[len + 1, 256]`` next states, state ``len`` = found."""
    size = len(marker)
    table = np.zeros((size + 1, 256), dtype=np.int16)
    table[0, marker[0]] = 1
    fallback = 0
    for state in range(1, size + 1):
        table[state] = table[fallback]
        if state < size:
            table[state, marker[state]] = state + 1
            fallback = int(table[fallback, marker[state]])
    table[size] = size  # (absorbing: never read)
    return table


class MarkerTable:
    """How every token of one vocabulary moves through one end marker's KMP automaton.

    :meth:`step` (per match state ``k``, built on first use, then cached): an int32
    array over the token ids: the next match state (``>= 0``) for a token that stays in
    the thinking, ``-2`` for one that completes the marker with its last byte, ``-3`` for
    one that completes it earlier (:meth:`crossing` has the byte offset where the
    document starts), ``-1`` for a token that is not ordinary text. :meth:`forced`: the
    same for the capped thinking (only tokens spelling the marker's next bytes).
    Immutable once built; thread-safe.
    """

    def __init__(self, vocabulary: Vocabulary, marker: bytes) -> None:
        self.vocabulary = vocabulary
        self.marker = marker
        self.kmp = _kmp(marker)
        #: The added control token that is the whole marker, if any.
        self.token: int | None = vocabulary.controls.get(marker.decode("utf-8", "surrogatepass"))
        #: Control tokens (not end-of-sequence) whose text is part of the marker, by
        #: id: each may write its part where the marker's match has got to it
        #: (``<|channel|>`` in ``...<|channel|>final<|message|>``), nowhere else.
        self.pieces: dict[int, bytes] = {
            token: content.encode("utf-8", "surrogatepass")
            for content, token in vocabulary.controls.items()
            if token not in vocabulary.eos_ids
            and content.encode("utf-8", "surrogatepass") in marker
        }
        self._steps: dict[int, tuple[npt.NDArray[np.int32], dict[int, int]]] = {}
        self._forced: dict[int, npt.NDArray[np.int32]] = {}
        self._lock = threading.Lock()

    def step(self, k: int) -> npt.NDArray[np.int32]:
        return self._step(k)[0]

    def crossing(self, k: int) -> Mapping[int, int]:
        """Token id -> the offset in its bytes where the document starts (code ``-3``)."""
        return self._step(k)[1]

    def _step(self, k: int) -> tuple[npt.NDArray[np.int32], dict[int, int]]:
        found = self._steps.get(k)
        if found is None:
            with self._lock:
                found = self._steps.get(k)
                if found is None:
                    found = self._steps[k] = self._walk(k)
        return found

    def _walk(self, k: int) -> tuple[npt.NDArray[np.int32], dict[int, int]]:
        """One vectorised walk of the byte matrix from match state ``k``."""
        vocab, size = self.vocabulary, len(self.marker)
        matrix, lengths = vocab.matrix, vocab.lengths
        rows = len(lengths)
        states = np.full(rows, k, dtype=np.int16)
        done_at = np.full(rows, -1, dtype=np.int32)
        width = int(lengths[-1]) if rows else 0
        for col in range(width):
            first = int(np.searchsorted(lengths, col, side="right"))  # rows longer than col
            if first >= rows:
                break
            live = states[first:]
            moved = self.kmp[live, matrix[first:, col]]
            fresh = (moved == size) & (done_at[first:] < 0)
            done_at[first:][fresh] = col + 1
            states[first:] = np.where(done_at[first:] >= 0, size, moved)
        codes = np.where(done_at < 0, states.astype(np.int32), _CROSS)
        codes[done_at == lengths] = _DONE
        out = np.full(vocab.size, _NO, dtype=np.int32)
        out[vocab.ids] = codes
        crossing = {
            int(vocab.ids[r]): int(done_at[r]) for r in np.flatnonzero(codes == _CROSS).tolist()
        }
        self._place_pieces(out, k)
        out.flags.writeable = False
        return out, crossing

    def _place_pieces(self, out: npt.NDArray[np.int32], k: int) -> None:
        """Set the codes of the marker's control-token pieces at match state ``k``."""
        for token, text in self.pieces.items():
            if self.marker.startswith(text, k):
                out[token] = _DONE if k + len(text) == len(self.marker) else k + len(text)

    def forced(self, k: int) -> npt.NDArray[np.int32]:
        """For the capped thinking at match state ``k``: the next state for tokens whose
        bytes are the marker's next bytes (``-2`` where they finish it), else ``-1``."""
        found = self._forced.get(k)
        if found is not None:
            return found
        vocab, rest = self.vocabulary, self.marker[k:]
        lengths = vocab.lengths
        out = np.full(vocab.size, _NO, dtype=np.int32)
        for length in range(1, len(rest) + 1):
            lo = int(np.searchsorted(lengths, length, side="left"))
            hi = int(np.searchsorted(lengths, length, side="right"))
            if lo == hi:
                continue
            want = np.frombuffer(rest[:length], dtype=np.uint8)
            same = np.all(vocab.matrix[lo:hi, :length] == want, axis=1)
            nxt = _DONE if length == len(rest) else k + length
            out[vocab.ids[lo:hi][same]] = nxt
        self._place_pieces(out, k)
        out.flags.writeable = False
        with self._lock:
            return self._forced.setdefault(k, out)

    def spellable(self) -> bool:
        """Whether the marker can be written at all from match state 0."""
        if self.token is not None:
            return True
        reach = {0}  # (control-token pieces included: forced() places them)
        for k in range(len(self.marker)):
            if k not in reach:
                continue
            forced = self.forced(k)
            nxt = forced[forced != _NO]
            if (nxt == _DONE).any():
                return True
            reach.update(int(n) for n in np.unique(nxt).tolist())
        return False


def marker_table(vocabulary: Vocabulary, marker: bytes) -> MarkerTable:
    """The (cached) table of ``marker`` over ``vocabulary``: the last few are kept."""
    # (the marker's control token too: names are not part of the fingerprint)
    key = (vocabulary.fingerprint, marker, vocabulary.controls.get(marker.decode("utf-8")))
    with _lock:
        table = _TABLES.get(key)
        if table is not None:
            _TABLES.move_to_end(key)
            return table
        table = _TABLES[key] = MarkerTable(vocabulary, marker)
        if len(_TABLES) > _TABLES_LIMIT:
            _TABLES.popitem(last=False)
    return table


@dataclass(frozen=True, slots=True)
class _Think:
    """A thinking position: the marker match state and the tokens written so far."""

    k: int
    count: int


class GatedConstraint:
    """A compiled constraint behind a reasoning gate (see the module docstring): the
    compiled contract (``accepts``, ``matcher``, ``unenforced``, ``vocabulary``,
    ``engine``), with the document's constraint as :attr:`inner`. Immutable;
    thread-safe (its masks are built under a lock, once each).

    Attributes:
        inner: the document's compiled schema or grammar.
        reasoning: the markers and cap.
    """

    def __init__(
        self, inner: Any, reasoning: Reasoning, vocabulary: Vocabulary | None = None
    ) -> None:
        self.inner = inner
        self._vocabulary = vocabulary if vocabulary is not None else inner.vocabulary
        self.reasoning = reasoning
        self.end = reasoning.end.encode("utf-8")
        self._serial = next(_serials)
        self._lock = threading.Lock()
        self._masks: dict[tuple[int, str], tuple[Mask, npt.NDArray[np.uint8]]] = {}
        self._crossed: dict[int, dict[int, State]] = {}

    # -- the compiled contract, forwarded ---------------------------------------------

    @property
    def unenforced(self) -> tuple[str, ...]:
        return tuple(self.inner.unenforced)

    @property
    def fully_enforced(self) -> bool:
        return not self.unenforced

    @property
    def vocabulary(self) -> Vocabulary | None:
        return self._vocabulary

    @property
    def options(self) -> Any:
        return self.inner.options

    @property
    def engine(self) -> MaskEngine:
        """The document's mask engine (its caches; ``vocabulary`` on it)."""
        return self.inner.engine  # type: ignore[no-any-return]

    def __repr__(self) -> str:
        cap = self.reasoning.max_tokens
        return (
            f"<GatedConstraint end={self.reasoning.end!r} start={self.reasoning.start!r} "
            f"max_tokens={cap!r} then {self.inner!r}>"
        )

    def accepts(self, text: str | bytes | bytearray) -> bool:
        """Whether ``text`` is thinking (no end marker in it), the end marker, then a
        document the inner constraint accepts. Cost: a substring search, then the
        inner ``accepts``. Raises as the inner ``accepts`` (UsageError for a text
        neither str nor bytes)."""
        if isinstance(text, str):
            try:
                data = text.encode("utf-8")
            except UnicodeEncodeError:
                return False
        elif isinstance(text, (bytes, bytearray)):
            data = bytes(text)
        else:
            raise UsageError(f"accepts() takes str or bytes, not {type(text).__name__}")
        at = data.find(self.end)
        if at < 0:
            return False
        return bool(self.inner.accepts(data[at + len(self.end) :]))

    def matcher(self) -> GateMatcher:
        """A fresh matcher for one sequence (cheap: tables and masks are shared)."""
        return GateMatcher(self)

    # -- tables -------------------------------------------------------------------------

    @functools.cached_property
    def table(self) -> MarkerTable:
        """The end marker's table over the vocabulary (checked spellable on first use)."""
        vocabulary = self.vocabulary
        if vocabulary is None:
            raise UsageError(
                "this was compiled without a vocabulary",
                hint="pass vocabulary=Vocabulary.from_tokenizer(tokenizer) when compiling",
            )
        table = marker_table(vocabulary, self.end)
        if not table.spellable():
            raise UnsupportedSchemaError(
                f"no token sequence of this vocabulary spells the end marker {self.reasoning.end!r}"
            )
        return table

    @functools.cached_property
    def start_token(self) -> int | None:
        """The start marker's control token, allowed as the first token only."""
        start = self.reasoning.start
        vocabulary = self.vocabulary
        if start is None or vocabulary is None:
            return None
        return vocabulary.controls.get(start)

    def spelled(self, token: int) -> bytes:
        """The text token ``token`` adds to a reply: its bytes, or a marker's text for
        the markers' control tokens (which a vocabulary spells as nothing)."""
        if token == self.table.token:
            return self.end
        piece = self.table.pieces.get(token)
        if piece is not None:
            return piece
        if token == self.start_token and self.reasoning.start is not None:
            return self.reasoning.start.encode("utf-8")
        vocabulary = self.vocabulary
        return b"" if vocabulary is None else vocabulary.token_bytes(token)

    def crossed(self, k: int) -> dict[int, State]:
        """Tokens crossing from match state ``k`` into the document -> the document's
        state after their remaining bytes (only those the document allows)."""
        found = self._crossed.get(k)
        if found is not None:
            return found
        reference = self.engine.reference
        vocabulary = self.table.vocabulary
        out: dict[int, State] = {}
        for token, offset in self.table.crossing(k).items():
            state = reference.feed(reference.initial(), vocabulary.token_bytes(token)[offset:])
            if state:
                out[token] = state
        with self._lock:
            return self._crossed.setdefault(k, out)

    def thinking_mask(self, k: int, phase: str) -> tuple[Mask, npt.NDArray[np.uint8]]:
        """The mask (and its bits) at match state ``k`` in ``phase`` (``"first"``: no
        token yet, the start token allowed; ``"free"``; ``"capped"``), built once."""
        key = (k, phase)
        found = self._masks.get(key)
        if found is not None:
            return found
        table = self.table
        if phase == "capped" and table.token is not None and k == 0:
            allowed = np.zeros(table.vocabulary.size, dtype=np.bool_)  # the token alone
        elif phase == "capped":
            allowed = table.forced(k) != _NO  # the rest of the marker's text
        else:
            codes = table.step(k)
            allowed = (codes >= 0) | (codes == _DONE)
            crossing = self.crossed(k)
            if crossing:
                allowed[np.fromiter(crossing, dtype=np.int64, count=len(crossing))] = True
            if phase == "first" and self.start_token is not None:
                allowed[self.start_token] = True
        if table.token is not None and (phase != "capped" or k == 0):
            allowed[table.token] = True
        allowed.flags.writeable = False
        entry = (allowed, pack_flags(allowed))
        with self._lock:
            return self._masks.setdefault(key, entry)


class GateMatcher(Matcher):
    """One sequence's position in a :class:`GatedConstraint`: thinking, then the
    document's matcher. Not thread-safe.

    The verbs are :class:`~jsonmode.decoding.matcher.Matcher`'s: ``mask``,
    ``fill_bitmask``, ``advance``, ``is_finished``, ``can_end``, ``rollback``,
    ``forced_bytes``. :attr:`state` is the document's state after the marker; in the
    thinking, a key of the gated constraint, the match state and the phase (what the
    mask depends on), so batch maskers cache thinking rows like any other.
    """

    def __init__(self, gated: GatedConstraint) -> None:
        super().__init__(gated.engine)
        self.gated = gated
        self._cap = gated.reasoning.max_tokens
        self._history: list[Any] = [_Think(0, 0)]  # (_Think or the document's State)

    def _phase(self, think: _Think) -> str:
        if self._cap is not None and think.count >= self._cap:
            return "capped"
        first = think.count == 0 and self.gated.start_token is not None
        return "first" if first else "free"  # (no start token: one mask for both)

    @property
    def state(self) -> Any:
        here = self._history[-1]
        if isinstance(here, _Think):
            return ("reasoning", self.gated._serial, here.k, self._phase(here))
        return here

    def in_thinking(self) -> bool:
        """The end marker has not been written yet."""
        return isinstance(self._history[-1], _Think)

    def mask(self) -> Mask:
        here = self._history[-1]
        if isinstance(here, _Think):
            return self.gated.thinking_mask(here.k, self._phase(here))[0]
        return super().mask()

    def fill_bitmask(self, out: npt.NDArray[Any]) -> None:
        here = self._history[-1]
        if not isinstance(here, _Think):
            super().fill_bitmask(out)
            return
        view = self._view if out is self._out else self._checked(out)
        bits = self.gated.thinking_mask(here.k, self._phase(here))[1]
        view[: bits.size] = bits
        if view.size > bits.size:
            view[bits.size :] = 0

    def advance(self, token: int) -> bool:
        here = self._history[-1]
        if not isinstance(here, _Think):
            return super().advance(token)
        nxt = self._thinking_step(here, int(token))
        if nxt is None:
            return False
        self._history.append(nxt)
        self._finished.append(False)
        return True

    def _thinking_step(self, here: _Think, token: int) -> Any:
        """The position after ``token`` in the thinking, or None (refused)."""
        gated = self.gated
        table = gated.table
        if not 0 <= token < table.vocabulary.size:
            return None
        phase = self._phase(here)
        if token == table.token and (phase != "capped" or here.k == 0):
            return self._engine.reference.initial()
        if token == gated.start_token and phase == "first":
            return _Think(0, 1)
        if phase == "capped" and table.token is not None and here.k == 0:
            return None  # (the marker's token alone, above)
        code = int((table.forced(here.k) if phase == "capped" else table.step(here.k))[token])
        if code >= 0:
            return _Think(code, here.count + 1)
        if code == _DONE:
            return self._engine.reference.initial()
        if code == _CROSS and phase != "capped":
            return gated.crossed(here.k).get(token)
        return None

    def can_end(self) -> bool:
        here = self._history[-1]
        return not isinstance(here, _Think) and END in here

    def forced_bytes(self) -> bytes:
        """The bytes every continuation starts with: the end marker's rest once the
        thinking is capped (empty when its control token is how it is written: a mask
        of one token forces it), the document's forced bytes after it, else empty."""
        here = self._history[-1]
        if isinstance(here, _Think):
            capped = self._phase(here) == "capped"
            if capped and (self.gated.table.token is None or here.k > 0):
                return self.gated.end[here.k :]
            return b""
        return super().forced_bytes()


class EngineConstraint:
    """A bare mask engine as a gate's inner constraint (where only the automata travel,
    as to the vLLM processor's engine): ``accepts`` by its reference matcher, nothing
    listed unenforced (the compiling side knows that). Immutable; thread-safe."""

    unenforced: tuple[str, ...] = ()
    options: Any = None

    def __init__(self, engine: MaskEngine) -> None:
        self.engine = engine
        self.vocabulary = engine.vocabulary

    def accepts(self, text: str | bytes) -> bool:
        data = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else bytes(text)
        return self.engine.reference.accepts(data)


def gate(inner: Any, reasoning: object, vocabulary: Vocabulary | None = None) -> GatedConstraint:
    """``inner`` (a compiled schema or grammar) behind the gate of ``reasoning``, for
    ``vocabulary`` (default: the inner one's; the one given names the control tokens,
    which a cached inner constraint's equal vocabulary may not). Cached per inner
    constraint, reasoning and named markers: the same pair gives the same object.

    Raises:
        UsageError: ``reasoning`` is not a Reasoning, or its start marker contains its
            end marker.
        UnsupportedSchemaError: an end marker over :data:`MAX_MARKER_BYTES` bytes (and,
            on the first mask, one the vocabulary cannot spell).
    """
    if not isinstance(reasoning, Reasoning):
        raise UsageError(
            f"reasoning must be a jsonmode.Reasoning, not {type(reasoning).__name__}",
            hint='reasoning=jsonmode.Reasoning(end="</think>", start="<think>")',
        )
    end = reasoning.end.encode("utf-8", "surrogatepass")
    if len(end) > MAX_MARKER_BYTES:
        raise UnsupportedSchemaError(
            f"the reasoning end marker is {len(end)} bytes; at most {MAX_MARKER_BYTES}"
        )
    if reasoning.start is not None and reasoning.end in reasoning.start:
        raise UsageError("Reasoning.start must not contain Reasoning.end")
    try:
        reasoning.end.encode("utf-8")
    except UnicodeEncodeError:
        raise UsageError("Reasoning.end is not Unicode text (a lone surrogate)") from None
    vocab = vocabulary if vocabulary is not None else inner.vocabulary
    named = None if vocab is None else tuple(marker_spellings(vocab, reasoning))
    key = (reasoning, named)
    with _lock:
        known = _gated.get(inner)
        found = None if known is None else known.get(key)
    if found is not None:
        return found
    gated = GatedConstraint(inner, reasoning, vocab)
    if vocab is not None:
        gated.table  # noqa: B018 (checks the marker can be written, now)
    with _lock:
        return _gated.setdefault(inner, {}).setdefault(key, gated)


def marker_spellings(vocabulary: Vocabulary, reasoning: Reasoning | None) -> dict[int, bytes]:
    """The markers' control tokens in ``vocabulary`` -> their text (a vocabulary
    spells control tokens as nothing; a reply's text keeps its markers)."""
    if reasoning is None:
        return {}
    out: dict[int, bytes] = {}
    for marker in (reasoning.start, reasoning.end):
        if marker is None:
            continue
        for content, token in vocabulary.controls.items():
            if token not in vocabulary.eos_ids and content in marker:
                out[token] = content.encode("utf-8", "surrogatepass")
    return out
