"""Subschemas merged in place: ``allOf`` parts and reference targets.

The compiler's builder (a :class:`~jsonmode.decoding.compile.containers.SchemaBuilder`) writes
``allOf`` as one merged schema (see :mod:`~jsonmode.decoding.compile.merging`), and an
``anyOf``/``oneOf`` branch merged with the rest of its schema. :func:`resolve` gives the
schema a part stands for: its keywords rewritten where exact
(:mod:`~jsonmode.decoding.compile.lowering`) and its references followed — ``$ref`` and
``$dynamicRef`` alike, the latter through the dynamic scope
(:mod:`~jsonmode.decoding.compile.scope`), whose resources a merged target carries along on its
subschemas where entering them matters. :func:`merge_all` merges a schema's ``allOf``
parts into it.

Called with the builder (which calls back for the parts); not thread-safe, like it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from jsonmode.budget import checkpoint
from jsonmode.decoding.compile.merging import merge
from jsonmode.decoding.compile.scope import MARKER
from jsonmode.errors import UnsupportedSchemaError
from jsonmode.schema.pointer import MISSING, resolve_local_ref

if TYPE_CHECKING:
    from jsonmode.decoding.compile.containers import SchemaBuilder

__all__ = ["merge_all", "resolve"]

_MAX_HOPS = 32  # references followed in place before a structure must come


def merge_all(b: SchemaBuilder, schema: dict[str, Any], path: str) -> dict[str, Any]:
    """``schema`` with its ``allOf`` parts merged in (``{"not": {}}``: one is false)."""
    merged: dict[str, Any] = {k: v for k, v in schema.items() if k != "allOf"}
    for index, part in enumerate(schema.get("allOf", [])):
        checkpoint()
        part = resolve(b, part, f"{path}/allOf/{index}")
        if part is False:
            return {"not": {}}
        if part is True:
            continue
        if "allOf" in part:
            with b.scope.using(part.get(MARKER)):
                part = merge_all(b, part, f"{path}/allOf/{index}")
        merged = merge(merged, part, lambda keyword: b.skip(path, f"allOf/{keyword}"))
    return merged


def resolve(b: SchemaBuilder, schema: Any, path: str) -> Any:
    """The schema ``schema`` stands for where it is merged: rewritten, references
    followed (their siblings merged in).

    Raises:
        UnsupportedSchemaError: a reference that is no pointer into the document (a
            bundled metaschema), or references that never reach a schema of their own.
    """
    with b.scope.using(schema.get(MARKER) if isinstance(schema, dict) else None):
        return _resolve(b, schema, path)


def _resolve(b: SchemaBuilder, schema: Any, path: str) -> Any:
    if isinstance(schema, dict):
        # (merged where it is, its own $id is never entered: see jsonmode.decoding.compile.scope)
        schema = b.lowering.lower(b.scope.inline(schema, draft7=b.draft7))
    hops = 0
    while isinstance(schema, dict) and ("$ref" in schema or "$dynamicRef" in schema):
        keyword, ref = b.scope.target(schema)
        target = resolve_local_ref(b.root, ref) if isinstance(ref, str) else MISSING
        if target is MISSING:
            raise UnsupportedSchemaError(f"reference {ref!r} is not local", schema_path=path)
        target = b.scope.inline_target(target, ref, draft7=b.draft7)
        if isinstance(target, dict):
            target = b.lowering.lower(target)
        siblings = {k: v for k, v in schema.items() if k != keyword}
        schema = (
            merge(target, siblings, lambda k: b.skip(path, k))
            if siblings and isinstance(target, dict)
            else target
        )
        hops += 1
        if hops > _MAX_HOPS:
            raise UnsupportedSchemaError("reference cycle without structure", schema_path=path)
    return schema
