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
from typing import Literal

__all__ = ["Token", "lex", "strings_and_comments", "strip_comments"]

_STRINGS_AND_COMMENTS = r"""
      (?P<dq>"[^"\\]*(?:\\.[^"\\]*)*"?)
    | (?P<sq>')
    | (?P<comment>//[^\n]*|/\*.*?(?:\*/|\Z)|\#[^\n]*)
"""
_TOKEN = re.compile(_STRINGS_AND_COMMENTS + r"| (?P<bracket>[{}\[\]])", re.DOTALL | re.VERBOSE)
# Without brackets, which the regex then skips in C: string detection never depends
# on them (a single quote looks back at the raw text, not at tokens).
_NO_BRACKETS = re.compile(_STRINGS_AND_COMMENTS, re.DOTALL | re.VERBOSE)
_SQ_END = re.compile(r"(?:[^\\]|\\.)*?'(?=[ \t\r]*(?:[,:}\]\n#]|//|/\*|\Z))", re.DOTALL)
_SQ_STARTS = frozenset("{[,:")
Kind = Literal["string", "comment", "bracket"]

#: ``(kind, start, end, closed)``: the lexeme is ``text[start:end]``; ``closed`` is
#: False for a string cut off at the end of the text. A plain tuple: the lexer is on
#: the repair hot path and a tuple costs a third of a dataclass instance.
Token = tuple[Kind, int, int, bool]


def _previous_char(text: str, index: int) -> str:
    """The last non-whitespace character before ``index`` ("" at the start)."""
    while index > 0:
        window = text[max(0, index - 16) : index].rstrip()  # in C: usually one step
        if window:
            return window[-1]
        index -= 16
    return ""


def lex(text: str, pos: int = 0) -> Iterator[Token]:
    """Strings, comments and brackets of ``text`` from ``pos``, in order.

    Linear in the text: every regex here matches in time proportional to what it
    consumes, and at most one single-quoted string fails to close (the lexer stops
    there: the rest of the text is inside it).
    """
    return _lex(text, pos, _TOKEN)


def strings_and_comments(text: str) -> list[Token]:
    """The tokens of :func:`lex` other than brackets, found faster: the regex skips
    brackets in C and the loop builds a list (no generator). Same rules as ``_lex``."""
    tokens: list[Token] = []
    search, n, pos = _NO_BRACKETS.search, len(text), 0
    while pos < n and (match := search(text, pos)) is not None:
        start, end, kind = match.start(), match.end(), match.lastgroup
        if kind == "dq":
            closed = end - start >= 2 and text[end - 1] == '"' and not _escaped(text, end - 1)
            tokens.append(("string", start, end, closed))
        elif kind == "comment":
            tokens.append(("comment", start, end, True))
        elif _previous_char(text, start) not in _SQ_STARTS:
            end = start + 1  # an apostrophe in bare text
        elif (end_match := _SQ_END.match(text, start + 1)) is None:
            tokens.append(("string", start, n, False))
            break
        else:
            end = end_match.end()
            tokens.append(("string", start, end, True))
        pos = end
    return tokens


def _lex(text: str, pos: int, token: re.Pattern[str]) -> Iterator[Token]:
    n = len(text)
    while pos < n:
        match = token.search(text, pos)
        if match is None:
            return
        start, kind = match.start(), match.lastgroup
        if kind == "sq":
            if _previous_char(text, start) not in _SQ_STARTS:
                pos = start + 1  # an apostrophe in bare text
                continue
            end_match = _SQ_END.match(text, start + 1)
            if end_match is None:
                yield ("string", start, n, False)
                return
            yield ("string", start, end_match.end(), True)
            pos = end_match.end()
            continue
        end = match.end()
        if kind == "dq":
            closed = end - start >= 2 and text[end - 1] == '"' and not _escaped(text, end - 1)
            yield ("string", start, end, closed)
        else:
            yield (kind, start, end, True)  # type: ignore[misc]
        pos = end


def _escaped(text: str, index: int) -> bool:
    backslashes = 0
    while index - 1 - backslashes >= 0 and text[index - 1 - backslashes] == "\\":
        backslashes += 1
    return backslashes % 2 == 1


def strip_comments(text: str) -> str:
    """``text`` without its comments (strings untouched)."""
    if "/" not in text and "#" not in text:
        return text
    pieces: list[str] = []
    last = 0
    for kind, start, end, _ in strings_and_comments(text):
        if kind == "comment":
            pieces.append(text[last:start])
            last = end
    pieces.append(text[last:])
    return "".join(pieces)
