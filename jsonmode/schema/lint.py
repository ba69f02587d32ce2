"""The schema lint: what is legal JSON Schema but almost surely not what was meant.

A schema's metaschema accepts ``"requried": ["name"]``, ``"minimum": 10`` beside
``"maximum": 5`` or ``"enum": []``; the model is then free to break what the author
meant, or no value can ever be valid. :func:`lint` finds, in one pass over the
subschemas (:func:`jsonmode.schema.refs.schema_positions`), each with the JSON pointer
(RFC 6901) of the offending keyword and a message that names the fix:

- an unknown keyword, with "did you mean" (:mod:`jsonmode.schema.spelling`), or what to
  write instead when it is another draft's (``prefixItems`` in a Draft 7 document:
  ``items`` as an array; ``additionalItems`` in Draft 2020-12: ``items`` beside
  ``prefixItems``; ``dependentRequired`` in Draft 7: ``dependencies``);
- a keyword of another draft that this draft's metaschema still describes but ignores
  (``dependencies``, ``$recursiveRef``, ``$recursiveAnchor`` in Draft 2020-12);
- a ``required`` name that can never be present: not in ``properties``, matched by no
  ``patternProperties`` pattern, and ``additionalProperties`` is ``false``;
- contradictory bounds, where no value can satisfy both: ``minimum`` above
  ``maximum`` (the exclusive forms included, Draft 4's boolean ones too, and no
  integer between them for ``"type": "integer"``), ``minLength`` above ``maxLength``,
  ``minItems`` above ``maxItems``, ``minProperties`` above ``maxProperties`` (or more
  ``required`` names than ``maxProperties``), ``minContains`` above ``maxContains``;
- an empty ``enum``;
- a ``pattern`` or ``patternProperties`` name that matches no string at all (decided
  by jsonmode's own regex engine, :mod:`jsonmode.regex`; a pattern it cannot turn
  into an automaton is not reported);
- a reference that points to nowhere inside the document from a definition nothing
  uses (:attr:`jsonmode.schema.refs.References.dangling`: harmless now, so not an
  error, but an error as soon as something refers to that definition).

Not reported, on purpose: ``definitions`` in a Draft 2020-12 document and ``$defs`` in
a Draft 7 one (references reach them by pointer all the same), unused definitions, and
anything the metaschema refuses (that is an :class:`~jsonmode.errors.InvalidSchemaError`
when the schema is read, whose hint names the other draft's form: ``items`` as an array
or ``exclusiveMinimum: true`` in Draft 2020-12).

Bounded: one pass over the keys of each subschema; at most :data:`MAX_WARNINGS`
records (messages are made only for those), then one record counting the rest; each
pattern is compiled at most once (the cache :func:`jsonmode.schema.patterns.compiled`
shares with validation). Never raises. Pure functions; thread-safe.
"""

from __future__ import annotations

import difflib
import json
import math
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from jsonmode._text import shown
from jsonmode.errors import InvalidSchemaError, JsonModeError
from jsonmode.records import SchemaWarning
from jsonmode.schema.patterns import PatternUndecidedError, compiled
from jsonmode.schema.refs import schema_positions
from jsonmode.schema.spelling import (
    MAX_WARNINGS,
    draft_title,
    instead,
    is_unknown,
    json_pointer,
    unknown_record,
)

__all__ = ["MAX_WARNINGS", "lint", "refusal"]

Parts = tuple[str | int, ...]
#: (where the keyword sits, the keyword, whether it is an unknown keyword, the record)
_Finding = tuple[Parts, str, bool, Callable[[], SchemaWarning]]


def lint(
    schema: Any, dialect: str | None, dangling: Sequence[tuple[Parts, str, str]] = ()
) -> tuple[SchemaWarning, ...]:
    """Every finding about ``schema`` (see the module docstring), in document order
    (a subschema's own keywords in their order, then its subschemas), at most
    :data:`MAX_WARNINGS` of them plus one record counting the rest.

    ``dialect``: the root's metaschema URI (None: Draft 2020-12). ``dangling``: the
    references to nowhere in unused definitions, as
    :attr:`~jsonmode.schema.refs.References.dangling` lists them. Never raises.
    """
    found: list[SchemaWarning] = []
    more = 0
    only_unknown = True
    for _, _, unknown, make in _findings(schema, dialect, dangling):
        if len(found) >= MAX_WARNINGS:
            more += 1
            only_unknown = only_unknown and unknown
            continue
        found.append(make())
    if more:
        what = "unknown keyword" if only_unknown else "finding"
        found.append(SchemaWarning("", "", f"{more} more {what}{'s' * (more != 1)} not listed"))
    return tuple(found)


