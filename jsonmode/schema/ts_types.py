"""TypeScript types → JSON Schema: the conversion of the declarations a
:class:`~jsonmode.schema.ts_source.Module` holds (:mod:`jsonmode.schema.typescript`
says what converts and what raises).

Bounded: :data:`MAX_DEPTH` levels of nested types, :data:`MAX_DEFINITIONS` ``$defs``
entries, :data:`MAX_BRANCHES` branches of a distributed intersection (each a
:class:`~jsonmode.errors.BudgetExceededError`), and the schema deadline
(:func:`jsonmode.budget.checkpoint`). One :class:`Converter` per conversion; not
shared between threads.
"""

from __future__ import annotations

import functools
import itertools
import json
import math
import re
from typing import TYPE_CHECKING, Any

from jsonmode.budget import checkpoint
from jsonmode.errors import BudgetExceededError, InvalidSchemaError
from jsonmode.schema.jsdoc import Doc, read_annotations
from jsonmode.schema.ts_source import (
    Declaration,
    Module,
    flattened,
    is_undefined,
    kids,
    name_of,
    number_value,
    string_value,
)

if TYPE_CHECKING:
    from tree_sitter import Node

__all__ = [
    "DIALECT",
    "MAX_ARGUMENT_NODES",
    "MAX_BRANCHES",
    "MAX_DEFINITIONS",
    "MAX_DEPTH",
    "Converter",
]

DIALECT = "https://json-schema.org/draft/2020-12/schema"
#: Most levels of types nested inside one another (syntax, and ``extends``/``&`` chains).
MAX_DEPTH = 64
#: Most ``$defs`` entries in one schema (each generic instantiation is one).
MAX_DEFINITIONS = 5_000
#: Most schema nodes in the type arguments of one generic instantiation.
MAX_ARGUMENT_NODES = 4_096
#: Most branches an intersection with unions inside distributes into.
MAX_BRANCHES = 256
_UNSUPPORTED = {
    "conditional_type": "conditional types need type evaluation",
    "function_type": "function types have no JSON value",
    "constructor_type": "constructor types have no JSON value",
    "index_type_query": "`keyof` types need type evaluation",
    "type_query": "`typeof` types need type evaluation",
    "lookup_type": "indexed access types (`T[K]`) need type evaluation",
    "template_literal_type": "template literal types are not supported",
    "infer_type": "`infer` types need type evaluation",
    "type_predicate": "type predicates have no JSON value",
    "asserts": "assertion types have no JSON value",
    "this_type": "`this` types need type evaluation",
}
_LIBRARY = {
    **dict.fromkeys(("symbol", "bigint", "Symbol", "BigInt", "Function"), "has no JSON value"),
    **dict.fromkeys(
        ("Promise", "Map", "Set", "WeakMap", "WeakSet", "RegExp", "URL", "Error", "Uint8Array"),
        "is a library type jsonmode does not convert",
    ),
    **dict.fromkeys(
        (
            "Exclude",
            "Extract",
            "NonNullable",
            "ReturnType",
            "Parameters",
            "InstanceType",
            "Awaited",
            "Uppercase",
            "Lowercase",
            "Capitalize",
            "Uncapitalize",
        ),
        "needs type evaluation",
    ),
}
_ANNOTATIONS = frozenset(
    ("description", "title", "examples", "default", "deprecated", "$comment", "readOnly")
)
_OBJECT_KEYS = frozenset(("type", "properties", "required", "additionalProperties"))
_KEY_UNSAFE = re.compile(r"[^A-Za-z0-9_$-]+")


