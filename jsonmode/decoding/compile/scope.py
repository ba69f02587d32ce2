"""The dynamic scope while a schema compiles: which schema a ``$dynamicRef`` applies.

:func:`~jsonmode.schema.refs.resolve_references` leaves every reference a pointer
from the root; a ``$dynamicRef`` that stays dynamic holds its static target's pointer,
and that target carries the ``$dynamicAnchor`` it names. Which schema applies depends
on the resources evaluation went through to get there (JSON Schema 2020-12, Core
§8.2.3.2): the outermost resource in the dynamic scope that has a ``$dynamicAnchor``
of that name wins; none (it can only be entered through merged subschemas, see
below) leaves the static target.

The compiler enters a resource where it follows a reference (the resource the target
lies in) and where a subschema has its own ``$id``. A rule made for a reference is
keyed by the reference and :meth:`DynamicScope.signature` — the winner of every
anchor name under the current scope — so a subschema reached under two scopes that
pick different schemas compiles twice, and recursion still closes (finitely many
signatures). In a document without dynamic references the signature is empty and
nothing changes.

Merged subschemas: the compiler merges ``allOf`` parts, ``if``/``then`` branches and
``$ref`` targets beside sibling keywords into one schema, so the resource such a target
lies in is never entered. Where entering it would change a winner
(:meth:`DynamicScope.inline`, :meth:`DynamicScope.inline_target`), the compiler merges
:meth:`DynamicScope.scoped` of the target instead: a copy whose every subschema that
applies to a part of the value carries the full scope it must compile under
(:data:`MARKER`, which :meth:`DynamicScope.using` restores), and whose own in-place
references are followed under that scope already.

Not thread-safe (one per compile); cheap: a list of URIs and a dict lookup per name.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from jsonmode.schema.pointer import MISSING, resolve_local_ref
from jsonmode.schema.refs import Resolved

__all__ = ["MARKER", "DynamicScope"]

#: Private keyword: the dynamic scope (a list of resource URIs, outermost first) a
#: subschema compiles under, where merging took it out of its place.
MARKER = "$jsonmode:scope"
_IN_PLACE_ONE = ("not", "if", "then", "else")
_IN_PLACE_MANY = ("allOf", "anyOf", "oneOf")
_PART_ONE = (
    "additionalProperties",
    "unevaluatedProperties",
    "propertyNames",
    "items",
    "additionalItems",
    "unevaluatedItems",
    "contains",
)
_PART_MANY = ("properties", "patternProperties")
_MAX_DEPTH = 32


class DynamicScope:
    """The resources entered so far (outermost first), for one compile."""

    def __init__(self, resolved: Resolved) -> None:
        self.resolved = resolved
        self.names = resolved.names
        self.stack: list[str] = [resolved.root_uri]

    @property
    def active(self) -> bool:
        """Whether the document has dynamic references at all."""
        return bool(self.names)

    def _winner(self, name: str, stack: list[str]) -> str | None:
        for uri in stack:
            found = self.resolved.dynamic_anchors.get(uri, {}).get(name)
            if found is not None:
                return found
        return None

    def signature(self, uri: str | None = None) -> str:
        """What decides every dynamic reference under the current scope (after
        entering ``uri``, when given): "" in a document without dynamic references."""
        if not self.names:
            return ""
        stack = self.stack if uri is None else [*self.stack, uri]
        return "|".join(f"{n}={self._winner(n, stack) or ''}" for n in self.names)

    def target(self, schema: dict[str, Any]) -> tuple[str, Any]:
        """The reference keyword ``schema`` holds and the pointer it applies now:
        ``$ref``'s as written; ``$dynamicRef``'s the scope's winner for the anchor its
        static target carries (the static target where none is in scope)."""
        if "$ref" in schema or "$dynamicRef" not in schema:
            return "$ref", schema.get("$ref")
        pointer = schema["$dynamicRef"]
        if not isinstance(pointer, str):
            return "$dynamicRef", pointer
        static = resolve_local_ref(self.resolved.document, pointer)
        name = static.get("$dynamicAnchor") if isinstance(static, dict) else None
        if static is MISSING or not isinstance(name, str):
            return "$dynamicRef", pointer
        return "$dynamicRef", self._winner(name, self.stack) or pointer

    def resource(self, pointer: str) -> str | None:
        """The resource a reference target lies in (None: unknown, or no dynamic
        references)."""
        return self.resolved.resources.get(pointer) if self.names else None

    def inline(self, schema: Any, *, draft7: bool = False) -> Any:
        """``schema`` about to be merged into a schema compiled under the current scope
        (its own ``$id`` is not entered there): :meth:`scoped` where entering it would
        change a winner, else itself."""
        uri = schema.get("$id") if self.names and isinstance(schema, dict) else None
        if isinstance(uri, str) and uri and self.signature(uri) != self.signature():
            return self.scoped(schema, [*self.stack, uri], draft7=draft7)
        return schema

    def inline_target(self, target: Any, pointer: str, *, draft7: bool = False) -> Any:
        """A reference's ``target`` about to be merged in place of the reference:
        :meth:`scoped` where entering its resource would change a winner."""
        uri = self.resource(pointer)
        if uri is not None and self.signature(uri) != self.signature():
            return self.scoped(target, [*self.stack, uri], draft7=draft7)
        return target

    @contextlib.contextmanager
    def using(self, stack: Any) -> Iterator[None]:
        """The scope replaced by ``stack`` (a :data:`MARKER` value; None: unchanged)."""
        if not self.names or not isinstance(stack, list) or not stack:
            yield
            return
        saved, self.stack = self.stack, [str(uri) for uri in stack]
        try:
            yield
        finally:
            self.stack = saved

    def scoped(self, schema: Any, stack: list[str], *, draft7: bool = False, depth: int = 0) -> Any:
        """``schema`` to be merged into a schema compiled under another scope: every
        subschema that applies to a part of the value marked with ``stack``, the
        in-place ones scoped alike, and its own reference replaced by the target's
        scoped copy (first, as the compiler lays a ``$ref`` beside its siblings)."""
        if not isinstance(schema, dict) or depth > _MAX_DEPTH:
            return schema
        out: dict[str, Any] = {}
        for key, value in schema.items():
            if key in ("$ref", "$dynamicRef", "$id", MARKER):
                continue  # (followed below; its subschemas carry the scope instead)
            if key in _IN_PLACE_MANY and isinstance(value, list):
                out[key] = [self.scoped(v, stack, draft7=draft7, depth=depth + 1) for v in value]
            elif key in _IN_PLACE_ONE:
                out[key] = self.scoped(value, stack, draft7=draft7, depth=depth + 1)
            elif key == "dependentSchemas" and isinstance(value, dict):
                out[key] = {
                    k: self.scoped(v, stack, draft7=draft7, depth=depth + 1)
                    for k, v in value.items()
                }
            elif key in _PART_MANY and isinstance(value, dict):
                out[key] = {k: _mark(v, stack) for k, v in value.items()}
            elif key == "prefixItems" or (key == "items" and isinstance(value, list)):
                out[key] = [_mark(v, stack) for v in value] if isinstance(value, list) else value
            elif key in _PART_ONE:
                out[key] = _mark(value, stack)
            else:
                out[key] = value
        if "$ref" not in schema and "$dynamicRef" not in schema:
            return out
        saved, self.stack = self.stack, list(stack)
        try:
            _, pointer = self.target(schema)
        finally:
            self.stack = saved
        target = (
            resolve_local_ref(self.resolved.document, pointer)
            if isinstance(pointer, str)
            else MISSING
        )
        if target is MISSING:
            return schema  # (the compiler reports it)
        uri = self.resolved.resources.get(pointer)
        inner = stack if not uri or uri == stack[-1] else [*stack, uri]
        first = self.scoped(target, inner, draft7=draft7, depth=depth + 1)
        if draft7 or not (set(out) - {"$anchor", "$dynamicAnchor", "$comment", "$defs"}):
            return first
        return {"allOf": [first, out]}

    @contextlib.contextmanager
    def entering(self, uri: Any) -> Iterator[None]:
        """The scope with ``uri`` entered (nothing for None, "" or the innermost)."""
        if not self.names or not isinstance(uri, str) or not uri or uri == self.stack[-1]:
            yield
            return
        self.stack.append(uri)
        try:
            yield
        finally:
            self.stack.pop()


def _mark(schema: Any, stack: list[str]) -> Any:
    """``schema`` marked to compile under ``stack`` (a mark it has already, from a
    deeper scoping, stays)."""
    if not isinstance(schema, dict) or not schema or MARKER in schema:
        return schema
    return {**schema, MARKER: list(stack)}
