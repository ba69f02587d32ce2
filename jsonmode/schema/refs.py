"""Reference resolution confined to one schema document: never a file, never the network.

Every ``$ref`` (and ``$dynamicRef``/``$recursiveRef``) a schema holds is resolved
here, once, when the :class:`~jsonmode.schema.core.Schema` is built, through
jsonschema's own ``referencing`` library, so what is checked is exactly what the
validator would later look up. The registry knows the document itself, the
resources it embeds (``$id``), their anchors (``$anchor``, ``$dynamicAnchor``,
draft 6/7 ``$id: "#name"``, draft 4 ``id``) and the metaschemas jsonschema ships
(``jsonschema-specifications``). Anything else — ``file:`` in any case, any other
scheme, remote or protocol-relative URLs, unknown URNs, a relative path that leaves
the document — has nowhere to come from: :data:`REFUSING_REGISTRY`'s retrieval
refuses without any I/O, and :func:`analyse` turns that into
:class:`~jsonmode.errors.InvalidSchemaError` naming the reference and where it sits.
The same registry goes to the jsonschema validator, so no later lookup can fetch
either.

:func:`analyse` also rewrites the document so that every in-document static
reference is a plain JSON pointer from the root (``#/$defs/item``), with the nested
``$id``/anchor keywords that no longer matter removed: the decoder, coercion and the
fast checker then need nothing but
:func:`jsonmode.schema.pointer.resolve_local_ref`. A document that uses
dynamic references (``$dynamicRef``, ``$recursiveRef``) or switches dialect inside
(a nested ``$schema``) is left as written: its meaning depends on the dynamic
scope, which a static rewrite cannot keep.

Definitions nothing uses: a ``$defs``/``definitions`` entry that no reference reaches
from the root is walked after the rest, and a reference in it that points to nowhere
inside the document (a missing definition, an unknown anchor) is not refused, since
nothing ever looks it up: it is kept as written and listed in
:attr:`References.dangling` for the schema lint. Every other reference there is
checked as anywhere else (a file or a URL is still refused).

Cycles: a reference cycle that never descends into the instance (only through
``$ref``, ``$dynamicRef``, ``$recursiveRef``, ``allOf``, ``anyOf``, ``oneOf``,
``not``, ``if``/``then``/``else``, ``dependentSchemas``/``dependencies``: applicators
that apply to the same value) makes a validator loop for ever on some value. JSON
Schema gives such a schema no meaning (Core 2020-12, "Guarding Against Infinite
Recursion": "Schemas SHOULD NOT make use of infinite recursive nesting like this; the
behavior is undefined"), so it is refused as an
:class:`~jsonmode.errors.InvalidSchemaError` — not UnsupportedSchemaError, which
says "a valid schema that jsonmode cannot enforce" (and lets the façade fall back to
another tier, where it would loop just the same). Every such cycle is refused, used
or not: ``$dynamicRef`` counts as reaching every same-named ``$dynamicAnchor`` of the
document (and ``$recursiveRef`` every ``$recursiveAnchor``), whichever the dynamic
scope picks. Recursion through ``properties``, ``items`` and other keywords that
descend (trees, linked lists) is what recursive schemas are for, and is kept; a
value nested deeper than the validators' recursion allows is reported by
:meth:`~jsonmode.schema.core.Schema.issues` instead.

Cost: one walk of the document plus one registry lookup per reference (well under
a millisecond for typical schemas). Pure functions; the registry is immutable and
thread-safe.
"""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import referencing
import referencing._core
import referencing.exceptions
import referencing.jsonschema
from jsonschema_specifications import REGISTRY as _METASCHEMAS

from jsonmode.errors import InvalidSchemaError
from jsonmode.schema.pointer import resolve_local_ref

__all__ = [
    "REFUSING_REGISTRY",
    "References",
    "Resolved",
    "analyse",
    "resolve_references",
    "schema_positions",
]


def _refuse(uri: str) -> referencing.Resource[Any]:
    """Retrieval for every URI not in the document: refused, with no I/O at all."""
    raise referencing.exceptions.NoSuchResource(ref=uri)  # type: ignore[call-arg]


#: The registry every jsonmode validator gets: nothing but what the schema document
#: itself holds (jsonschema adds the document and its bundled metaschemas).
REFUSING_REGISTRY: Final[referencing.Registry[Any]] = referencing.Registry(retrieve=_refuse)  # type: ignore[call-arg]

