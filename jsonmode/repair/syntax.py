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
from collections.abc import Iterator
from typing import Any

import json_repair

from jsonmode._json import StrictJSONError, dumps

__all__ = ["ContentLossError", "repair_syntax"]

_TOKEN = re.compile(r"-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?|\w+")
_ESCAPE = re.compile(r"\\(u[0-9a-fA-F]{4}|.)", re.DOTALL)
_SIMPLE_ESCAPES = {"n": "\n", "r": "\r", "t": "\t", "b": "\b", "f": "\f"}
# Python spellings json-repair maps onto JSON literals.
_LITERAL_ALIASES = {"none": "null"}
# Bare words that mean "no value" or "not a number": json-repair keeps them as strings,
# which would turn a missing value into text.
_NON_VALUES = frozenset({"undefined", "nan", "-nan", "infinity", "-infinity", "inf", "-inf"})
_EMPTY_STRING = re.compile(r"\"\"|''")


class ContentLossError(StrictJSONError):
    """The only available repair would drop or invent content."""


def _unescape(match: re.Match[str]) -> str:
    body = match.group(1)
    if body.startswith("u") and len(body) == 5:
        return chr(int(body[1:], 16))
    return _SIMPLE_ESCAPES.get(body, body)


def _strip_comments(text: str) -> str:
    """Drop ``//`` and ``/* */`` comments outside double-quoted strings."""
    out: list[str] = []
    i, n, in_string = 0, len(text), False
    while i < n:
        ch = text[i]
        if in_string:
            out.append(ch)
            if ch == "\\" and i + 1 < n:
                out.append(text[i + 1])
                i += 1
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
            out.append(ch)
        elif text.startswith("//", i):
            end = text.find("\n", i)
            i = n if end < 0 else end
            continue
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            i = n if end < 0 else end + 2
            continue
        else:
            out.append(ch)
        i += 1
    return "".join(out)


def _token(raw: str) -> str:
    if raw[0].isdigit() or raw[0] == "-":
        try:
            return repr(float(raw))
        except ValueError:  # pragma: no cover - the regex only matches numbers here
            return raw
    word = raw.lower()
    return _LITERAL_ALIASES.get(word, word)


def _tokens(text: str) -> Counter[str]:
    return Counter(_token(m.group(0)) for m in _TOKEN.finditer(text))


def _scalars(value: Any) -> Iterator[str]:
    """Text of every key and scalar, in the spelling the raw text would use."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield key
            yield from _scalars(item)
    elif isinstance(value, list):
        for item in value:
            yield from _scalars(item)
    elif isinstance(value, str):
        yield value
    else:
        yield dumps(value)


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, dict):
        for key, item in value.items():
            yield key
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)
    elif isinstance(value, str):
        yield value


def _quoted_in(source: str, text: str) -> bool:
    return f'"{text}"' in source or f"'{text}'" in source


def _stands_in(source: str, text: str) -> bool:
    """``text`` appears in ``source`` quoted, or bare between non-word characters."""
    if _quoted_in(source, text):
        return True
    if not text or text != text.strip():
        return False
    bare = re.compile(r"(?<![\w'\"])" + re.escape(text) + r"(?![\w'\"])")
    return bare.search(source) is not None


def _empty_strings(value: Any) -> int:
    if isinstance(value, dict):
        return sum((key == "") + _empty_strings(item) for key, item in value.items())
    if isinstance(value, list):
        return sum(_empty_strings(item) for item in value)
    return int(value == "")


def _check_content(raw: str, value: Any) -> None:
    if not _finite(value):
        raise ContentLossError("NaN and Infinity are not JSON numbers")
    source = _ESCAPE.sub(_unescape, _strip_comments(raw))
    before = _tokens(source)
    after: Counter[str] = Counter()
    for text in _scalars(value):
        after.update(_tokens(text))
    lost, added = before - after, after - before
    if lost:
        raise ContentLossError(f"repair would lose content: {_sample(lost)}")
    if added:
        raise ContentLossError(f"repair would invent content: {_sample(added)}")
    if _empty_strings(value) > len(_EMPTY_STRING.findall(source)):
        raise ContentLossError("repair would invent an empty string for a missing value")
    for text in _strings(value):
        if text.lower() in _NON_VALUES and not _quoted_in(source, text):
            raise ContentLossError(f"bare {text} is not a JSON value")
        if not _stands_in(source, text):
            raise ContentLossError(f"repair would alter the string {_sample(Counter([text]))}")


def _finite(value: Any) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, dict):
        return all(_finite(item) for item in value.values())
    if isinstance(value, list):
        return all(_finite(item) for item in value)
    return True


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
