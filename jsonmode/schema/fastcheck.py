"""A compiled yes/no validator for the common JSON Schema keywords.

jsonschema walks a schema through generic machinery (a new validator object per
subschema), which costs hundreds of microseconds per document. Most outputs
conform, and for those one yes/no answer is all that is needed. This module
compiles a schema once into nested closures that answer it about ten times faster.

Contract: ``compile_check(schema)`` returns a predicate that is *exactly*
``jsonschema``'s verdict (Draft 2020-12, same format checker, same equality and
type rules; regexes as ECMA-262 in linear time, like the validator classes
jsonmode builds: :mod:`jsonmode.schema.patterns`), or ``None`` when the schema uses
anything outside the supported set (other drafts, ``$id``/anchors/dynamic
references, remote references, ``unevaluated*`` ...). Callers fall back to
jsonschema then, and always use jsonschema to *explain* a failure. A differential
test against the official JSON-Schema-Test-Suite pins the equivalence.

Cost: linear in the value for every schema, recursive ones included: within one call,
a value reached again under the same ``$ref`` (the branches of a recursive union
reaching the same child) is judged once (see :func:`_judged_once`).

Thread-safe: compiled predicates hold no mutable state beyond a reference table
filled during compilation and a per-call memo held in a context variable.
"""

from __future__ import annotations

import contextvars
import math
from collections.abc import Callable
from fractions import Fraction
from typing import Any

from jsonschema import FormatChecker

from jsonmode.schema import patterns
from jsonmode.schema.keywords import ANNOTATIONS
from jsonmode.schema.linear import equality_key, first_duplicate, key_set
from jsonmode.schema.pointer import MISSING, resolve_local_ref

__all__ = ["compile_check"]

Check = Callable[[Any], bool]

_DRAFT_2020_12 = {
    "https://json-schema.org/draft/2020-12/schema",
    "https://json-schema.org/draft/2020-12/schema#",
}
# Keywords that never affect validity.
_ANNOTATIONS = ANNOTATIONS
_SUPPORTED = frozenset(
    {
        "type",
        "enum",
        "const",
        "properties",
        "required",
        "additionalProperties",
        "patternProperties",
        "minProperties",
        "maxProperties",
        "items",
        "prefixItems",
        "minItems",
        "maxItems",
        "minLength",
        "maxLength",
        "pattern",
        "format",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "anyOf",
        "oneOf",
        "allOf",
        "not",
        "$ref",
        "dependentRequired",
        "dependentSchemas",
        "propertyNames",
        "contains",
        "minContains",
        "maxContains",
        "if",
        "then",
        "else",
        "uniqueItems",
        "multipleOf",
    }
)


# What an ``allOf`` member may hold to be folded into its parent (see _Compiler.folded).
_FOLDABLE = frozenset({"type", "properties"}) | _ANNOTATIONS


class _Unsupported(Exception):
    pass


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


_TYPES: dict[str, Check] = {
    "null": lambda v: v is None,
    "boolean": lambda v: isinstance(v, bool),
    "string": lambda v: isinstance(v, str),
    "array": lambda v: isinstance(v, list),
    "object": lambda v: isinstance(v, dict),
    "number": _is_number,
    "integer": lambda v: (
        (isinstance(v, int) and not isinstance(v, bool))
        or (isinstance(v, float) and v.is_integer())
    ),
}


def _equal(one: Any, two: Any) -> bool:
    """jsonschema's equality: booleans are not numbers, 1 == 1.0, containers deep."""
    if isinstance(one, bool) or isinstance(two, bool):
        return isinstance(one, bool) and isinstance(two, bool) and one == two
    if isinstance(one, str) or isinstance(two, str):
        return isinstance(one, str) and isinstance(two, str) and one == two
    if isinstance(one, list) or isinstance(two, list):
        return (
            isinstance(one, list)
            and isinstance(two, list)
            and len(one) == len(two)
            and all(_equal(a, b) for a, b in zip(one, two, strict=True))
        )
    if isinstance(one, dict) or isinstance(two, dict):
        return (
            isinstance(one, dict)
            and isinstance(two, dict)
            and one.keys() == two.keys()
            and all(_equal(one[key], two[key]) for key in one)
        )
    if _is_number(one) and _is_number(two):
        return bool(one == two)
    return one is None and two is None


