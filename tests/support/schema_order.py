"""Instances re-serialised in the order constrained decoding writes their members.

jsonmode's decoder (like xgrammar's and llguidance's) writes an object's declared
properties in schema order by default. A valid instance that lists them in another
order is the same JSON value, but its text is not one decoding produces, so the
JSON-Schema-Test-Suite gate, the MaskBench gate and ``bench/decoder.py`` all serialise
instances with this one definition of schema order.
"""

from __future__ import annotations

import json
import re
from typing import Any

from jsonmode.schema.pointer import MISSING, resolve_local_ref

__all__ = ["SchemaOrder", "resolve_pointer", "same_order"]

_MAX_DEPTH = 60  # deeper values are left as they are
_MAX_CONJUNCTS = 40  # $ref / allOf / anyOf hops followed for one value


def resolve_pointer(root: Any, ref: str) -> Any:
    """The node a local ``#/a/b`` reference names in ``root``, or ``None``."""
    node = resolve_local_ref(root, ref)
    return None if node is MISSING else node


class SchemaOrder:
    """Puts an instance's object members in the order decoding writes them.

    Declared properties come in schema order: those of a node's ``$ref`` target first
    (in draft 7 the target alone: its siblings are ignored), then the node's own
    ``properties``, then those of its ``allOf`` parts, then those of the ``anyOf`` /
    ``oneOf`` branch the value matches (by ``validator``), each part laid out the same
    way in turn, then required names declared nowhere. Undeclared members (additional
    or pattern properties) keep their relative order and come last. Values, arrays and
    scalars are never changed.

    ``validator`` is a ``jsonschema`` validator for ``root`` (its ``evolve`` is used to
    test branches).
    """

    def __init__(self, root: Any, validator: Any) -> None:
        self.root = root
        self.validator = validator
        self.draft7 = isinstance(root, dict) and "draft-07" in str(root.get("$schema"))

    def order(self, value: Any) -> Any:
        """``value`` with every object's members in schema order."""
        return self._order(value, self.root, 0)

    def spellings(self, value: Any) -> list[Any]:
        """The instance as given, then in schema order (when that differs)."""
        ordered = self.order(value)
        return [value] if same_order(ordered, value) else [value, ordered]

    def _valid(self, schema: Any, value: Any) -> bool:
        try:
            return bool(self.validator.evolve(schema=schema).is_valid(value))
        except Exception:
            return False

    def _conjuncts(self, schema: Any, value: Any, depth: int = 0) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        if not isinstance(schema, dict) or depth > _MAX_CONJUNCTS:
            return out
        if isinstance(schema.get("$ref"), str):
            out += self._conjuncts(resolve_pointer(self.root, schema["$ref"]), value, depth + 1)
            if self.draft7:
                return out
            schema = {k: v for k, v in schema.items() if k != "$ref"}
        out.append(schema)
        for part in schema.get("allOf", []):
            out += self._conjuncts(part, value, depth + 1)
        for keyword in ("anyOf", "oneOf"):
            branches = schema.get(keyword)
            if isinstance(branches, list) and branches:
                chosen = next((b for b in branches if self._valid(b, value)), branches[0])
                out += self._conjuncts(chosen, value, depth + 1)
        return out

    def _order(self, value: Any, schema: Any, depth: int) -> Any:
        if depth > _MAX_DEPTH or not isinstance(value, dict | list):
            return value
        parts = self._conjuncts(schema, value)
        if isinstance(value, list):
            return [
                self._order(item, _item_schema(parts, i), depth + 1) for i, item in enumerate(value)
            ]
        declared: list[str] = []
        for part in parts:
            properties = part.get("properties")
            if isinstance(properties, dict):
                declared += [n for n in properties if n not in declared]
        for part in parts:
            required = part.get("required")
            if isinstance(required, list):
                declared += [n for n in required if isinstance(n, str) and n not in declared]
        names = [n for n in declared if n in value] + [n for n in value if n not in declared]
        return {n: self._order(value[n], _member_schema(parts, n), depth + 1) for n in names}


def same_order(a: Any, b: Any) -> bool:
    """Whether two equal values also list their members in the same order."""
    return json.dumps(a) == json.dumps(b)


def _member_schema(parts: list[dict[str, Any]], name: str) -> dict[str, Any]:
    subs = []
    for part in parts:
        properties = part.get("properties")
        if isinstance(properties, dict) and name in properties:
            subs.append(properties[name])
            continue
        matched = False
        for pattern, sub in (part.get("patternProperties") or {}).items():
            try:
                if re.search(pattern, name):
                    subs.append(sub)
                    matched = True
            except re.error:
                pass
        extra = part.get("additionalProperties")
        if not matched and isinstance(extra, dict):
            subs.append(extra)
    return {"allOf": subs}


def _item_schema(parts: list[dict[str, Any]], index: int) -> dict[str, Any]:
    subs = []
    for part in parts:
        prefix = part.get("prefixItems")
        items = part.get("items")
        extra = part.get("additionalItems") if isinstance(items, list) else None
        if isinstance(items, list):
            prefix, items = items, extra
        if isinstance(prefix, list) and index < len(prefix):
            subs.append(prefix[index])
        elif isinstance(items, dict):
            subs.append(items)
    return {"allOf": subs}
