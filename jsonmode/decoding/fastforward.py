"""Fast-forward: the tokens the grammar forces next, as the tokenizer would write them.

Where every continuation of the document starts with the same bytes (``":`` after
a key that is the only one left, ``,"age":`` between required properties in schema
order, ``}`` when an object can only close, ``ricot"}`` once an enum value has only
one spelling left), a decoder need not ask the model for them: it can append their
tokens without sampling, and feed them to the model in one forward pass.

    >>> ff = FastForward(vocabulary, encode)                       # doctest: +SKIP
    >>> ff.forced(matcher, emitted)                                # doctest: +SKIP
    Forced(tokens=(5211,), ends=False)

Which tokens. Forcing must never write a split the model would not produce: a model
trained on the tokenizer's output has seen ``"}`` as one token, never ``"`` then
``}``, and a forced odd split pushes it off its distribution. So the forced bytes are
tokenized by the real tokenizer, in context, and kept only where that tokenization
cannot change with what comes next. The rule, given the matcher after the emitted
tokens ``e_1 … e_n`` and its forced bytes ``F`` (``Matcher.forced_bytes()``):

1. Nothing before the first emitted token (``n = 0``): the boundary with the prompt
   is the model's to write (a SentencePiece model writes ``▁{`` there).
2. Context. ``C`` is the bytes of the last ``k`` emitted tokens, ``k`` = 3, else 2,
   else 1 (the first that works); ``C + F`` must be whole UTF-8 characters. It is
   encoded as a *continuation* (:meth:`FastForward.encode`: no special tokens, no
   prefix space, no control token).
3. Agreement. The encoding must start with ``e_{n-k+1} … e_n`` exactly; its other
   tokens ``R`` then spell ``F``. Otherwise the tokenizer would merge the emitted
   tokens with the forced bytes differently (the model stopped a token where the
   tokenizer would not have): nothing is forced.
4. The mask. Every token of ``R`` must be allowed by the matcher where it comes
   (checked with ``advance``, which accepts exactly what ``mask`` allows, then
   rolled back), else nothing is forced. (``R`` spells bytes the grammar forces, so
   this is a safety net.)
5. End. When after ``R`` the document is complete and the mask allows
   end-of-sequence and nothing else, all of ``R`` is forced and ``Forced.ends`` is
   set: the caller may append its end-of-sequence id too.
6. Otherwise the last token of ``R`` is held back: bytes the grammar has not decided
   yet follow it, and the tokenizer may merge them into it (``":`` becomes ``":"``
   when a string value follows, ``}`` becomes ``},``); the model writes that token
   itself, choosing the merge it prefers. A merge at the end may also ripple back
   (Mistral writes ``}}},`` as ``}}`` ``},`` but ``}}},"`` as ``}}}`` ``,"``), so the
   rest is cut to the longest prefix of ``R`` that every *probe* reproduces: ``C + F
   + b`` encoded, for each ASCII byte ``b`` that a token allowed after ``F`` may start
   with. A probe that changes the emitted tokens forces nothing.
7. Where nothing is forced (``F`` empty) but the document is complete and only
   end-of-sequence may follow: ``Forced((), ends=True)``.

So a single forced token is never forced unless it ends the document: forcing pays
on multi-token spans (keys in schema order, enum tails, closing runs at the end).
Probes of one byte are not enough to force the last token too: measured, that
variant wrote ``":`` where the document has ``":{"`` (the tokenizer has no ``":{``).
On MaskBench instance walks (``python bench/fastforward.py``; 300 schemas, 436
documents) the rule forces 3.8 % of Qwen2.5's tokens and 4.3-5.3 % of the other four
tokenizers', every one equal to the tokenizer's own encoding of the whole document,
and ends every document by force (the README's Fast-forward subsection).

Cost: one ``forced_bytes()`` walk per call (microseconds when nothing is forced);
when something is, up to three encodes of a few dozen bytes, one ``advance`` per
token of ``R``, one mask, and one encode per probe (a few to a dozen): ~20 µs a call
on average over a walk, Qwen2.5. Immutable and thread-safe; the matcher passed in is
left exactly as it was (its state and history).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from jsonmode.decoding.vocabulary import Vocabulary

__all__ = ["NONE", "FastForward", "Forced", "MatcherLike"]

# How many emitted tokens are re-tokenized with the forced bytes, most first.
_CONTEXTS = (3, 2, 1)
# A continuation that cannot start with a space is encoded after this text, whose
# own tokens are then dropped (SentencePiece tokenizers prepend "▁" to a text).
_SENTINEL = "\n"


@dataclass(frozen=True, slots=True)
class Forced:
    """What fast-forward appends: ``tokens`` (possibly none), and whether the document
    is complete after them with nothing but end-of-sequence allowed (``ends``)."""

    tokens: tuple[int, ...] = ()
    ends: bool = False


NONE = Forced()
_ENDS = Forced((), ends=True)


class MatcherLike(Protocol):
    """The matcher methods fast-forward uses (a
    :class:`~jsonmode.decoding.matcher.Matcher` has them)."""

    def forced_bytes(self) -> bytes: ...
    def advance(self, token: int) -> bool: ...
    def rollback(self, count: int = 1) -> None: ...
    def can_end(self) -> bool: ...
    def is_finished(self) -> bool: ...
    def mask(self) -> Any: ...


class FastForward:
    """The fast-forward rule (module docstring) for one tokenizer.

    Args:
        vocabulary: the tokenizer's :class:`Vocabulary` (the matchers' own).
        encode: the tokenizer's encoding of a text, without special tokens (for a
            transformers tokenizer, ``lambda s: tok.encode(s, add_special_tokens=False)``).
            Whatever it does with a text's start (a SentencePiece prefix space) is
            handled by :meth:`encode`.
    """

    def __init__(self, vocabulary: Vocabulary, encode: Callable[[str], Sequence[int]]) -> None:
        self.vocabulary = vocabulary
        self._encode = encode
        sentinel = [int(t) for t in encode(_SENTINEL)]
        self._sentinel = sentinel if vocabulary.decode(sentinel).endswith(b"\n") else None
        self._eos = np.array(sorted(vocabulary.eos_ids), dtype=np.int64)
        first = np.full(vocabulary.size, -1, dtype=np.int16)
        first[vocabulary.ids] = vocabulary.matrix[:, 0] if len(vocabulary.ids) else 0
        self._first = first  # each token's first byte, -1 for control and unused ids

    def encode(self, text: str) -> list[int] | None:
        """The tokens the tokenizer writes for ``text`` as a continuation of a document:
        their bytes are exactly ``text``'s UTF-8, or None when no encoding tried
        gives that. Tried: ``text`` alone, then ``text`` after a newline whose own
        tokens are dropped (a SentencePiece tokenizer prepends a space to a text; a
        newline is its own token there, so the text after it is tokenized as it
        would be in the middle of a document)."""
        want = text.encode("utf-8", "surrogatepass")
        ids = [int(t) for t in self._encode(text)]
        if self.vocabulary.decode(ids) == want and not self._has_control(ids):
            return ids
        sentinel = self._sentinel
        if sentinel is None:
            return None
        ids = [int(t) for t in self._encode(_SENTINEL + text)]
        if ids[: len(sentinel)] != sentinel:
            return None
        ids = ids[len(sentinel) :]
        if self.vocabulary.decode(ids) != want or self._has_control(ids):
            return None
        return ids

    def _has_control(self, ids: list[int]) -> bool:
        special = self.vocabulary.special_ids
        return any(t in special for t in ids)

    def forced(self, matcher: MatcherLike, emitted: Sequence[int]) -> Forced:
        """The tokens to append after ``emitted`` (the tokens generated so far, which
        brought ``matcher`` where it is). ``matcher`` is left unchanged."""
        if not emitted or matcher.is_finished():
            return NONE
        forced = matcher.forced_bytes()
        if not forced:
            return _ENDS if self._only_end(matcher) else NONE
        found = self._tokenize(emitted, forced)
        if found is None:
            return NONE
        tail, text, tokens = found
        accepted = 0
        for token in tokens:
            if not matcher.advance(token):
                break
            accepted += 1
        probes: list[str] = []
        try:
            if accepted < len(tokens):
                return NONE  # step 4
            if self._only_end(matcher):
                return Forced(tuple(tokens), ends=True)  # step 5
            if len(tokens) > 1:
                probes = self._next_bytes(matcher)
        finally:
            matcher.rollback(accepted)
        keep = len(tokens) - 1  # step 6: the last token is the model's
        k = len(tail)
        for probe in probes:
            ids = self.encode(text + probe)
            if ids is None or ids[:k] != tail:
                return NONE
            same = 0
            while same < keep and k + same < len(ids) and ids[k + same] == tokens[same]:
                same += 1
            keep = same
            if not keep:
                break
        return Forced(tuple(tokens[:keep])) if keep > 0 and probes else NONE

    def _tokenize(
        self, emitted: Sequence[int], forced: bytes
    ) -> tuple[list[int], str, list[int]] | None:
        """Rule steps 2-3: the emitted tail, the text encoded (the tail's bytes and the
        forced ones) and ``R``; None when no context gives an agreeing encoding."""
        vocabulary = self.vocabulary
        for k in _CONTEXTS:
            if k > len(emitted):
                continue
            tail = [int(t) for t in emitted[-k:]]
            try:
                text = (vocabulary.decode(tail) + forced).decode("utf-8")
            except UnicodeDecodeError:  # the tail starts, or the forced bytes end, mid-character
                continue
            ids = self.encode(text)
            if ids is not None and ids[:k] == tail:
                return tail, text, ids[k:]
        return None

    def _next_bytes(self, matcher: MatcherLike) -> list[str]:
        """The ASCII bytes a token allowed now may start with, as one-character texts."""
        first = self._first[np.asarray(matcher.mask(), dtype=np.bool_)]
        return [chr(b) for b in np.unique(first[(first >= 0) & (first < 0x80)]).tolist()]

    def _only_end(self, matcher: MatcherLike) -> bool:
        """The document is complete and nothing but end-of-sequence may follow."""
        if not matcher.can_end():
            return False
        mask = matcher.mask()
        allowed = int(np.count_nonzero(mask))
        return allowed == int(np.count_nonzero(mask[self._eos])) and allowed > 0
