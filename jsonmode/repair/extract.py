"""Find the JSON document(s) inside a model's reply: markdown fences, prose around JSON.

Fenced blocks are tried first, then every bracketed span of the whole reply, so
a fence holding code (or a fence cut short by backticks inside a string) never
hides the document.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from jsonmode.repair.lexer import lex

__all__ = ["Candidate", "find_candidates"]

_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)(?:```|\Z)", re.DOTALL)
_OPENERS = {"{": "}", "[": "]"}
_OPEN = re.compile(r"[{\[]")


@dataclass(frozen=True, slots=True)
class Candidate:
    """A span of the reply that may hold the JSON document.

    Attributes:
        text: the span itself.
        closed: False when the text ends inside an open string, object or array
            (the reply was most likely cut off).
    """

    text: str
    closed: bool


def _match(region: str, start: int) -> Candidate | None:
    """The span opened at ``start``, or None when a closer does not match."""
    stack: list[str] = []
    for kind, begin, end, closed in lex(region, start):
        if kind == "string":
            if not closed:
                break
            continue
        if kind != "bracket":
            continue
        char = region[begin]
        if char in _OPENERS:
            stack.append(_OPENERS[char])
        elif char != stack[-1]:
            return None
        else:
            stack.pop()
            if not stack:
                return Candidate(region[start:end], closed=True)
    return Candidate(region[start:], closed=False)


def _spans(region: str, skip: Sequence[tuple[int, int]] = ()) -> list[Candidate]:
    """Top-level ``{...}``/``[...]`` spans of ``region``, in order.

    Prose between spans is not lexed (a stray quote there must not swallow the JSON);
    nor are the ``skip`` ranges (fences whose spans are already known).
    """
    found: list[Candidate] = []
    pos = 0
    while (opener := _OPEN.search(region, pos)) is not None:
        inside = next((end for begin, end in skip if begin <= opener.start() < end), None)
        if inside is not None:
            pos = inside
            continue
        span = _match(region, opener.start())
        if span is None:
            pos = opener.start() + 1
            continue
        found.append(span)
        if not span.closed:
            break
        pos = opener.start() + len(span.text)
    return found


def find_candidates(text: str) -> list[Candidate]:
    """Candidate documents in ``text``, most likely first, without duplicates.

    Spans inside fenced blocks come first, then spans of the whole reply. A span is
    ``closed=False`` only when it is still open at the end of the reply (inside a
    closed fence, an open span is a syntax slip, not a cut). When nothing is
    bracketed, the stripped text itself is the only candidate (a scalar document,
    or text the parser will reject).
    """
    candidates: list[Candidate] = []
    seen: set[str] = set()

    def add(candidate: Candidate) -> None:
        if candidate.text not in seen:
            seen.add(candidate.text)
            candidates.append(candidate)

    known: list[tuple[int, int]] = []  # fences whose every span closed inside them
    for fence in _FENCE.finditer(text):
        runs_to_end = not fence.group(0).endswith("```") or fence.end() - fence.start(2) < 3
        spans = _spans(fence.group(2))
        for span in spans:
            add(Candidate(span.text, closed=span.closed or not runs_to_end))
        if all(span.closed for span in spans):
            known.append((fence.start(2), fence.end()))
    for span in _spans(text, known):
        add(span)
    if not candidates:
        add(Candidate(text.strip(), closed=True))
    return candidates
