"""Syntax repair with json-repair, guarded against silent content loss, in bounded time.

json-repair turns almost anything into *some* JSON, and in doing so it can drop or
invent content: an empty result for prose, ``1,000`` split into two values, ``NaN``,
a duplicate key overwritten, a missing value filled with ``""``, ``...`` or a stray
``@`` dropped, ``None;`` read as the string ``"None;"``. A repair is only accepted
when the repaired document holds exactly the content of the raw text: every word,
number and other non-structural character of the raw text (outside comments) is
still there, nothing else was added, every string of the result stands in the raw
text between its own delimiters (so ``'O'Brien'`` cannot become ``"O'Brien'"`` and a
trailing newline inside a string cannot vanish), and no bare literal (``null``,
``true``, ``NaN``...) became text, and no bracket outside quotes became text
(``{"tags": {urgent}}`` is not ``{"tags": ["urgent}}"]}``). Otherwise structural
characters (``{}[],:`` and quotes) may be added, moved or dropped: that is what syntax
repair is.

Python's ``None``/``True``/``False`` (and other capitalisations of JSON's literals)
are rewritten by :func:`normalize_literals` before any of this, so the caller can
record that rewrite on its own.

Bounds: json-repair is pure Python and superlinear on some hostile shapes, so
:func:`repair_syntax` refuses nesting deeper than :data:`MAX_REPAIR_DEPTH` up front
and, given a deadline, stops json-repair and the content check there
(:mod:`jsonmode._watchdog`). Either raises :class:`RepairLimitError`.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from typing import Any

import json_repair

from jsonmode._json import StrictJSONError, dumps
from jsonmode._watchdog import DeadlineExceeded, run_until
from jsonmode.repair.lexer import Token, lex, strings_and_comments, strip_comments

__all__ = [
    "MAX_REPAIR_DEPTH",
    "ContentLossError",
    "RepairLimitError",
    "RepairTimeoutError",
    "normalize_literals",
    "repair_syntax",
]

#: Deepest nesting of objects/arrays handed to json-repair. It recurses about four
#: Python frames per level, so this keeps it far from the recursion limit (and from
#: the C stack where a caller raised that limit); realistic replies nest < 20 deep.
MAX_REPAIR_DEPTH = 100

# Numbers, words, and every other character that is neither whitespace nor structure
# (``{}[],:`` and quotes, typographic ones included): ``...``, ``@``, ``;``, a lone
# ``-`` count as content.
_TOKEN = re.compile(r"-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?|\w+|[^\s\w{}\[\],:\"'“”‘’]")
_NUMBER = re.compile(r"-?\d")
_ESCAPE = re.compile(r"\\(u[0-9a-fA-F]{4}|.)", re.DOTALL)
_SIMPLE_ESCAPES = {"n": "\n", "r": "\r", "t": "\t", "b": "\b", "f": "\f"}
# Bare words that mean "no value" or "not a number": json-repair keeps them as strings,
# which would turn a missing value into text.
_NON_VALUES = frozenset({"undefined", "nan", "-nan", "infinity", "-infinity", "inf", "-inf"})
# An unquoted string of the result that starts with a bare literal: json-repair read
# ``None;`` or ``true blue`` as text, changing what the value means.
_BARE_LITERAL = re.compile(r"(?:null|none|true|false)(?!\w)", re.IGNORECASE)
# Literal words not spelled as JSON spells them (None, True, NULL, ...), as whole words.
# Written to start with a character class, which lets the regex engine skip ahead in C
# (5x faster than a leading lookbehind on text without any): the first letter, a
# lookbehind for the word boundary, the rest paired with it, then "not lowercase JSON".
_ODD_LITERAL = re.compile(
    r"[NnTtFf](?<![\w$.-].)(?:(?<=[Nn])(?i:one|ull)|(?<=[Tt])(?i:rue)|(?<=[Ff])(?i:alse))"
    r"(?<!null)(?<!true)(?<!false)(?![\w$.-])"
)
_JSON_LITERAL = {"none": "null", "null": "null", "true": "true", "false": "false"}
# What separates unquoted keys and values: their text lies between these.
_STRUCTURE = re.compile(r"[{}\[\],:\n]")
_BRACKET = re.compile(r"[{}\[\]]")
_EMPTY_STRING = re.compile(r"\"\"|''")
# A double-quoted string as the lexer reads it (an unclosed one runs to the end).
_DOUBLE_QUOTED = re.compile(r'"([^"\\]*(?:\\.[^"\\]*)*)("?)', re.DOTALL)


class ContentLossError(StrictJSONError):
    """The only available repair would drop or invent content."""


class RepairLimitError(StrictJSONError):
    """The repair was stopped by one of its bounds (time, nesting); nothing was read."""


class RepairTimeoutError(RepairLimitError):
    """The repair's deadline passed before it finished."""


