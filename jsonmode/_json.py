"""Strict JSON reading and writing shared by every layer: RFC 8259 only, no silent data loss.

What a value read here may hold, a contract every layer relies on (validation,
coercion, prompts, events, the command line all write values back out):

- **Numbers within the IEEE-754 double range**, ``±MAX_NUMBER`` (``±1.7976931348623157e308``).
  Integers inside it are exact Python ints (up to 309 digits); other numbers are the
  nearest double. Anything beyond it is rejected with :class:`UnrepresentableError`:
  Python reads ``1e400`` as ``inf`` (not a JSON number, and one that passes every
  ``maximum``), an integer over ~4 300 digits cannot even be converted
  (``sys.int_max_str_digits``), and an integer past the double range overflows where
  jsonschema divides (``multipleOf``) or pydantic converts to ``float`` (it becomes
  ``inf`` there). The double range is also what JSON readers everywhere share, so a
  value returned here can be written, validated and sent on unchanged. The bound does
  not depend on ``sys.int_max_str_digits`` (whose smallest setting, 640, is above it).
  Underflow is not an error: ``1e-400`` reads as ``0.0`` and ``-0.0e9999`` as ``-0.0``,
  the nearest doubles, finite, as every JSON reader returns them.
- **Strings that are Unicode text**: no lone UTF-16 surrogate, whether escaped
  (``"\\ud800"``, a high half not followed by a low one, a low half alone) or a raw
  surrogate code point in the ``str`` handed in. Such a string cannot be encoded as
  UTF-8, so it could be neither printed nor sent nor stored. An escaped pair
  (``"\\ud83d\\ude00"``) is one character, as always.
- No ``NaN``/``Infinity``, no duplicate keys, nesting within Python's recursion limit.

Costs: numbers are checked as they are read (a length test per integer, a finiteness
test per float: a Python call each, ~+10 us on a 5 kB reply, 21 -> 37 ms on a 2.7 MB
number-heavy one); strings are walked for surrogates only when a fast pre-check on the
whole text (``str.isascii``, one literal-prefix regex) says one may be present (text
full of escaped emoji: 8 -> 34 ms per MB). The bound is checked before any conversion,
so a million-digit number is rejected in linear time. Thread-safe: no state.
"""

from __future__ import annotations

import json
import math
import re
import sys
from typing import Any

from jsonmode.errors import UsageError

__all__ = [
    "MAX_NUMBER",
    "StrictJSONError",
    "UnrepresentableError",
    "check_value",
    "decode_message",
    "dumps",
    "has_surrogate",
    "loads_strict",
    "read_float",
    "read_int",
]

#: The largest magnitude of a number jsonmode reads or returns: the largest double.
MAX_NUMBER: float = sys.float_info.max
_MAX_INTEGER = int(MAX_NUMBER)
_MAX_DIGITS = len(str(_MAX_INTEGER))  # 309
_SURROGATE = re.compile("[\ud800-\udfff]")
# A \u escape of a surrogate half: the only way JSON text spells one in ASCII.
_ESCAPED_SURROGATE = re.compile(r"\\u[dD][89a-fA-F]")
_INTEGER_LITERAL = re.compile(r"-?[0-9]+")


class StrictJSONError(ValueError):
    """The text is not one strict JSON document."""


class UnrepresentableError(StrictJSONError):
    """Well-formed JSON holding what no returned value may hold: a number beyond
    ``±MAX_NUMBER`` or a lone surrogate. Syntax repair cannot help: there is no
    syntax to repair, and any stand-in (``inf``, a string of digits, U+FFFD) would
    change the content."""


def _clip(text: str) -> str:
    return text if len(text) <= 24 else f"{text[:20]}... ({len(text)} characters)"


def _out_of_range(text: str) -> UnrepresentableError:
    return UnrepresentableError(
        f"the number {_clip(text)} is out of range: numbers must lie within "
        f"+-{MAX_NUMBER:.6g} (the double range)"
    )


