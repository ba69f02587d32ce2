"""JSON Schema → :class:`~jsonmode.decoding.ir.Grammar`.

Every schema node becomes an expression: strings and numbers as lexeme rules of their
own (shared across properties and, through process-wide caches, across schemas),
literals inline, objects and arrays as rules of their own, ``$ref`` targets as named
rules (so recursion works). What the grammar cannot enforce exactly is
recorded, by schema location, in ``unenforced`` — the façade post-validates
those — and ``strict=True`` turns any such entry into an error.

Keyword policy (see ARCHITECTURE.md): enforced at decode time: ``type``, ``enum``,
``const``, ``properties``, ``required``, ``additionalProperties``,
``patternProperties`` (disjoint from the declared names), ``items``,
``prefixItems``, ``minItems``/``maxItems``, ``minLength``/``maxLength``,
``pattern``, ``format`` (where exact), integer bounds, number bounds (see
:mod:`~jsonmode.decoding.compile.numbers`), ``anyOf``, ``oneOf``
(disjoint branches), ``allOf`` (merged, see :mod:`~jsonmode.decoding.compile.merging`),
``$ref``/``$defs``/``$anchor``/``$id``-relative references and ``$dynamicRef`` (all
resolved inside the document: :func:`~jsonmode.schema.refs.resolve_references`,
:mod:`~jsonmode.decoding.compile.scope`), ``propertyNames``, ``contains`` (see
:mod:`~jsonmode.decoding.compile.containers`), and where the rewrite is exact ``not``,
``if``/``then``/``else``, ``dependentRequired``/``dependentSchemas``,
``unevaluatedProperties``/``unevaluatedItems`` (see
:mod:`~jsonmode.decoding.compile.lowering`). Everything else is listed in ``unenforced``.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import jsonschema

from jsonmode import regex as rx
from jsonmode.budget import checkpoint
from jsonmode.decoding.automata.families import LATTICE_MEMBERS
from jsonmode.decoding.compile import containers, inlining
from jsonmode.decoding.compile.containers import any_exprs as _any_exprs
from jsonmode.decoding.compile.containers import count as _count
from jsonmode.decoding.compile.format_patterns import FORMAT_EXACTNESS, format_dfa
from jsonmode.decoding.compile.lowering import Lowering, detach, dialect_of
from jsonmode.decoding.compile.merging import ANNOTATION_KEYWORDS as _ANNOTATIONS
from jsonmode.decoding.compile.merging import disjoint as _disjoint
from jsonmode.decoding.compile.merging import merge as _merge
from jsonmode.decoding.compile.numbers import Bounds, integer_range, number_dfa
from jsonmode.decoding.compile.scope import MARKER, DynamicScope
from jsonmode.decoding.ir import (
    EMPTY,
    Alt,
    Call,
    Expr,
    Grammar,
    Lex,
    Lit,
    Members,
    Rep,
    alt,
    expr_bytes,
    seq,
)
from jsonmode.decoding.options import CompileOptions
from jsonmode.errors import (
    BudgetExceededError,
    InvalidSchemaError,
    UnsupportedSchemaError,
)
from jsonmode.lru import Lru, memoised
from jsonmode.schema.core import UNDECIDED
from jsonmode.schema.patterns import pattern_dfa
from jsonmode.schema.pointer import MISSING, resolve_local_ref
from jsonmode.schema.refs import Resolved, resolve_references

__all__ = ["CompileOptions", "build_grammar"]

NEVER: Expr = Alt(())
# Scalar lexemes by label, shared by every compile in the process (see _Builder.lexeme):
# the expression and the keywords it could not enforce, as (keyword, reason).
_LEXEMES: Lru[str, tuple[Expr, tuple[tuple[str, str], ...]]] = Lru(64 << 20)
_KNOWN_METASCHEMA = re.compile(
    r"^https?://json-schema\.org/(?:draft-0[3-7]/schema|draft/20(?:19-09|20-12)/schema)#?$"
)
_NOT_NAME = re.compile(r"[^A-Za-z0-9_]+")
_ANY_SPELLING = "any spelling: "  # (label prefix, see _spelled)
# Formats jsonschema's checker asserts (what post-validation enforces).
_CHECKED_FORMATS = frozenset(jsonschema.Draft202012Validator.FORMAT_CHECKER.checkers)
JSON_TYPES = ("null", "boolean", "object", "array", "number", "string")
# The keywords the compiler reads (the others, annotations aside, are listed in
# ``unenforced``); drafts 4 to 7 also have ``additionalItems``.
# fmt: off
_HANDLED = frozenset({
    "type", "enum", "const", "properties", "required", "additionalProperties",
    "patternProperties", "items", "prefixItems", "minItems", "maxItems", "minLength",
    "maxLength", "pattern", "format", "minimum", "maximum", "exclusiveMinimum",
    "exclusiveMaximum", "anyOf", "oneOf", "allOf", "$ref", "$dynamicRef", "propertyNames",
    "minProperties", "maxProperties", "contains", "minContains", "maxContains",
})
# fmt: on
_HANDLED_DRAFT7 = _HANDLED | {"additionalItems"}
_NUMBER = r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?"


@functools.lru_cache(maxsize=4096)
def _rule_name(hint: str) -> str:
    """A rule name made of ``hint`` (letters, digits and ``_`` only)."""
    return _NOT_NAME.sub("_", hint).strip("_") or "rule"


def _lex(label: str, dfa: rx.CharDFA) -> Lex:
    return Lex(label, rx.utf8_byte_dfa(dfa))


def _string_lex(
    label: str,
    dfa: rx.CharDFA,
    lengths: tuple[int, int | None] | None = None,
    *,
    complete: bool = False,
) -> Expr:
    """A quoted JSON string whose decoded value ``dfa`` accepts, spelled canonically or
    (``complete``) in any way (``lengths``: ``dfa`` is exactly
    :func:`~jsonmode.regex.glushkov.any_char_dfa` of those bounds)."""
    body = rx.json_string_body_dfa(dfa, complete=complete)
    return seq(Lit(b'"'), Lex(_spelled(label, complete), body, lengths), Lit(b'"'))


def _spelled(label: str, complete: bool) -> str:
    """A lexeme's label in the given spelling: lexemes compare (and are cached) by
    label, so a language that differs with the spelling needs a label that does."""
    return f"{_ANY_SPELLING}{label}" if complete else label


@dataclass
class _Builder:
    root: Any
    options: CompileOptions
    draft7: bool
    legacy_integers: bool
    validator_for: Callable[[Any], Any]
    rules: dict[str, Expr] = field(default_factory=dict)
    unenforced: list[str] = field(default_factory=list)
    ref_rules: dict[str, str] = field(default_factory=dict)
    # References whose targets are being inlined (by allOf, anyOf, oneOf), and the
    # rules made where one of them comes back (recursion), by their schema's text.
    inlining: set[str] = field(default_factory=set)
    merged_rules: dict[str, str] = field(default_factory=dict)
    depth: int = 0  # value() calls under way
    # The dynamic scope ($dynamicRef) and the keyword rewrites (not, if, ...).
    scope: DynamicScope = field(default_factory=lambda: DynamicScope(Resolved(None)))
    lowering: Lowering = field(default_factory=lambda: Lowering(None, "modern"))
    visits: int = 0  # value() calls made (every 8th checks the deadline)
    _lexes: dict[str, Expr] = field(default_factory=dict)

    @property
    def complete(self) -> bool:
        """Whether every JSON spelling is allowed (``CompileOptions.spelling``)."""
        return self.options.spelling == "complete"

    # -- bookkeeping -----------------------------------------------------------------

    def skip(self, path: str, keyword: str) -> None:
        location = f"{path}/{keyword}"
        if self.options.strict:
            raise UnsupportedSchemaError(
                f"{keyword!r} cannot be enforced while decoding", schema_path=location
            )
        if location not in self.unenforced:
            self.unenforced.append(location)

    def rule(self, hint: str, build: Callable[[str], Expr]) -> Call:
        name = _rule_name(hint)
        base, counter = name, 1
        while name in self.rules:
            counter += 1
            name = f"{base}_{counter}"
        self.rules[name] = NEVER  # reserve the name (recursion may call it)
        self.rules[name] = build(name)
        return Call(name)

    def cached_lex(self, label: str, make: Callable[[], Expr]) -> Expr:
        """One expression per label: equal lexemes are built (and determinised) once."""
        if label not in self._lexes:
            self._lexes[label] = make()
        return self._lexes[label]

    def lexeme(self, label: str, make: containers.LexemeMaker, path: str) -> Expr:
        """A scalar value (string, number) as a rule of its own, one per label.

        Keeping scalars out of their parents keeps structural rules small (a string
        with ``maxLength`` is many states once, not once per property or item), and
        lets the mask engine share one vocabulary walk per lexeme across properties
        and schemas. ``label`` determines the lexeme completely, so its expression is
        built once per process (:data:`_LEXEMES`). ``make`` also returns the keywords
        it had to drop (an unsupported regex, a budget): they go to ``unenforced``, or
        raise under ``strict``.
        """
        if label not in self._lexes:
            built = _LEXEMES.get(label)
            if built is None:
                built = make()
                _LEXEMES.put(label, built, expr_bytes(built[0]))
            expr, dropped = built
            for keyword, message in dropped:
                if self.options.strict:
                    raise UnsupportedSchemaError(message, schema_path=f"{path}/{keyword}")
                self.skip(path, keyword)
            self._lexes[label] = self.rule(label, lambda name: expr)
        return self._lexes[label]

    # -- whitespace and separators -------------------------------------------------------

    @property
    def ws(self) -> Expr:
        if self.options.whitespace == "standard":
            return EMPTY
        return self.cached_lex(
            "ws",
            lambda: Rep(Lex("ws1", _ws_byte_dfa()), 0, self.options.max_whitespace),
        )

    def sep(self, char: bytes) -> Expr:
        """``,`` or ``:`` with the whitespace the policy allows around it."""
        if self.options.whitespace == "standard":
            return _standard_sep(char)
        return seq(self.ws, Lit(char), self.ws)

    # -- values ------------------------------------------------------------------------

    def value(self, schema: Any, path: str) -> Expr:
        """The expression for ``schema`` at ``path``.

        Raises:
            BudgetExceededError: subschemas nest deeper than ``_MAX_SCHEMA_DEPTH``
                (a schema that inlines itself without end would, too).
        """
        if self.depth >= _MAX_SCHEMA_DEPTH:
            raise BudgetExceededError(
                "schema nesting depth",
                _MAX_SCHEMA_DEPTH,
                hint="this bound is fixed: flatten the schema with $defs and $ref",
            )
        self.visits += 1
        if not self.visits & 7:
            checkpoint()
        self.depth += 1
        try:
            if not self.scope.names:  # (no dynamic references: the scope never changes)
                return self._value(schema, path)
            node = schema if isinstance(schema, dict) else {}
            with self.scope.using(node.get(MARKER)), self.scope.entering(node.get("$id")):
                return self._value(schema, path)
        finally:
            self.depth -= 1

    def _value(self, schema: Any, path: str) -> Expr:
        if schema is True or schema == {}:
            return self.any_value()
        if schema is False:
            return NEVER
        if not isinstance(schema, dict):
            raise InvalidSchemaError(f"not a schema: {schema!r}", schema_path=path)
        schema = self.lowering.lower(schema)
        if schema is False:
            return NEVER
        if "$ref" in schema or "$dynamicRef" in schema:
            return self.reference(schema, path)
        handled = _HANDLED_DRAFT7 if self.draft7 else _HANDLED
        for keyword in sorted(set(schema) - handled - _ANNOTATIONS):
            self.skip(path, keyword)
        if "allOf" in schema:
            refs = _references(schema["allOf"])
            if refs & self.inlining:
                return self.merged_rule(schema, path)
            return self.inline(refs, lambda: self.all_of(schema, path))
        for keyword in ("anyOf", "oneOf"):
            if keyword in schema:
                return self.branches(schema, keyword, path)
        if "enum" in schema or "const" in schema:
            return self.constants(schema, path)
        return self.typed(schema, path)

    def reference(self, schema: dict[str, Any], path: str) -> Expr:
        keyword, ref = self.scope.target(schema)
        siblings = {k: v for k, v in schema.items() if k != keyword and k not in _ANNOTATIONS}
        target = resolve_local_ref(self.root, ref) if isinstance(ref, str) else MISSING
        if target is MISSING:
            raise UnsupportedSchemaError(
                f"reference {ref!r} is not a local pointer", schema_path=path
            )
        if siblings and not self.draft7:
            siblings = detach(siblings, functools.partial(self.skip, path))
            parts = [{keyword: schema[keyword]}, siblings]
            if keyword == "$dynamicRef":
                parts.reverse()  # (its target's properties are not declared ones)
            return self.value({"allOf": parts}, path)
        uri = self.scope.resource(ref)

        def build() -> Expr:
            with self.scope.entering(uri):
                return self.value(target, ref[1:] or "/")

        # One rule per target and dynamic scope (see jsonmode.decoding.compile.scope).
        key = f"{ref} {self.scope.signature(uri)}" if self.scope.active else ref
        return self.rule_once(self.ref_rules, key, "ref_" + ref.rsplit("/", 1)[-1], build)

    def rule_once(
        self, rules: dict[str, str], key: str, hint: str, build: Callable[[], Expr]
    ) -> Call:
        """The rule ``rules[key]`` names, made by ``build()`` on first use; ``build``
        may come back to the same key (recursion): it is named before it runs."""
        if key not in rules:

            def body(name: str) -> Expr:
                rules[key] = name
                return build()

            self.rule(hint, body)
        return Call(rules[key])

    def inline(self, refs: set[str], build: Callable[[], Expr]) -> Expr:
        """``build()`` with ``refs`` marked as being inlined (see :meth:`merged_rule`)."""
        added = refs - self.inlining
        self.inlining |= added
        try:
            return build()
        finally:
            self.inlining -= added

    def all_of(self, schema: dict[str, Any], path: str) -> Expr:
        merged = self.merge_all(schema, path)
        if "allOf" not in merged:
            return self.value(merged, path)
        # anyOf/oneOf that do not merge with each other stay in an allOf: the branches
        # of one take the rest in, the allOf with them (one level each).
        keyword = next((k for k in ("anyOf", "oneOf") if k in merged), None)
        if keyword is None:  # pragma: no cover - _merge leaves an allOf only beside those
            raise UnsupportedSchemaError("allOf that does not merge", schema_path=path)
        return self.branches(merged, keyword, path)

    def merged_rule(self, schema: dict[str, Any], path: str) -> Call:
        """An allOf that inlines a reference already being inlined further up, as a
        rule of its own, one per distinct schema text: inlining it again would go on
        without end, where a rule is called again (as for ``$ref`` itself)."""
        key = json.dumps(schema, sort_keys=True, default=repr) + self.scope.signature()
        build = functools.partial(self.all_of, schema, path)
        return self.rule_once(self.merged_rules, key, f"all{path}", build)

    def any_value(self) -> Expr:
        if "any" not in self.rules:
            self.rule("any", lambda name: self._any_body())
        return Call("any")

    def _any_body(self) -> Expr:
        string = self.string_expr({}, "")
        for name in ("any_object", "any_array"):  # their place in the rule order
            self.rules[name] = NEVER
        number = self.number_expr({}, "", integer=False)
        obj, arr, body = _any_exprs(self.ws, self.sep(b":"), self.sep(b","), string, number)
        self.rules["any_object"] = obj
        self.rules["any_array"] = arr
        return body

    # -- combinators ---------------------------------------------------------------------

    def merge_all(self, schema: dict[str, Any], path: str) -> dict[str, Any]:
        return inlining.merge_all(self, schema, path)

    def resolve(self, schema: Any, path: str) -> Any:
        return inlining.resolve(self, schema, path)

    def branches(self, schema: dict[str, Any], keyword: str, path: str) -> Expr:
        # (The other of anyOf/oneOf, if any, stays in ``rest``: each branch takes it in.)
        rest = {k: v for k, v in schema.items() if k != keyword}
        rest = detach(rest, functools.partial(self.skip, path))
        options = schema[keyword]
        exprs: list[Expr] = []
        for index, option in enumerate(options):
            where = f"{path}/{keyword}/{index}"
            refs = _references([option])
            if refs & self.inlining:  # recursion through an inlined reference
                exprs.append(self.merged_rule({"allOf": [option, rest]}, where))
                continue
            branch = self.resolve(option, where)
            if branch is False:
                continue

            def unmerged(key: str, where: str = where) -> None:
                self.skip(where, key)

            combined = _merge(rest, branch if branch is not True else {}, unmerged)
            exprs.append(self.inline(refs, functools.partial(self.value, combined, where)))
        if keyword == "oneOf" and not _disjoint([self.resolve(o, path) for o in options]):
            self.skip(path, "oneOf")
        return alt(*exprs) if exprs else NEVER

    def constants(self, schema: dict[str, Any], path: str) -> Expr:
        values = [schema["const"]] if "const" in schema else list(schema["enum"])
        rest = {k: v for k, v in schema.items() if k not in ("enum", "const")}
        validator = self.validator_for(rest)
        kept = []
        for count, value in enumerate(values):
            if not count & 255:
                checkpoint()
            try:
                if validator.is_valid(value):
                    kept.append(value)
            except UNDECIDED:
                continue  # never generate a value whose check cannot be decided
        return alt(*(self.literal(value) for value in kept)) if kept else NEVER

    def literal(self, value: Any) -> Expr:
        """A JSON value written any way json.dumps may write it (whitespace per policy).

        Raises:
            BudgetExceededError: a string longer than ``max_rule_states`` characters
                (reading it takes a state per character): refused before its
                automaton is built.
        """
        if isinstance(value, str):
            if len(value) > self.options.max_rule_states:
                raise BudgetExceededError("states per rule", self.options.max_rule_states)
            if value.isascii() and value.isprintable() and '"' not in value and "\\" not in value:
                # (What json.dumps writes of printable ASCII without a quote or a
                # backslash, in either spelling: keys stay literals even when complete.)
                return Lit(b'"' + value.encode() + b'"')
            if not self.complete:
                # The one spelling json.dumps writes: keys and constants are then forced.
                try:
                    return Lit(json.dumps(value, ensure_ascii=False).encode())
                except UnicodeEncodeError:  # a lone surrogate: no UTF-8 spells it
                    return NEVER
            return _const_string(value)
        if isinstance(value, bool) or value is None:
            return Lit(json.dumps(value).encode())
        if isinstance(value, int) or (isinstance(value, float) and value.is_integer()):
            # 3, 3.0 and 3.00 are the same JSON Schema value (written 3 canonically).
            # An int is written from its own digits: one beyond the double range
            # (10**400, a valid JSON integer) has no float to go through.
            digits = str(int(value))
            if not self.complete:
                return Lit(digits.encode())
            label = _spelled(f"const:{digits}", True)
            return self.cached_lex(
                label,
                lambda: _lex(label, rx.compile_pattern(f"^{re.escape(digits)}(?:\\.0+)?$")),
            )
        if isinstance(value, float):
            return Lit(json.dumps(value).encode())
        checkpoint()  # (a large array or object constant is many calls)
        if isinstance(value, list):
            if not value:
                return seq(Lit(b"["), self.ws, Lit(b"]"))
            parts: list[Expr] = [Lit(b"["), self.ws]
            for index, item in enumerate(value):
                if index:
                    parts.append(self.sep(b","))
                parts.append(self.literal(item))
            return seq(*parts, self.ws, Lit(b"]"))
        if not value:
            return seq(Lit(b"{"), self.ws, Lit(b"}"))
        # An object constant equals the same members in any order (past a few
        # members, any order costs a rule per set written: see decoding.families).
        pairs = tuple(
            (seq(self.literal(key), self.sep(b":"), self.literal(item)), True)
            for key, item in value.items()
        )
        body = Members(pairs, None, self.sep(b","), any_order=len(pairs) <= LATTICE_MEMBERS)
        return seq(Lit(b"{"), self.ws, body, self.ws, Lit(b"}"))

    # -- types ---------------------------------------------------------------------------

    def typed(self, schema: dict[str, Any], path: str) -> Expr:
        declared = schema.get("type")
        if declared is None:
            types: list[str] = list(JSON_TYPES)
        elif isinstance(declared, str):
            types = [declared]
        else:
            types = list(declared)
        exprs: list[Expr] = []
        if "integer" in types and "number" in types:
            types.remove("integer")
        for kind in types:
            if kind == "null":
                exprs.append(Lit(b"null"))
            elif kind == "boolean":
                exprs.append(alt(Lit(b"true"), Lit(b"false")))
            elif kind == "string":
                exprs.append(self.string_expr(schema, path))
            elif kind in ("number", "integer"):
                exprs.append(self.number_expr(schema, path, integer=kind == "integer"))
            elif kind == "object":
                exprs.append(self.rule(f"obj{path}", lambda name: self.object_body(schema, path)))
            elif kind == "array":
                exprs.append(self.rule(f"arr{path}", lambda name: self.array_body(schema, path)))
            else:
                raise InvalidSchemaError(f"unknown type {kind!r}", schema_path=f"{path}/type")
        return alt(*exprs) if exprs else NEVER

    def string_expr(self, schema: dict[str, Any], path: str) -> Expr:
        low = _count(schema.get("minLength", 0))
        high = _count(schema.get("maxLength"))
        pattern = schema.get("pattern")
        fmt = schema.get("format")
        if high is not None and high > self.options.max_repeat:
            self.skip(path, "maxLength")
            high = None
        if low > self.options.max_repeat:
            self.skip(path, "minLength")
            low = 0
        known = format_dfa(fmt) if isinstance(fmt, str) else None
        if (
            isinstance(fmt, str)
            and fmt in _CHECKED_FORMATS
            and FORMAT_EXACTNESS.get(fmt) != "exact"
        ):
            # Post-validation checks it; decoding only approximates (or ignores) it.
            self.skip(path, "format")
        parts: list[tuple[str, str, Callable[[], rx.CharDFA]]] = []
        if isinstance(pattern, str):
            parts.append(("pattern", f" pattern:{pattern}", lambda: pattern_dfa(pattern)))
        if known is not None:
            parts.append(("format", f" format:{fmt}", lambda: known))
        complete = self.options.spelling == "complete"
        label = f"string{_bounds(low or None, high)}" + "".join(text for _, text, _ in parts)
        label = _spelled(label, complete)

        def make() -> tuple[Expr, tuple[tuple[str, str], ...]]:
            # The shape (pattern, format) first, then the length bounds: when both
            # together exceed a budget, the shape matters more while decoding and the
            # lengths are left to post-validation.
            shape: rx.CharDFA | None = None
            name = ""
            dropped: list[tuple[str, str]] = []
            for keyword, text, build in parts:
                try:
                    shape = build() if shape is None else rx.intersect(shape, build())
                    name += text
                except BudgetExceededError:
                    raise  # the compile's deadline: not this keyword's fault
                except UnsupportedSchemaError as exc:
                    dropped.append((keyword, str(exc)))
            if low == 0 and high is None:
                dfa = shape if shape is not None else rx.any_char_dfa(0, None)
                return _string_lex(f"string{name}", dfa, complete=complete), tuple(dropped)
            try:
                lengths = rx.any_char_dfa(low, high)
                if shape is None:
                    name = f"string{_bounds(low or None, high)}"
                    expr = _string_lex(name, lengths, (low, high), complete=complete)
                    return expr, tuple(dropped)
                dfa = rx.intersect(lengths, shape)
                name = f"string{_bounds(low or None, high)}{name}"
            except BudgetExceededError:
                raise
            except UnsupportedSchemaError as exc:
                dfa = shape if shape is not None else rx.any_char_dfa(0, None)
                name = f"string{name}"
                if low:
                    dropped.append(("minLength", str(exc)))
                if high is not None:
                    dropped.append(("maxLength", str(exc)))
            return _string_lex(name, dfa, complete=complete), tuple(dropped)

        return self.lexeme(label, make, path)

    def number_expr(self, schema: dict[str, Any], path: str, *, integer: bool) -> Expr:
        keywords = [
            k for k in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum") if k in schema
        ]
        if "multipleOf" in schema:
            self.skip(path, "multipleOf")
        bounds = Bounds.of(schema, legacy=self.legacy_integers)
        if not integer:
            if bounds.unbounded:
                return self.lexeme("number", _generic_number, path)
            label = f"number{bounds.label()}"

            def make_number() -> tuple[Expr, tuple[tuple[str, str], ...]]:
                dfa = number_dfa(bounds)
                if dfa is None:
                    reason = "a bound within exponent notation's range is not enforced exactly"
                    expr, _ = _generic_number()
                    return expr, tuple((keyword, reason) for keyword in keywords)
                return _lex(label, dfa), ()

            return self.lexeme(label, make_number, path)
        low, high = integer_range(bounds)
        if low is not None and high is not None and low > high:
            return NEVER
        label = f"integer{_bounds(low, high)}"
        # An integral float ("3.0") is an integer for JSON Schema since draft 6
        # (drafts 3 and 4 say it is not); only the complete spelling writes one.
        fraction = "(?:\\.0+)?" if self.complete and not self.legacy_integers else ""
        if self.legacy_integers:
            label += " draft4"
        elif self.complete:
            label = _spelled(label, True)

        def make() -> tuple[Expr, tuple[tuple[str, str], ...]]:
            digits = rx.integer_range_pattern(low, high)
            return _lex(label, rx.compile_pattern(f"^(?:{digits}){fraction}$")), ()

        return self.lexeme(label, make, path)

    # -- objects and arrays (jsonmode.decoding.compile.containers) ----------------------------

    @property
    def spelling(self) -> containers.Spelling:
        # How keys are spelled, with this module's lexeme writers.
        return containers.Spelling(self.complete, _string_lex, _spelled)

    def object_body(self, schema: dict[str, Any], path: str) -> Expr:
        return containers.object_body(self, schema, path)

    def array_body(self, schema: dict[str, Any], path: str) -> Expr:
        return containers.array_body(self, schema, path)


@functools.lru_cache(maxsize=16)
def _standard_sep(char: bytes) -> Expr:
    """``char`` and one optional space (the standard whitespace policy)."""
    return seq(Lit(char), Rep(Lit(b" "), 0, 1))


@memoised(32 << 20, expr_bytes)
def _const_string(value: str) -> Expr:
    """A string constant written any way JSON may escape it (cached per process, 32 MiB
    of automata: a long constant's is megabytes)."""
    return _string_lex(f"const:{json.dumps(value)}", rx.literal_dfa([value]), complete=True)


def _generic_number() -> tuple[Expr, tuple[tuple[str, str], ...]]:
    return _lex("number", rx.compile_pattern(f"^{_NUMBER}$")), ()


def _ws_byte_dfa() -> rx.ByteDFA:
    return rx.utf8_byte_dfa(rx.compile_pattern("^[ \\t\\n\\r]$"))


def _bounds(low: int | None, high: int | None) -> str:
    """The bounds part of a lexeme label. Labels key the lexeme cache, so every
    distinct bound must print distinctly (0 is a bound, None is none)."""
    if low is None and high is None:
        return ""
    return f"[{'' if low is None else low},{'' if high is None else high}]"


def _references(parts: Sequence[Any]) -> set[str]:
    """The references that ``parts`` (allOf's or anyOf's subschemas) are."""
    return {
        p[k]
        for p in parts
        if isinstance(p, dict)
        for k in ("$ref", "$dynamicRef")
        if isinstance(p.get(k), str)
    }


# Subschemas nested deeper than this (allOf/anyOf and references count) are refused:
# no JSON document the matcher can finish nests that deep (max_nesting_depth), and it
# keeps the builder's recursion well inside Python's limit.
_MAX_SCHEMA_DEPTH = 96


def build_grammar(
    schema: Any, options: CompileOptions, validator_for: Callable[[Any], Any]
) -> tuple[Grammar, tuple[str, ...]]:
    """The grammar for ``schema`` and the schema locations it does not enforce exactly.

    ``validator_for(subschema)`` returns a jsonschema validator (with the root's
    references) used to filter ``enum`` values by the node's other keywords.
    """
    declared = str(schema.get("$schema", "")) if isinstance(schema, dict) else ""
    draft7 = "draft-07" in declared or "draft-06" in declared
    legacy = "draft-04" in declared or "draft-03" in declared
    resolved = resolve_references(schema)
    builder = _Builder(resolved.document, options, draft7 or legacy, legacy, validator_for)
    builder.scope = DynamicScope(resolved)
    builder.lowering = Lowering(resolved.document, dialect_of(declared))
    if declared and not _KNOWN_METASCHEMA.match(declared):
        # A custom metaschema may switch vocabularies off: decoding applies the
        # standard ones, so whether they hold is left to post-validation.
        builder.skip("", "$schema")
    # One leading space is allowed: SentencePiece tokenizers spell the first token
    # of a reply with it ("▁{"), and refusing it would force a less likely token.
    lead = Rep(Lit(b" "), 0, 1) if options.whitespace == "standard" else builder.ws
    builder.rule("root", lambda name: seq(lead, builder.value(builder.root, "")))
    grammar = Grammar("root", dict(builder.rules))
    return grammar, tuple(builder.unenforced)