def _unescape(match: re.Match[str]) -> str:
    body = match.group(1)
    if body.startswith("u") and len(body) == 5:
        return chr(int(body[1:], 16))
    return _SIMPLE_ESCAPES.get(body, body)


def _decode(text: str) -> str:
    return _ESCAPE.sub(_unescape, text) if "\\" in text else text


def _token(raw: str) -> str:
    if _NUMBER.match(raw):
        return repr(float(raw))
    return raw.lower()


def _tokens(text: str) -> Counter[str]:
    return Counter(_token(m.group(0)) for m in _TOKEN.finditer(text))


def _difference(raw: str, repaired: str) -> tuple[Counter[str], Counter[str]]:
    """Words, numbers and other characters of ``raw`` missing from ``repaired``,
    and the reverse.

    Compares spellings first (one ``findall`` per side, in C); only when they differ
    does it compare numbers by value (``4.50`` is ``4.5``).
    """
    before = Counter(_TOKEN.findall(raw.lower()))
    after = Counter(_TOKEN.findall(repaired.lower()))
    if before == after:
        return Counter(), Counter()
    before, after = _tokens(raw), _tokens(repaired)
    return before - after, after - before


def _walk(value: Any, scalars: list[str], strings: list[str]) -> bool:
    """Collect keys and scalars (as the raw text would spell them); False on NaN/inf."""
    if isinstance(value, dict):
        for key, item in value.items():
            scalars.append(key)
            strings.append(key)
            if not _walk(item, scalars, strings):
                return False
    elif isinstance(value, list):
        for item in value:
            if not _walk(item, scalars, strings):
                return False
    elif isinstance(value, str):
        scalars.append(value)
        strings.append(value)
    elif isinstance(value, float) and not math.isfinite(value):
        return False
    else:
        scalars.append(dumps(value))
    return True


def _bare_in(source: str, text: str, pieces: set[str]) -> bool:
    """``text`` stands unquoted in ``source``, between non-word characters.

    A set lookup for the usual case (the text lies between structural characters);
    otherwise a ``str.find`` scan of ``source``, no regex compiled per string.
    """
    if not text or text != text.strip():
        return False
    if text in pieces:
        return True
    pos = source.find(text)
    while pos >= 0:
        end = pos + len(text)
        if not _word_or_quote(source, pos - 1) and not _word_or_quote(source, end):
            return True
        pos = source.find(text, pos + 1)
    return False


def _word_or_quote(source: str, index: int) -> bool:
    if index < 0 or index >= len(source):
        return False
    char = source[index]
    return char.isalnum() or char in "_'\""


def _quoted(source: str) -> set[str]:
    """Bodies of the quoted strings of ``source`` (decoded), in linear time.

    Without a single quote in ``source`` every string is double-quoted and one C
    ``findall`` finds them all (the lexer's double-quote rule, so each match consumes
    what it scans); otherwise one lexer pass.
    """
    if "'" not in source:
        return {_decode(body) for body, close in _DOUBLE_QUOTED.findall(source) if close}
    bodies: set[str] = set()
    for kind, start, end, closed in strings_and_comments(source):
        if kind == "string" and closed:
            bodies.add(_decode(source[start + 1 : end - 1]))
    return bodies


def _check_content(raw: str, value: Any) -> None:
    scalars: list[str] = []
    strings: list[str] = []
    if not _walk(value, scalars, strings):
        raise ContentLossError("NaN and Infinity are not JSON numbers")
    source = strip_comments(raw)
    quoted = _quoted(source)
    unquoted = [text for text in strings if text not in quoted]
    for text in unquoted:
        if (bracket := _BRACKET.search(text)) is not None:
            # Outside quotes a bracket is structure: json-repair read "{urgent}}" as
            # the text 'urgent}}' and closed the containers with brackets of its own.
            raise ContentLossError(
                f"repair would turn the bracket {bracket.group(0)!r} into text: {text!r:.60}"
            )
        if text.lower() in _NON_VALUES:
            raise ContentLossError(f"bare {text} is not a JSON value")
        if (bare := _BARE_LITERAL.match(text)) is not None:
            raise ContentLossError(f"bare {bare.group(0)} would become the string {text!r:.60}")
    lost, added = _difference(_decode(source), "\n".join(scalars))
    if lost:
        raise ContentLossError(f"repair would lose content: {_sample(lost)}")
    if added:
        raise ContentLossError(f"repair would invent content: {_sample(added)}")
    if strings.count("") > len(_EMPTY_STRING.findall(source)):
        raise ContentLossError("repair would invent an empty string for a missing value")
    pieces: set[str] = set()
    for text in unquoted:
        if not pieces:
            pieces = {piece.strip() for piece in _STRUCTURE.split(source)}
        if not _bare_in(source, text, pieces):
            raise ContentLossError(f"repair would alter the string {text!r:.60}")