def refusal(records: Sequence[SchemaWarning]) -> InvalidSchemaError:
    """The error ``strict_schema=True`` raises for a schema whose lint found
    ``records`` (those of severity ``"warning"``; notes never refuse): its message lists
    each one's pointer and fix, ``schema_path`` is the first one's location and
    ``warnings`` holds them all."""
    count = len(records)
    listed = "; ".join(str(record) for record in records)
    return InvalidSchemaError(
        f"the schema has {count} lint warning{'s' * (count != 1)} and strict_schema "
        f"refuses it: {listed}",
        schema_path=records[0].location if records else "",
        hint="fix each one as its message says, or leave strict_schema off to be warned only",
        warnings=records,
    )


def _findings(
    schema: Any, dialect: str | None, dangling: Sequence[tuple[Parts, str, str]]
) -> Iterator[_Finding]:
    """Every finding, lazily (a record is made only when asked for), in document order."""
    references: dict[Parts, list[tuple[str, str]]] = {}
    for parts, keyword, ref in dangling:
        references.setdefault(parts, []).append((keyword, ref))
    for parts, node, draft in schema_positions(schema, dialect):
        at = _node_findings(parts, node, draft)
        for keyword, ref in references.pop(parts, ()):
            at.setdefault(keyword, []).append(_dangling(parts, keyword, ref))
        for keyword in node:
            if is_unknown(keyword, node[keyword], draft):
                yield _unknown(parts, keyword, draft)
            yield from at.get(keyword, ())
    for parts, entries in references.items():  # (off the schema positions)
        for keyword, ref in entries:
            yield _dangling(parts, keyword, ref)


def _unknown(parts: Parts, keyword: str, draft: str) -> _Finding:
    where = (*parts, keyword)
    return where, keyword, True, lambda: unknown_record(json_pointer(where), keyword, draft)


def _finding(where: Parts, keyword: str, message: Callable[[], str]) -> _Finding:
    return where, keyword, False, lambda: SchemaWarning(json_pointer(where), keyword, message())


def _node_findings(parts: Parts, node: dict[str, Any], draft: str) -> dict[str, list[_Finding]]:
    """The findings of one subschema other than unknown keywords, by the keyword they
    are reported at. Constant work per keyword, but for ``required`` (its names) and
    the patterns (compiled once each)."""
    at: dict[str, list[_Finding]] = {}
    if _CHECKED.isdisjoint(node):
        return at

    def add(keyword: str, message: str, *more: str | int) -> None:
        where = (*parts, keyword, *more)
        at.setdefault(keyword, []).append(_finding(where, keyword, lambda: message))

    for keyword in _IGNORED.get(draft, ()):
        if keyword in node:
            add(keyword, _ignored_message(keyword, draft))
    numeric = _numeric_bounds(node, draft)
    if numeric is not None:
        add(*numeric)
    for low, high, things in _COUNTS:
        counted = _counted_bounds(node, low, high, things)
        if counted is not None:
            add(low, counted)
    too_many = _required_over_max(node)
    if too_many is not None:
        add("maxProperties", too_many)
    if node.get("enum") == []:
        add(
            "enum",
            "'enum' is empty, so no value is valid here: list the allowed values, or remove 'enum'",
        )
    pattern = node.get("pattern")
    if isinstance(pattern, str) and _matches_nothing(pattern):
        add(
            "pattern",
            f"pattern '{shown(pattern)}' matches no string, so no string is valid "
            "here: correct the pattern",
        )
    named = node.get("patternProperties")
    if isinstance(named, dict):
        for name in named:
            if isinstance(name, str) and _matches_nothing(name):
                message = (
                    f"pattern '{shown(name)}' matches no property name, so this entry never "
                    "applies: correct the pattern"
                )
                add("patternProperties", message, name)
    if isinstance(node.get("required"), list) and node["required"]:
        useless = _required_without_objects(node)
        if useless is not None:
            add("required", useless)
        else:
            for index, name, close in _unreachable_required(node):
                add("required", _required_message(name, close), index)
    return at


