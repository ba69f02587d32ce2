"""Schema-aware coercion: fix values whose *type* is wrong in a way that loses nothing.

Only these changes are made, each recorded as a :class:`~jsonmode.repair.report.Repair`:

=====================  ==========================================================
``string_to_integer``  ``"42"`` → ``42`` (also ``"31.0"`` → ``31``)
``string_to_number``   ``"4.5"`` → ``4.5``
``string_to_boolean``  ``"true"``/``"False"`` → ``true``/``false``
``string_to_null``     ``"null"`` → ``null``
``float_to_integer``   ``31.0`` → ``31``
``wrap_array``         ``x`` → ``[x]`` where an array is expected
``enum_case``          ``"RED"`` → ``"red"``: case-insensitive, only when unambiguous
=====================  ==========================================================

Coercion never adds a missing property, never removes one, and never touches a
value whose type the schema already allows. ``anyOf``/``oneOf`` branches are tried
in order and a branch's coercions are kept only if they make the value valid for it.
"""

from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass, field
from typing import Any

from jsonschema.protocols import Validator as _JsonschemaValidator

from jsonmode._json import StrictJSONError, read_float, read_int
from jsonmode.repair.report import Repair, RepairKind
from jsonmode.schema.core import UNDECIDED
from jsonmode.schema.patterns import PatternUndecidedError
from jsonmode.schema.patterns import search as search_pattern
from jsonmode.schema.pointer import MISSING, resolve_local_ref
from jsonmode.schema.validation import format_path

__all__ = ["CoercionTimeoutError", "coerce"]

_INTEGER = re.compile(r"\s*[-+]?\d+(?:\.0*)?\s*")
_FLOAT_MARK = re.compile(r"[.eE]")  # present: parse as float
# One way to match each spelling: "\d+\.?\d*" backtracked quadratically on long digit runs.
_NUMBER = re.compile(r"\s*[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?\s*")
_MAX_DEPTH = 64
_MAX_REF_HOPS = 32


class CoercionTimeoutError(Exception):
    """Coercion did not finish before its deadline (internal: the caller validates the
    value as it was)."""


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "integer" if value.is_integer() else "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def _allowed(types: set[str], value: Any) -> bool:
    kind = _json_type(value)
    return kind in types or (kind == "integer" and "number" in types)