# The registry analysis resolves through: the metaschemas, and refusal for the rest.
_BASE_REGISTRY: Final[referencing.Registry[Any]] = _METASCHEMAS.combine(REFUSING_REGISTRY)

_REF_KEYWORDS = ("$ref", "$dynamicRef", "$recursiveRef")
_HINT = "jsonmode never reads files or the network: put the referenced schema under $defs"


@dataclass(frozen=True)
class _Keywords:
    """Where a draft keeps subschemas, and which of those apply to the same value."""

    value: frozenset[str]  # one subschema
    array: frozenset[str]  # a list of subschemas
    mapping: frozenset[str]  # an object of subschemas
    in_place: frozenset[str]  # applied to the value itself (cycles through them loop)
    items_list: bool  # "items" may be a list (draft 2019-09 and earlier)
    dependencies: bool  # "dependencies" may hold subschemas (draft 7 and earlier)
    id_keyword: str  # "$id", or "id" (draft 4 and earlier)


_MODERN_VALUE = frozenset(
    {"additionalProperties", "contains", "contentSchema", "else", "if", "not", "propertyNames"}
    | {"then", "unevaluatedItems", "unevaluatedProperties"}
)
_MODERN_MAPPING = frozenset(
    {"$defs", "definitions", "dependentSchemas", "patternProperties", "properties"}
)
_LEGACY_MAPPING = frozenset({"definitions", "patternProperties", "properties"})
_COMBINATORS = frozenset({"allOf", "anyOf", "oneOf"})
_IN_PLACE = _COMBINATORS | {"not", "if", "then", "else", "dependentSchemas", "dependencies"}

_KEYWORDS: dict[str, _Keywords] = {
    "draft2020-12": _Keywords(
        _MODERN_VALUE | {"items"},
        _COMBINATORS | {"prefixItems"},
        _MODERN_MAPPING,
        _IN_PLACE,
        items_list=False,
        dependencies=False,
        id_keyword="$id",
    ),
    "draft2019-09": _Keywords(
        _MODERN_VALUE | {"additionalItems"},
        _COMBINATORS,
        _MODERN_MAPPING,
        _IN_PLACE,
        items_list=True,
        dependencies=False,
        id_keyword="$id",
    ),
    "draft-07": _Keywords(
        frozenset({"additionalItems", "additionalProperties", "contains", "else", "if", "not"})
        | {"propertyNames", "then"},
        _COMBINATORS,
        _LEGACY_MAPPING,
        _IN_PLACE,
        items_list=True,
        dependencies=True,
        id_keyword="$id",
    ),
    "draft-06": _Keywords(
        frozenset({"additionalItems", "additionalProperties", "contains", "not", "propertyNames"}),
        _COMBINATORS,
        _LEGACY_MAPPING,
        _IN_PLACE,
        items_list=True,
        dependencies=True,
        id_keyword="$id",
    ),
    "draft-04": _Keywords(
        frozenset({"additionalItems", "additionalProperties", "not"}),
        _COMBINATORS,
        _LEGACY_MAPPING,
        _IN_PLACE,
        items_list=True,
        dependencies=True,
        id_keyword="id",
    ),
    "draft-03": _Keywords(
        frozenset({"additionalItems", "additionalProperties"}),
        frozenset({"extends"}),
        _LEGACY_MAPPING,
        frozenset({"extends", "dependencies"}),
        items_list=True,
        dependencies=True,
        id_keyword="id",
    ),
}
_ANCHOR_KEYWORDS = ("$anchor", "$dynamicAnchor", "$recursiveAnchor")
_DEFINITIONS = frozenset({"$defs", "definitions"})

Parts = tuple[str | int, ...]
_Spec = referencing.Specification[Any]
_Resolver = referencing._core.Resolver[Any]
_Entry = tuple[Any, Parts, _Resolver, _Spec]  # (node, location, resolver, dialect)