def _sample(tokens: Counter[str], limit: int = 5) -> str:
    shown = [repr(token) for token in sorted(tokens)[:limit]]
    more = len(tokens) - limit
    return ", ".join(shown) + (f" and {more} more" if more > 0 else "")


def normalize_literals(text: str) -> str:
    """``text`` with bare ``None``/``True``/``False`` (and ``NULL``, ``True``... any
    capitalisation but JSON's own) spelled ``null``/``true``/``false``.

    Only a word that stands alone as a value is rewritten: outside strings and
    comments, after ``{ [ , :`` or a newline (or at the start), and before ``, ] }``,
    a newline, a comment or the end. So keys (``{None: 1}``) and words inside
    unquoted text (``None of these``) are left alone; the content check refuses
    whatever json-repair then makes of them. Returns ``text`` itself when nothing
    changes. Linear: one lexer pass, only when such a word occurs at all.
    """
    if _ODD_LITERAL.search(text) is None:
        return text
    edits: list[tuple[int, int, str]] = []
    tokens = list(strings_and_comments(text))
    last = 0  # end of the token before the current gap
    for index in range(len(tokens) + 1):
        previous = tokens[index - 1] if index else None
        following = tokens[index] if index < len(tokens) else None
        gap_end = following[1] if following is not None else len(text)
        for word in _ODD_LITERAL.finditer(text, last, gap_end):
            spelled = _JSON_LITERAL[word.group(0).lower()]
            before = text[last : word.start()].rstrip(" \t\r")
            after = text[word.end() : gap_end].lstrip(" \t\r")
            # At a gap's edge is a string (no value starts or ends there), a
            # comment or the text's edge (one may).
            starts = before[-1] in ",:[{\n" if before else _not_string(previous)
            ends = after[0] in ",]}\n" if after else _not_string(following)
            if starts and ends:
                edits.append((word.start(), word.end(), spelled))
        last = following[2] if following is not None else len(text)
    if not edits:
        return text
    out: list[str] = []
    pos = 0
    for start, end, spelled in edits:
        out.append(text[pos:start])
        out.append(spelled)
        pos = end
    out.append(text[pos:])
    return "".join(out)


def _not_string(token: Token | None) -> bool:
    return token is None or token[0] != "string"


def _depth(text: str) -> int:
    """The deepest nesting of brackets outside strings and comments (one lexer pass)."""
    depth = deepest = 0
    for kind, start, _, _ in lex(text):
        if kind == "bracket":
            if text[start] in "{[":
                depth += 1
                deepest = max(deepest, depth)
            elif depth:
                depth -= 1
    return deepest


def repair_syntax(raw: str, *, depth: int | None = None, deadline: float | None = None) -> Any:
    """Repair ``raw`` into one JSON value, or raise :class:`ContentLossError`.

    Callers try a strict parse first: this is for text that is not valid JSON.
    Literals are normalised first (:func:`normalize_literals`; a cheap no-op when the
    caller already did, to record it).

    Args:
        raw: the text to repair.
        depth: its nesting depth when the caller already knows it (extraction
            measures it for free); otherwise measured here, one lexer pass.
        deadline: a :func:`time.monotonic` time at which json-repair and the content
            check are stopped. Without one the work is bounded only by the nesting
            check, and json-repair can take minutes on hostile text.

    Raises:
        ContentLossError: no repair keeps exactly the content of ``raw``.
        RepairLimitError: nesting deeper than :data:`MAX_REPAIR_DEPTH`, or the
            deadline passed.

    Cost: one json-repair pass (about 1 µs per character on realistic text) plus a
    linear content check. Thread-safe.
    """
    if not raw.strip():
        raise ContentLossError("the output is empty")
    if depth is None:
        brackets = raw.count("{") + raw.count("[")
        depth = _depth(raw) if brackets > MAX_REPAIR_DEPTH else brackets
    if depth > MAX_REPAIR_DEPTH:
        raise RepairLimitError(
            f"nesting is {depth} deep, deeper than the {MAX_REPAIR_DEPTH} levels repair handles"
        )
    if deadline is None:
        return _repair(normalize_literals(raw))
    try:
        return run_until(deadline, _repair, normalize_literals(raw))
    except DeadlineExceeded:
        raise RepairTimeoutError("repair stopped at its deadline") from None


def _repair(raw: str) -> Any:
    try:
        value = json_repair.repair_json(raw, return_objects=True, skip_json_loads=True)
    except RecursionError:
        raise RepairLimitError("nesting is too deep to repair") from None
    except Exception as exc:  # json-repair raises assorted internal errors on hostile input
        raise ContentLossError(f"json-repair failed: {type(exc).__name__}: {exc}") from None
    if value == "" and raw.strip() not in ('""', "''"):
        raise ContentLossError("no JSON document found in the output")
    _check_content(raw, value)
    return value
