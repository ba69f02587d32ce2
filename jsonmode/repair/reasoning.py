"""A reply's thinking split off from its answer, before the answer is read.

A reasoning model writes its thinking, an end marker, then its answer:
``<think>\\n...\\n</think>\\n{"name": "Ada"}``. :func:`split_reasoning` cuts such a reply
in two, so that the answer alone is read and validated and the thinking is kept
apart: nothing in the thinking is ever searched for the answer (a thinking that
quotes a JSON draft is not a second document).

What is recognised, for each :class:`~jsonmode.reasoning.Reasoning` given (the known
:data:`~jsonmode.reasoning.FAMILIES` for ``reasoning="auto"``; the first that matches
wins):

- the reply opens (after blank space, and after harmony's role header such as
  ``<|start|>assistant``) with the start marker: the thinking runs to the end marker;
  consecutive thinking blocks at the head are all thinking;
- the reply holds the end marker with no start marker before it, and does not open
  with a JSON document (``{``, ``[`` or ``"``): the chat template pre-filled the start
  marker, so the reply began inside the thinking;
- a reply that opens with the start marker and never writes the end marker *ended
  inside its thinking* (:attr:`Split.unfinished`): it holds no answer at all.

The blank space between the end marker and the answer is dropped (a text under a
grammar starts where the answer does). A marker that appears only after the answer
began (inside a JSON string, say) is left alone, and a reply with no marker is the
answer whole. For harmony, the answer's closing ``<|return|>``/``<|end|>`` token is
dropped too.

Cost: each marker is looked for once with ``str.find`` from a moving position, so the
time is linear in the reply (times the marker's length, at most
:data:`~jsonmode.reasoning.MAX_MARKER_CHARS`) and the memory is the two slices; the
reply's own length is bounded by the readers' caps. Pure and thread-safe.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from jsonmode.reasoning import FAMILIES, MAX_MARKER_CHARS, Reasoning

__all__ = ["AUTO", "Split", "StreamedSplit", "split_gated", "split_reasoning"]

#: The markers ``reasoning="auto"`` looks for in replies.
AUTO: tuple[Reasoning, ...] = tuple(FAMILIES.values())

# harmony's header before a channel (``<|start|>assistant``), skipped at the head
_HEADER = re.compile(r"\s*(?:<\|start\|>[A-Za-z]{0,32})?\s*")
_DOCUMENT = ("{", "[", '"')
_HARMONY_HEAD = "<|start|>"
_HARMONY_END = ("<|return|>", "<|end|>", "<|call|>")


@dataclass(frozen=True, slots=True)
class Split:
    """A reply cut into its thinking and its answer.

    Attributes:
        answer: the text to read the value from (the whole reply when no thinking).
        thinking: the thinking's text, markers excluded (None: the reply has none).
        unfinished: the reply ended inside its thinking (no end marker): no answer.
        markers: the markers that matched (None: no thinking found).
    """

    answer: str
    thinking: str | None = None
    unfinished: bool = False
    markers: Reasoning | None = None


def split_reasoning(text: str, markers: Sequence[Reasoning]) -> Split:
    """``text`` cut into thinking and answer by the first of ``markers`` that matches
    (see the module docstring); ``Split(text)`` when none does. Linear in ``text``."""
    for reasoning in markers:
        split = _split(text, reasoning)
        if split is not None:
            return split
    return Split(text)


def split_gated(text: str, reasoning: Reasoning) -> Split:
    """``text`` as a constraining backend decoded it under ``reasoning``'s gate: an
    optional start marker, the thinking, the end marker, the document (no guessing: the
    thinking may look like anything, even JSON). No end marker: the reply ended inside
    its thinking (``unfinished``). Linear in ``text``."""
    body = (
        text[len(reasoning.start) :]
        if reasoning.start and text.startswith(reasoning.start)
        else text
    )
    closing = body.find(reasoning.end)
    if closing < 0:
        return Split("", body.strip(), True, reasoning)
    return Split(
        _answer(body[closing + len(reasoning.end) :], reasoning),
        body[:closing].strip(),
        False,
        reasoning,
    )


def _split(text: str, reasoning: Reasoning) -> Split | None:
    start, end = reasoning.start, reasoning.end
    head = _HEADER.match(text)
    at = head.end() if head is not None else 0
    if start is not None and text.startswith(start, at):
        pieces: list[str] = []
        while start is not None and text.startswith(start, at):
            closing = text.find(end, at + len(start))
            if closing < 0:
                pieces.append(text[at + len(start) :])
                return Split("", _joined(pieces), True, reasoning)
            pieces.append(text[at + len(start) : closing])
            at = closing + len(end)
            following = _HEADER.match(text, at)
            if following is None or not text.startswith(start, following.end()):
                break
            at = following.end()
        return Split(_answer(text[at:], reasoning), _joined(pieces), False, reasoning)
    closing = text.find(end)
    if closing < 0:
        return None
    if start is not None and text.find(start, 0, closing) >= 0:
        return None  # a start marker inside the answer's text: not thinking at the head
    if text[:closing].lstrip()[:1] in _DOCUMENT:
        return None  # the reply opens with a document: the marker is inside the answer
    thinking = text[:closing].strip()
    return Split(_answer(text[closing + len(end) :], reasoning), thinking, False, reasoning)


def _joined(pieces: list[str]) -> str:
    return "\n".join(piece.strip() for piece in pieces)


def _answer(rest: str, reasoning: Reasoning) -> str:
    rest = rest.lstrip()  # the blank space after the end marker separates, it is not answer
    if reasoning.end.startswith("<|"):  # harmony: the final message's closing token
        stripped = rest.rstrip()
        for token in _HARMONY_END:
            if stripped.endswith(token):
                return stripped[: -len(token)]
    return rest


#: The longest head held back while it may still open a thinking block (harmony's
#: header plus the longest start marker fits; past it the head is decided).
_MAX_HEAD = 64 + 2 * MAX_MARKER_CHARS


class StreamedSplit:
    """:func:`split_reasoning` over a reply that arrives in pieces: each piece is cut
    into a thinking delta and an answer delta as it comes, so that a stream shows the
    thinking apart and reads partial values from the answer only.

    The head is held back while it may still open a thinking block (at most
    :data:`_MAX_HEAD` characters); inside a thinking block, the last few characters
    are held back while they may be the start of the end marker. A reply that began
    inside its thinking (a pre-filled start marker) is known to be thinking only when
    its end marker arrives: until then it reads as answer, and :meth:`feed` then says
    ``restart`` (the answer so far was thinking; the answer starts over). Linear in
    the reply: each character is looked at a bounded number of times (times the
    marker's length). Not thread-safe: one per streamed reply.
    """

    def __init__(self, markers: Sequence[Reasoning]) -> None:
        self._markers = tuple(markers)
        self._state = "head" if self._markers else "answer"
        self._held = ""  # head not yet decided, or a tail that may start the end marker
        self._active: Reasoning | None = None  # the markers of the block being read
        self._prose: list[str] = []  # answer text that may yet prove to be thinking
        self._scanned = ""  # the prose's last characters, for markers across pieces
        self._started = False  # a thinking block was opened or closed already

    def feed(self, piece: str) -> tuple[str, str, bool]:
        """(thinking delta, answer delta, restart) for one piece of the reply."""
        if self._state == "answer":
            return "", piece, False
        if self._state == "thinking":
            return self._thinking(piece)
        if self._state == "prose":
            return self._in_prose(piece)
        return self._head(self._held + piece)

    def finish(self) -> tuple[str, str]:
        """(thinking, answer) still held back when the reply ends."""
        held, self._held = self._held, ""
        if self._state == "thinking":
            return held, ""
        if self._state == "head":
            return "", held
        return "", ""

    def _head(self, text: str) -> tuple[str, str, bool]:
        self._held = ""
        head = _HEADER.match(text)
        at = head.end() if head is not None else 0
        rest = text[at:]
        waiting = False
        for reasoning in self._markers:
            start = reasoning.start
            if start is None:
                continue
            if rest.startswith(start):
                self._state, self._active = "thinking", reasoning
                self._started = True
                return self._thinking(rest[len(start) :])
            if start.startswith(rest) or _HARMONY_HEAD.startswith(text.lstrip()):
                waiting = True
        if waiting and len(text) < _MAX_HEAD:
            self._held = text
            return "", "", False
        if self._started or text.lstrip()[:1] in _DOCUMENT:
            self._state = "answer"
            return "", text.lstrip() if self._started else text, False
        self._state = "prose"
        return self._in_prose(text)

    def _thinking(self, piece: str) -> tuple[str, str, bool]:
        assert self._active is not None
        end = self._active.end
        window = self._held + piece
        closing = window.find(end)
        if closing < 0:
            keep = min(len(window), len(end) - 1)
            self._held = window[len(window) - keep :]
            return window[: len(window) - keep], "", False
        self._held = ""
        self._state = "head"
        thinking = window[:closing]
        more_thinking, answer, restart = self._head(window[closing + len(end) :])
        return thinking + more_thinking, answer, restart

    def _in_prose(self, piece: str) -> tuple[str, str, bool]:
        window = self._scanned + piece
        for reasoning in self._markers:
            closing = window.find(reasoning.end)
            if closing < 0:
                continue
            prose = "".join(self._prose) + piece
            before = prose[: len(prose) - len(window) + closing]
            if reasoning.start is not None and reasoning.start in before:
                continue
            self._prose, self._scanned, self._started = [], "", True
            self._state = "head"
            after = window[closing + len(reasoning.end) :]
            more_thinking, answer, _ = self._head(after)
            return before.strip() + more_thinking, answer, True
        self._prose.append(piece)
        longest = max(len(reasoning.end) for reasoning in self._markers)
        self._scanned = window[-(longest - 1) :] if longest > 1 else ""
        return "", piece, False