# Draft 4's "integer": an int, never a float (1.0 is a number only).
_LEGACY_TYPES: dict[str, Check] = {
    **_TYPES,
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
}


class _Compiler:
    def __init__(
        self,
        root: Any,
        formats: FormatChecker,
        types: dict[str, Check],
        step: Callable[[], None] | None = None,
    ) -> None:
        self.root = root
        self.formats = formats
        self.types = types
        self.step = step
        self.refs: dict[str, Check] = {}

    def ref(self, pointer: str) -> Check:
        if pointer != "#" and not pointer.startswith("#/"):
            raise _Unsupported(pointer)
        if pointer not in self.refs:
            table = self.refs
            table[pointer] = lambda value: table[pointer](value)  # placeholder for recursion
            target = resolve_local_ref(self.root, pointer)
            if target is MISSING:
                raise _Unsupported(pointer)
            table[pointer] = self.compile(target)
        table = self.refs
        step = self.step

        def check(value: Any) -> bool:
            # (Each value judged once per reference within one call: branches that
            # reach the same child, of anyOf, allOf, if..., share its verdict.)
            if step is not None:
                step()
            verdicts = _verdicts.get()
            if verdicts is None:
                return bool(table[pointer](value))
            key = (id(value), pointer)
            known = verdicts.get(key)
            if known is not None and known[0] is value:
                return known[1]
            verdict = bool(table[pointer](value))
            verdicts[key] = (value, verdict)
            return verdict

        return check

    def compile(self, schema: Any) -> Check:
        if schema is True:
            return lambda value: True
        if schema is False:
            return lambda value: False
        if not isinstance(schema, dict):
            raise _Unsupported(repr(schema))
        unknown = set(schema) - _SUPPORTED - _ANNOTATIONS
        if unknown:
            raise _Unsupported(", ".join(sorted(unknown)))
        if "allOf" in schema:
            folded = self.folded(schema)
            if folded is not None:
                return folded
        compiled = (self.keyword(key, schema[key], schema) for key in schema if key in _SUPPORTED)
        checks: list[Check] = [check for check in compiled if check is not None]
        if not checks:
            return lambda value: True
        return _all(checks)

    def folded(self, schema: dict[str, Any]) -> Check | None:
        """``schema`` compiled with its ``allOf`` folded in, when every member of that
        ``allOf`` holds only ``type``, ``properties`` and annotations (a metaschema's
        vocabularies: the flat 2020-12 one is seven such): each distinct ``type`` is
        tested once, and the ``properties`` maps (the schema's own and its members')
        are merged into one lookup per member name, so a value's members are looked
        up once instead of once per map. The same verdict (a conjunction of the same
        checks, in another order). None: ``schema`` is not of that form."""
        parts = schema["allOf"]
        if not isinstance(parts, list) or not parts:
            return None
        for part in parts:
            if not isinstance(part, dict) or not part.keys() <= _FOLDABLE:
                return None
            if not isinstance(part.get("properties", {}), dict):
                return None
        if not isinstance(schema.get("properties", {}), dict):
            return None
        checks: list[Check] = []
        types: list[Any] = []
        maps: list[dict[str, Any]] = []
        for key in schema:
            if key == "allOf" or key not in _SUPPORTED:
                continue
            if key == "properties":
                maps.append(schema[key])
                continue
            if key == "type":
                types.append(schema[key])
            check = self.keyword(key, schema[key], schema)
            if check is not None:
                checks.append(check)
        for part in parts:
            if "type" in part and part["type"] not in types:
                types.append(part["type"])
                checks.append(self.kw_type(part["type"], part))
            if "properties" in part:
                maps.append(part["properties"])
        merged: dict[str, list[Check]] = {}
        for properties in maps:
            for name, sub in properties.items():
                merged.setdefault(name, []).append(self.compile(sub))
        if merged:
            checks.append(_properties({name: _all(tests) for name, tests in merged.items()}))
        return _all(checks)

    def keyword(self, key: str, arg: Any, schema: dict[str, Any]) -> Check | None:
        method = getattr(self, "kw_" + key.lstrip("$"), None)
        if method is None:  # pragma: no cover - _SUPPORTED and the methods agree
            raise _Unsupported(key)
        check: Check | None = method(arg, schema)
        return check

    # -- keywords --------------------------------------------------------------------

    def kw_type(self, arg: Any, schema: dict[str, Any]) -> Check:
        names = [arg] if isinstance(arg, str) else arg
        if not isinstance(names, list) or any(name not in self.types for name in names):
            raise _Unsupported("type")
        tests = [self.types[name] for name in names]
        if len(tests) == 1:
            return tests[0]
        if all(name in _CLASSES for name in names):
            # (One isinstance where each name is exactly a class test, null aside.)
            classes = tuple(_CLASSES[name] for name in names if name != "null")
            if "null" in names:
                return lambda value: value is None or isinstance(value, classes)
            return lambda value: isinstance(value, classes)
        return _any(tests)

    def kw_enum(self, arg: Any, schema: dict[str, Any]) -> Check:
        if not isinstance(arg, list):
            raise _Unsupported("enum")
        keys = key_set(arg)  # one hash per check, not a comparison per option

        def check(value: Any) -> bool:
            try:
                return equality_key(value) in keys
            except RecursionError:
                return any(_equal(value, option) for option in arg)

        return check

    def kw_const(self, arg: Any, schema: dict[str, Any]) -> Check:
        return lambda value: _equal(value, arg)

    def kw_properties(self, arg: Any, schema: dict[str, Any]) -> Check:
        return _properties({name: self.compile(sub) for name, sub in arg.items()})

    def kw_patternProperties(self, arg: Any, schema: dict[str, Any]) -> Check:
        compiled = [(_regex(pattern), self.compile(sub)) for pattern, sub in arg.items()]

        def check(value: Any) -> bool:
            if not isinstance(value, dict):
                return True
            return all(
                test(item)
                for key, item in value.items()
                for regex, test in compiled
                if regex.search(key)
            )

        return check

    def kw_additionalProperties(self, arg: Any, schema: dict[str, Any]) -> Check:
        known = set(schema.get("properties", {}))
        patterns = [_regex(pattern) for pattern in schema.get("patternProperties", {})]
        test = self.compile(arg)

        def check(value: Any) -> bool:
            if not isinstance(value, dict):
                return True
            for key, item in value.items():
                if key in known or any(p.search(key) for p in patterns):
                    continue
                if not test(item):
                    return False
            return True

        return check

    def kw_required(self, arg: Any, schema: dict[str, Any]) -> Check:
        names = list(arg)
        return lambda value: not isinstance(value, dict) or all(name in value for name in names)

    def kw_dependentRequired(self, arg: Any, schema: dict[str, Any]) -> Check:
        return lambda value: (
            not isinstance(value, dict)
            or all(
                all(name in value for name in needed) for key, needed in arg.items() if key in value
            )
        )

    def kw_minProperties(self, arg: Any, schema: dict[str, Any]) -> Check:
        return lambda value: not isinstance(value, dict) or len(value) >= arg

    def kw_maxProperties(self, arg: Any, schema: dict[str, Any]) -> Check:
        return lambda value: not isinstance(value, dict) or len(value) <= arg

    def kw_prefixItems(self, arg: Any, schema: dict[str, Any]) -> Check:
        tests = [self.compile(sub) for sub in arg]
        return lambda value: (
            not isinstance(value, list)
            or all(test(item) for test, item in zip(tests, value, strict=False))
        )

    def kw_items(self, arg: Any, schema: dict[str, Any]) -> Check:
        if isinstance(arg, list):
            raise _Unsupported("items as a list (draft 7 and earlier)")
        skip = len(schema.get("prefixItems", ()))
        test = self.compile(arg)
        return lambda value: not isinstance(value, list) or all(test(item) for item in value[skip:])

    def kw_minItems(self, arg: Any, schema: dict[str, Any]) -> Check:
        return lambda value: not isinstance(value, list) or len(value) >= arg

    def kw_maxItems(self, arg: Any, schema: dict[str, Any]) -> Check:
        return lambda value: not isinstance(value, list) or len(value) <= arg

    def kw_minLength(self, arg: Any, schema: dict[str, Any]) -> Check:
        return lambda value: not isinstance(value, str) or len(value) >= arg

    def kw_maxLength(self, arg: Any, schema: dict[str, Any]) -> Check:
        return lambda value: not isinstance(value, str) or len(value) <= arg

    def kw_pattern(self, arg: Any, schema: dict[str, Any]) -> Check:
        regex = _regex(arg)
        return lambda value: not isinstance(value, str) or regex.search(value)

    def kw_format(self, arg: Any, schema: dict[str, Any]) -> Check:
        formats = self.formats
        return lambda value: formats.conforms(value, arg)

    def kw_minimum(self, arg: Any, schema: dict[str, Any]) -> Check:
        _number_argument(arg)
        return lambda value: not _is_number(value) or value >= arg

    def kw_maximum(self, arg: Any, schema: dict[str, Any]) -> Check:
        _number_argument(arg)
        return lambda value: not _is_number(value) or value <= arg

    def kw_exclusiveMinimum(self, arg: Any, schema: dict[str, Any]) -> Check:
        _number_argument(arg)
        return lambda value: not _is_number(value) or value > arg

    def kw_exclusiveMaximum(self, arg: Any, schema: dict[str, Any]) -> Check:
        _number_argument(arg)
        return lambda value: not _is_number(value) or value < arg

    def kw_anyOf(self, arg: Any, schema: dict[str, Any]) -> Check:
        return _any([self.compile(sub) for sub in arg])

    def kw_allOf(self, arg: Any, schema: dict[str, Any]) -> Check:
        return _all([self.compile(sub) for sub in arg])

    def kw_oneOf(self, arg: Any, schema: dict[str, Any]) -> Check:
        tests = [self.compile(sub) for sub in arg]
        return lambda value: sum(1 for test in tests if test(value)) == 1

    def kw_not(self, arg: Any, schema: dict[str, Any]) -> Check:
        test = self.compile(arg)
        return lambda value: not test(value)

    def kw_dependentSchemas(self, arg: Any, schema: dict[str, Any]) -> Check:
        tests = {key: self.compile(sub) for key, sub in arg.items()}
        return lambda value: (
            not isinstance(value, dict)
            or all(test(value) for key, test in tests.items() if key in value)
        )

    def kw_propertyNames(self, arg: Any, schema: dict[str, Any]) -> Check:
        test = self.compile(arg)
        return lambda value: not isinstance(value, dict) or all(test(key) for key in value)

    def kw_contains(self, arg: Any, schema: dict[str, Any]) -> Check:
        test = self.compile(arg)
        low = schema.get("minContains", 1)
        high = schema.get("maxContains")
        if not isinstance(low, int) or not (high is None or isinstance(high, int)):
            raise _Unsupported("minContains/maxContains")

        def check(value: Any) -> bool:
            if not isinstance(value, list):
                return True
            matches = sum(1 for item in value if test(item))
            return matches >= low and (high is None or matches <= high)

        return check

    def kw_minContains(self, arg: Any, schema: dict[str, Any]) -> None:
        return None  # applied by "contains"; without it, no effect

    def kw_maxContains(self, arg: Any, schema: dict[str, Any]) -> None:
        return None

    def kw_if(self, arg: Any, schema: dict[str, Any]) -> Check:
        condition = self.compile(arg)
        then = self.compile(schema.get("then", True))
        otherwise = self.compile(schema.get("else", True))
        return lambda value: then(value) if condition(value) else otherwise(value)

    def kw_then(self, arg: Any, schema: dict[str, Any]) -> None:
        return None  # applied by "if"; without it, no effect

    def kw_else(self, arg: Any, schema: dict[str, Any]) -> None:
        return None

    def kw_uniqueItems(self, arg: Any, schema: dict[str, Any]) -> Check | None:
        if not arg:
            return None

        def check(value: Any) -> bool:
            # One hash per item, not a comparison per pair (schema/linear.py).
            return not isinstance(value, list) or first_duplicate(value) is None

        return check

    def kw_multipleOf(self, arg: Any, schema: dict[str, Any]) -> Check:
        _number_argument(arg)

        def check(value: Any) -> bool:
            if not _is_number(value):
                return True
            if isinstance(arg, float):  # jsonschema's float rule, overflow included
                try:
                    quotient = value / arg
                    return bool(int(quotient) == quotient)
                except OverflowError:
                    return (Fraction(value) / Fraction(arg)).denominator == 1
            try:
                return not value % arg
            except OverflowError:  # a float value, an integer past the double range
                return bool((Fraction(value) / arg).denominator == 1)

        return check

    def kw_ref(self, arg: Any, schema: dict[str, Any]) -> Check:
        if not isinstance(arg, str):
            raise _Unsupported("$ref")
        return self.ref(arg)


