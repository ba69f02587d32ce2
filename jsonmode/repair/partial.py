"""The JSON value a prefix of a streamed document already determines.

For showing a document while it streams. A partial value is *never validated*:
required properties may still be missing and strings still growing. What it holds
is exactly what the finished document will hold, no more:

- a string cut off mid-way appears with the characters received so far (an escape
  sequence cut in half is left out until it is complete), or, with
  ``growing_strings=False``, only once its closing quote has arrived;
- a number appears only once something follows it (``12`` may still become
  ``1234``), ``true``/``false``/``null`` once complete;
- an object key appears only once its value has started;
- containers appear as soon as they open.

So for every prefix of a JSON text ``t``, ``parse_partial(prefix)`` is contained in
``json.loads(t)`` in that sense, and ``parse_partial(t) == json.loads(t)``. Leading
prose or a markdown fence before the first ``{`` or ``[`` is skipped; anything after
the document is ignored. Costs one linear pass over the text per call; texts over
:data:`MAX_PARTIAL_CHARS` give no value. (A stream re-reads its growing text: see
:mod:`jsonmode.streaming` for the cadence that keeps those reads linear in total.)

:func:`complete_items` reads the same way the items of a top-level array that are
already complete (for handing out list items one by one while the list streams).

A document that can never be read (see :mod:`jsonmode._json`: a number beyond the
double range such as ``1e400``, a lone surrogate) gives no partial value at all, so a
partial never shows what the final value cannot hold (``inf``, text that is not Unicode).
"""

from __future__ import annotations

import json
import re
from typing import Any

from jsonmode._json import StrictJSONError, has_surrogate, loads_strict

__all__ = ["MAX_PARTIAL_CHARS", "ReadCadence", "complete_items", "parse_partial"]

#: Longer texts give no partial value: this bounds the time and memory of one read
#: (a stream spaces its re-reads so that their total stays linear in the reply's
#: length, see :mod:`jsonmode.streaming`, but each is still a full pass).
MAX_PARTIAL_CHARS = 200_000


class ReadCadence:
    """When to re-read a text that grows piece by piece (a stream), so that all the
    reads add up to linear work: after every piece while the text holds at most
    :attr:`SHORT` characters, then only once it has grown by ``1/GROWTH`` of its
    length since the last read. Reads then cost at most about ``GROWTH + 1`` passes
    over the final text, plus at most ``SHORT`` characters a piece within the first
    ``SHORT``; what a skipped read would show comes at most ``1/GROWTH`` of the text
    late. Not thread-safe (one per stream)."""

    SHORT = 1024
    GROWTH = 32

    def __init__(self) -> None:
        self.read_at = 0  # the text's length at the last read

    def due(self, size: int) -> bool:
        """Whether a text now ``size`` characters long is to be read again."""
        return size <= self.SHORT or (size - self.read_at) * self.GROWTH >= size

    def read(self, size: int) -> None:
        """Note a read of the text at ``size`` characters."""
        self.read_at = size


_WS = re.compile(r"[ \t\n\r]*")
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
# Pieces of an unterminated string body: plain runs and complete escapes.
_BODY_PIECE = re.compile(r'[^"\\]+|\\u[0-9a-fA-F]{4}|\\["\\/bfnrt]')
_HIGH_SURROGATE = re.compile(r"\\u[dD][89abAB][0-9a-fA-F]{2}")
_ESCAPE_START = re.compile(r"\\(?:u[0-9a-fA-F]{0,3})?")
_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")
# Everything a number may be on its way to: decides "still growing" vs "invalid".
_NUMBERISH = re.compile(r"-?[0-9]*(?:\.[0-9]*)?(?:[eE][+-]?[0-9]*)?")
_LITERALS = (("true", True), ("false", False), ("null", None))
_START = re.compile(r"[\[{]")
_NOTHING: Any = object()


class _Cut(Exception):
    """The text ended; ``value`` is what the interrupted value holds so far."""

    def __init__(self, value: Any) -> None:
        super().__init__()
        self.value = value


class _Invalid(Exception):
    """The prefix cannot be the start of a JSON document."""


def parse_partial(text: str, *, growing_strings: bool = True) -> Any:
    """The value the JSON document at the start of ``text`` holds so far.

    ``growing_strings=False`` leaves out a string until it is closed (an object
    member whose string value is still open is not shown yet).

    Returns ``None`` when nothing can be shown yet (empty text, a lone number still
    growing), when the text cannot be the start of a JSON document, or when it is
    longer than :data:`MAX_PARTIAL_CHARS`. Never raises for any input text.
    """
    start = _start(text)
    if start is None:
        return None
    try:
        value, _ = _value(text, start, growing_strings)
    except _Cut as cut:
        value = cut.value
    except (_Invalid, RecursionError):
        return None
    return None if value is _NOTHING else value