@dataclass(frozen=True)
class References:
    """What :func:`analyse` learned about a document.

    Attributes:
        document: the document with every in-document static reference rewritten to
            a JSON pointer from the root (the input object itself when nothing had to
            change; a new object otherwise, the input is never mutated).
        as_written: the document uses dynamic references or switches dialect inside,
            so it was kept as written (``$ref`` values may then be relative to a
            nested ``$id``: only jsonschema reads them correctly).
        unchecked: the subschemas references reach that sit where the metaschema does
            not look (``{"$ref": "#/x", "x": {...}}``, or under a keyword the dialect
            does not know), with their locations: the caller checks them against the
            metaschema itself, since validating and compiling read them as schemas.
        dangling: (location of the node, keyword, reference) for each pointer to
            nowhere in a definition nothing uses (see the module docstring).
    """

    document: Any
    as_written: bool
    unchecked: tuple[tuple[Parts, dict[str, Any]], ...] = ()
    dangling: tuple[tuple[Parts, str, str], ...] = ()


def pointer_of(parts: Parts) -> str:
    """``("$defs", "a b")`` → ``"#/$defs/a%20b"`` (RFC 6901 in a URI fragment)."""
    escaped = (
        urllib.parse.quote(
            str(part).replace("~", "~0").replace("/", "~1"), safe="!$&'()*+,;=:@-._~"
        )
        for part in parts
    )
    return "#" + "".join("/" + part for part in escaped)


def _location(parts: Parts) -> str:
    return "/" + "/".join(str(part) for part in parts)


_IDENTIFIERS = frozenset({"$id", "id", "$anchor", "$dynamicAnchor", "$recursiveAnchor"})
_REFERENCES = frozenset(_REF_KEYWORDS)


def _node_index(root: Any, out: dict[int, Parts]) -> tuple[bool, bool]:
    """Every dict of the document by identity → its location (iterative); whether any
    dict holds an identifier keyword (else nothing needs crawling), and whether any
    holds a reference keyword (else there is nothing to resolve)."""
    identified = referenced = False
    stack: list[tuple[Any, Parts]] = [(root, ())]
    while stack:
        current, where = stack.pop()
        if isinstance(current, dict):
            out.setdefault(id(current), where)
            identified = identified or not _IDENTIFIERS.isdisjoint(current)
            referenced = referenced or not _REFERENCES.isdisjoint(current)
            items: Any = current.items()
        else:
            items = enumerate(current)
        for key, child in items:
            if isinstance(child, (dict, list)):
                stack.append((child, (*where, key)))
    return identified, referenced


_MENTIONS = _IDENTIFIERS | _REFERENCES


def _mentions_references(root: Any) -> bool:
    """Whether any dict of the document (values of ``enum``, ``const``, ... included)
    holds an identifier or a reference keyword: :func:`_node_index`'s two answers
    together, without its index (one walk, no allocation per node)."""
    stack = [root]
    while stack:
        current = stack.pop()
        if isinstance(current, dict):
            if not _MENTIONS.isdisjoint(current):
                return True
            children: Any = current.values()
        else:
            children = current
        stack.extend(child for child in children if isinstance(child, (dict, list)))
    return False


def _subschemas(node: dict[str, Any], keywords: _Keywords) -> Iterator[tuple[Parts, Any, bool]]:
    """(relative location, subschema, applies in place) for each subschema of ``node``."""
    for key, child in node.items():
        in_place = key in keywords.in_place
        if key in keywords.value or (key == "items" and keywords.items_list):
            if isinstance(child, list) and key == "items":
                yield from (((key, i), sub, False) for i, sub in enumerate(child))
            else:
                yield (key,), child, in_place
        elif key in keywords.array and isinstance(child, list):
            yield from (((key, i), sub, in_place) for i, sub in enumerate(child))
        elif (key in keywords.mapping or (key == "dependencies" and keywords.dependencies)) and (
            isinstance(child, dict)
        ):
            applies = key in ("dependentSchemas", "dependencies")
            for name, sub in child.items():
                if key != "dependencies" or isinstance(sub, (dict, bool)):
                    yield (key, name), sub, applies


