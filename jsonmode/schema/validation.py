"""Validation of JSON values against a normalised schema.

Validation errors become :class:`Issue` records — (JSON path, keyword, message) — for
re-ask prompts and metrics. Every error is reported, not just the best match: the
model needs all of them to fix its output in one go.
"""

from __future__ import annotations

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
from jsonmode.schema.formats import bounded
from jsonmode.schema.linear import linear_validator_class
from jsonmode.schema.metaschema import check_schema
from jsonmode.schema.refs import REFUSING_REGISTRY

__all__ = [
    "MAX_ISSUES",
    "MAX_MESSAGE_CHARS",
    "Issue",
    "format_path",
    "make_validator",
    "validation_issues",
]

# Sub-errors of anyOf/oneOf explain *why* no branch matched; more than this many is noise.
_MAX_BRANCH_ISSUES = 8
#: At most this many violations are collected from one value (then a ``limit`` issue).
MAX_ISSUES = 100
#: An issue's message is cut to this many characters (its head and its tail, where
#: jsonschema names the keyword: "... is too long", "... is not one of [...]").
MAX_MESSAGE_CHARS = 1_000


@dataclass(frozen=True, slots=True)
class Issue:
    """One reason a value does not conform.

    Attributes:
        path: JSONPath-style location in the instance, ``$`` for the root (``$.items[0].name``).
        keyword: the schema keyword that failed (``type``, ``required``, ``enum`` ...),
            or ``parse``/``model`` for failures outside JSON Schema.
        message: human-readable explanation, suitable for showing to a model.
    """

    path: str
    keyword: str
    message: str

    def __str__(self) -> str:
        return f"{self.path} ({self.keyword}): {self.message}"


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
    declared = schema.get("$schema") if isinstance(schema, dict) else None
    if declared is not None and not isinstance(declared, str):
        # jsonschema's own lookup fails on these with an AttributeError.
        raise jsonschema.exceptions.SchemaError(
            f"{declared!r} is not of type 'string'", path=("$schema",)
        )
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    check_schema(cls, schema)
    cls = linear_validator_class(cls)
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
