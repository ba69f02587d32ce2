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

A marker that appears only after the answer began (inside a JSON string, say) is left
alone, and a reply with no marker is the answer whole. For harmony, the answer's closing
``<|return|>``/``<|end|>`` token is dropped too.

Cost: each marker is looked for once with ``str.find`` from a moving position, so the
time is linear in the reply (times the marker's length, at most
:data:`~jsonmode.reasoning.MAX_MARKER_CHARS`) and the memory is the two slices; the
reply's own length is bounded by the readers' caps. Pure and thread-safe.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from jsonmode.reasoning import FAMILIES, Reasoning

__all__ = ["AUTO", "Split", "split_reasoning"]

#: The markers ``reasoning="auto"`` looks for in replies.
AUTO: tuple[Reasoning, ...] = tuple(FAMILIES.values())

# harmony's header before a channel (``<|start|>assistant``), skipped at the head
_HEADER = re.compile(r"\s*(?:<\|start\|>[A-Za-z]{0,32})?\s*")
_DOCUMENT = ("{", "[", '"')
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
    if reasoning.end.startswith("<|"):  # harmony: the final message's closing token
        stripped = rest.rstrip()
        for token in _HARMONY_END:
            if stripped.endswith(token):
                return stripped[: -len(token)]
    return rest