class _Analysis:
    def __init__(self, root: dict[str, Any], specification: _Spec) -> None:
        self.root = root
        self.specification = specification
        self.index: dict[int, Parts] = {}
        identified, self.referenced = _node_index(root, self.index)
        resource = specification.create_resource(root)
        uri = resource.id() or ""
        registry = _BASE_REGISTRY.with_resource(uri, resource)
        # Crawling finds embedded resources and anchors: none without identifiers.
        self.registry = registry.crawl() if identified else registry
        self.root_resolver: _Resolver = self.registry.resolver(base_uri=uri)
        self.visited: set[int] = set()
        self.edges: dict[int, list[int]] = {}  # in-place applications between dict nodes
        self.rewrites: list[tuple[Parts, str, str]] = []  # (node, keyword, new reference)
        self.strips: list[tuple[Parts, str]] = []  # (node, keyword) to drop when rewriting
        self.dynamic = False
        self.dynamic_anchors: dict[str, list[int]] = {}
        self.recursive_anchors: list[int] = []
        self.dynamic_refs: list[tuple[int, str, str]] = []
        self.targets: list[tuple[Parts, str, Parts]] = []  # (node, keyword, target)
        self.dangling: list[tuple[Parts, str, str]] = []  # (see References)
        self.unused = False  # walking the definitions the first pass did not reach

    # -- the walk ------------------------------------------------------------------------

    def run(self) -> None:
        """Walk from the root, then the definitions that walk did not reach (unused:
        see the module docstring)."""
        if not self.referenced:
            return  # nothing to resolve, no cycle possible
        # Each entry's resolver is already inside the entry's node (its base URI).
        definitions: list[_Entry] = []
        self.walk([(self.root, (), self.root_resolver, self.specification)], definitions)
        self.unused = True
        self.walk(definitions[::-1], [])

    def walk(self, stack: list[_Entry], definitions: list[_Entry]) -> None:
        """Visit what ``stack`` reaches; in the first pass, set definitions aside."""
        while stack:
            node, parts, resolver, spec = stack.pop()
            if not isinstance(node, dict) or id(node) in self.visited:
                continue
            self.visited.add(id(node))
            if parts and isinstance(node.get("$schema"), str):
                self.dynamic = True  # a dialect switch inside: keep the document as written
                spec = referencing.jsonschema.specification_with(node["$schema"], default=spec)
            keywords = _KEYWORDS.get(spec.name, _KEYWORDS["draft2020-12"])
            self.note_identifiers(node, parts, keywords)
            edges = self.edges.setdefault(id(node), [])
            for keyword in _REF_KEYWORDS:
                if keyword in node:
                    found = self.reference(node, parts, keyword, resolver)
                    if found is not None:
                        stack.append(found)
            for relative, child, in_place in _subschemas(node, keywords):
                if isinstance(child, dict):
                    if in_place:
                        edges.append(id(child))
                    inside = (
                        resolver.in_subresource(spec.create_resource(child))
                        if keywords.id_keyword in child
                        else resolver
                    )
                    entry = (child, (*parts, *relative), inside, spec)
                    if not self.unused and relative[0] in _DEFINITIONS:
                        definitions.append(entry)
                    else:
                        stack.append(entry)

    def note_identifiers(self, node: dict[str, Any], parts: Parts, keywords: _Keywords) -> None:
        identifier = node.get(keywords.id_keyword)
        if isinstance(identifier, str) and (parts or identifier.startswith("#")):
            self.strips.append((parts, keywords.id_keyword))
        for keyword in _ANCHOR_KEYWORDS:
            if keyword in node:
                self.strips.append((parts, keyword))
        if isinstance(node.get("$dynamicAnchor"), str):
            self.dynamic_anchors.setdefault(node["$dynamicAnchor"], []).append(id(node))
        if node.get("$recursiveAnchor") is True:
            self.recursive_anchors.append(id(node))

    def reference(
        self, node: dict[str, Any], parts: Parts, keyword: str, resolver: _Resolver
    ) -> tuple[Any, Parts, _Resolver, _Spec] | None:
        """Resolve ``node[keyword]``; the target to walk next when it is in the document."""
        ref = node[keyword]
        where = _location((*parts, keyword))
        if not isinstance(ref, str):
            raise InvalidSchemaError(f"{keyword} must be a string, not {ref!r}", schema_path=where)
        try:
            resolved = resolver.lookup(ref)
        except (referencing.exceptions.PointerToNowhere, referencing.exceptions.NoSuchAnchor):
            if not self.unused:
                raise InvalidSchemaError(
                    f"reference {ref!r} does not resolve inside the schema document",
                    schema_path=where,
                    hint=_HINT,
                ) from None
            self.dangling.append((parts, keyword, ref))
            return None
        except referencing.exceptions.Unresolvable:
            raise InvalidSchemaError(
                f"reference {ref!r} does not resolve inside the schema document",
                schema_path=where,
                hint=_HINT,
            ) from None
        except (referencing.exceptions.Unretrievable, ValueError, TypeError, KeyError):
            raise InvalidSchemaError(
                f"reference {ref!r} cannot be resolved", schema_path=where, hint=_HINT
            ) from None
        if keyword != "$ref":
            self.dynamic = True
        target = resolved.contents
        if isinstance(target, dict) and id(target) not in self.index:
            return None  # a bundled metaschema (all the registry holds besides the document)
        if not isinstance(target, (dict, bool)):
            raise InvalidSchemaError(
                f"reference {ref!r} names {json.dumps(target)[:40]}, which is not a schema",
                schema_path=where,
            )
        located = self.locate(target, ref, resolver)
        if located is None:  # a boolean inside a metaschema
            return None
        if isinstance(target, dict):
            self.edges.setdefault(id(node), []).append(id(target))
            self.dynamic_refs.append((id(node), keyword, ref))
        self.targets.append((parts, keyword, located))
        if keyword == "$ref" and resolve_local_ref(self.root, ref) is not target:
            # (Not already the root pointer to it: anchors, $id-relative, nested bases.)
            self.rewrites.append((parts, keyword, pointer_of(located)))
        return target, located, resolved.resolver, self.specification

    def locate(self, target: Any, ref: str, resolver: _Resolver) -> Parts | None:
        """Where ``target`` (the contents ``ref`` resolved to) sits in the document."""
        if isinstance(target, dict):
            return self.index.get(id(target))
        # A boolean schema: only a JSON pointer reaches one.
        resource_part, fragment = urllib.parse.urldefrag(ref)
        base = resolver.lookup(resource_part or "#").contents
        base_parts = self.index.get(id(base))
        if base_parts is None:
            return None
        steps: list[str | int] = []
        node = base
        for raw in urllib.parse.unquote(fragment).split("/")[1:]:
            part = raw.replace("~1", "/").replace("~0", "~")
            if isinstance(node, list):
                steps.append(int(part))
                node = node[int(part)]
            else:
                steps.append(part)
                node = node[part]
        return (*base_parts, *steps)

    def unchecked(self) -> tuple[tuple[Parts, dict[str, Any]], ...]:
        """The dict targets of references that sit off the schema positions (see
        :class:`References`), each once, outermost first."""
        found: dict[int, tuple[Parts, dict[str, Any]]] = {}
        for _, _, located in self.targets:
            target = _at(self.root, located)
            if (
                isinstance(target, dict)
                and id(target) not in found
                and not _at_schema_position(self.root, located, self.specification)
            ):
                found[id(target)] = (located, target)
        ordered = sorted(found.values(), key=lambda entry: len(entry[0]))
        kept: list[tuple[Parts, dict[str, Any]]] = []
        for located, target in ordered:  # (one below another is checked with it)
            if not any(located[: len(outer)] == outer for outer, _ in kept):
                kept.append((located, target))
        return tuple(kept)

    # -- cycles ------------------------------------------------------------------------

    def check_cycles(self) -> None:
        """Refuse a cycle of in-place applications (see the module docstring)."""
        edges = self.edges
        for source, keyword, ref in self.dynamic_refs:
            # The dynamic scope may land on any same-named anchor: count them all.
            if keyword == "$dynamicRef":
                name = urllib.parse.urldefrag(ref)[1]
                edges[source].extend(self.dynamic_anchors.get(name, ()))
            elif keyword == "$recursiveRef":
                edges[source].extend(self.recursive_anchors)
        white, grey, black = 0, 1, 2
        color: dict[int, int] = {}
        for start in edges:
            if color.get(start, white) != white:
                continue
            color[start] = grey
            stack: list[tuple[int, Iterator[int]]] = [(start, iter(edges.get(start, ())))]
            while stack:
                node, children = stack[-1]
                child = next(children, None)
                if child is None:
                    color[node] = black
                    stack.pop()
                    continue
                state = color.get(child, white)
                if state == grey:
                    cycle = [entry for entry, _ in stack]
                    raise self.cycle_error(cycle[cycle.index(child) :])
                if state == white:
                    color[child] = grey
                    stack.append((child, iter(edges.get(child, ()))))

    def cycle_error(self, cycle: list[int]) -> InvalidSchemaError:
        """The error for ``cycle`` (dict node ids), naming a reference on it."""
        where = [self.index.get(node, ()) for node in cycle]
        named = [
            (parts, keyword, _at(self.root, parts)[keyword])
            for parts in where
            for keyword in _REF_KEYWORDS
            if keyword in _at(self.root, parts)
        ]
        parts, keyword, ref = named[0] if named else (where[0], "", "")
        through = " → ".join(_location(parts) for parts in where)
        return InvalidSchemaError(
            f"the schema refers to itself without descending into the value: "
            f"{keyword} {ref!r} closes the cycle {through} → {_location(where[0])}, "
            "so validating it would never end",
            schema_path=_location((*parts, keyword) if keyword else parts),
            hint="recurse only through properties, items or another keyword that "
            "applies to a part of the value",
        )

    # -- the rewritten document ----------------------------------------------------------

    def document(self) -> Any:
        if not self.rewrites or self.dynamic:
            return self.root
        copy = json.loads(json.dumps(self.root))
        for parts, keyword, ref in self.rewrites:
            _at(copy, parts)[keyword] = ref
        for parts, keyword in self.strips:
            _at(copy, parts).pop(keyword, None)
        return copy


