"""Checking a schema against its metaschema, fast for drafts 2020-12 and 4.

The official 2020-12 metaschema is seven vocabulary documents that refer back to
the whole through ``$dynamicRef: "#meta"``; jsonschema resolves each of those
dynamically, which makes checking a typical schema cost ~3 ms, often more than
compiling it. When the standard metaschema is where validation starts, every such
reference resolves to its top document, so the same constraints can be stated as
one document with plain ``$ref: "#"``. That document is built here, once, from the
metaschemas jsonschema itself ships (``jsonschema-specifications``), and compiled
by :mod:`~jsonmode.schema.fastcheck`: a typical schema is checked in ~0.3 ms. The
draft 4 metaschema (a third of MaskBench's schemas declare draft 4) is restated in
2020-12 keywords and compiled the same way, with draft 4's integers.

Contract: :func:`check_schema` raises exactly when ``cls.check_schema`` would, with
jsonschema's own error. A schema the flat document rejects is checked again the
official way (which raises), and any surprise while building the document falls
back to the official check; differential tests pin the two verdicts together.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable
from typing import Any

import jsonschema
import jsonschema.validators
from jsonschema.protocols import Validator

from jsonmode.schema.fastcheck import compile_check

__all__ = ["check_schema"]

_BASE = "https://json-schema.org/draft/2020-12/"
# Keywords of the metaschemas whose values are schemas, maps of schemas or lists of
# schemas (the places ``$dynamicRef`` and ``$ref`` can occur).
_SCHEMA_MAPS = frozenset({"properties", "patternProperties", "$defs", "dependentSchemas"})
_SCHEMA_LISTS = frozenset({"allOf", "anyOf", "oneOf", "prefixItems"})
_SCHEMAS = frozenset(
    {
        "additionalProperties",
        "items",
        "contains",
        "propertyNames",
        "not",
        "if",
        "then",
        "else",
        "unevaluatedItems",
        "unevaluatedProperties",
        "contentSchema",
    }
)
# Identification and annotations only: no effect on what validates.
_DROPPED = frozenset({"$id", "$schema", "$vocabulary", "$dynamicAnchor", "$comment", "title"})


def check_schema(cls: type[Validator], schema: Any) -> None:
    """Raise :class:`jsonschema.exceptions.SchemaError` when ``schema`` is not valid
    under ``cls``'s metaschema (as ``cls.check_schema(schema)`` does)."""
    fast = None
    if cls is jsonschema.Draft202012Validator:
        fast = _flat_check()
    elif cls is jsonschema.Draft4Validator:
        fast = _draft4_check()
    if fast is not None and fast(schema):
        return
    cls.check_schema(schema)


# The draft 4 metaschema's only draft 4 forms (checked before they are restated).
_DRAFT4_DEPENDENCIES = {"exclusiveMaximum": ["maximum"], "exclusiveMinimum": ["minimum"]}
_DRAFT4_MULTIPLE_OF = {"type": "number", "minimum": 0, "exclusiveMinimum": True}


@functools.cache
def _draft4_check() -> Callable[[Any], bool] | None:
    """The draft 4 metaschema as a fastcheck predicate: the document restated with
    2020-12 keywords (``dependencies`` of names as ``dependentRequired``, a Boolean
    ``exclusiveMinimum`` as a number, the identifiers dropped) and checked with
    draft 4's "integer" and format checker; None if the shipped document has any other
    draft 4 form (jsonschema's check is used then). ~1.3 -> ~0.2 ms a schema."""
    cls = jsonschema.Draft4Validator
    meta = copy.deepcopy(cls.META_SCHEMA)
    properties = meta.get("properties", {})
    if (
        meta.get("dependencies") != _DRAFT4_DEPENDENCIES
        or properties.get("multipleOf") != _DRAFT4_MULTIPLE_OF
    ):
        return None  # (any other draft 4 form makes compile_check refuse: None too)
    meta.pop("id", None)
    meta.pop("$schema", None)
    meta["dependentRequired"] = meta.pop("dependencies")
    properties["multipleOf"] = {"type": "number", "exclusiveMinimum": 0}
    return compile_check(meta, cls.FORMAT_CHECKER, legacy_integers=True)


@functools.cache
def _flat_check() -> Callable[[Any], bool] | None:
    """The yes/no check of the flat 2020-12 metaschema: compiled by
    :mod:`~jsonmode.schema.fastcheck` (same verdicts as jsonschema's, ~5x faster),
    else jsonschema's own; None without the flat document."""
    flat = _flat_validator()
    if flat is None:
        return None
    cls = jsonschema.Draft202012Validator
    compiled = compile_check(flat.schema, cls.FORMAT_CHECKER)
    return compiled if compiled is not None else flat.is_valid


@functools.cache
def _flat_validator() -> Validator | None:
    """A validator for the flattened 2020-12 metaschema; None if the shipped
    metaschemas are not shaped as expected (the official check is used then)."""
    try:
        from jsonschema_specifications import REGISTRY

        top = REGISTRY.contents(_BASE + "schema")
        parts = [_flatten(REGISTRY.contents(_BASE + ref["$ref"])) for ref in top["allOf"]]
        flat = _flatten({key: value for key, value in top.items() if key != "allOf"})
        defs: dict[str, Any] = {}
        for document in (*parts, flat):
            for name, definition in document.pop("$defs", {}).items():
                if defs.setdefault(name, definition) != definition:
                    return None  # two documents define one name differently
        flat.update({"allOf": parts, "$defs": defs})
        cls = jsonschema.Draft202012Validator
        cls.check_schema(flat)
        validator: Validator = cls(flat, format_checker=cls.FORMAT_CHECKER)
    except (ImportError, LookupError, TypeError, ValueError, jsonschema.SchemaError):
        return None
    return validator


def _flatten(schema: Any) -> Any:
    """One metaschema document rewritten to live inside the flat one: ``#meta``
    dynamic references become ``#``, references to sibling vocabularies
    (``meta/validation#/$defs/...``) become local, identifiers are dropped."""
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "$dynamicRef":
            if value != "#meta":
                raise ValueError(f"unexpected $dynamicRef {value!r}")
            out["$ref"] = "#"
        elif key == "$ref" and isinstance(value, str) and value.startswith("meta/"):
            fragment = value.partition("#")[2]
            if not fragment.startswith("/$defs/"):
                raise ValueError(f"unexpected $ref {value!r}")
            out["$ref"] = "#" + fragment
        elif key in _DROPPED:
            continue
        elif key in _SCHEMA_MAPS:
            out[key] = {name: _flatten(sub) for name, sub in value.items()}
        elif key in _SCHEMA_LISTS:
            out[key] = [_flatten(sub) for sub in value]
        elif key in _SCHEMAS:
            out[key] = _flatten(value)
        else:
            out[key] = value
    return out