@dataclass
class _Walk:
    root: Any
    validator: _JsonschemaValidator
    deadline: float = math.inf  # time.monotonic(); checked at every value visited
    repairs: list[Repair] = field(default_factory=list)
    # enum lists of this coercion's schema (alive as long as the walk): see enum_index
    enums: dict[int, tuple[set[str], dict[str, list[str]]]] = field(default_factory=dict)

    def record(self, path: list[str | int], kind: RepairKind, before: Any, after: Any) -> Any:
        self.repairs.append(Repair(format_path(path), kind, before, after))
        return after

    def resolve(self, schema: Any) -> Any:
        for _ in range(_MAX_REF_HOPS):
            if not isinstance(schema, dict) or not isinstance(schema.get("$ref"), str):
                return schema
            # Schema.of rewrote every in-document reference as a pointer from the root
            # (jsonmode.schema.refs); what is left (a metaschema) is not coerced.
            target = resolve_local_ref(self.root, schema["$ref"])
            if target is MISSING:
                return schema
            siblings = {k: v for k, v in schema.items() if k != "$ref"}
            schema = {**target, **siblings} if siblings and isinstance(target, dict) else target
        return schema

    def valid(self, schema: Any, value: Any) -> bool:
        try:
            return bool(self.validator.evolve(schema=schema).is_valid(value))
        except (RecursionError, *UNDECIDED):  # too deep, or undecided: not a branch to take
            return False

    def value(self, schema: Any, value: Any, path: list[str | int], depth: int) -> Any:
        if time.monotonic() > self.deadline:
            raise CoercionTimeoutError
        schema = self.resolve(schema)
        if not isinstance(schema, dict) or depth > _MAX_DEPTH:
            return value
        for sub in schema.get("allOf", ()):
            value = self.value(sub, value, path, depth + 1)
        for key in ("anyOf", "oneOf"):
            if isinstance(schema.get(key), list):
                value = self.branches(schema[key], value, path, depth)
        value = self.scalar(schema, value, path)
        if isinstance(value, dict):
            return self.object(schema, value, path, depth)
        if isinstance(value, list):
            return self.array(schema, value, path, depth)
        return value

    def branches(self, options: list[Any], value: Any, path: list[str | int], depth: int) -> Any:
        if any(self.valid(option, value) for option in options):
            return value
        for option in options:
            trial = _Walk(self.root, self.validator, self.deadline, enums=self.enums)
            fixed = trial.value(option, value, path, depth + 1)
            if trial.repairs and self.valid(option, fixed):
                self.repairs.extend(trial.repairs)
                return fixed
        return value

    def scalar(self, schema: dict[str, Any], value: Any, path: list[str | int]) -> Any:
        raw_types = schema.get("type")
        types = {raw_types} if isinstance(raw_types, str) else set(raw_types or ())
        if "integer" in types and isinstance(value, float) and value.is_integer():
            return self.record(path, "float_to_integer", value, int(value))
        if types and not _allowed(types, value):
            value = self.retype(types, value, path)
        for key in ("enum", "const"):
            if key in schema:
                options = schema[key] if key == "enum" else [schema[key]]
                if isinstance(options, list):
                    value = self.enum_case(options, value, path)
        return value

    def retype(self, types: set[str], value: Any, path: list[str | int]) -> Any:
        if isinstance(value, str):
            text = value.strip()
            if "integer" in types and _INTEGER.fullmatch(value):
                # The digits, not via float: "1234567890123456789" stays exact.
                exact = _number(text.split(".", 1)[0])
                if exact is not None:
                    return self.record(path, "string_to_integer", value, exact)
            if "number" in types and _NUMBER.fullmatch(value):
                number = _number(text)
                if number is not None:
                    return self.record(path, "string_to_number", value, number)
            if "boolean" in types and text.lower() in ("true", "false"):
                return self.record(path, "string_to_boolean", value, text.lower() == "true")
            if "null" in types and text.lower() == "null":
                return self.record(path, "string_to_null", value, None)
        if "array" in types and not isinstance(value, list):
            return self.record(path, "wrap_array", value, [value])
        return value

    def enum_case(self, options: list[Any], value: Any, path: list[str | int]) -> Any:
        if not isinstance(value, str):
            return value
        exact, by_fold = self.enum_index(options)
        if value in exact:
            return value
        matches = by_fold.get(value.strip().casefold(), ())
        if len(matches) == 1:
            return self.record(path, "enum_case", value, matches[0])
        return value

    def enum_index(self, options: list[Any]) -> tuple[set[str], dict[str, list[str]]]:
        """The string options, and them by case-folded spelling: built once per enum
        list per coercion, so each value costs a lookup, not a pass over the options."""
        hit = self.enums.get(id(options))
        if hit is not None:
            return hit
        exact = {option for option in options if isinstance(option, str)}
        by_fold: dict[str, list[str]] = {}
        for option in exact:
            by_fold.setdefault(option.casefold(), []).append(option)
        self.enums[id(options)] = (exact, by_fold)
        return exact, by_fold

    def object(
        self, schema: dict[str, Any], value: dict[str, Any], path: list[str | int], depth: int
    ) -> dict[str, Any]:
        properties = schema.get("properties") or {}
        patterns = schema.get("patternProperties") or {}
        extra = schema.get("additionalProperties")
        out: dict[str, Any] = {}
        for key, item in value.items():
            sub: Any = None
            if isinstance(properties, dict) and key in properties:
                sub = properties[key]
            else:
                try:
                    sub = next(
                        (s for p, s in patterns.items() if _search(p, key)),
                        extra if isinstance(extra, dict) else None,
                    )
                except PatternUndecidedError:  # left alone; validation reports it
                    sub = None
            out[key] = item if sub is None else self.value(sub, item, [*path, key], depth + 1)
        return out

    def array(
        self, schema: dict[str, Any], value: list[Any], path: list[str | int], depth: int
    ) -> list[Any]:
        prefix = schema.get("prefixItems")
        prefix = prefix if isinstance(prefix, list) else []
        items = schema.get("items")
        if isinstance(items, list):  # draft 7 tuple form
            prefix, items = items, schema.get("additionalItems")
        out: list[Any] = []
        for index, item in enumerate(value):
            sub = prefix[index] if index < len(prefix) else items
            out.append(
                item
                if not isinstance(sub, dict)
                else self.value(sub, item, [*path, index], depth + 1)
            )
        return out


def _number(text: str) -> int | float | None:
    """The number ``text`` spells (exact for integers), or None beyond the double
    range (see :mod:`jsonmode._json`): never inf, never int()'s digit-limit ValueError."""
    try:
        return read_float(text) if _FLOAT_MARK.search(text) else read_int(text)
    except StrictJSONError:
        return None


def _search(pattern: str, key: str) -> bool:
    """ECMA-262, linear time; raises PatternUndecidedError (see jsonmode.schema.patterns)."""
    return isinstance(pattern, str) and search_pattern(pattern, key)


def coerce(
    value: Any, schema: Any, validator: _JsonschemaValidator, *, deadline: float = math.inf
) -> tuple[Any, list[Repair]]:
    """Coerce ``value`` toward ``schema`` (the root, for ``$ref``); returns a new value.

    ``validator`` is the root schema's validator (used to test ``anyOf`` branches with
    references intact). The input is never mutated.

    Raises:
        CoercionTimeoutError: ``deadline`` (a :func:`time.monotonic` time) passed; it is
            checked before every value visited, so a large value against a schema of
            many branches stops there (nothing is half-changed: the copy is dropped).
    """
    walk = _Walk(schema, validator, deadline)
    return walk.value(schema, value, [], 0), walk.repairs