class Converter:
    """One conversion: the ``$defs`` built so far and the ones still to build."""

    def __init__(self, module: Module) -> None:
        self.module = module
        self.defs: dict[str, dict[str, Any] | None] = {}
        self.pending: dict[str, tuple[Declaration, dict[str, Any]]] = {}
        self.keys: dict[tuple[str, str], str] = {}
        self.root_key = ""

    def schema(self, root: str) -> dict[str, Any]:
        decl = self.module.types[root]
        reference = self._instance(decl, [], {}, decl.node, 0)
        self.root_key = reference["$ref"].rsplit("/", 1)[-1]
        while self.pending:
            self._built(next(iter(self.pending)), 0)
        body = self.defs.pop(self.root_key) or {}
        out: dict[str, Any] = {"$schema": DIALECT}
        out.update(body)
        used = _referenced(body, self.defs)  # (bases merged away are left out)
        if used:
            out["$defs"] = {key: value for key, value in self.defs.items() if key in used}
        return out

    # -- declarations -----------------------------------------------------------------

    def _instance(
        self,
        decl: Declaration,
        arguments: list[Node],
        env: dict[str, Any],
        at: Node,
        depth: int,
    ) -> dict[str, Any]:
        """A ``$ref`` to ``decl`` with ``arguments`` bound to its type parameters (read
        in ``env``); the definition is queued, built later."""
        params = self._parameters(decl)
        if len(arguments) > len(params):
            raise self.module.fail(
                at,
                f"`{decl.name}` takes {len(params)} type argument(s), not {len(arguments)}",
                InvalidSchemaError,
            )
        bound: dict[str, Any] = {}
        for index, (name, default) in enumerate(params):
            if index < len(arguments):
                bound[name] = self._type(arguments[index], env, depth + 1)
            elif default is not None:
                bound[name] = self._type(default, bound, depth + 1)
            else:
                raise self.module.fail(
                    at, f"`{decl.name}` needs {len(params)} type argument(s)", InvalidSchemaError
                )
        self._check_arguments(bound, at)
        identity = (decl.name, json.dumps(bound))
        key = self.keys.get(identity)
        if key is None:
            if len(self.keys) >= MAX_DEFINITIONS:
                raise BudgetExceededError(
                    "$defs entries",
                    MAX_DEFINITIONS,
                    doing=f"converting the TypeScript types (at {self.module.where(at)})",
                    hint="a generic type instantiated without end? Simplify the types, "
                    "or raise jsonmode.schema.ts_types.MAX_DEFINITIONS",
                )
            key = self._new_key(decl.name, bound)
            self.keys[identity] = key
            self.pending[key] = (decl, bound)
        return {"$ref": "#" if key == self.root_key else f"#/$defs/{key}"}

    def _new_key(self, name: str, bound: dict[str, Any]) -> str:
        label = "-".join([name, *(_label(schema) for schema in bound.values())])
        base = _KEY_UNSAFE.sub("_", label) or "type"
        used = set(self.keys.values())
        key, number = base, 1
        while key in used:
            number += 1
            key = f"{base}-{number}"
        return key

    def _parameters(self, decl: Declaration) -> list[tuple[str, Node | None]]:
        node = decl.node.child_by_field_name("type_parameters")
        if node is None:
            return []
        params: list[tuple[str, Node | None]] = []
        for param in kids(node):
            name = param.child_by_field_name("name")
            value = param.child_by_field_name("value")
            default = kids(value)[0] if value is not None and kids(value) else None
            params.append((self.module.text(name).decode() if name else "", default))
        return params

    def _built(self, key: str, depth: int) -> dict[str, Any] | None:
        """The definition ``key``, built now if it is queued (None while it is being built)."""
        if key in self.defs:
            return self.defs[key]
        decl, bound = self.pending.pop(key)
        self.defs[key] = None
        built = self._declaration(decl, bound, depth)
        self.defs[key] = built
        return built

    def _declaration(self, decl: Declaration, env: dict[str, Any], depth: int) -> dict[str, Any]:
        node = decl.node
        if node.type == "enum_declaration":
            schema = _enum_schema(list(self._enum_members(decl).values()))
        elif node.type == "type_alias_declaration":
            value = node.child_by_field_name("value")
            if value is None:  # pragma: no cover - tree-sitter marks it MISSING
                raise self.module.fail(node, "a type alias without a type", InvalidSchemaError)
            schema = self._type(value, env, depth + 1)
        else:
            body = node.child_by_field_name("body")
            if body is None:  # pragma: no cover - tree-sitter marks it MISSING
                raise self.module.fail(node, "an interface without a body", InvalidSchemaError)
            schema = self._object(body, env, depth + 1)
            for clause in kids(node):
                if clause.type == "extends_type_clause":
                    bases = [
                        self._object_of(self._type(base, env, depth + 1), base, depth)
                        for base in kids(clause)
                    ]
                    schema = _merge([*bases, schema], override=True)
        return _annotate(schema, decl.doc)

    def _enum_members(self, decl: Declaration) -> dict[str, Any]:
        body = decl.node.child_by_field_name("body")
        members: dict[str, Any] = {}
        following: int | float | None = 0
        for member in kids(body) if body is not None else []:
            name_node, value_node = member, None
            if member.type == "enum_assignment":
                name_node = member.child_by_field_name("name") or member
                value_node = member.child_by_field_name("value")
            if value_node is None:
                if following is None:
                    raise self.module.fail(
                        member, "an enum member after a string member needs a value"
                    )
                value: Any = following
            else:
                value = self._constant(value_node)
            following = value + 1 if isinstance(value, (int, float)) else None
            members[name_of(name_node, self.module)] = value
        if not members:
            raise self.module.fail(decl.node, "an empty enum accepts no value")
        return members

    def _constant(self, node: Node) -> Any:
        """The value of an enum member's initialiser: a string or a number literal."""
        if node.type == "string":
            return string_value(node, self.module)
        if node.type == "number":
            return number_value(node, self.module)
        if node.type == "unary_expression":
            operand = kids(node)
            sign = self.module.text(node.children[0]).decode()
            if sign in "-+" and len(operand) == 1 and operand[0].type == "number":
                number = number_value(operand[0], self.module)
                return -number if sign == "-" else number
        raise self.module.fail(node, "computed enum members need evaluation")

    # -- types ------------------------------------------------------------------------

    def _type(self, node: Node, env: dict[str, Any], depth: int) -> dict[str, Any]:
        """The schema of the type ``node``, type parameters read in ``env``."""
        if depth > MAX_DEPTH:
            raise self._too_deep(node)
        checkpoint()
        kind = node.type
        if kind == "predefined_type":
            return self._predefined(node)
        if kind == "type_identifier":
            return self._named(node, [], env, depth)
        if kind == "generic_type":
            name = node.child_by_field_name("name") or kids(node)[0]
            arguments = node.child_by_field_name("type_arguments")
            return self._named(name, kids(arguments) if arguments else [], env, depth)
        if kind == "nested_type_identifier":
            return self._enum_member(node)
        if kind == "literal_type":
            return self._literal(node)
        if kind == "parenthesized_type":
            return self._type(kids(node)[0], env, depth + 1)
        if kind == "array_type":
            return {"type": "array", "items": self._type(kids(node)[0], env, depth + 1)}
        if kind == "readonly_type":
            inner = kids(node)[0]
            if inner.type not in ("array_type", "tuple_type"):
                raise self.module.fail(node, "`readonly` applies to arrays and tuples only")
            return self._type(inner, env, depth + 1)
        if kind == "tuple_type":
            return self._tuple(node, env, depth)
        if kind == "union_type":
            return self._union(node, env, depth)
        if kind == "intersection_type":
            return self._intersection(node, env, depth)
        if kind == "object_type":
            return self._object(node, env, depth)
        if kind in _UNSUPPORTED:
            raise self.module.fail(node, _UNSUPPORTED[kind])
        raise self.module.fail(node, f"this kind of type ({kind}) is not supported")

    def _check_arguments(self, bound: dict[str, Any], at: Node) -> None:
        """Refuse type arguments nested deeper than :data:`MAX_DEPTH` or larger than
        :data:`MAX_ARGUMENT_NODES` schema nodes (an instantiation that grows its own
        arguments: ``Grow<X[]>`` inside ``Grow<X>``). Walks at most that many nodes."""
        stack: list[tuple[Any, int]] = [(value, 0) for value in bound.values()]
        nodes = 0
        while stack:
            node, depth = stack.pop()
            nodes += 1
            if depth > MAX_DEPTH:
                raise self._too_deep(at)
            if nodes > MAX_ARGUMENT_NODES:
                raise BudgetExceededError(
                    "type argument size (schema nodes)",
                    MAX_ARGUMENT_NODES,
                    doing=f"instantiating the generic type at {self.module.where(at)}",
                    hint="a generic type instantiated without end? Simplify the types",
                )
            if isinstance(node, dict):
                stack.extend((value, depth + 1) for value in node.values())
            elif isinstance(node, list):
                stack.extend((value, depth + 1) for value in node)

    def _too_deep(self, node: Node) -> BudgetExceededError:
        return BudgetExceededError(
            "TypeScript type nesting",
            MAX_DEPTH,
            doing=f"converting the type at {self.module.where(node)}",
            hint="flatten the types with named declarations, or raise "
            "jsonmode.schema.ts_types.MAX_DEPTH",
        )

    def _predefined(self, node: Node) -> dict[str, Any]:
        name = self.module.text(node).decode()
        if name in ("string", "number", "boolean"):
            return {"type": name}
        if name in ("any", "unknown"):
            return {}
        if name == "object":
            return {"type": "object"}
        if name == "never":
            raise self.module.fail(node, "`never` accepts no value")
        raise self.module.fail(node, f"`{name}` has no JSON value")

    def _named(
        self, node: Node, arguments: list[Node], env: dict[str, Any], depth: int
    ) -> dict[str, Any]:
        """A type named by ``node`` (a type parameter, a declaration or a built-in)."""
        if node.type == "nested_type_identifier":
            if arguments:
                raise self.module.fail(node, "qualified generic types are not supported")
            return self._enum_member(node)
        name = self.module.text(node).decode()
        if name in env:
            if arguments:
                raise self.module.fail(node, "a type parameter takes no type arguments")
            return dict(env[name])
        decl = self.module.types.get(name)
        if decl is not None:
            return self._instance(decl, arguments, env, node, depth)
        builtin = _BUILTINS.get(name)
        if builtin is not None:
            count, build = builtin
            if len(arguments) != count:
                raise self.module.fail(
                    node, f"`{name}` takes {count} type argument(s)", InvalidSchemaError
                )
            values = [self._type(argument, env, depth + 1) for argument in arguments]
            result: dict[str, Any] = build(self, values, node, depth)
            return result
        if name in _LIBRARY:
            raise self.module.fail(node, f"`{name}` {_LIBRARY[name]}")
        if name in self.module.foreign:
            _, what = self.module.foreign[name]
            raise self.module.fail(
                node, f"`{name}` {what}; only types declared in this source convert"
            )
        raise self.module.fail(node, f"unknown type `{name}`", InvalidSchemaError)

    def _enum_member(self, node: Node) -> dict[str, Any]:
        module_node = node.child_by_field_name("module")
        name_node = node.child_by_field_name("name")
        enum = self.module.types.get(self.module.text(module_node).decode() if module_node else "")
        member = self.module.text(name_node).decode() if name_node else ""
        if enum is None or enum.node.type != "enum_declaration":
            raise self.module.fail(node, "qualified names other than enum members")
        members = self._enum_members(enum)
        if member not in members:
            raise self.module.fail(
                node, f"`{member}` is not a member of the enum", InvalidSchemaError
            )
        return _enum_schema([members[member]])

    def _literal(self, node: Node) -> dict[str, Any]:
        inner = kids(node)[0]
        kind = inner.type
        if kind in ("string", "number", "unary_expression"):
            value = self._constant(inner)
            return {"type": "string" if isinstance(value, str) else "number", "const": value}
        if kind in ("true", "false"):
            return {"type": "boolean", "const": kind == "true"}
        if kind == "null":
            return {"type": "null"}
        if kind == "undefined":
            raise self.module.fail(node, "`undefined` has no JSON value (outside a union)")
        raise self.module.fail(node, f"this kind of literal type ({kind}) is not supported")

    def _tuple(self, node: Node, env: dict[str, Any], depth: int) -> dict[str, Any]:
        prefix: list[dict[str, Any]] = []
        required = 0
        rest: dict[str, Any] | None = None
        elements = kids(node)
        for index, element in enumerate(elements):
            optional, spread, inner = False, False, element
            if element.type in ("optional_type", "rest_type"):
                inner = kids(element)[0]
                optional, spread = element.type == "optional_type", element.type == "rest_type"
            elif element.type in ("required_parameter", "optional_parameter"):
                annotation = element.child_by_field_name("type")
                if annotation is None:
                    raise self.module.fail(element, "a tuple member without a type")
                inner = kids(annotation)[0]
                optional = element.type == "optional_parameter"
                spread = any(kid.type == "rest_pattern" for kid in kids(element))
            schema = self._type(inner, env, depth + 1)
            label = element.child_by_field_name("name")
            if label is not None and label.type == "identifier" and not spread:
                schema = {**schema, "title": self.module.text(label).decode()}
            if spread:
                if index != len(elements) - 1:
                    raise self.module.fail(element, "a rest element before the tuple's end")
                if (
                    schema.get("type") != "array"
                    or "items" not in schema
                    or "prefixItems" in schema
                ):
                    raise self.module.fail(element, "a rest element that is not `T[]`")
                rest = schema["items"]
            elif optional:
                prefix.append(schema)
            else:
                if required != len(prefix):
                    raise self.module.fail(
                        element, "a required element after an optional one", InvalidSchemaError
                    )
                prefix.append(schema)
                required += 1
        out: dict[str, Any] = {"type": "array"}
        if prefix:
            out["prefixItems"] = prefix
        out["minItems"] = required
        if rest is not None:
            out["items"] = rest
        else:
            out["maxItems"] = len(prefix)
        return out

    def _union(self, node: Node, env: dict[str, Any], depth: int) -> dict[str, Any]:
        schemas = [
            self._type(member, env, depth + 1)
            for member in flattened(node, "union_type")
            if not is_undefined(member) and self.module.text(member) != b"never"
        ]
        if not schemas:
            raise self.module.fail(node, "a union of only `undefined` and `never`")
        return _union_of(schemas)

    def _intersection(self, node: Node, env: dict[str, Any], depth: int) -> dict[str, Any]:
        choices: list[list[dict[str, Any]]] = []
        for member in flattened(node, "intersection_type"):
            schema = self._resolved(self._type(member, env, depth + 1), depth)
            branches = schema["anyOf"] if set(schema) == {"anyOf"} else [schema]
            choices.append([self._object_of(branch, member, depth) for branch in branches])
        if math.prod(len(choice) for choice in choices) > MAX_BRANCHES:
            raise BudgetExceededError(
                "intersection branches",
                MAX_BRANCHES,
                doing=f"distributing the intersection at {self.module.where(node)}",
                hint="write the union of objects out, or raise "
                "jsonmode.schema.ts_types.MAX_BRANCHES",
            )
        merged = [_merge(list(combination)) for combination in itertools.product(*choices)]
        return merged[0] if len(merged) == 1 else {"anyOf": merged}

    def _object(self, body: Node, env: dict[str, Any], depth: int) -> dict[str, Any]:
        properties: dict[str, Any] = {}
        required: list[str] = []
        extra: Any = False
        doc: Doc | None = None
        for member in body.named_children:
            if member.type == "comment":
                doc = self.module.doc(member)
                continue
            if member.type == "property_signature":
                name_node = member.child_by_field_name("name")
                annotation = member.child_by_field_name("type")
                if name_node is None or annotation is None:
                    raise self.module.fail(member, "a property without a type")
                name = name_of(name_node, self.module)
                if name in properties:
                    raise self.module.fail(
                        member, f"the property `{name}` is declared twice", InvalidSchemaError
                    )
                type_node = kids(annotation)[0]
                schema = self._type(type_node, env, depth + 1)
                properties[name] = _annotate(schema, doc)
                optional = any(kid.type == "?" for kid in member.children)
                if not optional and not self._admits_undefined(type_node):
                    required.append(name)
            elif member.type == "index_signature":
                extra = self._index(member, env, depth, doc, extra)
            elif member.type in ("method_signature", "call_signature", "construct_signature"):
                raise self.module.fail(member, "methods have no JSON value")
            else:
                raise self.module.fail(
                    member, f"this kind of member ({member.type}) is not supported"
                )
            doc = None
        out: dict[str, Any] = {"type": "object"}
        if properties:
            out["properties"] = properties
        if required:
            out["required"] = required
        out["additionalProperties"] = extra
        return out

    def _index(
        self, member: Node, env: dict[str, Any], depth: int, doc: Doc | None, extra: Any
    ) -> Any:
        parts = kids(member)
        if any(kid.type == "mapped_type_clause" for kid in parts):
            raise self.module.fail(member, "mapped types need type evaluation")
        if extra is not False:
            raise self.module.fail(member, "a second index signature")
        keys = [kid for kid in parts if kid.type not in ("identifier", "type_annotation")]
        annotation = member.child_by_field_name("type")
        if len(keys) != 1 or self.module.text(keys[0]) != b"string" or annotation is None:
            raise self.module.fail(member, "index signatures other than `[key: string]: T`")
        return _annotate(self._type(kids(annotation)[0], env, depth + 1), doc)

    def _admits_undefined(self, node: Node) -> bool:
        """Whether the type ``node`` has ``undefined`` in its union (through aliases)."""
        seen: set[str] = set()
        stack = [node]
        while stack:
            for member in flattened(stack.pop(), "union_type"):
                if is_undefined(member):
                    return True
                name = self.module.text(member).decode()
                decl = self.module.types.get(name) if member.type == "type_identifier" else None
                if decl is not None and name not in seen:
                    seen.add(name)
                    value = decl.node.child_by_field_name("value")
                    if value is not None and not self._parameters(decl):
                        stack.append(value)
        return False

    def _resolved(self, schema: dict[str, Any], depth: int) -> dict[str, Any]:
        """``schema`` with its ``$ref`` followed to a definition (built now if need be)."""
        for _ in range(MAX_DEFINITIONS + 1):
            target = schema.get("$ref")
            if not isinstance(target, str):
                return schema
            key = self.root_key if target == "#" else target.rsplit("/", 1)[-1]
            built = self._built(key, depth + 1)
            if built is None:
                return schema
            schema = built
        return schema  # pragma: no cover - a chain longer than the definitions

    def _object_of(self, schema: dict[str, Any], at: Node, depth: int) -> dict[str, Any]:
        """``schema`` resolved to an object type that can be merged, else an error."""
        found = self._resolved(schema, depth)
        if "$ref" in found:
            raise self.module.fail(at, "a type that extends or intersects itself")
        if found.get("type") != "object" or not set(found) <= _OBJECT_KEYS | _ANNOTATIONS:
            raise self.module.fail(at, "`extends`, `&` and mapped helpers take object types only")
        return found

    # -- built-in generics (see _BUILTINS) --------------------------------------------

    def _record(self, values: list[dict[str, Any]], at: Node, depth: int) -> dict[str, Any]:
        keys, value = self._resolved(values[0], depth), values[1]
        if keys == {"type": "string"}:
            return {"type": "object", "additionalProperties": value}
        names = _string_literals(keys)
        if names is None:
            raise self.module.fail(at, "`Record` keys other than `string` or string literals")
        return {
            "type": "object",
            "properties": dict.fromkeys(names, value),
            "required": list(names),
            "additionalProperties": False,
        }

    def _reshaped(self, name: str, values: list[dict[str, Any]], at: Node, depth: int) -> Any:
        """``Partial``, ``Required``, ``Pick`` and ``Omit`` of an object type."""
        found = self._object_of(values[0], at, depth)
        properties: dict[str, Any] = dict(found.get("properties", {}))
        required = list(found.get("required", []))
        if name in ("Pick", "Omit"):
            keys = _string_literals(self._resolved(values[1], depth))
            if keys is None:
                raise self.module.fail(at, f"`{name}` keys other than string literals")
            keep = set(keys) if name == "Pick" else set(properties) - set(keys)
            properties = {key: item for key, item in properties.items() if key in keep}
            required = [key for key in required if key in keep]
        elif name == "Partial":
            required = []
        else:
            required = list(properties)
        out: dict[str, Any] = {"type": "object"}
        if properties:
            out["properties"] = properties
        if required:
            out["required"] = required
        out["additionalProperties"] = found.get("additionalProperties", True)
        return out


