"""Find the JSON document(s) inside a model's reply: markdown fences, prose around JSON.

Fenced blocks are tried first, then every bracketed span of the whole reply, so
a fence holding code (or a fence cut short by backticks inside a string) never
hides the document.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["Candidate", "find_candidates"]

_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)(?:```|\Z)", re.DOTALL)
_OPENERS = {"{": "}", "[": "]"}
_SINGLE_STARTS = frozenset("{[,:")
_SINGLE_ENDS = frozenset(",:}]") | {""}


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


def _neighbour(region: str, i: int, step: int) -> str:
    """The nearest non-space character from ``i`` in direction ``step`` ("" at the edge)."""
    i += step
    while 0 <= i < len(region) and region[i].isspace():
        i += step
    return region[i] if 0 <= i < len(region) else ""


def _spans(region: str) -> list[Candidate]:
    """Top-level ``{...}``/``[...]`` spans of ``region``, in order.

    Double quotes always delimit strings (with backslash escapes). A single quote
    opens a string only where a value or key may start (after ``{ [ , :``) and closes
    it only where one may end (before ``, : } ]``), so apostrophes in ``'O'Brien'``
    or ``'it's'`` are content, and ``'12" vinyl'`` does not open a double-quoted string.
    """
    found: list[Candidate] = []
    i, n = 0, len(region)
    while i < n:
        if region[i] not in _OPENERS:
            i += 1
            continue
        start, stack, quote, escaped = i, [_OPENERS[region[i]]], "", False
        i += 1
        while i < n and stack:
            ch = region[i]
            if quote:
                if escaped:
                    escaped = False
                elif ch == "\\":
                    escaped = True
                elif ch == quote and (quote == '"' or _neighbour(region, i, 1) in _SINGLE_ENDS):
                    quote = ""
            elif ch == '"' or (ch == "'" and _neighbour(region, i, -1) in _SINGLE_STARTS):
                quote = ch
            elif ch in _OPENERS:
                stack.append(_OPENERS[ch])
            elif ch in "}]":
                if ch != stack[-1]:
                    break  # mismatched closer: not JSON structure, move on
                stack.pop()
            i += 1
        if not stack:
            found.append(Candidate(region[start:i], closed=True))
        elif i >= n:
            found.append(Candidate(region[start:], closed=False))
        else:
            i = start + 1
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

    for fence in _FENCE.finditer(text):
        runs_to_end = not fence.group(0).endswith("```") or fence.end() - fence.start(2) < 3
        for span in _spans(fence.group(2)):
            add(Candidate(span.text, closed=span.closed or not runs_to_end))
    for span in _spans(text):
        add(span)
    if not candidates:
        add(Candidate(text.strip(), closed=True))
    return candidates