def _at_schema_position(root: Any, parts: Parts, spec: _Spec) -> bool:
    """Whether ``parts`` leads from the root through subschemas only (as
    :func:`_subschemas` finds them: where the metaschema checks what it finds),
    following dialect switches on the way."""
    node: Any = root
    step = 0
    while step < len(parts):
        key = parts[step]
        if not isinstance(node, dict) or not isinstance(key, str) or key not in node:
            return False
        if isinstance(node.get("$schema"), str):
            spec = referencing.jsonschema.specification_with(node["$schema"], default=spec)
        keywords = _KEYWORDS.get(spec.name, _KEYWORDS["draft2020-12"])
        # (Only the keyword the next step names: one lookup, where scanning every
        # subschema of a large $defs for each reference made this quadratic.)
        nested = parts[step + 1] if step + 1 < len(parts) else None
        found = _step_into(key, node[key], nested, keywords)
        if found is None:
            return False
        node, width = found
        step += width
    return True


def _step_into(key: str, child: Any, nested: Any, keywords: _Keywords) -> tuple[Any, int] | None:
    """The subschema that the location steps ``key`` (holding ``child``), then
    ``nested``, reach, as :func:`_subschemas` finds it, and how many steps it took (1
    or 2); None where :func:`_subschemas` finds none. Constant time."""
    if key in keywords.value or (key == "items" and keywords.items_list):
        if not (isinstance(child, list) and key == "items"):
            return child, 1
    elif not (key in keywords.array and isinstance(child, list)):
        mapping = key in keywords.mapping or (key == "dependencies" and keywords.dependencies)
        if not (mapping and isinstance(child, dict) and isinstance(nested, str)):
            return None
        sub = child.get(nested, _ABSENT)
        if sub is _ABSENT or (key == "dependencies" and not isinstance(sub, (dict, bool))):
            return None
        return sub, 2
    if isinstance(nested, int) and not isinstance(nested, bool) and 0 <= nested < len(child):
        return child[nested], 2
    return None


