"""``not``: the complement of a schema, written in keywords the decoder enforces.

:func:`negate` returns a schema accepting exactly the values the given one rejects,
or None where that cannot be written exactly. It works keyword by keyword (a value
fails a schema when it fails one of its keywords, so ``not`` of a schema is the
``anyOf`` of its keywords' complements):

- ``type``: the other JSON types (not ``integer`` without ``number``: "a number
  that is not an integer" is no automaton over every spelling of a number);
- number bounds: a number beyond the flipped bound (``minimum: 5`` →
  ``exclusiveMaximum: 5``; values of other types satisfy a bound); string and array
  lengths alike;
- ``const``/``enum`` of scalars: per JSON type, what is left (numbers: the open
  intervals between the values; strings: a pattern that matches every string but
  those, written from their trie; booleans and null: the other literals); object and
  array constants are not complemented;
- ``required``: an object without one of the names; ``properties``: an object with
  one of the names whose value fails its schema; ``items`` (a schema): an array that
  contains an item failing it;
- ``allOf``/``anyOf``/``not``/``$ref``: De Morgan, double negation, the target.

Everything else (``pattern``, ``format``, ``multipleOf``, ``oneOf``, ``if`` …)
makes the result None, and the caller leaves the keyword to post-validation.
Pure; thread-safe.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

from jsonmode.decoding.compile.merging import ANNOTATION_KEYWORDS
from jsonmode.schema.pointer import MISSING

__all__ = ["BASE_TYPES", "negate", "not_in_pattern"]

#: The JSON types, ``integer`` counted within ``number``.
BASE_TYPES = ("null", "boolean", "object", "array", "number", "string")
_FLIP = {
    "minimum": "exclusiveMaximum",
    "maximum": "exclusiveMinimum",
    "exclusiveMinimum": "maximum",
    "exclusiveMaximum": "minimum",
}
_LENGTHS = {
    "minLength": ("string", "maxLength", -1),
    "maxLength": ("string", "minLength", 1),
    "minItems": ("array", "maxItems", -1),
    "maxItems": ("array", "minItems", 1),
}
_MAX_DEPTH = 16  # references and nested negations followed
_MAX_PATTERN = 2000  # characters of a complemented string set's pattern


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def _escape(char: str) -> str:
    if char.isascii() and char.isalnum():
        return char
    return f"\\u{ord(char):04x}"


def not_in_pattern(values: list[str]) -> str | None:
    """An anchored pattern matching every string except ``values`` (None: a value
    beyond the Basic Multilingual Plane, or a pattern past a size bound)."""
    if any(ord(c) > 0xFFFF for v in values for c in v):
        return None
    trie: dict[str, Any] = {}
    for value in values:
        node = trie
        for char in value:
            node = node.setdefault(char, {})
        node[""] = {}  # end marker
    options: list[str] = []

    def walk(node: dict[str, Any], prefix: str) -> None:
        if "" not in node:
            options.append(prefix)  # a proper prefix of a value (or the empty string)
        children = sorted(c for c in node if c)
        if children:
            options.append(f"{prefix}[^{''.join(map(_escape, children))}][\\s\\S]*")
        else:
            options.append(f"{prefix}[\\s\\S]+")
        for char in children:
            walk(node[char], prefix + _escape(char))

    walk(trie, "")
    pattern = "^(?:" + "|".join(options) + ")$"
    return pattern if len(pattern) <= _MAX_PATTERN else None


def _not_values(values: list[Any], legacy: bool) -> list[Any] | None:
    """Alternatives accepting exactly the values not in ``values`` (scalars only; no
    numbers before draft 6, whose ``exclusiveMinimum`` is a flag)."""
    by_kind: dict[str, list[Any]] = {}
    for value in values:
        kind = _kind(value)
        if kind in ("object", "array") or (kind == "number" and legacy):
            return None
        if value not in by_kind.setdefault(kind, []):
            by_kind[kind].append(value)
    out: list[Any] = [{"type": [t for t in BASE_TYPES if t not in by_kind]}]
    if "boolean" in by_kind and len(by_kind["boolean"]) == 1:
        out.append({"const": not by_kind["boolean"][0]})
    if "number" in by_kind:
        points = sorted(set(by_kind["number"]))
        out.append({"type": "number", "exclusiveMaximum": points[0]})
        for low, high in itertools.pairwise(points):
            out.append({"type": "number", "exclusiveMinimum": low, "exclusiveMaximum": high})
        out.append({"type": "number", "exclusiveMinimum": points[-1]})
    if "string" in by_kind:
        pattern = not_in_pattern(by_kind["string"])
        if pattern is None:
            return None
        out.append({"type": "string", "pattern": pattern})
    return out


def _keyword(
    key: str, value: Any, resolve: Callable[[str], Any], legacy: bool, draft7: bool, depth: int
) -> list[Any] | None:
    """Alternatives for the values that fail keyword ``key`` (None: not expressible)."""
    if key == "type":
        kinds = {value} if isinstance(value, str) else set(value)
        if "integer" in kinds and "number" not in kinds:
            return None
        return [{"type": [t for t in BASE_TYPES if t not in kinds]}]
    if key in _FLIP:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or legacy:
            return None
        return [{"type": "number", _FLIP[key]: value}]
    if key in _LENGTHS:
        kind, other, step = _LENGTHS[key]
        bound = int(value) + step
        return [{"type": kind, other: bound}] if bound >= 0 else []
    if key == "const":
        return _not_values([value], legacy)
    if key == "enum":
        return _not_values(list(value), legacy)
    if key == "required":
        names = [n for n in value if isinstance(n, str)]
        return [{"type": "object", "properties": {n: False}} for n in names]
    if key == "properties":
        out: list[Any] = []
        for name, sub in value.items():
            negated = negate(sub, resolve, legacy=legacy, draft7=draft7, depth=depth + 1)
            if negated is None:
                return None
            if negated is not False:
                out.append({"type": "object", "required": [name], "properties": {name: negated}})
        return out
    if key == "items" and isinstance(value, (dict, bool)):
        negated = negate(value, resolve, legacy=legacy, draft7=draft7, depth=depth + 1)
        if negated is None:
            return None
        return [] if negated is False else [{"type": "array", "contains": negated}]
    if key == "allOf":
        out = []
        for part in value:
            negated = negate(part, resolve, legacy=legacy, draft7=draft7, depth=depth + 1)
            if negated is None:
                return None
            out.append(negated)
        return out
    if key == "anyOf":
        parts = [
            negate(part, resolve, legacy=legacy, draft7=draft7, depth=depth + 1) for part in value
        ]
        if any(part is None for part in parts):
            return None
        return [{"allOf": parts}]
    if key == "not":
        return [value]
    if key == "$ref" and isinstance(value, str):
        target = resolve(value)
        if target is MISSING:
            return None
        negated = negate(target, resolve, legacy=legacy, draft7=draft7, depth=depth + 1)
        return None if negated is None else [negated]
    return None


def negate(
    schema: Any,
    resolve: Callable[[str], Any],
    *,
    legacy: bool = False,
    draft7: bool = False,
    depth: int = 0,
) -> Any:
    """A schema accepting exactly the values ``schema`` rejects, or None.

    ``resolve(pointer)`` gives a ``$ref`` target (or ``MISSING``); ``legacy``: draft
    4 or earlier (boolean ``exclusiveMinimum``, not complemented); ``draft7``: draft 7
    or earlier (a ``$ref`` ignores its siblings).
    """
    if depth > _MAX_DEPTH:
        return None
    if schema is True or schema == {}:
        return False
    if schema is False:
        return True
    if not isinstance(schema, dict):
        return None
    alternatives: list[Any] = []
    for key, value in schema.items():
        if key in ANNOTATION_KEYWORDS or (draft7 and "$ref" in schema and key != "$ref"):
            continue  # (draft 7 ignores a reference's siblings)
        found = _keyword(key, value, resolve, legacy, draft7, depth)
        if found is None:
            return None
        alternatives.extend(a for a in found if a is not False and a != {"type": []})
    if not alternatives:
        return False
    return alternatives[0] if len(alternatives) == 1 else {"anyOf": alternatives}
