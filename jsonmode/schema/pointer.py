"""JSON Pointer (RFC 6901) resolution inside one schema document, and rebasing a
document's pointers under another (:func:`array_of`)."""

from __future__ import annotations

import urllib.parse
from typing import Any, Final

__all__ = ["MISSING", "array_of", "resolve_local_ref"]

#: Returned when a pointer leads nowhere (``None`` is a valid JSON value).
MISSING: Final = object()


def resolve_local_ref(root: Any, ref: str) -> Any:
    """The node a local reference (``#`` or ``#/a/b~1c/0``) names in ``root``, or MISSING."""
    if ref == "#":
        return root
    if not ref.startswith("#/"):
        return MISSING
    node = root
    for raw in ref[2:].split("/"):
        # A pointer in a URI fragment is percent-encoded first (RFC 6901, section 6).
        part = urllib.parse.unquote(raw).replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return MISSING
    return node


_VALUES = frozenset({"enum", "const", "examples", "default"})


def array_of(item: dict[str, Any] | bool) -> dict[str, Any]:
    """An array of ``item``: its references (JSON pointers from its root, as
    :class:`~jsonmode.schema.core.Schema` leaves them) rebased under ``/items``; its
    ``$schema`` moves to the array and its root ``$id`` is dropped (the pointers no
    longer need it)."""
    if isinstance(item, bool):
        return {"type": "array", "items": item}
    body = {key: value for key, value in item.items() if key not in ("$schema", "$id")}
    whole: dict[str, Any] = {"type": "array", "items": _rebased(body)}
    if "$schema" in item:
        whole = {"$schema": item["$schema"], **whole}
    return whole


def _rebased(node: Any) -> Any:
    if isinstance(node, list):
        return [_rebased(child) for child in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in ("$ref", "$dynamicRef") and isinstance(value, str) and value.startswith("#"):
            out[key] = "#/items" + value[1:] if value[1:2] in ("", "/") else value
        elif key in _VALUES:
            out[key] = value
        else:
            out[key] = _rebased(value)
    return out