def complete_items(text: str) -> tuple[list[Any], bool] | None:
    """The items of the top-level array at the start of ``text`` that are complete,
    and whether the array itself is closed.

    An item is complete once the text shows where it ends (``12`` only once a ``,`` or
    ``]`` or space follows it). Leading prose is skipped as by :func:`parse_partial`.
    Returns None when the document is not an array (or not yet known to be one), when
    the text cannot be the start of a JSON document, or when it is over
    :data:`MAX_PARTIAL_CHARS`. Never raises; one linear pass.
    """
    start = _start(text)
    if start is None or start >= len(text) or text[start] != "[":
        return None
    items: list[Any] = []
    try:
        i = _skip(text, start + 1)
        if i < len(text) and text[i] == "]":
            return items, True
        while True:
            try:
                item, i = _value(text, i, False)
            except _Cut:
                return items, False
            items.append(item)
            i = _skip(text, i)
            if i >= len(text):
                return items, False
            if text[i] == "]":
                return items, True
            if text[i] != ",":
                return None
            i += 1
    except (_Invalid, RecursionError):
        return None


def _start(text: str) -> int | None:
    """Where the document starts (past leading whitespace or prose), or None."""
    if len(text) > MAX_PARTIAL_CHARS:
        return None
    start = _WS.match(text, 0).end()  # type: ignore[union-attr]
    if start < len(text) and text[start] not in '{["':
        found = _START.search(text, start)
        if found is None:
            return None
        start = found.start()
    return start


def _skip(text: str, i: int) -> int:
    return _WS.match(text, i).end()  # type: ignore[union-attr]


def _value(text: str, i: int, growing: bool) -> tuple[Any, int]:
    i = _skip(text, i)
    if i >= len(text):
        raise _Cut(_NOTHING)
    char = text[i]
    if char == "{":
        return _object(text, i + 1, growing)
    if char == "[":
        return _array(text, i + 1, growing)
    if char == '"':
        return _string(text, i, growing)
    if char in "-0123456789":
        token = _NUMBERISH.match(text, i).group()  # type: ignore[union-attr]
        end = i + len(token)
        if end == len(text):
            raise _Cut(_NOTHING)  # "12" may still become "1234"
        if _NUMBER.fullmatch(token) is None:
            raise _Invalid
        try:
            return loads_strict(token), end
        except StrictJSONError:  # beyond the double range: the document cannot be read
            raise _Invalid from None
    for word, literal in _LITERALS:
        if text.startswith(word, i):
            return literal, i + len(word)
        if word.startswith(text[i : i + len(word)]) and len(text) - i < len(word):
            raise _Cut(_NOTHING)
    raise _Invalid


def _string(text: str, i: int, growing: bool) -> tuple[str, int]:
    whole = _STRING.match(text, i)
    if whole is not None:
        return _text(whole.group()), whole.end()
    if not growing:
        raise _Cut(_NOTHING)
    pieces: list[str] = []
    pos = i + 1
    while (piece := _BODY_PIECE.match(text, pos)) is not None:
        pieces.append(piece.group())
        pos = piece.end()
    if pos < len(text) and _ESCAPE_START.fullmatch(text, pos) is None:
        raise _Invalid  # a bad escape, not an unfinished one
    if pieces and _HIGH_SURROGATE.fullmatch(pieces[-1]):
        pieces.pop()  # half of a surrogate pair: wait for the other half
    raise _Cut(_text('"' + "".join(pieces) + '"'))


def _text(literal: str) -> str:
    """A JSON string literal's value; _Invalid when it is not Unicode text."""
    try:
        value: str = json.loads(literal, strict=False)
    except json.JSONDecodeError:
        raise _Invalid from None
    if has_surrogate(value):  # a lone surrogate: an escaped pair is one character by now
        raise _Invalid
    return value


def _object(text: str, i: int, growing: bool) -> tuple[dict[str, Any], int]:
    obj: dict[str, Any] = {}
    i = _skip(text, i)
    if i < len(text) and text[i] == "}":
        return obj, i + 1
    while True:
        i = _skip(text, i)
        if i >= len(text):
            raise _Cut(obj)
        if text[i] != '"':
            raise _Invalid
        try:
            key, i = _string(text, i, True)
        except _Cut:
            raise _Cut(obj) from None  # a key is shown only once it is complete
        i = _skip(text, i)
        if i >= len(text):
            raise _Cut(obj)
        if text[i] != ":":
            raise _Invalid
        try:
            obj[key], i = _value(text, i + 1, growing)
        except _Cut as cut:
            if cut.value is not _NOTHING:
                obj[key] = cut.value
            raise _Cut(obj) from None
        i = _skip(text, i)
        if i >= len(text):
            raise _Cut(obj)
        if text[i] == "}":
            return obj, i + 1
        if text[i] != ",":
            raise _Invalid
        i += 1


def _array(text: str, i: int, growing: bool) -> tuple[list[Any], int]:
    items: list[Any] = []
    i = _skip(text, i)
    if i < len(text) and text[i] == "]":
        return items, i + 1
    while True:
        try:
            item, i = _value(text, i, growing)
        except _Cut as cut:
            if cut.value is not _NOTHING:
                items.append(cut.value)
            raise _Cut(items) from None
        items.append(item)
        i = _skip(text, i)
        if i >= len(text):
            raise _Cut(items)
        if text[i] == "]":
            return items, i + 1
        if text[i] != ",":
            raise _Invalid
        i += 1
