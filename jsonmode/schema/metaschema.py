"""Checking a schema against its metaschema, fast for drafts 2020-12, 7, 6 and 4.

The official 2020-12 metaschema is seven vocabulary documents that refer back to
the whole through ``$dynamicRef: "#meta"``; jsonschema resolves each of those
dynamically, which makes checking a typical schema cost ~3 ms, often more than
compiling it. When the standard metaschema is where validation starts, every such
reference resolves to its top document, so the same constraints can be stated as
one document with plain ``$ref: "#"``. That document is built here, once, from the
metaschemas jsonschema itself ships (``jsonschema-specifications``), and compiled
by :mod:`~jsonmode.schema.fastcheck`: a typical schema is checked in ~0.3 ms. The
draft 4, 6 and 7 metaschemas (a third of MaskBench's schemas declare draft 4) are
restated in 2020-12 keywords and compiled the same way (draft 4 with its integers).

Contract: :func:`check_schema` raises exactly when ``cls.check_schema`` would, with
jsonschema's own error, except that a string Python's ``re`` refuses with an
``OverflowError`` (``"pattern": "a{99999999999}"``) is "not a 'regex'" where
jsonschema would let the OverflowError out (see
:data:`~jsonmode.schema.formats.ALSO_MALFORMED`). A schema the flat document rejects
is checked again the official way (which raises), and any surprise while building the
document falls back to the official check; differential tests pin the two verdicts
together.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable, Iterator
from typing import Any

import jsonschema
import jsonschema.exceptions
import jsonschema.validators
from jsonschema.protocols import Validator

from jsonmode.budget import checkpoint
from jsonmode.schema.fastcheck import compile_check
from jsonmode.schema.formats import tolerant

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
    under ``cls``'s metaschema (as ``cls.check_schema(schema)`` does; a ``regex`` that
    ``re`` refuses with an OverflowError is not valid either: SchemaError too).

    Bounded: the check stops at the current compile deadline (checked per subschema,
    and Python's ``re`` compiling a ``regex`` is interrupted there), and a ``regex``
    over :data:`~jsonmode.limits.MAX_PATTERN_CHARS` is refused unread; both raise
    :class:`~jsonmode.errors.BudgetExceededError`."""
    fast = None
    if cls is jsonschema.Draft202012Validator:
        fast = _flat_check()
    elif cls in _RESTATED:
        fast = _restated_check(cls)
    if fast is not None:
        try:
            if fast(schema):
                return
        except RecursionError:  # (nested deeper than the fast check's recursion allows)
            pass
    for error in _official(cls).iter_errors(schema):
        raise jsonschema.exceptions.SchemaError.create_from(error)


def _official(cls: type[Validator]) -> Validator:
    """What ``cls.check_schema`` checks with (the validator of ``cls``'s metaschema,
    its format checker made :func:`~jsonmode.schema.formats.tolerant`), with a
    :func:`~jsonmode.budget.checkpoint` before each keyword it evaluates: the
    official check of a large schema (draft 2019-09's ``$recursiveRef``: 7 s for the
    largest Kubernetes schema) stops at the compile deadline. Immutable, thread-safe."""
    known = _officials.get(cls)
    if known is not None:
        return known
    meta = jsonschema.validators.validator_for(cls.META_SCHEMA, default=cls)
    stepping = jsonschema.validators.extend(
        meta, {name: _stepping(check) for name, check in meta.VALIDATORS.items()}
    )
    made: Validator = stepping(cls.META_SCHEMA, format_checker=tolerant(cls.FORMAT_CHECKER))
    _officials[cls] = made  # (two threads may each make one: either is the same)
    return made


_officials: dict[type[Validator], Validator] = {}


def _stepping(check: Callable[..., Any]) -> Callable[..., Any]:
    def stepped(validator: Any, value: Any, instance: Any, schema: Any) -> Any:
        checkpoint()
        return check(validator, value, instance, schema)

    return stepped