def _array(_: Converter, values: list[dict[str, Any]], at: Node, depth: int) -> Any:
    return {"type": "array", "items": values[0]}


_BUILTINS: dict[str, tuple[int, Any]] = {
    "Date": (0, lambda *_: {"type": "string", "format": "date-time"}),
    "Array": (1, _array),
    "ReadonlyArray": (1, _array),
    "Readonly": (1, lambda _, values, *__: values[0]),
    "Record": (2, lambda self, values, at, depth: self._record(values, at, depth)),
    **{
        name: (
            2 if name in ("Pick", "Omit") else 1,
            functools.partial(
                lambda name, self, values, at, depth: self._reshaped(name, values, at, depth),
                name,
            ),
        )
        for name in ("Partial", "Required", "Pick", "Omit")
    },
}


def _union_of(schemas: list[dict[str, Any]]) -> dict[str, Any]:
    """The schemas of a union's members as one schema, as the reference tool writes it."""
    unique: dict[str, dict[str, Any]] = {}
    for schema in schemas:
        unique.setdefault(json.dumps(schema, sort_keys=True), schema)
    members = list(unique.values())
    if len(members) == 1:
        return members[0]
    literals = [m for m in members if set(m) == {"type", "const"}]
    nulls = [m for m in members if m == {"type": "null"}]
    strings = [m for m in members if m == {"type": "string"}]
    if literals and len(literals) + len(nulls) + len(strings) == len(members):
        if not strings:
            values = [m["const"] for m in literals] + ([None] if nulls else [])
            types = list(dict.fromkeys([m["type"] for m in literals] + ["null"] * len(nulls)))
            return {"type": types[0] if len(types) == 1 else types, "enum": values}
        if all(m["type"] == "string" for m in literals):
            return {"type": ["string", "null"] if nulls else "string"}
    if all(set(m) == {"type"} and isinstance(m["type"], str) for m in members):
        return {"type": list(dict.fromkeys(m["type"] for m in members))}
    flat: list[dict[str, Any]] = []
    for member in members:
        flat.extend(member["anyOf"] if set(member) == {"anyOf"} else [member])
    return {"anyOf": flat}


