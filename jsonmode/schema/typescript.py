"""TypeScript types → JSON Schema (Draft 2020-12), as ``ts-json-schema-generator`` writes them.

An optional extra (``pip install "jsonmode[typescript]"``: tree-sitter and its TypeScript
grammar, imported on first use). :func:`convert` parses the source with tree-sitter (a
real parser, never regular expressions) and converts the root type and every type it
reaches; the declarations it does not reach are never read.

What converts (the reference tool's verdicts, see tests/test_typescript_reference.py):

- ``interface`` (with ``extends``, one base or many: their properties merged) and
  ``type`` aliases; ``enum`` and ``const enum`` (string and numeric members, numbers
  counted on as TypeScript counts) and enum members as types (``Color.Red``);
- ``string number boolean null`` (``@asType integer`` for integers), ``any`` and
  ``unknown`` (any value), ``object``, literal types, ``Date`` (a ``date-time`` string);
- unions (literals become ``enum``, primitives a ``type`` list, the rest ``anyOf``:
  discriminated unions too), intersections of object types (merged into one object;
  a union inside is distributed: ``anyOf`` of the merged branches);
- arrays (``T[]``, ``Array<T>``, ``readonly T[]``, ``ReadonlyArray<T>``), tuples
  (``prefixItems``, optional and named elements, a rest element at the end);
- object types: optional (``?``, or a union with ``undefined``) and ``readonly``
  members, index signatures with string keys and ``Record<string, T>``
  (``additionalProperties``), ``Record<"a" | "b", T>``; every object type has
  ``additionalProperties: false`` unless it has an index signature;
- generic interfaces and aliases instantiated with arguments (``Page<User>``: the
  parameters substituted, defaults used), and ``Partial``, ``Required``, ``Readonly``,
  ``Pick`` and ``Omit`` of object types;
- JSDoc: see :mod:`jsonmode.schema.jsdoc`.

Every named type the root reaches is one ``$defs`` entry (``Name``, or ``Page-User``
for an instantiated generic) referenced with ``$ref``; the root's own schema is the
document's top level, and a reference to the root is ``{"$ref": "#"}``.

Anything else raises, naming line, column and the offending text, never a looser
schema: :class:`~jsonmode.errors.InvalidSchemaError` for what TypeScript itself refuses
(a syntax error: tree-sitter's ERROR or MISSING nodes; an unknown type; a duplicate
property) and :class:`~jsonmode.errors.UnsupportedSchemaError` for valid TypeScript
that needs type evaluation or has no JSON form (conditional and mapped types, ``keyof``,
``typeof``, indexed access, template literal types, functions and methods, classes,
imports from other files, ``symbol``/``bigint``/``void``, declaration merging).

Bounds, each a :class:`~jsonmode.errors.BudgetExceededError` when passed: the source's
length (:data:`~jsonmode.limits.MAX_SCHEMA_CHARS`, as for a schema's JSON text),
:data:`~jsonmode.schema.ts_source.MAX_DECLARATIONS` top-level declarations, and in
:mod:`jsonmode.schema.ts_types`: ``MAX_DEPTH`` levels of nested types,
``MAX_DEFINITIONS`` ``$defs`` entries (generic instantiations included),
``MAX_ARGUMENT_NODES`` schema nodes in one instantiation's type arguments and
``MAX_BRANCHES`` branches of a distributed intersection (module attributes, read at
each use: raise one process-wide); and the schema deadline
(:mod:`jsonmode.budget`). Cost: one tree-sitter parse (C, linear in the source) and one
walk of the types reached. Thread-safe: each call has its own parser and state.
"""

from __future__ import annotations

from typing import Any

from jsonmode import limits
from jsonmode.budget import ensure_deadline
from jsonmode.errors import UsageError
from jsonmode.schema.ts_source import parse
from jsonmode.schema.ts_types import Converter

__all__ = ["convert"]


def convert(source: str, root: str | None = None) -> tuple[dict[str, Any], str]:
    """``source``'s type ``root`` as a JSON Schema dict, and the root's name.

    ``root`` None: the source must export exactly one type (``export interface``,
    ``export type``, ``export enum``), which is the root.

    Raises:
        UsageError: the ``typescript`` extra is not installed, or ``source`` or ``root``
            is not a ``str``.
        InvalidSchemaError / UnsupportedSchemaError / BudgetExceededError: see the
            module docstring; every message names the line and column.
    """
    if not isinstance(source, str) or not (root is None or isinstance(root, str)):
        raise UsageError("TypeScript source and root type must be text (str)")
    limits.check_schema_size(len(source), "TypeScript source")
    with ensure_deadline():
        module = parse(source)
        name = module.root_name(root)
        return Converter(module).schema(name), name