# The older metaschemas checked by fastcheck, restated in 2020-12 keywords.
_RESTATED = (jsonschema.Draft4Validator, jsonschema.Draft6Validator, jsonschema.Draft7Validator)
# The draft 4 metaschema's only draft 4 forms (checked before they are restated).
_DRAFT4_DEPENDENCIES = {"exclusiveMaximum": ["maximum"], "exclusiveMinimum": ["minimum"]}
_DRAFT4_MULTIPLE_OF = {"type": "number", "minimum": 0, "exclusiveMinimum": True}


def _restated_check(cls: type[Validator]) -> Callable[[Any], bool] | None:
    """:func:`_restate` once per draft."""
    if cls not in _restated:
        _restated[cls] = _restate(cls)
    return _restated[cls]


_restated: dict[type[Validator], Callable[[Any], bool] | None] = {}


def _restate(cls: type[Validator]) -> Callable[[Any], bool] | None:
    """A draft 4, 6 or 7 metaschema as a fastcheck predicate: the document restated
    with 2020-12 keywords and checked with its draft's format checker (and, for
    draft 4, its "integer": 2.0 is not one).

    Draft 4's ``dependencies`` of names become ``dependentRequired`` and its Boolean
    ``exclusiveMinimum`` a number; identifiers are dropped. None (jsonschema's own
    check is used then) if the shipped document has any other form whose meaning
    differs in 2020-12: a ``$ref`` with sibling keywords (ignored before 2019-09), or
    anything fastcheck does not know. ~1 ms -> ~0.2 ms a schema.
    """
    meta = copy.deepcopy(cls.META_SCHEMA)
    legacy = cls is jsonschema.Draft4Validator
    if legacy:
        properties = meta.get("properties", {})
        if (
            meta.get("dependencies") != _DRAFT4_DEPENDENCIES
            or properties.get("multipleOf") != _DRAFT4_MULTIPLE_OF
        ):
            return None  # (any other draft 4 form makes compile_check refuse: None too)
        meta["dependentRequired"] = meta.pop("dependencies")
        properties["multipleOf"] = {"type": "number", "exclusiveMinimum": 0}
    for identifier in ("id", "$id", "$schema"):
        meta.pop(identifier, None)
    if any("$ref" in sub and len(sub.keys() - _INERT) > 1 for sub in _subschemas(meta)):
        return None
    return compile_check(
        meta, tolerant(cls.FORMAT_CHECKER), legacy_integers=legacy, step=checkpoint
    )


# Keywords beside a "$ref" that change nothing in any draft.
_INERT = frozenset({"$comment", "title", "description", "default", "examples"})


def _subschemas(schema: Any) -> Iterator[dict[str, Any]]:
    """Every schema object in a metaschema document, by keyword position."""
    if not isinstance(schema, dict):
        return
    yield schema
    for key, value in schema.items():
        if key in _SCHEMA_MAPS or key == "definitions":
            for sub in value.values():
                yield from _subschemas(sub)
        elif key in _SCHEMA_LISTS:
            for sub in value:
                yield from _subschemas(sub)
        elif key in _SCHEMAS or key in ("additionalItems", "items"):
            if isinstance(value, list):
                for sub in value:
                    yield from _subschemas(sub)
            else:
                yield from _subschemas(value)


@functools.cache
def _flat_check() -> Callable[[Any], bool] | None:
    """The yes/no check of the flat 2020-12 metaschema: compiled by
    :mod:`~jsonmode.schema.fastcheck` (same verdicts as jsonschema's, ~5x faster),
    else jsonschema's own; None without the flat document."""
    flat = _flat_validator()
    if flat is None:
        return None
    cls = jsonschema.Draft202012Validator
    compiled = compile_check(flat.schema, tolerant(cls.FORMAT_CHECKER), step=checkpoint)
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
        validator: Validator = cls(flat, format_checker=tolerant(cls.FORMAT_CHECKER))
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