_ABSENT = object()


def schema_positions(root: Any, dialect: str | None) -> Iterator[tuple[Parts, dict[str, Any], str]]:
    """Every object subschema of ``root`` where the metaschema checks a schema (the
    positions :func:`_subschemas` finds: never inside ``enum``, ``const``, ``default``
    or an unknown keyword, and the names under ``properties``/``$defs`` are not
    keywords), as (location, subschema, dialect name such as ``"draft2020-12"``),
    following a nested ``$schema``; the root first, then depth-first in document order.

    ``dialect``: the root's metaschema URI (``None``: Draft 2020-12). Lazy and
    iterative: each node costs one pass over its keys, the caller may stop at any time.
    A document that is a tree (any parsed JSON) yields each node once.
    """
    spec = referencing.jsonschema.specification_with(
        dialect or "", default=referencing.jsonschema.DRAFT202012
    )
    stack: list[tuple[Any, Parts, _Spec]] = [(root, (), spec)]
    while stack:
        node, parts, spec = stack.pop()
        if not isinstance(node, dict):
            continue
        if parts and isinstance(node.get("$schema"), str):
            spec = referencing.jsonschema.specification_with(node["$schema"], default=spec)
        yield parts, node, spec.name
        keywords = _KEYWORDS.get(spec.name, _KEYWORDS["draft2020-12"])
        children = [
            ((*parts, *relative), child) for relative, child, _ in _subschemas(node, keywords)
        ]
        stack.extend((child, where, spec) for where, child in reversed(children))


