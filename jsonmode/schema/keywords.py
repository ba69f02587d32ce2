"""Keywords that never constrain a value (annotations), shared by every schema consumer."""

from __future__ import annotations

__all__ = ["ANNOTATIONS"]

ANNOTATIONS = frozenset(
    {
        "$schema",
        "$comment",
        "$defs",
        "definitions",
        "title",
        "description",
        "default",
        "examples",
        "deprecated",
        "readOnly",
        "writeOnly",
        "contentMediaType",
        "contentEncoding",
        "contentSchema",
        "discriminator",  # OpenAPI annotation pydantic emits
    }
)