def _merge(objects: list[dict[str, Any]], *, override: bool = False) -> dict[str, Any]:
    """Object schemas as one (an intersection, or an interface and its bases: then a
    later property replaces an earlier one, else both hold through ``allOf``)."""
    properties: dict[str, Any] = {}
    required: list[str] = []
    extras: list[Any] = []
    out: dict[str, Any] = {"type": "object"}
    for schema in objects:
        for name, item in schema.get("properties", {}).items():
            if name in properties and properties[name] != item and not override:
                properties[name] = {"allOf": [properties[name], item]}
            else:
                properties[name] = item
        required.extend(name for name in schema.get("required", []) if name not in required)
        extras.append(schema.get("additionalProperties", True))
    if properties:
        out["properties"] = properties
    if required:
        out["required"] = required
    schemas = [extra for extra in extras if not isinstance(extra, bool)]
    distinct = list({json.dumps(extra, sort_keys=True): extra for extra in schemas}.values())
    if len(distinct) > 1:
        out["additionalProperties"] = {"anyOf": distinct}
    elif distinct:
        out["additionalProperties"] = distinct[0]
    elif all(extra is False for extra in extras):
        out["additionalProperties"] = False
    if override:
        out.update({key: value for key, value in objects[-1].items() if key in _ANNOTATIONS})
    return out