def read_int(text: str) -> int:
    """The integer ``text`` spells (optional sign, leading zeros and surrounding
    whitespace allowed), exactly.

    The length is checked before converting, so a million digits never meet
    ``int_max_str_digits`` nor pay for a quadratic conversion. Raises
    :class:`UnrepresentableError` beyond ``±MAX_NUMBER``, :class:`StrictJSONError`
    when ``text`` is not decimal digits.
    """
    body = text.strip()
    digits = body[1:] if body[:1] in ("+", "-") else body
    if not (digits.isascii() and digits.isdigit()):
        raise StrictJSONError(f"not an integer: {_clip(text)}")
    digits = digits.lstrip("0") or "0"
    if len(digits) > _MAX_DIGITS:
        raise _out_of_range(body)
    value = int(digits)
    if value > _MAX_INTEGER:
        raise _out_of_range(body)
    return -value if body.startswith("-") else value


def read_float(text: str) -> float:
    """The double nearest to the number ``text`` spells; never ``inf`` or ``nan``.

    Raises :class:`UnrepresentableError` beyond ``±MAX_NUMBER`` (``1e400``, a
    400-digit mantissa), :class:`StrictJSONError` when ``text`` is not a number.
    Underflow gives ``0.0`` (finite). Callers pass a number literal.
    """
    try:
        value = float(text)
    except ValueError:
        raise StrictJSONError(f"not a number: {_clip(text)}") from None
    if not math.isfinite(value):
        raise _out_of_range(text.strip())
    return value


def _json_int(text: str) -> int:
    # A JSON integer has no leading zeros, so its length is its magnitude.
    return int(text) if len(text) < _MAX_DIGITS else read_int(text)


def _reject_constant(name: str) -> Any:
    raise StrictJSONError(f"{name} is not a JSON number")


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            # Keeping either value would silently drop the other.
            raise StrictJSONError(f"duplicate key {key!r}")
        out[key] = value
    return out


def has_surrogate(text: str) -> bool:
    """Whether ``text`` holds a surrogate code point (cannot be encoded as UTF-8).

    A decoded string: an escaped pair has become one character by now, so any
    surrogate left is a lone one. O(1) for ASCII text.
    """
    return not text.isascii() and _SURROGATE.search(text) is not None


def _may_hold_surrogate(text: str) -> bool:
    """Cheap pre-check on JSON text: False guarantees no string read from it holds one."""
    return has_surrogate(text) or _ESCAPED_SURROGATE.search(text) is not None


def _surrogate_error(text: str) -> UnrepresentableError:
    found = _SURROGATE.search(text)
    code = f"\\u{ord(found.group()):04x}" if found else "a surrogate"
    return UnrepresentableError(
        f"the string {_clip(ascii(text))} holds a lone surrogate ({code}): "
        "not Unicode text (write the character itself, or an escaped surrogate pair)"
    )


def _paired(text: str) -> str:
    """``text`` with each surrogate pair (two code points) joined into one character.

    Raises UnicodeDecodeError when a surrogate is left without its partner.
    """
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le")


def _lone(text: str, pairs_allowed: bool) -> bool:
    if not has_surrogate(text):
        return False
    if not pairs_allowed:
        return True
    try:
        _paired(text)
    except UnicodeDecodeError:
        return True
    return False


def _problem(
    value: Any, source: str | None, pairs_allowed: bool
) -> tuple[UnrepresentableError | None, bool]:
    """The first thing in ``value`` that no returned value may hold (iterative walk),
    and whether any string holds a surrogate pair to join."""
    paired = False
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if _lone(item, pairs_allowed):
                return _surrogate_error(item), paired
            paired = paired or has_surrogate(item)
            if source is not None and _bare_number(item, source):
                return _out_of_range(item), paired
        elif isinstance(item, dict):
            for key in item:
                if isinstance(key, str) and _lone(key, pairs_allowed):
                    return _surrogate_error(key), paired
                paired = paired or (isinstance(key, str) and has_surrogate(key))
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, float):
            if not math.isfinite(item):
                return _out_of_range(repr(item)), paired
        elif isinstance(item, int) and not isinstance(item, bool) and abs(item) > _MAX_INTEGER:
            return _out_of_range(f"of {item.bit_length()} bits"), paired
    return None, paired


