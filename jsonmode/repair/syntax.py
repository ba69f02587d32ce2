"""Syntax repair with json-repair, guarded against silent content loss.

json-repair turns almost anything into *some* JSON, and in doing so it can drop or
invent content: an empty result for prose, ``1,000`` split into two values, ``NaN``,
a duplicate key overwritten, a missing value filled with ``""``. A repair is only
accepted when the repaired document holds exactly the content of the raw text:
every word and number of the raw text (outside comments) is still there, nothing
else was added, and every string of the result stands in the raw text between its
own delimiters (so ``'O'Brien'`` cannot become ``"O'Brien'"`` and a trailing newline
inside a string cannot vanish).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from typing import Any

import json_repair

from jsonmode._json import StrictJSONError, dumps
from jsonmode.repair.lexer import QUOTED_BODY, strip_comments

__all__ = ["ContentLossError", "repair_syntax"]

_TOKEN = re.compile(r"-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?|\w+")
_ESCAPE = re.compile(r"\\(u[0-9a-fA-F]{4}|.)", re.DOTALL)
_SIMPLE_ESCAPES = {"n": "\n", "r": "\r", "t": "\t", "b": "\b", "f": "\f"}
# Python spellings json-repair maps onto JSON literals.
_LITERAL_ALIASES = {"none": "null"}
# Bare words that mean "no value" or "not a number": json-repair keeps them as strings,
# which would turn a missing value into text.
_NON_VALUES = frozenset({"undefined", "nan", "-nan", "infinity", "-infinity", "inf", "-inf"})
# What separates unquoted keys and values: their text lies between these.
_STRUCTURE = re.compile(r"[{}\[\],:\n]")
_EMPTY_STRING = re.compile(r"\"\"|''")


class ContentLossError(StrictJSONError):
    """The only available repair would drop or invent content."""


def _unescape(match: re.Match[str]) -> str:
    body = match.group(1)
    if body.startswith("u") and len(body) == 5:
        return chr(int(body[1:], 16))
    return _SIMPLE_ESCAPES.get(body, body)


def _decode(text: str) -> str:
    return _ESCAPE.sub(_unescape, text) if "\\" in text else text


def _token(raw: str) -> str:
    if raw[0].isdigit() or raw[0] == "-":
        return repr(float(raw))
    word = raw.lower()
    return _LITERAL_ALIASES.get(word, word)


def _tokens(text: str) -> Counter[str]:
    return Counter(_token(m.group(0)) for m in _TOKEN.finditer(text))


def _difference(raw: str, repaired: str) -> tuple[Counter[str], Counter[str]]:
    """Words and numbers of ``raw`` missing from ``repaired``, and the reverse.

    Compares spellings first (one ``findall`` per side, in C); only when they differ
    does it compare numbers by value and Python literals by meaning (``4.50`` is
    ``4.5``, ``None`` is ``null``).
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
    """``text`` stands unquoted in ``source``, between non-word characters."""
    if not text or text != text.strip():
        return False
    if text in pieces:
        return True
    bare = re.compile(r"(?<![\w'\"])" + re.escape(text) + r"(?![\w'\"])")
    return bare.search(source) is not None


def _check_content(raw: str, value: Any) -> None:
    scalars: list[str] = []
    strings: list[str] = []
    if not _walk(value, scalars, strings):
        raise ContentLossError("NaN and Infinity are not JSON numbers")
    source = strip_comments(raw)
    decoded = _decode(source)
    lost, added = _difference(decoded, "\n".join(scalars))
    if lost:
        raise ContentLossError(f"repair would lose content: {_sample(lost)}")
    if added:
        raise ContentLossError(f"repair would invent content: {_sample(added)}")
    if strings.count("") > len(_EMPTY_STRING.findall(source)):
        raise ContentLossError("repair would invent an empty string for a missing value")
    quoted = {_decode(double or single) for double, single in QUOTED_BODY.findall(source)}
    pieces: set[str] = set()
    for text in strings:
        if text in quoted:
            continue
        if text.lower() in _NON_VALUES:
            raise ContentLossError(f"bare {text} is not a JSON value")
        if not pieces:
            pieces = {piece.strip() for piece in _STRUCTURE.split(source)}
        if not _bare_in(source, text, pieces):
            raise ContentLossError(f"repair would alter the string {text!r:.60}")


def _sample(tokens: Counter[str], limit: int = 5) -> str:
    shown = [repr(token) for token in sorted(tokens)[:limit]]
    more = len(tokens) - limit
    return ", ".join(shown) + (f" and {more} more" if more > 0 else "")


def repair_syntax(raw: str) -> Any:
    """Repair ``raw`` into one JSON value, or raise :class:`ContentLossError`.

    Callers try a strict parse first: this is for text that is not valid JSON.
    Costs one json-repair pass plus a linear content check.
    """
    if not raw.strip():
        raise ContentLossError("the output is empty")
    try:
        value = json_repair.repair_json(raw, return_objects=True, skip_json_loads=True)
    except RecursionError:
        raise ContentLossError("nesting is too deep to repair") from None
    except Exception as exc:  # json-repair raises assorted internal errors on hostile input
        raise ContentLossError(f"json-repair failed: {type(exc).__name__}: {exc}") from None
    if value == "" and raw.strip() not in ('""', "''"):
        raise ContentLossError("no JSON document found in the output")
    _check_content(raw, value)
    return value
