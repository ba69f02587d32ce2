"""Objects and arrays: the grammar of an object's members and of an array's items.

Moved out of :mod:`~jsonmode.decoding.compile.compiler`, whose builder (a
:class:`SchemaBuilder`) calls these with itself; they read the builder's options and
call back into it for subschemas.

Objects enforce ``properties``, ``required``, ``additionalProperties`` and
``patternProperties`` (extra keys per pattern, where patterns' keys do not overlap; a
declared name also takes the schemas of the patterns it matches, though
``patternProperties`` stays listed as unenforced there, as before), and also

- ``propertyNames`` whose schema is a string language (``type``, ``minLength``,
  ``maxLength``, ``pattern``, ``enum``/``const``): declared names outside it are
  refused, and the extra keys' automata are intersected with it;
- ``minProperties`` / ``maxProperties`` where counting is not needed: ``maxProperties:
  0`` (no member), or bounds every object the rest allows already meets (extra keys
  may repeat in a document, so the decoder never counts them).

A name that ``required`` lists but ``properties`` does not declare is written after
the declared ones and takes what an undeclared name gets (its patterns, else
``additionalProperties``).

Arrays enforce ``prefixItems``, ``items``, ``minItems``/``maxItems``, and ``contains``
with ``minContains``/``maxContains`` where there is no ``prefixItems`` and no item
count bound: at least (at most) so many items satisfy ``items`` and ``contains``,
the others ``items`` (with ``maxContains``: ``items`` and not ``contains``, which
needs :func:`~jsonmode.decoding.compile.negation.negate`). Exactly as the matcher counts:
every item is one of the two kinds, so the count is the number of the first kind.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from jsonmode import regex as rx
from jsonmode.decoding.automata.keys import extra_key_body
from jsonmode.decoding.compile.merging import ANNOTATION_KEYWORDS, conjunction
from jsonmode.decoding.ir import (
    EMPTY,
    Alt,
    Call,
    Expr,
    Lex,
    Lit,
    Members,
    Rep,
    alt,
    expr_bytes,
    seq,
)
from jsonmode.errors import BudgetExceededError, UnsupportedSchemaError
from jsonmode.lru import memoised
from jsonmode.schema.patterns import PatternUndecidedError, pattern_dfa
from jsonmode.schema.patterns import search as search_pattern

if TYPE_CHECKING:
    from jsonmode.decoding.compile.lowering import Lowering
    from jsonmode.decoding.compile.scope import DynamicScope
    from jsonmode.decoding.options import CompileOptions

__all__ = [
    "LexemeMaker",
    "SchemaBuilder",
    "Spelling",
    "any_exprs",
    "array_body",
    "count",
    "escape",
    "object_body",
]

#: What makes a scalar lexeme: its expression, and the keywords it could not enforce
#: as ``(keyword, reason)``.
LexemeMaker = Callable[[], tuple[Expr, tuple[tuple[str, str], ...]]]


class SchemaBuilder(Protocol):
    """What the object, array and inlining code needs of the schema compiler's builder
    (:mod:`~jsonmode.decoding.compile.compiler` implements it and passes itself): its options
    and state, and the writers of values, lexemes, rules and separators. One builder
    per compile: not thread-safe."""

    root: Any
    options: CompileOptions
    draft7: bool
    scope: DynamicScope
    lowering: Lowering

    @property
    def validator_for(self) -> Callable[[Any], Any]: ...

    @property
    def ws(self) -> Expr: ...

    @property
    def spelling(self) -> Spelling: ...

    def skip(self, path: str, keyword: str) -> None: ...

    def rule(self, hint: str, build: Callable[[str], Expr]) -> Call: ...

    def lexeme(self, label: str, make: LexemeMaker, path: str) -> Expr: ...

    def sep(self, char: bytes) -> Expr: ...

    def value(self, schema: Any, path: str) -> Expr: ...

    def literal(self, value: Any) -> Expr: ...


NEVER: Expr = Alt(())
# Optional prefixItems positions written out exactly (each nests the rest a level
# deeper in the expression, and the automaton builder recurses on that depth).
_MAX_OPTIONAL_PREFIX = 128
_MAX_CONTAINS = 32  # minContains/maxContains written out (each nests a level deeper)
_NAME_KEYWORDS = frozenset({"type", "minLength", "maxLength", "pattern", "enum", "const"})


def count(value: Any) -> Any:
    """A length/count keyword as an int (JSON Schema allows 2.0 for 2); None stays None."""
    return None if value is None else int(value)


def escape(name: str) -> str:
    """``name`` as one JSON pointer segment."""
    return name.replace("~", "~0").replace("/", "~1")


def _matches(pattern: str, name: str) -> bool | None:
    """Whether ``pattern`` matches ``name`` (None: no verdict within the budget)."""
    try:
        return isinstance(pattern, str) and search_pattern(pattern, name)
    except PatternUndecidedError:
        return None


@functools.lru_cache(maxsize=16)
def any_exprs(
    ws: Expr, colon: Expr, comma: Expr, string: Expr, number: Expr
) -> tuple[Expr, Expr, Expr]:
    """The unconstrained JSON value's rules: ``any_object``, ``any_array`` and ``any``
    (calling those two by name), given the whitespace, separators and the string and
    number lexemes (cached: every schema with a free-form value needs them)."""
    member = seq(string, colon, Call("any"))
    obj = seq(
        Lit(b"{"),
        ws,
        Rep(seq(member, Rep(seq(comma, member), 0, None)), 0, 1),
        ws,
        Lit(b"}"),
    )
    items = seq(Call("any"), Rep(seq(comma, Call("any")), 0, None))
    arr = seq(Lit(b"["), ws, Rep(items, 0, 1), ws, Lit(b"]"))
    body = alt(
        Call("any_object"),
        Call("any_array"),
        string,
        number,
        Lit(b"true"),
        Lit(b"false"),
        Lit(b"null"),
    )
    return obj, arr, body


# -- objects ---------------------------------------------------------------------------


def _names_language(b: SchemaBuilder, names: Any) -> tuple[Any, rx.CharDFA | None] | None:
    """``propertyNames`` as (a validator of one name, the names' automaton or None for
    every string), or None where the decoder cannot read it exactly."""
    if names is True or names == {}:
        return None
    if names is False:
        return b.validator_for(False), rx.literal_dfa([])
    if not isinstance(names, dict):
        return None
    keywords = set(names) - ANNOTATION_KEYWORDS
    if not keywords <= _NAME_KEYWORDS:
        return None
    declared = names.get("type", "string")
    kinds = {declared} if isinstance(declared, str) else set(declared)
    dfa: rx.CharDFA | None = None
    try:
        if "string" not in kinds:
            dfa = rx.literal_dfa([])
        if "minLength" in names or "maxLength" in names:
            low, high = count(names.get("minLength", 0)), count(names.get("maxLength"))
            lengths = rx.any_char_dfa(low, high)
            dfa = lengths if dfa is None else rx.intersect(dfa, lengths)
        if isinstance(names.get("pattern"), str):
            shape = pattern_dfa(names["pattern"])
            dfa = shape if dfa is None else rx.intersect(dfa, shape)
        if "enum" in names or "const" in names:
            values = [names["const"]] if "const" in names else list(names["enum"])
            listed = rx.literal_dfa([v for v in values if isinstance(v, str)])
            dfa = listed if dfa is None else rx.intersect(dfa, listed)
    except BudgetExceededError:
        raise
    except UnsupportedSchemaError:
        return None
    return b.validator_for(names), dfa


def object_body(b: SchemaBuilder, schema: dict[str, Any], path: str) -> Expr:
    """``{ members }`` for an object schema (see the module docstring)."""
    for keyword in ("dependentRequired", "dependentSchemas", "unevaluatedProperties"):
        if keyword in schema:
            b.skip(path, keyword)
    if "dependencies" in schema:
        b.skip(path, "dependencies")
    names = schema.get("propertyNames", True)
    if count(schema.get("maxProperties")) == 0:
        names = False  # (no member at all)
    names_rule = _names_language(b, names)
    if names_rule is None and names is not True and names != {}:
        b.skip(path, "propertyNames")
    properties: dict[str, Any] = dict(schema.get("properties") or {})
    required = [name for name in schema.get("required", []) if isinstance(name, str)]
    patterns: dict[str, Any] = dict(schema.get("patternProperties") or {})
    extra = schema.get("additionalProperties", True)
    for name in required:
        if name not in properties:
            properties[name] = True if any(_matches(p, name) for p in patterns) else extra
    members: list[tuple[Expr, bool]] = []  # (member expr, required)
    for name, sub in properties.items():
        sub_path = f"{path}/properties/{escape(name)}"
        if names_rule is not None and not names_rule[0].is_valid(name):
            sub = False
        matching = []
        for pattern in patterns:
            verdict = _matches(pattern, name)
            if verdict is not False:  # (None: no verdict, post-validation decides)
                b.skip(path, "patternProperties")
            if verdict:
                matching.append(patterns[pattern])
        if matching and sub is not False:
            # The value takes the patterns' schemas too. (Still listed above, as it was
            # when it did not: tests/test_patterns.py pins that listing.)
            sub = conjunction([sub, *matching])
        value = b.value(sub, sub_path)
        if value == NEVER:
            if name in required:
                return NEVER
            continue
        key = b.literal(name)
        members.append((seq(key, b.sep(b":"), value), name in required))
    extras: list[Expr] = []
    pattern_keys: tuple[tuple[str, Expr | None], ...] = ()
    other_key: Expr | None = None
    inexact = False
    restrict = None if names_rule is None else names_rule[1]
    if patterns or extra is not False:  # keys beyond the declared names may appear
        if restrict is None:
            pattern_keys, other_key, inexact = _key_lexemes(
                tuple(properties), tuple(patterns), b.options.max_rule_states, b.spelling
            )
        else:
            pattern_keys, other_key, inexact = _restricted_key_lexemes(
                tuple(properties),
                tuple(patterns),
                restrict,
                json.dumps(names),
                b.spelling,
            )
    if inexact:
        b.skip(path, "patternProperties")
    for pattern, pattern_key in pattern_keys:
        value = b.value(patterns[pattern], f"{path}/patternProperties/{escape(pattern)}")
        if value != NEVER and pattern_key is not None:
            extras.append(seq(pattern_key, b.sep(b":"), value))
    if extra is not False:
        value = b.value(extra, f"{path}/additionalProperties")
        if value != NEVER and other_key is not None:
            key = b.lexeme(f"{other_key}", lambda: (other_key, ()), path)
            extras.append(seq(key, b.sep(b":"), value))
    _counts(b, schema, path, members, bool(extras))
    any_order = b.options.property_order == "any"
    extra_call = b.rule(f"extra{path}", lambda name: alt(*extras)) if extras else None
    body = Members(tuple(members), extra_call, b.sep(b","), any_order)
    return seq(Lit(b"{"), b.ws, body, b.ws, Lit(b"}"))


def _counts(
    b: SchemaBuilder,
    schema: dict[str, Any],
    path: str,
    members: list[tuple[Expr, bool]],
    extras: bool,
) -> None:
    """List ``minProperties``/``maxProperties`` as unenforced unless every object the
    members allow meets them already (the decoder does not count members)."""
    least = count(schema.get("minProperties"))
    most = count(schema.get("maxProperties"))
    if least is not None and least > sum(needed for _, needed in members):
        b.skip(path, "minProperties")
    if most is not None and most != 0 and (extras or len(members) > most):
        b.skip(path, "maxProperties")


@dataclass(frozen=True)
class Spelling:
    """How keys are spelled (``CompileOptions.spelling``), with the compiler's own
    lexeme writers (this module cannot import the compiler, which imports it)."""

    complete: bool
    string_lex: Callable[..., Expr]  # compiler._string_lex
    spelled: Callable[[str, bool], str]  # compiler._spelled

    def string(self, label: str, dfa: rx.CharDFA) -> Expr:
        return self.string_lex(label, dfa, complete=self.complete)

    def plain(self, label: str, names: tuple[str, ...], max_states: int | None) -> Expr | None:
        """The keys that are none of ``names`` from the trie of
        :mod:`~jsonmode.decoding.automata.keys` (None: a name that is not plain ASCII)."""
        body = extra_key_body(names, max_states, complete=self.complete)
        if body is None:
            return None
        keys = None if self.complete else names
        lexeme = Lex(self.spelled(label, self.complete), body, keys=keys)
        return seq(Lit(b'"'), lexeme, Lit(b'"'))


def _lexemes_bytes(found: tuple[tuple[tuple[str, Expr | None], ...], Expr | None, bool]) -> int:
    """What :func:`_key_lexemes`' result holds (for its cache's budget)."""
    per_pattern, extra, _ = found
    return expr_bytes(extra) + sum(expr_bytes(expr) for _, expr in per_pattern)


# (Budgets, not counts: one object of a few thousand names has a key automaton of
# megabytes, and a count-bounded cache of them pinned gigabytes.)
@memoised(32 << 20, _lexemes_bytes)
def _key_lexemes(
    names: tuple[str, ...], patterns: tuple[str, ...], max_states: int, spelling: Spelling
) -> tuple[tuple[tuple[str, Expr | None], ...], Expr | None, bool]:
    """Key lexemes of an object: per pattern, the keys it matches that are not
    declared names (None: none); the keys no name or pattern claims (None: none);
    and whether patternProperties is enforced only approximately (two patterns'
    keys overlap, or a pattern the regex engine cannot compile: its keys then count
    as the others'), so post-validation must check it.

    Cached per process (32 MiB): equal name and pattern lists give equal automata.
    Keys are spelled as ``spelling`` says.

    Raises:
        BudgetExceededError: the keys' automaton would exceed ``max_states`` states.
    """
    label = "key" + "".join(f" not:{json.dumps(n)}" for n in names)
    quick = None if patterns else spelling.plain(label, names, max_states)
    if quick is not None:  # the common case: no patterns, plain names
        return (), quick, False
    return _pattern_key_lexemes(names, patterns, label, None, max_states, spelling)


@memoised(16 << 20, _lexemes_bytes)
def _restricted_key_lexemes(
    names: tuple[str, ...],
    patterns: tuple[str, ...],
    restrict: rx.CharDFA,
    text: str,
    spelling: Spelling,
) -> tuple[tuple[tuple[str, Expr | None], ...], Expr | None, bool]:
    """:func:`_key_lexemes` within the names ``restrict`` accepts (``propertyNames``;
    ``text`` is its schema, for the labels)."""
    label = "key" + "".join(f" not:{json.dumps(n)}" for n in names) + f" names:{text}"
    return _pattern_key_lexemes(names, patterns, label, restrict, None, spelling)


def _pattern_key_lexemes(
    names: tuple[str, ...],
    patterns: tuple[str, ...],
    label: str,
    restrict: rx.CharDFA | None,
    max_states: int | None,
    spelling: Spelling,
) -> tuple[tuple[tuple[str, Expr | None], ...], Expr | None, bool]:
    names_dfa = rx.literal_dfa(list(names))
    used = names_dfa
    keys: list[tuple[str, Expr | None]] = []
    dfas: list[rx.CharDFA] = []
    inexact = False
    for pattern in patterns:
        try:
            dfa = rx.intersect(pattern_dfa(pattern), rx.complement(names_dfa))
        except BudgetExceededError:
            raise  # the compile's deadline
        except UnsupportedSchemaError:
            inexact = True
            continue
        inexact = inexact or any(not rx.intersect(dfa, other).is_empty() for other in dfas)
        dfas.append(dfa)
        used = rx.union(used, dfa)
        allowed = dfa if restrict is None else rx.intersect(dfa, restrict)
        # (The label names the declared names too: the automaton excludes them, and
        # lexemes are told apart by label.)
        name = f"key pattern:{pattern}{label[3:]}"
        keys.append((pattern, None if allowed.is_empty() else spelling.string(name, allowed)))
    label += "".join(f" not:/{p}/" for p, _ in keys)
    if not keys and restrict is None:
        quick = spelling.plain(label, names, max_states)  # every pattern was dropped
        if quick is not None:
            return (), quick, inexact
    other = rx.complement(used)
    if restrict is not None:
        other = rx.intersect(other, restrict)
    return tuple(keys), None if other.is_empty() else spelling.string(label, other), inexact


# -- arrays ----------------------------------------------------------------------------


def array_body(b: SchemaBuilder, schema: dict[str, Any], path: str) -> Expr:
    """``[ items ]`` for an array schema (see the module docstring)."""
    for keyword in ("uniqueItems", "unevaluatedItems"):
        if keyword in schema and not (keyword == "uniqueItems" and schema[keyword] is False):
            b.skip(path, keyword)
    prefix = list(schema.get("prefixItems") or [])
    items = schema.get("items", True)
    if b.draft7 and isinstance(items, list):
        prefix, items = items, schema.get("additionalItems", True)
    low = count(schema.get("minItems", 0))
    high = count(schema.get("maxItems"))
    if high is not None and high > b.options.max_repeat:
        b.skip(path, "maxItems")
        high = None
    if low > b.options.max_repeat:
        b.skip(path, "minItems")
        low = 0
    if min(len(prefix), len(prefix) if high is None else high) - low > _MAX_OPTIONAL_PREFIX:
        # Each optional prefix position nests its successors one level deeper
        # ("(, p1 (, p2 ...)?)?"): beyond this many, the later positions take any
        # value and post-validation checks them (no Python recursion limit reached).
        kind = "items" if b.draft7 and isinstance(schema.get("items"), list) else "prefixItems"
        b.skip(path, kind)
        if items is not True and items != {}:
            b.skip(path, "additionalItems" if kind == "items" else "items")
        prefix, items = prefix[: low + _MAX_OPTIONAL_PREFIX], True
    counted = _contains(b, schema, path, items, bool(prefix) or low > 0 or high is not None)
    if counted is not None:
        return seq(Lit(b"["), b.ws, counted, b.ws, Lit(b"]"))
    prefix_exprs = [b.value(sub, f"{path}/prefixItems/{i}") for i, sub in enumerate(prefix)]
    item_expr = b.value(items, f"{path}/items")
    comma = b.sep(b",")

    def element(index: int) -> Expr:
        return prefix_exprs[index] if index < len(prefix_exprs) else item_expr

    def tail(count: int) -> Expr:
        """What may follow once ``count`` elements are written."""
        if count >= len(prefix_exprs):
            more = None if high is None else high - count
            need = max(0, low - count)
            if more is not None and more < need:
                return NEVER
            if more == 0:
                return EMPTY
            return Rep(seq(comma, item_expr), need, more)
        options: list[Expr] = [EMPTY] if count >= low else []
        if high is None or count < high:
            options.append(seq(comma, element(count), tail(count + 1)))
        return alt(*options) if options else NEVER

    if high == 0:
        body: Expr = EMPTY if low == 0 else NEVER
    else:
        first = seq(element(0), tail(1))
        body = alt(EMPTY, first) if low == 0 else first
    # NEVER inside a sequence kills that path: impossible lengths trim themselves.
    return seq(Lit(b"["), b.ws, body, b.ws, Lit(b"]"))


def _contains(
    b: SchemaBuilder, schema: dict[str, Any], path: str, items: Any, bounded: bool
) -> Expr | None:
    """The items of an array with ``contains`` (None: no ``contains``, or one listed as
    unenforced and the items built the ordinary way)."""

    def unenforced() -> None:
        for keyword in ("contains", "minContains", "maxContains"):
            if keyword in schema:
                b.skip(path, keyword)

    if "contains" not in schema:
        return None  # (minContains, maxContains alone count nothing)
    if b.lowering.dialect == "legacy":
        unenforced()
        return None
    modern = b.lowering.dialect == "modern"
    least = count(schema.get("minContains", 1)) if modern else 1
    most = count(schema.get("maxContains")) if modern else None
    if least == 0 and most is None:
        return None  # (contains then asks nothing)
    if bounded or least > _MAX_CONTAINS or (most is not None and most > _MAX_CONTAINS):
        unenforced()
        return None
    if most is not None and most < least:
        return NEVER
    contains = schema["contains"]
    hit = b.value(conjunction([items, contains]), f"{path}/contains")
    if most is None:
        miss = b.value(items, f"{path}/items")
    else:
        negated = b.lowering.negate(contains)
        if negated is None:
            unenforced()
            return None
        miss = b.value(conjunction([items, negated]), f"{path}/items")
    comma = b.sep(b",")
    misses = Rep(seq(comma, miss), 0, None)

    def after(found: int) -> Expr:
        """The items after the first, each with its comma, once ``found`` matched."""
        if most is None and found >= least:
            return misses
        options: list[Expr] = [EMPTY] if found >= least else []
        if most is None or found < most:
            options.append(seq(comma, hit, after(found + 1)))
        return seq(misses, alt(*options)) if options else NEVER

    firsts: list[Expr] = [EMPTY] if least == 0 else []
    firsts.append(seq(miss, after(0)))
    if most is None or most > 0:
        firsts.append(seq(hit, after(1)))
    return alt(*firsts)
