"""``allOf`` as one schema: the conjunction of two schemas, keyword by keyword.

The compiler merges ``allOf`` parts (and a ``$ref`` target with its siblings, and
each ``anyOf``/``oneOf`` branch with the rest of its schema) into one schema, then
compiles that. :func:`merge` writes the conjunction exactly for the keywords where
it is expressible and reports the others through ``unmerged(keyword)`` (the compiler
lists them as unenforced). Object and array keywords are merged as a whole, because
``additionalProperties`` and ``items`` depend on their siblings:

- objects: a name declared on one side only takes, from the other side, what that
  side gives an undeclared name (its matching ``patternProperties``, else its
  ``additionalProperties``); the merged ``additionalProperties`` is both sides'.
  A pattern on one side only, beside a closed other side, is exact where that other
  side has no patterns and none of its names match it; otherwise it is reported.
- arrays (2019-09 and later: ``prefixItems`` and a schema ``items``): position by
  position, each side's ``prefixItems`` entry or, past them, its ``items``.

Pure functions on JSON-like values; thread-safe.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from jsonmode.budget import checkpoint
from jsonmode.schema.keywords import ANNOTATIONS
from jsonmode.schema.patterns import PatternUndecidedError
from jsonmode.schema.patterns import search as search_pattern

__all__ = ["ANNOTATION_KEYWORDS", "conjunction", "disjoint", "merge", "search"]

# Keywords that never constrain a value (for the decoder): $id, $anchor and
# $dynamicAnchor only name locations (references are pointers by then); "nullable"
# is OpenAPI's, ignored by jsonschema too.
ANNOTATION_KEYWORDS = ANNOTATIONS | {
    "$id",
    "$anchor",
    "$dynamicAnchor",
    "nullable",
    "$jsonmode:scope",  # (see jsonmode.decoding.compile.scope.MARKER)
}

_CONTEXTUAL = ("unevaluatedProperties", "unevaluatedItems")  # (see lowering.CONTEXTUAL)
_OBJECT = ("properties", "patternProperties", "additionalProperties")
_LOWER = ("minimum", "exclusiveMinimum", "minLength", "minItems", "minProperties")
_UPPER = ("maximum", "exclusiveMaximum", "maxLength", "maxItems", "maxProperties")


def search(pattern: str, text: str) -> bool:
    """Whether ``pattern`` may match ``text`` (ECMA-262, linear time: see
    :mod:`jsonmode.schema.patterns`). No verdict in the budget counts as a match, which
    leaves ``patternProperties`` to post-validation."""
    try:
        return isinstance(pattern, str) and search_pattern(pattern, text)
    except PatternUndecidedError:
        return True


def _free(schema: Any) -> bool:
    return schema is True or schema == {}


def conjunction(parts: Sequence[Any]) -> Any:
    """``allOf`` of ``parts`` written as simply as possible (``True`` for none)."""
    kept = [p for p in parts if not _free(p)]
    if any(p is False for p in kept):
        return False
    if not kept:
        return True
    return kept[0] if len(kept) == 1 else {"allOf": kept}


def _undeclared(
    name: str, patterns: dict[str, Any], extra: Any, unmerged: Callable[[str], None]
) -> Any:
    """What a schema asks of ``name`` beyond its matching patterns (which the merge
    keeps) when it does not declare ``name``."""
    if _free(extra):
        return True
    verdicts = [_match(p, name) for p in patterns]
    if None in verdicts:
        unmerged("patternProperties")  # (no verdict: post-validation decides)
    return True if any(verdicts) else extra


def _match(pattern: str, name: str) -> bool | None:
    """Whether ``pattern`` matches ``name`` (None: no verdict within the budget)."""
    try:
        return isinstance(pattern, str) and search_pattern(pattern, name)
    except PatternUndecidedError:
        return None


def _merge_objects(
    a: dict[str, Any], b: dict[str, Any], unmerged: Callable[[str], None]
) -> dict[str, Any]:
    """The object keywords of ``allOf: [a, b]`` (see the module docstring)."""
    sides: list[tuple[dict[str, Any], dict[str, Any], Any]] = []
    for side in (a, b):
        declared = side.get("properties")
        matched = side.get("patternProperties")
        sides.append(
            (
                declared if isinstance(declared, dict) else {},
                matched if isinstance(matched, dict) else {},
                side.get("additionalProperties", True),
            )
        )
    (pa, qa, xa), (pb, qb, xb) = sides
    out: dict[str, Any] = {}
    properties: dict[str, Any] = {}
    for name in [*pa, *(n for n in pb if n not in pa)]:
        checkpoint()
        properties[name] = conjunction(
            [
                pa[name] if name in pa else _undeclared(name, qa, xa, unmerged),
                pb[name] if name in pb else _undeclared(name, qb, xb, unmerged),
            ]
        )
    patterns: dict[str, Any] = {}
    for pattern in [*qa, *(p for p in qb if p not in qa)]:
        parts = []
        for props, pats, extra in sides:
            if pattern in pats:
                parts.append(pats[pattern])
            elif not _free(extra):
                # Keys that match this pattern get this side's additionalProperties,
                # unless one of its own patterns or names claims them.
                if pats or any(_match(pattern, n) is not False for n in props):
                    unmerged("additionalProperties")
                else:
                    parts.append(extra)
        patterns[pattern] = conjunction(parts)
    if properties or "properties" in a or "properties" in b:
        out["properties"] = properties
    if patterns or "patternProperties" in a or "patternProperties" in b:
        out["patternProperties"] = patterns
    if "additionalProperties" in a or "additionalProperties" in b:
        out["additionalProperties"] = conjunction([xa, xb])
    return out


def _modern_items(schema: dict[str, Any]) -> bool:
    return "items" not in schema or isinstance(schema["items"], (dict, bool))


def _merge_arrays(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """``prefixItems``/``items`` of ``allOf: [a, b]`` (2019-09 and later forms)."""
    pa, pb = list(a.get("prefixItems") or []), list(b.get("prefixItems") or [])
    ia, ib = a.get("items", True), b.get("items", True)
    out: dict[str, Any] = {}
    if pa or pb:
        out["prefixItems"] = [
            conjunction([pa[i] if i < len(pa) else ia, pb[i] if i < len(pb) else ib])
            for i in range(max(len(pa), len(pb)))
        ]
    if "items" in a or "items" in b:
        out["items"] = conjunction([ia, ib])
    return out


def _items_into_prefix(one: dict[str, Any], other: dict[str, Any]) -> dict[str, Any]:
    """``one`` with ``other``'s ``items`` applied to each of its ``prefixItems`` (when
    ``other`` has a schema ``items`` and no ``prefixItems`` of its own)."""
    items = other.get("items")
    prefix = one.get("prefixItems")
    if "prefixItems" in other or not isinstance(prefix, list) or items in (None, True):
        return one
    if not isinstance(items, (dict, bool)):
        return one  # draft 7's array form: positional, not "the rest"
    return {**one, "prefixItems": [{"allOf": [p, items]} for p in prefix]}


def merge(a: dict[str, Any], b: dict[str, Any], unmerged: Callable[[str], None]) -> dict[str, Any]:
    """allOf of two schemas as one, for the keywords whose conjunction is expressible."""
    objects = _merge_objects(a, b, unmerged) if any(k in s for s in (a, b) for k in _OBJECT) else {}
    arrays: dict[str, Any] = {}
    if (
        _modern_items(a)
        and _modern_items(b)
        and any(k in s for s in (a, b) for k in ("prefixItems", "items"))
    ):
        arrays = _merge_arrays(a, b)
    else:
        # items applies past its own siblings' prefixItems only: when the other schema
        # brings a prefixItems, its positions must also satisfy these items.
        a, b = _items_into_prefix(a, b), _items_into_prefix(b, a)
    out = dict(a)
    for key in _CONTEXTUAL:
        if key in a or key in b:
            # Its meaning depends on the schema it sits in: merged into another, it
            # would see other siblings (the compiler rewrites it first where it can).
            unmerged(key)
            out.pop(key, None)
    for key, value in b.items():
        if key in _CONTEXTUAL or key == "$jsonmode:scope":
            continue  # (the scope b compiles under is on its subschemas already)
        if key not in out or key in ANNOTATION_KEYWORDS:
            out.setdefault(key, value)
            continue
        mine = out[key]
        if mine == value or key in objects or key in arrays:
            continue
        if key == "type":
            left = {mine} if isinstance(mine, str) else set(mine)
            right = {value} if isinstance(value, str) else set(value)
            both = (left & right) | (
                {"integer"}
                if ("integer" in left and "number" in right)
                or ("number" in left and "integer" in right)
                else set()
            )
            out[key] = sorted(both)
        elif key == "required":
            out[key] = list(dict.fromkeys([*mine, *value]))
        elif key in _LOWER:
            out[key] = max(mine, value)
        elif key in _UPPER:
            out[key] = min(mine, value)
        elif key == "enum":
            out[key] = [v for v in mine if v in value]
        elif key in ("anyOf", "oneOf", "allOf"):
            out.setdefault("allOf", [])
            out["allOf"] = [*out.get("allOf", []), {key: value}]
        elif key == "not":
            out[key] = {"anyOf": [mine, value]}  # neither a nor b: not (a or b)
        elif key == "propertyNames":
            out[key] = conjunction([mine, value])
        elif key == "dependentRequired" and isinstance(mine, dict) and isinstance(value, dict):
            joined = dict(mine)
            for name, names in value.items():
                joined[name] = list(dict.fromkeys([*joined.get(name, []), *names]))
            out[key] = joined
        elif key == "dependentSchemas" and isinstance(mine, dict) and isinstance(value, dict):
            joined = dict(mine)
            for name, sub in value.items():
                joined[name] = conjunction([joined[name], sub]) if name in joined else sub
            out[key] = joined
        else:
            unmerged(key)
    out.update(objects)
    out.update(arrays)
    return out


def disjoint(branches: Sequence[Any]) -> bool:
    """Provably no value satisfies two branches: distinct types, or distinct constants."""
    kinds: list[set[str]] = []
    for branch in branches:
        if not isinstance(branch, dict):
            return False
        declared = branch.get("type")
        if declared is None:
            return _distinct_constants(branches)
        kind = {declared} if isinstance(declared, str) else set(declared)
        if "number" in kind:
            kind.add("integer")
        kinds.append(kind)
    return all(
        not (x & y) for i, x in enumerate(kinds) for y in kinds[i + 1 :]
    ) or _distinct_constants(branches)


def _distinct_constants(branches: Sequence[Any]) -> bool:
    """A shared required property whose const/enum values never overlap (a discriminator)."""
    shared: set[str] | None = None
    for branch in branches:
        props = branch.get("properties", {}) if isinstance(branch, dict) else {}
        names = {
            n
            for n, s in props.items()
            if isinstance(s, dict)
            and ("const" in s or "enum" in s)
            and n in branch.get("required", [])
        }
        shared = names if shared is None else shared & names
    for name in shared or ():
        seen: list[Any] = []
        ok = True
        for branch in branches:
            checkpoint()  # (quadratic in the branches: each value against those seen)
            sub = branch["properties"][name]
            values = [sub["const"]] if "const" in sub else list(sub["enum"])
            if any(v in seen for v in values):
                ok = False
                break
            seen.extend(values)
        if ok:
            return True
    return False
