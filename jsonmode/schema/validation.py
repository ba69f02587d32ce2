"""Validation of JSON values against a normalised schema.

Validation errors become :class:`Issue` records — (JSON path, keyword, message) — for
re-ask prompts and metrics. Every error is reported, not just the best match: the
model needs all of them to fix its output in one go.

A schema that is itself invalid is explained the other way round: one error, the
deepest relevant one (:func:`explain_schema_error`), for the person who wrote it.
"""

from __future__ import annotations

import difflib
import itertools
import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import jsonschema
import jsonschema.exceptions
import jsonschema.validators
from jsonschema.protocols import Validator as _JsonschemaValidator

from jsonmode._text import clip
from jsonmode.records import Issue
from jsonmode.schema.formats import bounded
from jsonmode.schema.linear import linear_validator_class
from jsonmode.schema.metaschema import check_schema
from jsonmode.schema.refs import REFUSING_REGISTRY

__all__ = [
    "MAX_ISSUES",
    "MAX_MESSAGE_CHARS",
    "Issue",
    "SchemaProblem",
    "checked_class",
    "explain_schema_error",
    "format_path",
    "make_validator",
    "validation_issues",
    "validator_of",
]

# Sub-errors of anyOf/oneOf explain *why* no branch matched; more than this many is noise.
_MAX_BRANCH_ISSUES = 8
#: At most this many violations are collected from one value (then a ``limit`` issue).
MAX_ISSUES = 100
#: An issue's message is cut to this many characters (its head and its tail, where
#: jsonschema names the keyword: "... is too long", "... is not one of [...]").
MAX_MESSAGE_CHARS = 1_000


#: The names JSON Schema's ``type`` keyword takes (the metaschemas' ``simpleTypes``).
JSON_TYPES = ("array", "boolean", "integer", "null", "number", "object", "string")


def format_path(parts: Iterable[str | int]) -> str:
    """Render instance path parts as ``$.a[0]["odd key"]``."""
    out = ["$"]
    for part in parts:
        if isinstance(part, int):
            out.append(f"[{part}]")
        elif part.isidentifier():
            out.append(f".{part}")
        else:
            out.append(f"[{json.dumps(part)}]")
    return "".join(out)


def make_validator(schema: dict[str, Any] | bool) -> _JsonschemaValidator:
    """A jsonschema validator for ``schema`` with format checking.

    The draft follows ``$schema`` (Draft 2020-12 when absent). References are looked up
    in the document and the bundled metaschemas only
    (:data:`jsonmode.schema.refs.REFUSING_REGISTRY`: no file, no network). Keywords
    that jsonschema runs in more than linear time are replaced
    (:mod:`jsonmode.schema.linear`), and format checks share one deadline
    (:mod:`jsonmode.schema.formats`). Raises :class:`jsonschema.exceptions.SchemaError`
    when the schema itself is invalid.
    """
    return validator_of(checked_class(schema), schema)


def checked_class(schema: dict[str, Any] | bool) -> type[_JsonschemaValidator]:
    """The validator class :func:`make_validator` uses for ``schema``, once ``schema``
    is checked against its metaschema (the part of :func:`make_validator` that may
    raise :class:`jsonschema.exceptions.SchemaError`).

    Raises:
        jsonschema.exceptions.SchemaError: ``schema`` is not valid under its
            metaschema, or its ``$schema`` is not a string or not a URI that can be
            read (``"http://[::1"``: "... is not a 'uri'", as the metaschema says of
            the same string elsewhere).
    """
    declared = schema.get("$schema") if isinstance(schema, dict) else None
    if declared is not None and not isinstance(declared, str):
        # jsonschema's own lookup fails on these with an AttributeError.
        raise jsonschema.exceptions.SchemaError(
            f"{declared!r} is not of type 'string'", path=("$schema",)
        )
    try:
        cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    except ValueError:
        # jsonschema normalises the URI with urllib, which refuses some malformed ones
        # ("Invalid IPv6 URL") with a ValueError.
        raise jsonschema.exceptions.SchemaError(
            f"{declared!r} is not a 'uri'", path=("$schema",)
        ) from None
    check_schema(cls, schema)
    return linear_validator_class(cls)


