"""Find the JSON document(s) inside a model's reply: markdown fences, prose around JSON.

Fenced blocks are tried first, then every bracketed span of the whole reply, so
a fence holding code (or a fence cut short by backticks inside a string) never
hides the document.

Cost: linear in the reply on realistic text (each character is lexed about once per
fence it sits in, plus once for the whole reply). On adversarial text a span that
fails at a mismatched closer is retried from the openers inside it that could still
match, so work can grow beyond linear; callers bound it with a deadline
(:func:`jsonmode._watchdog.run_until`): every loop here is pure Python and can
be interrupted, and every regex runs in linear time.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Sequence
from dataclasses import dataclass

from jsonmode.repair.lexer import lex

__all__ = ["Candidate", "find_candidates"]

_OPENERS = {"{": "}", "[": "]"}
_OPEN = re.compile(r"[{\[]")


@dataclass(frozen=True, slots=True)
class Candidate:
    """A span of the reply that may hold the JSON document.

    Attributes:
        text: the span itself.
        closed: False when the text ends inside an open string, object or array
            (the reply was most likely cut off).
        depth: the deepest nesting of objects and arrays in it (0 when unknown:
            the text was not bracket-matched).
    """

    text: str
    closed: bool
    depth: int = 0


def _match(region: str, start: int) -> Candidate | list[int]:
    """The span opened at ``start``; when a closer does not match, the openers
    still open there (each would fail at the same closer: retrying them is wasted)."""
    opened: list[int] = []  # positions of the open brackets
    depth = 0
    for kind, begin, end, closed in lex(region, start):
        if kind == "string":
            if not closed:
                break
            continue
        if kind != "bracket":
            continue
        char = region[begin]
        if char in _OPENERS:
            opened.append(begin)
            if len(opened) > depth:
                depth = len(opened)
        elif char != _OPENERS[region[opened[-1]]]:
            return opened
        else:
            opened.pop()
            if not opened:
                return Candidate(region[start:end], closed=True, depth=depth)
    return Candidate(region[start:], closed=False, depth=depth)


def _spans(region: str, skip: Sequence[tuple[int, int]] = ()) -> list[Candidate]:
    """Top-level ``{...}``/``[...]`` spans of ``region``, in order.

    Prose between spans is not lexed (a stray quote there must not swallow the JSON);
    nor are the ``skip`` ranges (fences whose spans are already known).
    """
    found: list[Candidate] = []
    starts = [begin for begin, _ in skip]  # sorted, disjoint
    doomed: set[int] = set()
    pos = 0
    while (opener := _OPEN.search(region, pos)) is not None:
        at = opener.start()
        index = bisect.bisect_right(starts, at) - 1
        if index >= 0 and at < skip[index][1]:
            pos = skip[index][1]
            continue
        if at in doomed:
            pos = at + 1
            continue
        span = _match(region, at)
        if isinstance(span, list):
            doomed.update(span)
            pos = at + 1
            continue
        found.append(span)
        if not span.closed:
            break
        pos = at + len(span.text)
    return found


def _fences(text: str) -> list[tuple[int, int, int, bool]]:
    """Markdown fences as ``(body_start, body_end, end, closed)``, in order.

    A fence opens at a ``` followed by an info string and a newline, and closes at
    the next ``` (or runs to the end). One forward scan with ``str.find``, so no
    backtracking regex can go quadratic on long runs of backticks.
    """
    fences: list[tuple[int, int, int, bool]] = []
    pos = 0
    while (tick := text.find("```", pos)) >= 0:
        newline = text.find("\n", tick + 3)
        if newline < 0:
            break  # no fence can open without a newline after it
        body = newline + 1
        close = text.find("```", body)
        if close < 0:
            fences.append((body, len(text), len(text), False))
            break
        fences.append((body, close, close + 3, True))
        pos = close + 3
    return fences


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
    for body, body_end, end, closed in _fences(text):
        spans = _spans(text[body:body_end])
        for span in spans:
            add(Candidate(span.text, closed=span.closed or closed, depth=span.depth))
        if all(span.closed for span in spans):
            known.append((body, end))
    for span in _spans(text, known):
        add(span)
    if not candidates:
        add(Candidate(text.strip(), closed=True))
    return candidates