def _annotate(schema: dict[str, Any], doc: Doc | None) -> dict[str, Any]:
    """``schema`` with the JSDoc annotations of ``doc`` (``@asType`` replaces a ``$ref``)."""
    found = read_annotations(doc) if doc is not None else {}
    if not found:
        return schema
    out = {**schema, **found}
    if "type" in found:
        out.pop("$ref", None)
    return out


def _enum_schema(values: list[Any]) -> dict[str, Any]:
    unique = list({json.dumps(value): value for value in values}.values())
    types = list(dict.fromkeys("string" if isinstance(v, str) else "number" for v in unique))
    kind: Any = types[0] if len(types) == 1 else types
    return (
        {"type": kind, "const": unique[0]} if len(unique) == 1 else {"type": kind, "enum": unique}
    )


def _string_literals(schema: dict[str, Any]) -> list[str] | None:
    """The strings a literal (union) schema allows, or None when it is not one."""
    if schema.get("type") != "string":
        return None
    if "const" in schema:
        return [schema["const"]]
    values = schema.get("enum")
    return list(values) if isinstance(values, list) else None


def _referenced(root: Any, defs: dict[str, Any]) -> set[str]:
    """The ``$defs`` keys that ``root`` reaches through ``$ref`` (no recursion)."""
    used: set[str] = set()
    stack = [root]
    while stack:
        node = stack.pop()
        if isinstance(node, list):
            stack.extend(node)
        elif isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/$defs/"):
                key = ref.rsplit("/", 1)[-1]
                if key not in used:
                    used.add(key)
                    stack.append(defs.get(key))
            stack.extend(node.values())  # (a property named "$ref" is looked into too)
    return used


def _label(schema: dict[str, Any]) -> str:
    """A short readable name for a type argument (in an instantiation's ``$defs`` key)."""
    ref = schema.get("$ref")
    if isinstance(ref, str):
        return ref.rsplit("/", 1)[-1] if ref != "#" else "root"
    kind = schema.get("type")
    if isinstance(kind, str):
        return kind
    if isinstance(kind, list):
        return "_".join(str(item) for item in kind)
    return "any" if not schema else "T"
