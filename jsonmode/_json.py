"""Strict JSON reading shared by every layer: RFC 8259 only, no silent data loss."""

from __future__ import annotations

import json
from typing import Any

__all__ = ["StrictJSONError", "dumps", "loads_strict"]


class StrictJSONError(ValueError):
    """The text is not one strict JSON document."""


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


def loads_strict(text: str) -> Any:
    """Parse exactly one JSON document (surrounding whitespace allowed).

    Rejects NaN/Infinity, duplicate keys and nesting deeper than Python's recursion
    limit, all of which ``json.loads`` accepts or crashes on. Raises StrictJSONError.
    """
    try:
        return json.loads(text, parse_constant=_reject_constant, object_pairs_hook=_pairs)
    except json.JSONDecodeError as exc:
        raise StrictJSONError(f"{exc.msg} at line {exc.lineno} column {exc.colno}") from None
    except RecursionError:
        raise StrictJSONError("nesting is too deep") from None


def dumps(value: Any) -> str:
    """Compact JSON with non-ASCII kept as is."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