def _join_pairs(value: Any) -> Any:
    if isinstance(value, str):
        return _paired(value) if has_surrogate(value) else value
    if isinstance(value, dict):
        return {_join_pairs(key): _join_pairs(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_join_pairs(item) for item in value]
    return value


def _bare_number(text: str, source: str) -> bool:
    """``text`` is a long integer literal that ``source`` spells without quotes: what
    json-repair returns for a number it could not convert (it gives up with a string)."""
    if len(text) <= _MAX_DIGITS or _INTEGER_LITERAL.fullmatch(text) is None:
        return False
    # Any one occurrence not opened by a quote is the bare number (the same digits
    # may also stand quoted elsewhere in the source).
    at = source.find(text)
    while at != -1:
        if at == 0 or source[at - 1] not in "\"'":
            return True
        at = source.find(text, at + 1)
    return False


def check_value(value: Any, source: str | None = None) -> Any:
    """``value`` if it holds nothing a returned value may not; else raise
    :class:`UnrepresentableError`: a non-finite float, an integer beyond
    ``±MAX_NUMBER``, a lone surrogate (in a key or a string).

    For values that did not come through :func:`loads_strict`: json-repair's. With
    ``source``, the text such a value was repaired from:

    - a long integer literal that ``source`` spells unquoted but ``value`` holds as a
      string is out of range too (json-repair's fallback for a number it cannot convert);
    - json-repair decodes an escaped pair (``\\ud83d\\ude00``) as two code points: when
      ``source`` holds no raw surrogate, such pairs are joined into their one character
      (a copy of ``value`` is returned), as a JSON reader does. A raw surrogate in
      ``source`` is not Unicode text, so none is joined then.

    One walk over ``value``, and a copy only when a pair is joined.
    """
    pairs_allowed = source is not None and not has_surrogate(source)
    problem, paired = _problem(value, source, pairs_allowed)
    if problem is not None:
        raise problem
    if not paired:
        return value
    try:
        return _join_pairs(value)
    except RecursionError:
        raise StrictJSONError("nesting is too deep") from None


def decode_message(exc: json.JSONDecodeError) -> str:
    """``json``'s message without its location, to be followed by " at <where>": some
    of its messages end in "at" already ("Unterminated string starting at", "Invalid
    control character at"), which would read "... at at line 1"."""
    return exc.msg.removesuffix(" at")


def loads_strict(text: str) -> Any:
    """Parse exactly one JSON document (surrounding whitespace allowed).

    Rejects NaN/Infinity, duplicate keys and nesting deeper than Python's recursion
    limit, all of which ``json.loads`` accepts or crashes on; and, with
    :class:`UnrepresentableError`, numbers beyond ``±MAX_NUMBER`` and lone surrogates
    (see the module docstring). Raises StrictJSONError; never a bare ValueError.
    """
    try:
        value = json.loads(
            text,
            parse_constant=_reject_constant,
            object_pairs_hook=_pairs,
            parse_int=_json_int,
            parse_float=read_float,
        )
    except json.JSONDecodeError as exc:
        where = f"line {exc.lineno} column {exc.colno}"
        raise StrictJSONError(f"{decode_message(exc)} at {where}") from None
    except RecursionError:
        raise StrictJSONError("nesting is too deep") from None
    if _may_hold_surrogate(text):
        check_value(value)
    return value


def dumps(value: Any) -> str:
    """Compact JSON with non-ASCII kept as is.

    Every value :func:`loads_strict` returns can be written. Raises
    :class:`~jsonmode.errors.UsageError` for what JSON cannot hold: NaN or infinity,
    an integer too long for ``str()`` (``sys.int_max_str_digits``), a lone surrogate
    (not UTF-8), a non-JSON type, a cycle or nesting past the recursion limit.
    """
    try:
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError, RecursionError) as exc:
        raise UsageError(f"value cannot be written as JSON: {exc}") from None
    if has_surrogate(text):
        raise UsageError(f"value cannot be written as JSON: {_surrogate_error(text)}")
    return text