# The type names whose _TYPES test is exactly an isinstance test ("null": ``is None``);
# "number" and "integer" are not (a bool is an int to isinstance).
_CLASSES: dict[str, type] = {
    "null": type(None),
    "boolean": bool,
    "string": str,
    "array": list,
    "object": dict,
}


def _properties(compiled: dict[str, Check]) -> Check:
    """The ``properties`` check of these compiled member checks."""
    lookup = compiled.get

    def check(value: Any) -> bool:
        if not isinstance(value, dict):
            return True
        if len(value) < len(compiled):
            # (The smaller side walked: a metaschema's ~60 properties against a
            # subschema's few keywords. Same verdict: a conjunction.)
            for name, item in value.items():
                test = lookup(name)
                if test is not None and not test(item):
                    return False
            return True
        for name, test in compiled.items():  # noqa: SIM110 (no generator per value)
            if name in value and not test(value[name]):
                return False
        return True

    return check


def _all(checks: list[Check]) -> Check:
    """A check that every one of ``checks`` passes (truthy), in order, stopping at the
    first that fails."""
    return _joined(checks, stop=False)


def _any(checks: list[Check]) -> Check:
    """A check that some one of ``checks`` passes (truthy), in order, stopping at the
    first that does (none: fails)."""
    return _joined(checks, stop=True)