def validator_of(
    cls: type[_JsonschemaValidator], schema: dict[str, Any] | bool
) -> _JsonschemaValidator:
    """The validator of class ``cls`` (from :func:`checked_class`) for ``schema``."""
    return cls(schema, format_checker=bounded(cls.FORMAT_CHECKER), registry=REFUSING_REGISTRY)


def _issues_from(errors: Iterable[jsonschema.exceptions.ValidationError]) -> Iterator[Issue]:
    for error in errors:
        yield Issue(format_path(error.absolute_path), str(error.validator), _clip(error.message))
        if error.validator in ("anyOf", "oneOf") and error.context:
            branch = sorted(error.context, key=lambda e: (len(e.absolute_path), e.message))
            for sub in branch[:_MAX_BRANCH_ISSUES]:
                yield Issue(
                    format_path(sub.absolute_path),
                    str(sub.validator),
                    f"(in {error.validator} branch {_branch_index(sub)}) {_clip(sub.message)}",
                )


def _clip(message: str) -> str:
    """jsonschema quotes the instance whole ("'...60 MB...' is too long"): keep a bounded
    message (head, and the tail where the keyword's verdict stands), so an issue never
    holds a copy of a huge output."""
    return clip(message, MAX_MESSAGE_CHARS, tail=MAX_MESSAGE_CHARS // 2)


def _branch_index(error: jsonschema.exceptions.ValidationError) -> int:
    path = list(error.relative_schema_path)
    return int(path[0]) if path and isinstance(path[0], int) else 0


def validation_issues(validator: _JsonschemaValidator, value: Any) -> list[Issue]:
    """The issues found in ``value``, in a stable order, without duplicates.

    At most :data:`MAX_ISSUES` are collected (jsonschema finds them lazily, so the
    search stops there); when there were more, a last issue with keyword ``limit`` says
    so. A value with 300 000 wrong members costs the first hundred errors, not all.
    """
    found = list(itertools.islice(validator.iter_errors(value), MAX_ISSUES + 1))
    more = len(found) > MAX_ISSUES
    errors: Sequence[jsonschema.exceptions.ValidationError] = sorted(
        found[:MAX_ISSUES], key=lambda e: (list(map(str, e.absolute_path)), e.message)
    )
    seen: set[Issue] = set()
    issues: list[Issue] = []
    for issue in _issues_from(errors):
        if issue not in seen:
            seen.add(issue)
            issues.append(issue)
    if more:
        issues.append(
            Issue("$", "limit", f"more issues were found; only the first {MAX_ISSUES} are listed")
        )
    return issues


@dataclass(frozen=True, slots=True)
class SchemaProblem:
    """Why a schema is not a valid JSON Schema, worded for the person who wrote it.

    Attributes:
        location: where in the schema, as a JSON-pointer-like path (``/properties/age/type``;
            ``/`` for the root), the form :attr:`jsonmode.errors.SchemaError.schema_path` uses.
        message: what is wrong there and what was expected.
        hint: a likely fix (``did you mean 'string'?``), or None.
    """

    location: str
    message: str
    hint: str | None = None


def explain_schema_error(error: jsonschema.exceptions.ValidationError) -> SchemaProblem:
    """The metaschema violation ``error`` (jsonschema's best match) as a :class:`SchemaProblem`.

    jsonschema reports a bad ``type`` as "'strin' is not valid under any of the given
    schemas" (the metaschema's ``anyOf``: a type name, or a list of them). This looks
    into such an ``anyOf``/``oneOf`` (``error.context``) for the branch that explains
    it: one that went deeper into the schema, or the list of JSON type names. Cost:
    proportional to the error's context (a few errors); no validation is re-run.
    """
    error = _deepest(error)
    location = "/" + "/".join(str(part) for part in error.absolute_path)
    if _names_json_types(error):
        name, types = error.instance, ", ".join(JSON_TYPES)
        if not isinstance(name, str):
            message = (
                f"a type must be one of the JSON types ({types}) or a list of them, "
                f"not {_short(name)}"
            )
            return SchemaProblem(location, message)
        close = difflib.get_close_matches(name, JSON_TYPES, n=1)
        message = f"{_short(name)} is not one of the JSON types ({types})"
        return SchemaProblem(location, message, f"did you mean {close[0]!r}?" if close else None)
    if error.validator in ("anyOf", "oneOf") and error.context:
        # No branch goes deeper: each says what this value could have been.
        reasons = "; or ".join(dict.fromkeys(sub.message for sub in error.context))
        message = f"{_short(error.instance)} is not allowed here: {reasons}"
        return SchemaProblem(location, _clip(message))
    return SchemaProblem(location, _clip(error.message), _other_draft_form(error))


def _other_draft_form(error: jsonschema.exceptions.ValidationError) -> str | None:
    """The fix when the metaschema refuses another draft's form of a keyword: an
    array ``items`` (Draft 2019-09 and earlier) in Draft 2020-12, a boolean
    ``exclusiveMinimum`` (Draft 4) in a later draft, a number there in Draft 4."""
    path = error.absolute_path
    keyword = path[-1] if path else None
    value = error.instance
    if keyword == "items" and isinstance(value, list):
        return (
            "an array of item schemas is the form of Draft 2019-09 and earlier: in Draft "
            "2020-12 write it as 'prefixItems' (and 'additionalItems' as 'items'), or declare "
            'the older draft with "$schema"'
        )
    if keyword not in ("exclusiveMinimum", "exclusiveMaximum"):
        return None
    bound = "minimum" if keyword == "exclusiveMinimum" else "maximum"
    if isinstance(value, bool):
        return (
            f"'{keyword}': true is Draft 4's form: since Draft 6 write the bound itself "
            f"('{keyword}': 5 in place of '{bound}': 5 with '{keyword}': true)"
        )
    if isinstance(value, (int, float)):
        return (
            f"a number in '{keyword}' is the form of Draft 6 and later: in Draft 4 write "
            f"'{bound}': {value} with '{keyword}': true, or declare a later draft with "
            '"$schema"'
        )
    return None


def _deepest(error: jsonschema.exceptions.ValidationError) -> jsonschema.exceptions.ValidationError:
    """The branch of an ``anyOf``/``oneOf`` error that explains it best, recursively."""
    for _ in range(32):  # (the metaschemas nest anyOf a few levels at most)
        if error.validator not in ("anyOf", "oneOf") or not error.context:
            return error
        deeper = [sub for sub in error.context if len(sub.absolute_path) > len(error.absolute_path)]
        if deeper:  # ("type": ["string", "strin"]: the item is wrong, not the list)
            error = jsonschema.exceptions.best_match(deeper)
            continue
        # The branches of the value's own kind ("type" failed in the others); a list is
        # never a type name, so there its branch is the list of them.
        own_kind = [
            sub
            for sub in error.context
            if sub.validator != "type"
            and not (_names_json_types(sub) and isinstance(sub.instance, list))
        ]
        return own_kind[0] if len(own_kind) == 1 else error
    return error


def _names_json_types(error: jsonschema.exceptions.ValidationError) -> bool:
    """Whether ``error`` is the metaschema's "must be one of the JSON type names"."""
    allowed = error.validator_value
    return (
        error.validator == "enum"
        and isinstance(allowed, list)
        and sorted(map(str, allowed)) == list(JSON_TYPES)
    )


def _short(value: Any) -> str:
    return clip(repr(value), 80, tail=20)
