"""jsonschema validator classes whose every keyword costs linear time in the instance.

jsonschema's own ``pattern``, ``patternProperties``, ``additionalProperties`` and
``unevaluatedProperties`` run Python's backtracking ``re`` (a catastrophic pattern
and a 31-character string ran for minutes), and its ``uniqueItems`` compares pairs
of items (quadratic: an output array of 100 000 distinct objects would take hours).
:func:`linear_validator_class` returns a draft's class with those keywords replaced:
patterns go through :mod:`jsonmode.schema.patterns` (a DFA, or a bounded fallback),
uniqueness and ``enum`` through hashing (:func:`first_duplicate`, :func:`key_set`:
one hash per item, whatever the number of options), ``anyOf``, ``oneOf`` and ``$ref``
through :mod:`jsonmode.schema.verdicts` (each value judged once per subschema:
jsonschema's doubled the work with every level of a recursive union), and
``multipleOf`` falls back to exact fractions where jsonschema's float arithmetic
raised OverflowError (a divisor past the double range).

jsonschema picks a validator class again whenever a subschema declares its own
``$schema`` (``evolve`` looks the class up by that URI in jsonschema's registry of
*stock* classes); the classes made here turn whatever class that lookup gives into its
linear counterpart too, so a nested ``$schema`` cannot bring the stock keywords back.

Messages are jsonschema's own, except that an instance is quoted at most
:data:`MAX_QUOTE` characters long and ``uniqueItems`` names the first equal pair.
Classes are built once per stock class (cached), are never registered with jsonschema
(no global state changes) and are thread-safe as jsonschema's are.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Iterator, Sequence
from fractions import Fraction
from typing import Any

import attrs
import jsonschema._keywords as _keywords
import jsonschema._legacy_keywords as _legacy_keywords
import jsonschema.validators
from jsonschema.exceptions import ValidationError
from jsonschema.protocols import Validator as _Validator

from jsonmode.schema.patterns import KEYWORDS, unevaluated_properties
from jsonmode.schema.verdicts import MAX_QUOTE, any_of, one_of, quote, ref

__all__ = [
    "MAX_QUOTE",
    "equality_key",
    "first_duplicate",
    "key_set",
    "linear_validator_class",
    "without_memo",
]
_UNKNOWN = object()


def equality_key(value: Any) -> Any:
    """A hashable key, equal for exactly the values JSON Schema calls equal.

    Booleans are not numbers (``true`` != ``1``), ``1`` == ``1.0`` (Python's ints and
    floats compare and hash alike), objects ignore member order, arrays do not.
    """
    if isinstance(value, bool):
        return (0, value)
    if isinstance(value, (int, float)):
        return (1, value)
    if isinstance(value, str):
        return (2, value)
    if value is None:
        return (3,)
    if isinstance(value, list):
        return (4, tuple(equality_key(item) for item in value))
    if isinstance(value, dict):
        return (5, frozenset((name, equality_key(item)) for name, item in value.items()))
    return (6, id(value))  # not a JSON value: equal only to itself


def first_duplicate(items: Sequence[Any]) -> tuple[int, int] | None:
    """The indices ``(i, j)``, ``i < j``, of the first item equal to an earlier one.

    One key per item and one set: linear in the size of ``items``. Raises
    RecursionError for items nested past the recursion limit (as jsonschema would).
    """
    seen: dict[Any, int] = {}
    for index, item in enumerate(items):
        earlier = seen.setdefault(equality_key(item), index)
        if earlier != index:
            return earlier, index
    return None


def key_set(options: Sequence[Any]) -> frozenset[Any]:
    """The keys of ``options`` (see :func:`first_duplicate`): membership in one hash."""
    return frozenset(equality_key(option) for option in options)


_ENUM_SETS: dict[int, tuple[Sequence[Any], frozenset[Any]]] = {}
_ENUM_SETS_LIMIT = 256
_ENUM_SETS_LOCK = threading.Lock()


def _enum_keys(options: Sequence[Any]) -> frozenset[Any]:
    """:func:`key_set` of a schema's ``enum`` list, cached by identity (the list is
    held by the cache, so its id cannot be reused while cached)."""
    hit = _ENUM_SETS.get(id(options))
    if hit is not None and hit[0] is options:
        return hit[1]
    keys = key_set(options)
    with _ENUM_SETS_LOCK:  # eviction iterates the dict: no insertion meanwhile
        if len(_ENUM_SETS) >= _ENUM_SETS_LIMIT:
            _ENUM_SETS.pop(next(iter(_ENUM_SETS)), None)
        _ENUM_SETS[id(options)] = (options, keys)
    return keys


def _enum(validator: Any, options: Any, instance: Any, schema: Any) -> Iterator[ValidationError]:
    """jsonschema's ``enum`` with one hash lookup, not a comparison per option."""
    if not isinstance(options, list):
        yield from _keywords.enum(validator, options, instance, schema)
        return
    try:
        if equality_key(instance) in _enum_keys(options):
            return
    except RecursionError:
        yield from _keywords.enum(validator, options, instance, schema)
        return
    yield ValidationError(f"{quote(instance)} is not one of {quote(options)}")