# -- another draft's keywords -----------------------------------------------------------

# Keywords a draft's metaschema still describes (so spelling knows them) but whose
# validator ignores them: another draft's keyword, silently without effect here.
_IGNORED: dict[str, tuple[str, ...]] = {
    "draft2020-12": ("dependencies", "$recursiveRef", "$recursiveAnchor"),
    "draft2019-09": ("dependencies",),
}


def _ignored_message(keyword: str, draft: str) -> str:
    return (
        f"'{keyword}' is not a keyword of {draft_title(draft)} (this schema's draft) and is "
        f"ignored; {instead(keyword, draft)}"
    )


# -- bounds ---------------------------------------------------------------------------


def _number(value: Any) -> int | float | None:
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _numeric_bounds(node: dict[str, Any], draft: str) -> tuple[str, str] | None:
    """(the keyword of the lower bound, the message) when no number (or, for
    ``"type": "integer"``, no integer) lies between the bounds."""
    legacy = draft in ("draft-03", "draft-04")
    low, low_key, low_open = _number(node.get("minimum")), "minimum", False
    high, high_key, high_open = _number(node.get("maximum")), "maximum", False
    if legacy:
        low_open = low is not None and node.get("exclusiveMinimum") is True
        high_open = high is not None and node.get("exclusiveMaximum") is True
    else:
        exclusive = _number(node.get("exclusiveMinimum"))
        if exclusive is not None and (low is None or exclusive >= low):
            low, low_key, low_open = exclusive, "exclusiveMinimum", True
        exclusive = _number(node.get("exclusiveMaximum"))
        if exclusive is not None and (high is None or exclusive <= high):
            high, high_key, high_open = exclusive, "exclusiveMaximum", True
    if low is None or high is None:
        return None
    lower = _bound(low_key, low, legacy and low_open)
    upper = _bound(high_key, high, legacy and high_open)
    if low > high:
        return (
            low_key,
            f"{lower} is above {upper}: no number is valid here (swap them, or correct one)",
        )
    if low == high and (low_open or high_open):
        return (
            low_key,
            f"{lower} and {upper} leave no number between them (for exactly "
            f"{json.dumps(low)} write 'const', else widen the range)",
        )
    if node.get("type") == "integer" and _first_integer(low, low_open) > _last_integer(
        high, high_open
    ):
        return (
            low_key,
            f"no integer lies between {lower} and {upper}, and 'type' is "
            "'integer': widen the range, or allow 'number'",
        )
    return None


def _bound(keyword: str, value: int | float, exclusive: bool) -> str:
    flag = f" (exclusive{keyword[0].upper()}{keyword[1:]}: true)" if exclusive else ""
    return f"{keyword} {json.dumps(value)}{flag}"


def _first_integer(low: int | float, open_: bool) -> int:
    first = math.ceil(low)
    return first + 1 if open_ and first == low else first


def _last_integer(high: int | float, open_: bool) -> int:
    last = math.floor(high)
    return last - 1 if open_ and last == high else last


# The keywords some check of _node_findings reads first (a subschema without any of
# them has nothing to report: one set operation).
_CHECKED = frozenset(
    {"minimum", "exclusiveMinimum", "minLength", "minItems", "minProperties", "minContains"}
    | {"maxProperties", "enum", "pattern", "patternProperties", "required"}
    | {"dependencies", "$recursiveRef", "$recursiveAnchor"}
)

_COUNTS = (
    ("minLength", "maxLength", "string"),
    ("minItems", "maxItems", "array"),
    ("minProperties", "maxProperties", "object"),
    ("minContains", "maxContains", "array"),
)


