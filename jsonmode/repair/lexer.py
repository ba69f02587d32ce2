"""A lenient lexer for JSON-like model output: strings, comments and brackets.

One regex search per token, so string bodies and comments are skipped at C speed
(no per-character Python loop). Shared by extraction (bracket matching) and the
content-loss guard (comments to drop, string bodies to compare).

Double quotes always delimit strings, with backslash escapes. A single quote opens
a string only where a key or value may start (after ``{ [ , :``) and closes it only
where one may end (before ``, : } ]``, a newline, a comment or the end), so the
apostrophes in ``'O'Brien'`` and ``'it's'`` are content, and ``'12" vinyl'`` does
not open a double-quoted string. Comments are ``//``, ``/* */`` and ``#`` to end of line.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

__all__ = ["Token", "lex", "string_body", "strip_comments"]

_TOKEN = re.compile(
    r"""
      (?P<dq>"[^"\\]*(?:\\.[^"\\]*)*"?)
    | (?P<sq>')
    | (?P<comment>//[^\n]*|/\*.*?(?:\*/|\Z)|\#[^\n]*)
    | (?P<bracket>[{}\[\]])
    """,
    re.DOTALL | re.VERBOSE,
)
_SQ_END = re.compile(r"(?:[^\\]|\\.)*?'(?=[ \t\r]*(?:[,:}\]\n#]|//|/\*|\Z))", re.DOTALL)
_SQ_STARTS = frozenset("{[,:")

Kind = Literal["string", "comment", "bracket"]


@dataclass(frozen=True, slots=True)
class Token:
    """A lexeme: ``text[start:end]``. ``closed`` is False for a string cut off at the end."""

    kind: Kind
    start: int
    end: int
    closed: bool = True


def _previous_char(text: str, index: int) -> str:
    index -= 1
    while index >= 0 and text[index].isspace():
        index -= 1
    return text[index] if index >= 0 else ""


def lex(text: str, pos: int = 0) -> Iterator[Token]:
    """Strings, comments and brackets of ``text`` from ``pos``, in order."""
    n = len(text)
    while pos < n:
        match = _TOKEN.search(text, pos)
        if match is None:
            return
        start, kind = match.start(), match.lastgroup
        if kind == "sq":
            if _previous_char(text, start) not in _SQ_STARTS:
                pos = start + 1  # an apostrophe in bare text
                continue
            end_match = _SQ_END.match(text, start + 1)
            if end_match is None:
                yield Token("string", start, n, closed=False)
                return
            yield Token("string", start, end_match.end())
            pos = end_match.end()
            continue
        end = match.end()
        if kind == "dq":
            closed = end - start >= 2 and text[end - 1] == '"' and not _escaped(text, end - 1)
            yield Token("string", start, end, closed)
        else:
            yield Token(kind, start, end)  # type: ignore[arg-type]
        pos = end


def _escaped(text: str, index: int) -> bool:
    backslashes = 0
    while index - 1 - backslashes >= 0 and text[index - 1 - backslashes] == "\\":
        backslashes += 1
    return backslashes % 2 == 1


def string_body(text: str, token: Token) -> str:
    """The raw body of a string token, without its delimiters (escapes kept)."""
    body = text[token.start + 1 : token.end]
    return body[:-1] if token.closed and body else body


def strip_comments(text: str) -> str:
    """``text`` without its comments (strings untouched)."""
    if "/" not in text and "#" not in text:
        return text
    pieces: list[str] = []
    last = 0
    for token in lex(text):
        if token.kind == "comment":
            pieces.append(text[last : token.start])
            last = token.end
    pieces.append(text[last:])
    return "".join(pieces)