def _unique_items(
    validator: Any, unique: Any, instance: Any, schema: Any
) -> Iterator[ValidationError]:
    """jsonschema's ``uniqueItems`` in linear time, naming the first equal pair."""
    if not unique or not validator.is_type(instance, "array"):
        return
    pair = first_duplicate(instance)
    if pair is not None:
        yield ValidationError(
            f"{quote(instance)} has non-unique elements (items {pair[0]} and {pair[1]} are equal)"
        )


def _multiple_of(
    validator: Any, divisor: Any, instance: Any, schema: Any
) -> Iterator[ValidationError]:
    """jsonschema's ``multipleOf``, exact where its float arithmetic overflows (a
    divisor or value past the double range: jsonschema raised OverflowError)."""
    try:
        yield from _keywords.multipleOf(validator, divisor, instance, schema)
    except OverflowError:
        if (Fraction(instance) / Fraction(divisor)).denominator != 1:
            yield ValidationError(f"{quote(instance)} is not a multiple of {quote(divisor)}")


def _linear_evolve(stock: Any, memo: bool) -> Any:
    """An ``evolve`` that keeps the linear keywords when the subschema switches draft."""

    def evolve(self: Any, **changes: Any) -> Any:
        evolved = stock(self, **changes)
        kind: Any = type(evolved)
        if getattr(kind, "_jsonmode_linear", False):
            return evolved
        linear = linear_validator_class(kind, memo=memo)
        arguments = {
            field.alias: getattr(evolved, field.name) for field in attrs.fields(kind) if field.init
        }
        return linear(**arguments)

    return evolve


@functools.lru_cache(maxsize=32)
def linear_validator_class(cls: type[_Validator], *, memo: bool = True) -> type[_Validator]:
    """``cls`` (a jsonschema validator class, any draft) with the keywords in the
    module docstring replaced by linear-time ones. Built once per class (cached); the
    result is not registered with jsonschema. ``memo=False``: ``anyOf``/``oneOf``/``$ref``
    verdicts are not memoised (for documents with dynamic references, see
    :mod:`jsonmode.schema.verdicts`)."""
    if getattr(cls, "_jsonmode_linear", False):
        return cls
    replaced = {k: v for k, v in KEYWORDS.items() if k in cls.VALIDATORS}
    if "uniqueItems" in cls.VALIDATORS:
        replaced["uniqueItems"] = _unique_items
    if cls.VALIDATORS.get("enum") is getattr(_keywords, "enum", _UNKNOWN):
        replaced["enum"] = _enum
    # jsonschema's own functions, by identity (private modules: absent names match nothing).
    if cls.VALIDATORS.get("anyOf") is getattr(_keywords, "anyOf", _UNKNOWN):
        replaced["anyOf"] = functools.partial(any_of, memo=memo)
    if cls.VALIDATORS.get("oneOf") is getattr(_keywords, "oneOf", _UNKNOWN):
        replaced["oneOf"] = functools.partial(one_of, memo=memo)
    if cls.VALIDATORS.get("multipleOf") is getattr(_keywords, "multipleOf", _UNKNOWN):
        replaced["multipleOf"] = _multiple_of
    if cls.VALIDATORS.get("$ref") is getattr(_keywords, "ref", _UNKNOWN):
        replaced["$ref"] = functools.partial(ref, memo=memo)
    current = cls.VALIDATORS.get("unevaluatedProperties")
    if current is getattr(_keywords, "unevaluatedProperties", _UNKNOWN):
        replaced["unevaluatedProperties"] = unevaluated_properties
    elif current is getattr(_legacy_keywords, "unevaluatedProperties_draft2019", _UNKNOWN):
        replaced["unevaluatedProperties"] = functools.partial(unevaluated_properties, legacy=True)
    linear: Any = jsonschema.validators.extend(cls, validators=replaced)
    linear._jsonmode_linear = True
    linear._jsonmode_stock = cls
    linear.evolve = _linear_evolve(linear.evolve, memo)
    return linear  # type: ignore[no-any-return]


def without_memo(cls: type[_Validator]) -> type[_Validator]:
    """The class :func:`linear_validator_class` makes with ``memo=False`` from the same
    stock class as ``cls`` (a class it made)."""
    stock: Any = getattr(cls, "_jsonmode_stock", cls)
    return linear_validator_class(stock, memo=False)