def _counted_bounds(node: dict[str, Any], low_key: str, high_key: str, things: str) -> str | None:
    if low_key not in node or high_key not in node:
        return None
    low, high = _number(node.get(low_key)), _number(node.get(high_key))
    if low is None or high is None or low <= high:
        return None
    return (
        f"{low_key} {json.dumps(low)} is above {high_key} {json.dumps(high)}: no {things} is "
        "valid here (swap them, or correct one)"
    )


def _required_over_max(node: dict[str, Any]) -> str | None:
    required, most = node.get("required"), _number(node.get("maxProperties"))
    if not isinstance(required, list) or most is None:
        return None
    names = len({name for name in required if isinstance(name, str)})
    if names <= most:
        return None
    return (
        f"maxProperties {json.dumps(most)} is below the {names} names 'required' lists: no "
        "object is valid here (raise maxProperties, or require fewer)"
    )


# -- required names that can never be present ------------------------------------------


def _required_without_objects(node: dict[str, Any]) -> str | None:
    """The message when ``type`` rules objects out, so ``required`` does nothing (it
    was meant for a subschema: an array's ``items``, most often)."""
    declared = node.get("type")
    kinds = [declared] if isinstance(declared, str) else declared
    if not isinstance(kinds, list) or not kinds or "object" in kinds:
        return None
    where = (
        "move it into 'items', whose objects it was probably meant for"
        if "array" in kinds and isinstance(node.get("items"), dict)
        else "move it into the subschema it was meant for, or remove it"
    )
    return (
        f"'required' has no effect here: it applies to objects, and 'type' is "
        f"{shown(json.dumps(declared))} ({where})"
    )


def _unreachable_required(node: dict[str, Any]) -> Iterator[tuple[int, str, str | None]]:
    """(index in ``required``, name, the closest property name) for each name that
    ``additionalProperties: false`` forbids."""
    required = node.get("required")
    if node.get("additionalProperties") is not False or not isinstance(required, list):
        return
    properties = node.get("properties")
    declared = (
        [name for name in properties if isinstance(name, str)]
        if isinstance(properties, dict)
        else []
    )
    names = set(declared)
    patterns = node.get("patternProperties")
    patterns = [p for p in patterns if isinstance(p, str)] if isinstance(patterns, dict) else []
    seen: set[str] = set()
    for index, name in enumerate(required):
        if not isinstance(name, str) or name in seen or name in names:
            continue
        seen.add(name)
        if any(_may_match(pattern, name) for pattern in patterns):
            continue
        close = (
            difflib.get_close_matches(name, declared, n=1, cutoff=0.75)
            if (len(name) <= 64 and len(declared) <= 1000)
            else []
        )
        yield index, name, close[0] if close else None


def _required_message(name: str, close: str | None) -> str:
    problem = (
        f"'{shown(name)}' is required, but it is not in 'properties' and "
        "'additionalProperties' is false: no object is valid here"
    )
    if close is not None:
        return f"{problem} (did you mean '{shown(close)}'?)"
    return f"{problem} (add it to 'properties', or remove it from 'required')"


# -- patterns -------------------------------------------------------------------------


def _matches_nothing(pattern: str) -> bool:
    """Whether jsonmode's regex engine proves that no string matches ``pattern``."""
    try:
        return compiled(pattern).matches_nothing
    except (JsonModeError, RecursionError):  # (a compile deadline that passed)
        return False


def _may_match(pattern: str, name: str) -> bool:
    """Whether ``pattern`` matches ``name``, or may (no verdict in time)."""
    try:
        return compiled(pattern).search(name)
    except (PatternUndecidedError, JsonModeError, RecursionError):
        return True


# -- references to nowhere in unused definitions ---------------------------------------


def _dangling(parts: Parts, keyword: str, ref: str) -> _Finding:
    def message() -> str:
        return (
            f"{keyword} '{shown(ref)}' points to nothing in this document: harmless while "
            f"nothing uses {json_pointer(_definition(parts)) or 'this definition'}, an error "
            "as soon as something does (add the missing definition, or correct the reference)"
        )

    return _finding((*parts, keyword), keyword, message)


def _definition(parts: Parts) -> Parts:
    """The outermost definition (``$defs``/``definitions`` entry) ``parts`` lies in."""
    for index, part in enumerate(parts[:-1]):
        if part in ("$defs", "definitions"):
            return parts[: index + 2]
    return parts
