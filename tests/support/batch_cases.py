"""Schemas and sizes shared by the batch-mask tests (tests/test_decoding_batch.py and
tests/test_native_rows.py): an object with every kind of row, an array, a padded head."""

from __future__ import annotations

import pathlib
from typing import Any

__all__ = ["ARRAY", "OBJECT", "PAD", "TOKENIZERS"]

TOKENIZERS = pathlib.Path(__file__).resolve().parents[2].parent / "shared" / "data" / "tokenizers"
OBJECT: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 6},
        "n": {"type": "integer", "minimum": -5, "maximum": 120},
        "tags": {"type": "array", "items": {"enum": ["a", "bc"]}, "maxItems": 3},
    },
    "required": ["name", "n"],
    "additionalProperties": False,
}
ARRAY: dict[str, Any] = {"type": "array", "items": {"type": "boolean"}}
PAD = 13  # a model head wider than its tokenizer