def _at(root: Any, parts: Parts) -> Any:
    node = root
    for part in parts:
        node = node[part]
    return node


def analyse(schema: Any, dialect: str | None) -> References:
    """Resolve every reference of ``schema`` inside the document; refuse the rest.

    ``dialect``: the metaschema URI the validator uses (``None``: Draft 2020-12).
    Call on a schema its metaschema accepts.

    Raises:
        InvalidSchemaError: a reference that does not resolve inside the document
            (files, URLs, unknown URNs, pointers to nowhere; nothing is ever read),
            one that names something not a schema, or a cycle of references that never
            descends into the value. The message names the reference; ``schema_path``
            says where it is. (A pointer or anchor to nowhere inside a definition that
            nothing uses is not refused: see :attr:`References.dangling`.)
    """
    if not isinstance(schema, dict) or not _mentions_references(schema):
        # (No identifier and no reference anywhere: nothing to resolve, nothing to
        # crawl, no cycle; what the analysis below finds of such a document.)
        return References(schema, as_written=False)
    specification = referencing.jsonschema.specification_with(
        dialect or "", default=referencing.jsonschema.DRAFT202012
    )
    try:
        analysis = _Analysis(schema, specification)
        analysis.run()
        unchecked = analysis.unchecked()
    except (AttributeError, TypeError, ValueError, LookupError) as exc:
        # A malformed identifier the metaschema let through (one inside an unknown
        # keyword that a pointer reaches, say): referencing cannot read it.
        raise InvalidSchemaError(f"the schema's references cannot be read: {exc!r}") from None
    analysis.check_cycles()
    dangling = tuple(analysis.dangling)
    return References(analysis.document(), analysis.dynamic, unchecked, dangling)


# -- the document as the decoder reads it ---------------------------------------------


@dataclass(frozen=True)
class Resolved:
    """A schema document with every in-document reference a JSON pointer from the root.

    What the decoder compiles (:func:`resolve_references`). Pointers survive the
    compiler's merging of subschemas (``allOf``), where a reference relative to a
    nested ``$id`` would lose its base.

    Attributes:
        document: the document (the input itself when nothing had to change; a copy
            otherwise). Every ``$ref`` is a root pointer (``#/$defs/a``). A
            ``$dynamicRef`` whose static target carries a ``$dynamicAnchor`` of the
            name its fragment gives stays a ``$dynamicRef`` holding that target's
            pointer (the dynamic scope picks the schema it applies); every other
            ``$dynamicRef`` behaves as a ``$ref`` and becomes one. Where references
            stay dynamic, ``$id`` values are absolute URIs.
        root_uri: the root resource's URI ("" without one).
        resources: per reference target's pointer, the URI of the resource it lies in.
        dynamic_anchors: per resource URI, its ``$dynamicAnchor`` names and where
            they sit (pointers).
    """

    document: Any
    root_uri: str = ""
    resources: Mapping[str, str] = field(default_factory=dict)
    dynamic_anchors: Mapping[str, Mapping[str, str]] = field(default_factory=dict)

    @property
    def names(self) -> tuple[str, ...]:
        """The dynamic anchor names the document's dynamic references may look up."""
        return tuple(sorted({n for anchors in self.dynamic_anchors.values() for n in anchors}))


_VALUE_KEYWORDS = frozenset({"enum", "const", "default", "examples"})


def _plain_pointers(root: Any) -> bool:
    """Whether every reference is already a pointer from the root: no dynamic
    reference, every ``$ref`` ``#`` or ``#/…``, and no base URI below the root."""
    stack: list[tuple[Any, bool]] = [(root, True)]
    while stack:
        node, top = stack.pop()
        if isinstance(node, dict):
            if "$dynamicRef" in node or "$recursiveRef" in node:
                return False
            ref = node.get("$ref")
            if isinstance(ref, str) and ref != "#" and not ref.startswith("#/"):
                return False
            if not top and isinstance(node.get("$id"), str) and not node["$id"].startswith("#"):
                return False
            # (values, not schemas: an "$ref" member of a constant is data)
            stack.extend((v, False) for k, v in node.items() if k not in _VALUE_KEYWORDS)
        elif isinstance(node, list):
            stack.extend((child, False) for child in node)
    return True


