"""Find the JSON document(s) inside a model's reply: markdown fences, prose around JSON.

The scanner tracks double-quoted strings only: single quotes are too often
apostrophes in prose (``it's``) to be trusted as string delimiters.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["Candidate", "find_candidates"]

_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)(?:```|\Z)", re.DOTALL)
_OPENERS = {"{": "}", "[": "]"}


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


def _spans(region: str) -> list[Candidate]:
    """Top-level ``{...}``/``[...]`` spans of ``region``, in order."""
    found: list[Candidate] = []
    i, n = 0, len(region)
    while i < n:
        if region[i] not in _OPENERS:
            i += 1
            continue
        start, stack, in_string, escaped = i, [_OPENERS[region[i]]], False, False
        i += 1
        while i < n and stack:
            ch = region[i]
            if in_string:
                if escaped:
                    escaped = False
                elif ch == "\\":
                    escaped = True
                elif ch == '"':
                    in_string = False
            elif ch == '"':
                in_string = True
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
    """Candidate documents in ``text``, most likely first.

    Fenced blocks come first (a closing fence that never comes means the reply was
    cut off), then bracketed spans in the prose. When nothing is bracketed the
    stripped text itself is the only candidate (a scalar document, or garbage that
    the parser will reject).
    """
    # (region, runs_to_end): an open document is only "cut off" when its region runs
    # to the end of the reply; inside a closed fence it is a syntax slip instead.
    regions: list[tuple[str, bool]] = [
        (m.group(2), not (m.group(0).endswith("```") and m.end() - m.start(2) >= 3))
        for m in _FENCE.finditer(text)
    ]
    if not regions:
        regions = [(text, True)]
    candidates: list[Candidate] = []
    for region, runs_to_end in regions:
        spans = _spans(region)
        if spans:
            candidates.extend(
                Candidate(span.text, closed=span.closed or not runs_to_end) for span in spans
            )
        elif region.strip():
            candidates.append(Candidate(region.strip(), closed=True))
    if not candidates:
        candidates.append(Candidate(text.strip(), closed=True))
    return candidates