def _joined(checks: list[Check], *, stop: bool) -> Check:
    """A check that runs ``checks`` in order until one's verdict is ``stop`` and
    answers ``stop`` then, ``not stop`` when none is. Written out for up to two
    checks; a loop beyond (``all()``/``any()`` would make a generator per value)."""
    if not checks:
        return lambda value: not stop
    if len(checks) == 1:
        return checks[0]
    if len(checks) == 2:
        first, second = checks
        if stop:
            return lambda value: first(value) or second(value)
        return lambda value: first(value) and second(value)

    def check(value: Any) -> bool:
        for test in checks:
            if bool(test(value)) is stop:
                return stop
        return not stop

    return check


def _regex(pattern: Any) -> patterns.CompiledPattern:
    """ECMA-262, linear time (see :mod:`jsonmode.schema.patterns`)."""
    compiled = patterns.compiled(pattern) if isinstance(pattern, str) else None
    if compiled is None or compiled.engine == "none":
        raise _Unsupported(f"pattern {pattern!r}")
    return compiled


def _number_argument(arg: Any) -> None:
    if not _is_number(arg) or (isinstance(arg, float) and not math.isfinite(arg)):
        raise _Unsupported("numeric bound")


def compile_check(
    schema: Any,
    formats: FormatChecker,
    *,
    legacy_integers: bool = False,
    step: Callable[[], None] | None = None,
) -> Check | None:
    """A predicate exactly equal to jsonschema's verdict, or None (unsupported schema).

    ``legacy_integers``: "integer" as draft 4 has it (``1.0`` is not one), for a
    draft 4 document restated with 2020-12 keywords (the draft 4 metaschema).
    ``step``: called each time the predicate follows a reference (a metaschema's
    check passes :func:`~jsonmode.budget.checkpoint`: once per subschema of
    the schema it checks); whatever it raises propagates."""
    if isinstance(schema, dict):
        declared = schema.get("$schema")
        if declared is not None and declared not in _DRAFT_2020_12:
            return None
    types = _LEGACY_TYPES if legacy_integers else _TYPES
    compiler = _Compiler(schema, formats, types, step)
    try:
        check = compiler.compile(schema)
    except (_Unsupported, RecursionError, TypeError, AttributeError):
        return None
    return _judged_once(check) if compiler.refs else check


# Verdicts per (id(value), reference) for the call under way (see _judged_once).
_verdicts: contextvars.ContextVar[dict[tuple[int, str], tuple[Any, bool]] | None] = (
    contextvars.ContextVar("jsonmode_fastcheck_verdicts", default=None)
)


def _judged_once(check: Check) -> Check:
    """``check`` with a fresh memo of reference verdicts per call: a value reached
    again under the same reference (a recursive union's branches reaching the same
    child) is not judged again, so a call costs linear time where judging it anew
    would double with every level. The memo holds the values, so no identity is
    reused while it lives; it is dropped when the call returns."""

    def judged(value: Any) -> bool:
        token = _verdicts.set({})
        try:
            return bool(check(value))
        finally:
            _verdicts.reset(token)

    return judged