def _bases(root: dict[str, Any], spec: _Spec) -> dict[Parts, str]:
    """The base URI of every subschema in a known position, by location."""
    out: dict[Parts, str] = {}
    stack: list[tuple[Any, Parts, str, _Spec]] = [(root, (), "", spec)]
    while stack:
        node, parts, base, spec = stack.pop()
        if isinstance(node, dict):
            if parts and isinstance(node.get("$schema"), str):
                spec = referencing.jsonschema.specification_with(node["$schema"], default=spec)
            identifier = spec.create_resource(node).id()
            if isinstance(identifier, str):
                base = urllib.parse.urljoin(base, identifier)
            keywords = _KEYWORDS.get(spec.name, _KEYWORDS["draft2020-12"])
            for relative, child, _ in _subschemas(node, keywords):
                stack.append((child, (*parts, *relative), base, spec))
        out[parts] = base
    return out


def _base_of(bases: dict[Parts, str], parts: Parts) -> str:
    """The base URI at ``parts`` (a location inside an unknown keyword: its closest
    known ancestor's)."""
    for end in range(len(parts), -1, -1):
        if parts[:end] in bases:
            return bases[parts[:end]]
    return ""


def resolve_references(schema: Any, dialect: str | None = None) -> Resolved:
    """``schema`` with every in-document reference a root JSON pointer (see
    :class:`Resolved`), for the decoder.

    ``dialect``: the metaschema URI (``None``: the document's ``$schema``, else Draft
    2020-12). Cost: nothing for a document whose references are all root pointers
    already (what :func:`analyse` leaves of every document without dynamic
    references); otherwise one walk and a lookup per reference, and one copy.

    Raises:
        InvalidSchemaError: as :func:`analyse` (a reference that leaves the document,
            or one that cannot be read). A reference into a bundled metaschema is
            left as written (the decoder refuses it).
    """
    if not isinstance(schema, dict) or _plain_pointers(schema):
        return Resolved(schema)
    declared = dialect if dialect is not None else schema.get("$schema")
    specification = referencing.jsonschema.specification_with(
        declared if isinstance(declared, str) else "", default=referencing.jsonschema.DRAFT202012
    )
    try:
        analysis = _Analysis(schema, specification)
        analysis.run()
        bases = _bases(schema, specification)
    except (AttributeError, TypeError, ValueError, LookupError) as exc:
        raise InvalidSchemaError(f"the schema's references cannot be read: {exc!r}") from None
    copy = json.loads(json.dumps(schema))
    # Plain-name anchors by resource (referencing resolves a dynamic anchor through
    # the scope of the walk that reached it; the static target is this one).
    named: dict[tuple[str, str], Parts] = {}
    for parts, base in bases.items():
        node = _at(schema, parts)
        for keyword in ("$anchor", "$dynamicAnchor"):
            if isinstance(node, dict) and isinstance(node.get(keyword), str):
                named.setdefault((base, node[keyword]), parts)
    resources: dict[str, str] = {}
    dynamic = False
    for parts, keyword, located in analysis.targets:
        node = _at(copy, parts)
        ref = _at(schema, parts)[keyword]
        if keyword == "$dynamicRef":
            uri, name = urllib.parse.urldefrag(urllib.parse.urljoin(_base_of(bases, parts), ref))
            located = named.get((uri, name), located)
        pointer = pointer_of(located)
        resources[pointer] = _base_of(bases, located)
        if keyword == "$ref":
            node["$ref"] = pointer
            continue
        if keyword != "$dynamicRef":
            continue  # $recursiveRef (2019-09): left as written
        target = _at(schema, located)
        if name and isinstance(target, dict) and target.get("$dynamicAnchor") == name:
            node["$dynamicRef"] = pointer  # the dynamic scope decides (bookended)
            dynamic = True
            continue
        del node["$dynamicRef"]  # resolves like a $ref
        if "$ref" in node:
            node["allOf"] = [*node.get("allOf", []), {"$ref": pointer}]
        else:
            node["$ref"] = pointer
    if not dynamic:
        return Resolved(copy)
    anchors: dict[str, dict[str, str]] = {}
    for parts, base in bases.items():
        node = _at(copy, parts)
        if not isinstance(node, dict):
            continue
        if isinstance(node.get("$id"), str) and not node["$id"].startswith("#"):
            node["$id"] = base
        name = node.get("$dynamicAnchor")
        if isinstance(name, str):
            anchors.setdefault(base, {}).setdefault(name, pointer_of(parts))
    return Resolved(copy, bases.get((), ""), resources, anchors)
