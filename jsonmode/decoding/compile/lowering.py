"""Keywords rewritten into ones the decoder enforces, where the rewrite is exact.

:meth:`Lowering.lower` takes a schema node and returns an equivalent one in which some
keywords the grammar cannot read directly are expressed with those it can (``allOf``,
``anyOf``, ``properties``, ``additionalProperties``, ``prefixItems``, ``items``,
bounds, constants). A keyword whose rewrite would not be exact is left where it is,
and the compiler lists it in ``unenforced`` as before.

- ``unevaluatedProperties`` / ``unevaluatedItems`` (2019-09 and later): when the
  names (items) the node's in-place subschemas evaluate are known statically — its
  own ``properties``/``patternProperties`` (``prefixItems``), those of its ``allOf``
  parts and ``$ref`` targets, and no conditional applicator (``anyOf``, ``oneOf``,
  ``if``, ``dependentSchemas``, ``$dynamicRef``) that could evaluate more — the
  keyword becomes one more ``allOf`` part: ``{"properties": {name: true …},
  "patternProperties": {pattern: true …}, "additionalProperties": U}`` (or
  ``{"prefixItems": [true …], "items": U}``). ``not`` never evaluates anything
  (its annotations are dropped), so it is no obstacle.
- ``not``: the complement (:func:`~jsonmode.decoding.compile.negation.negate`).
- ``if``/``then``/``else`` (draft 7 and later): ``anyOf: [allOf: [if, then],
  allOf: [not if, else]]`` — the branches are disjoint, so this is exact.
- ``dependentRequired``/``dependentSchemas`` (``dependencies`` in drafts 4–7): per
  name, ``anyOf: [the name absent, the name present and its requirement]``.
- ``oneOf`` of two branches that are not provably disjoint: ``anyOf: [a and not b,
  b and not a]``.

Property order: decoding writes declared properties in schema order
(``property_order="schema"``), and a rewrite must not declare names the schema left
undeclared in an order of its own (an undeclared member may come in any order). So a
branch that would declare names the rest of the schema does not is repeated once per
order of those names (at most three of them; more leaves the keyword unenforced), after
the names the rest requires without declaring them.

Pure functions; thread-safe.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from jsonmode.decoding.compile.merging import ANNOTATION_KEYWORDS, disjoint
from jsonmode.decoding.compile.negation import negate
from jsonmode.schema.pointer import MISSING, resolve_local_ref

__all__ = ["CONTEXTUAL", "Lowering", "detach", "dialect_of"]

_KEYWORDS = frozenset(
    {
        "unevaluatedProperties",
        "unevaluatedItems",
        "not",
        "if",
        "then",
        "else",
        "dependentRequired",
        "dependentSchemas",
        "dependencies",
        "oneOf",
    }
)
#: Keywords whose meaning depends on the whole schema they sit in.
CONTEXTUAL = ("unevaluatedProperties", "unevaluatedItems")
_PROPERTY_KEYWORDS = frozenset(
    {"properties", "patternProperties", "additionalProperties", "unevaluatedProperties"}
)
_ITEM_KEYWORDS = frozenset(
    {"prefixItems", "items", "additionalItems", "contains", "unevaluatedItems"}
)
_IN_PLACE_LIST = ("allOf", "anyOf", "oneOf")
_CONDITIONAL = ("anyOf", "oneOf", "if", "then", "else", "dependentSchemas", "dependencies")
_MAX_NEW_NAMES = 3  # names a branch may declare (each order is a branch: 3! = 6)
_MAX_DEPENDENCIES = 4  # dependencies rewritten per object (2 branches each, multiplied)
_MAX_COMBINATIONS = 64  # object shapes the rewritten dependencies multiply into
_MAX_DEPTH = 32
_MAX_SUBSCHEMAS = 1000  # looked at to decide whether annotations are static


@dataclass(frozen=True)
class Lowering:
    """The rewrites for one document.

    Attributes:
        root: the document (references are pointers from it).
        dialect: ``"modern"`` (2019-09, 2020-12), ``"draft7"``, ``"draft6"`` or
            ``"legacy"`` (drafts 3 and 4): which keywords exist.
    """

    root: Any
    dialect: str

    def resolve(self, ref: str) -> Any:
        return resolve_local_ref(self.root, ref) if isinstance(ref, str) else MISSING

    def lower(self, schema: dict[str, Any]) -> Any:
        """``schema`` with the keywords that can be rewritten exactly rewritten (the
        object itself when none can; ``False`` when it accepts nothing)."""
        if _KEYWORDS.isdisjoint(schema):
            return schema
        steps = [self._not, self._dependencies, self._one_of]
        if self.dialect in ("modern", "draft7"):
            steps.insert(1, self._conditional)
        if self.dialect == "modern":
            steps[:0] = [self._unevaluated_properties, self._unevaluated_items]
        out: Any = schema
        for step in steps:
            if out is False:
                break
            out = step(out)
        return out

    # -- helpers -----------------------------------------------------------------------

    def negate(self, schema: Any) -> Any:
        legacy = self.dialect == "legacy"
        return negate(schema, self.resolve, legacy=legacy, draft7=self.dialect != "modern")

    def _conjuncts(self, schema: Any) -> Iterable[dict[str, Any]]:
        """``schema`` and what always applies with it: its ``allOf`` parts and
        ``$ref`` targets (recursively; a repeated reference once; before 2019-09 a
        reference's target instead of the schema that holds it)."""
        seen: set[str] = set()
        stack: list[tuple[Any, int]] = [(schema, 0)]
        while stack:
            node, level = stack.pop()
            if not isinstance(node, dict) or level > _MAX_DEPTH:
                continue
            ref = node.get("$ref")
            if isinstance(ref, str) and self.dialect != "modern":
                if ref not in seen:  # (draft 7 and earlier ignore a reference's siblings)
                    seen.add(ref)
                    stack.append((self.resolve(ref), level + 1))
                continue
            yield node
            if isinstance(ref, str) and ref not in seen:
                seen.add(ref)
                stack.append((self.resolve(ref), level + 1))
            parts = node.get("allOf")
            if isinstance(parts, list):
                stack.extend((part, level + 1) for part in reversed(parts))

    def _declared(self, schema: Any) -> tuple[list[str], list[str]]:
        """The names ``schema`` declares (``properties``, in order) and the names it
        requires without declaring, through its conjuncts."""
        declared: list[str] = []
        required: list[str] = []
        for node in self._conjuncts(schema):
            props = node.get("properties")
            if isinstance(props, dict):
                # (a name whose schema is false never appears: it has no place)
                declared += [
                    n for n, sub in props.items() if n not in declared and sub is not False
                ]
            names = node.get("required")
            if isinstance(names, list):
                required += [n for n in names if isinstance(n, str) and n not in required]
        return declared, [n for n in required if n not in declared]

    def _in_order(self, rest: dict[str, Any], branches: list[Any]) -> list[Any] | None:
        """``branches`` (alternatives beside ``rest``), each repeated for every order
        of the names it declares and ``rest`` does not (see the module docstring);
        None when a branch declares too many."""
        declared, required = self._declared(rest)
        known = set(declared)
        out: list[Any] = []
        for branch in branches:
            names, needs = self._declared(branch)
            new = [n for n in [*names, *needs] if n not in known and n not in required]
            new = list(dict.fromkeys(new))
            if not new:
                out.append(branch)
                continue
            if len(new) > _MAX_NEW_NAMES:
                return None
            for order in itertools.permutations(new):
                props = dict.fromkeys([*required, *order], True)
                out.append({"properties": props, "allOf": [branch]})
        return out

    def _touches(self, schema: Any, keywords: frozenset[str]) -> bool:
        """Whether ``schema`` may evaluate properties (items): ``keywords`` in it or in a
        subschema applied in place (``not`` excepted: its annotations are dropped).
        Each subschema is looked at once; past a bound of them, the answer is yes."""
        seen: set[int] = set()
        stack: list[Any] = [schema]
        while stack:
            node = stack.pop()
            if not isinstance(node, dict) or id(node) in seen:
                continue
            seen.add(id(node))
            if len(seen) > _MAX_SUBSCHEMAS:
                return True
            if not keywords.isdisjoint(node) or "$dynamicRef" in node:
                return True
            stack += [node[k] for k in ("if", "then", "else") if k in node]
            for key in _IN_PLACE_LIST:
                if isinstance(node.get(key), list):
                    stack += node[key]
            for key in ("dependentSchemas", "dependencies"):
                if isinstance(node.get(key), dict):
                    stack += [s for s in node[key].values() if isinstance(s, dict)]
            if isinstance(node.get("$ref"), str):
                stack.append(self.resolve(node["$ref"]))
        return False

    def _statically_evaluated(self, schema: dict[str, Any], keywords: frozenset[str]) -> bool:
        """No conditional applicator anywhere among the conjuncts evaluates more."""
        for node in self._conjuncts(schema):
            if "$dynamicRef" in node:
                return False
            for key in _CONDITIONAL:
                if key in node and self._touches({"allOf": _subs(key, node[key])}, keywords):
                    return False
        return True

    # -- unevaluatedProperties / unevaluatedItems ----------------------------------------

    def _unevaluated_properties(self, schema: dict[str, Any]) -> Any:
        if "unevaluatedProperties" not in schema:
            return schema
        extra = schema["unevaluatedProperties"]
        rest = {k: v for k, v in schema.items() if k != "unevaluatedProperties"}
        if extra is True or extra == {}:
            return rest
        if not self._statically_evaluated(rest, _PROPERTY_KEYWORDS):
            return schema
        names: list[str] = []
        patterns: list[str] = []
        for node in self._conjuncts(rest):
            if "additionalProperties" in node or "unevaluatedProperties" in node:
                return rest  # every property is evaluated
            names += [n for n in node.get("properties") or {} if n not in names]
            patterns += [p for p in node.get("patternProperties") or {} if p not in patterns]
        part: dict[str, Any] = {}
        if names:
            part["properties"] = dict.fromkeys(names, True)
        if patterns:
            part["patternProperties"] = dict.fromkeys(patterns, True)
        part["additionalProperties"] = extra
        return _with_part(rest, part)

    def _unevaluated_items(self, schema: dict[str, Any]) -> Any:
        if "unevaluatedItems" not in schema:
            return schema
        extra = schema["unevaluatedItems"]
        rest = {k: v for k, v in schema.items() if k != "unevaluatedItems"}
        if extra is True or extra == {}:
            return rest
        if not self._statically_evaluated(rest, _ITEM_KEYWORDS):
            return schema
        length = 0
        for node in self._conjuncts(rest):
            if "contains" in node or "additionalItems" in node:
                return schema  # (contains evaluates the items it matches)
            items = node.get("items")
            if isinstance(items, list):
                return schema  # (2019-09's array form)
            if "items" in node or "unevaluatedItems" in node:
                return rest  # every item is evaluated
            prefix = node.get("prefixItems")
            length = max(length, len(prefix) if isinstance(prefix, list) else 0)
        part: dict[str, Any] = {"prefixItems": [True] * length} if length else {}
        part["items"] = extra
        return _with_part(rest, part)

    # -- not, if/then/else, oneOf ------------------------------------------------------

    def _not(self, schema: dict[str, Any]) -> Any:
        if "not" not in schema:
            return schema
        negated = self.negate(schema["not"])
        if negated is None:
            return schema
        rest = {k: v for k, v in schema.items() if k != "not"}
        ordered = self._in_order(rest, _alternatives(negated))
        if ordered is None:
            return schema
        return _with_part(rest, ordered[0] if len(ordered) == 1 else {"anyOf": ordered})

    def _conditional(self, schema: dict[str, Any]) -> Any:
        if "if" not in schema:
            if "then" in schema or "else" in schema:  # (without if, they do nothing)
                return {k: v for k, v in schema.items() if k not in ("then", "else")}
            return schema
        condition = schema["if"]
        negated = self.negate(condition)
        if negated is None:
            return schema
        rest = {k: v for k, v in schema.items() if k not in ("if", "then", "else")}
        otherwise = schema.get("else", True)
        branches = [_all([condition, schema.get("then", True)])]
        branches += [_all([option, otherwise]) for option in _alternatives(negated)]
        ordered = self._in_order(rest, [b for b in branches if b is not False])
        if ordered is None:
            return schema
        return _with_part(rest, {"anyOf": ordered} if ordered else False)

    def _one_of(self, schema: dict[str, Any]) -> Any:
        options = schema.get("oneOf")
        if not isinstance(options, list) or len(options) != 2:
            return schema
        resolved = [self._target(option) for option in options]
        if disjoint(resolved):
            return schema  # the compiler's alternation is exact already
        negated = [self.negate(option) for option in options]
        if negated[0] is None or negated[1] is None:
            return schema
        rest = {k: v for k, v in schema.items() if k != "oneOf"}
        branches = [_all([options[0], other]) for other in _alternatives(negated[1])]
        branches += [_all([options[1], other]) for other in _alternatives(negated[0])]
        ordered = self._in_order(rest, [b for b in branches if b is not False])
        if ordered is None:
            return schema
        return _with_part(rest, {"anyOf": ordered} if ordered else False)

    def _target(self, schema: Any) -> Any:
        for _ in range(_MAX_DEPTH):
            if not (isinstance(schema, dict) and set(schema) - ANNOTATION_KEYWORDS == {"$ref"}):
                break
            schema = self.resolve(schema["$ref"])
        return schema

    # -- dependencies ------------------------------------------------------------------

    def _dependencies(self, schema: dict[str, Any]) -> Any:
        keywords = (
            ("dependentRequired", "dependentSchemas")
            if self.dialect == "modern"
            else ("dependencies",)
        )
        present = [k for k in keywords if k in schema]
        if not present:
            return schema
        rules: list[tuple[str, Any]] = []
        for keyword in present:
            value = schema[keyword]
            if not isinstance(value, dict):
                return schema
            for name, need in value.items():
                if isinstance(need, str):  # (draft 3: one name)
                    need = [need]
                if isinstance(need, list):
                    if need:
                        rules.append((name, {"required": list(need)}))
                elif need is not True and need != {}:
                    rules.append((name, need))
        rest = {k: v for k, v in schema.items() if k not in present}
        if len(rules) > _MAX_DEPENDENCIES:
            return schema
        parts: list[Any] = []
        combinations = 1
        for name, need in rules:
            absent = {"properties": {name: False}}
            if need is False:
                parts.append(absent)
                continue
            present_branch = {"type": "object", "required": [name], "allOf": [need]}
            ordered = self._in_order(rest, [absent, present_branch])
            combinations *= len(ordered or ())
            if ordered is None or combinations > _MAX_COMBINATIONS:
                return schema
            parts.append({"anyOf": ordered})
        out = rest
        for part in parts:
            out = _with_part(out, part)
        return out


def dialect_of(declared: str) -> str:
    """:attr:`Lowering.dialect` for a ``$schema`` value (unknown: ``"modern"``)."""
    for marker, name in (
        ("draft-07", "draft7"),
        ("draft-06", "draft6"),
        ("draft-04", "legacy"),
        ("draft-03", "legacy"),
    ):
        if marker in declared:
            return name
    return "modern"


def detach(piece: dict[str, Any], skip: Callable[[str], None]) -> dict[str, Any]:
    """A piece of a schema that the compiler splits off (the siblings of a ``$ref``,
    what an ``anyOf`` leaves), without the keywords that would read differently in
    it alone: ``unevaluated*`` (left where :meth:`Lowering.lower` could not rewrite
    them), each reported through ``skip(keyword)``."""
    if all(key not in piece for key in CONTEXTUAL):
        return piece
    for key in CONTEXTUAL:
        if key in piece:
            skip(key)
    return {k: v for k, v in piece.items() if k not in CONTEXTUAL}


def _subs(key: str, value: Any) -> list[Any]:
    """The subschemas of applicator ``key`` (one of ``_CONDITIONAL``)."""
    if key in ("anyOf", "oneOf"):
        return list(value) if isinstance(value, list) else []
    if key in ("dependentSchemas", "dependencies"):
        return (
            [v for v in value.values() if isinstance(v, (dict, bool))]
            if isinstance(value, dict)
            else []
        )
    return [value]


def _alternatives(schema: Any) -> list[Any]:
    """The branches of an ``anyOf`` that is all ``schema`` says, else ``[schema]``."""
    if isinstance(schema, dict) and set(schema) == {"anyOf"}:
        return list(schema["anyOf"])
    return [schema]


def _all(parts: list[Any]) -> Any:
    kept = [p for p in parts if p is not True and p != {}]
    if any(p is False for p in kept):
        return False
    if not kept:
        return True
    return kept[0] if len(kept) == 1 else {"allOf": kept}


def _with_part(schema: Any, part: Any) -> Any:
    """``schema`` with one more ``allOf`` part (``False`` when either is)."""
    if schema is False or part is False:
        return False
    if part is True or part == {}:
        return schema
    parts = schema.get("allOf")
    return {**schema, "allOf": [*(parts if isinstance(parts, list) else []), part]}
