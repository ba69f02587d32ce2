"""JSON Pointer (RFC 6901) resolution inside one schema document."""

from __future__ import annotations

import urllib.parse
from typing import Any, Final

__all__ = ["MISSING", "resolve_local_ref"]

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
