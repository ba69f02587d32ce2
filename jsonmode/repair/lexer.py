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

__all__ = ["QUOTED_BODY", "Token", "lex", "strip_comments"]

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
#: Bodies of quoted strings, found without lexing: double-quoted anywhere, single-quoted
#: where a key or value starts. A superset of the lexer's strings, used where a
#: superset is safe (the content-loss guard asks "was this string quoted in the raw?").
QUOTED_BODY = re.compile(
    r"""\"([^"\\]*(?:\\.[^"\\]*)*)\""""  # "double", escapes kept
    r"""|[{\[,:]\s*'((?:[^\\]|\\.)*?)'(?=[ \t\r]*(?:[,:}\]\n#]|//|/\*|\Z))""",  # 'single'
    re.DOTALL,
)

Kind = Literal["string", "comment", "bracket"]

#: ``(kind, start, end, closed)``: the lexeme is ``text[start:end]``; ``closed`` is
#: False for a string cut off at the end of the text. A plain tuple: the lexer is on
#: the repair hot path and a tuple costs a third of a dataclass instance.
Token = tuple[Kind, int, int, bool]


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
    for kind, start, end, _ in lex(text):
        if kind == "comment":
            pieces.append(text[last:start])
            last = end
    pieces.append(text[last:])
    return "".join(pieces)
