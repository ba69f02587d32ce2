"""JSDoc comments as JSON Schema annotations, read as ``ts-json-schema-generator`` reads them.

Used by :mod:`jsonmode.schema.typescript`. A ``/** ... */`` comment just before a
declaration, a property or an index signature gives:

- ``description``: the comment's text before its first tag (lines joined with a space
  unless a blank line, or a line starting with ``*`` or ``-``, follows);
- for each tag ``@name value`` (a tag starts a line):

  - text tags (the value as written): ``@title @description @format @pattern
    @comment`` (as ``$comment``) ``@contentMediaType @contentEncoding``;
  - JSON tags (the value read as JSON where it parses, or a single-quoted string,
    else the text; a tag without a value is ``true``): ``@minimum @maximum
    @exclusiveMinimum @exclusiveMaximum @multipleOf @minLength @maxLength @minItems
    @maxItems @minProperties @maxProperties @uniqueItems @default @examples @const
    @readOnly @writeOnly @deprecated @propertyNames @contains @required @if @then @else``;
  - ``@example VALUE`` (each one that is JSON joins ``examples``), ``@asType integer``
    (the JSON type in place of the TypeScript one).

Other tags (``@see``, ``@param`` ...) are ignored, as the reference tool ignores them.
Where JSON Schema 2020-12 asks for a kind of value the reference tool does not check,
jsonmode decides: a number tag that is not a number, a count that is not a
non-negative integer, a boolean tag that is not a boolean, are
:class:`~jsonmode.errors.InvalidSchemaError` (line and column of the tag); ``@examples``
that is not a JSON array becomes a one-item list; ``@deprecated some text`` is
``deprecated: true``. ``@id``, ``@ref``, ``@discriminator`` and ``@nullable`` (which
change the schema's structure) are :class:`~jsonmode.errors.UnsupportedSchemaError`.

Pure functions of their input; thread-safe.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from jsonmode.errors import InvalidSchemaError, UnsupportedSchemaError

__all__ = ["Doc", "read_annotations", "where"]

_TEXT_TAGS = {
    "title": "title",
    "description": "description",
    "format": "format",
    "pattern": "pattern",
    "comment": "$comment",
    "contentMediaType": "contentMediaType",
    "contentEncoding": "contentEncoding",
}
_NUMBER_TAGS = frozenset(
    ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf")
)
_COUNT_TAGS = frozenset(
    ("minLength", "maxLength", "minItems", "maxItems", "minProperties", "maxProperties")
)
_BOOLEAN_TAGS = frozenset(("uniqueItems", "readOnly", "writeOnly"))
_VALUE_TAGS = frozenset(
    ("default", "examples", "const", "propertyNames", "contains", "required", "if", "then", "else")
)
_REFUSED_TAGS = {
    "id": "sets a base URI",
    "ref": "replaces the type by a reference",
    "discriminator": "turns the union into if/then branches",
    "nullable": "adds null to the type: write `T | null`",
}
_TYPE_NAMES = frozenset(("string", "number", "integer", "boolean", "null", "object", "array"))
_TAG = re.compile(r"@([A-Za-z][\w-]*)")
# (ts-json-schema-generator's own rule: a line break becomes a space unless a blank
# line, or a line starting with '*' or '-', follows.)
_SOFT_BREAK = re.compile(r"(?<=[^\n])\n(?=[^\n*-])")


@dataclass(frozen=True, slots=True)
class Doc:
    """One JSDoc comment: its text and where it starts (0-based row, 1-based column)."""

    text: str
    row: int
    column: int


def where(row: int, column: int) -> str:
    """``line L, column C`` for a 0-based row and a 1-based column."""
    return f"line {row + 1}, column {column}"


def read_annotations(doc: Doc) -> dict[str, Any]:
    """The JSON Schema annotations of ``doc`` (see the module docstring); empty when
    it has none. Raises InvalidSchemaError / UnsupportedSchemaError for a tag whose
    value cannot be used, naming its line and column."""
    description: list[str] = []
    tags: list[tuple[str, list[str], int, int]] = []
    for index, raw in enumerate(_body_lines(doc.text)):
        offset, line = raw
        tag = _TAG.match(line)
        row = doc.row + index
        if tag is not None:
            column = offset + 1 + (doc.column - 1 if index == 0 else 0)
            tags.append((tag.group(1), [line[tag.end() :].strip()], row, column))
        elif tags:
            tags[-1][1].append(line)
        else:
            description.append(line)
    found: dict[str, Any] = {}
    text = "\n".join(description).replace("\r", "").strip()
    if text:
        found["description"] = _SOFT_BREAK.sub(" ", text).strip()
    examples: list[Any] = []
    for name, lines, row, column in tags:
        value = "\n".join(lines).strip()
        at = where(row, column)
        if name in _REFUSED_TAGS:
            raise UnsupportedSchemaError(
                f"{at}: the JSDoc tag `@{name}` is not supported (it {_REFUSED_TAGS[name]})"
            )
        if name in _TEXT_TAGS:
            found[_TEXT_TAGS[name]] = value
        elif name == "asType":
            if value not in _TYPE_NAMES:
                raise InvalidSchemaError(
                    f"{at}: `@asType {value}` is not a JSON Schema type "
                    f"(one of {', '.join(sorted(_TYPE_NAMES))})"
                )
            found["type"] = value
        elif name == "example":
            parsed = _json(value)
            if parsed is not _NOT_JSON:
                examples.append(parsed)
        elif name in _NUMBER_TAGS or name in _COUNT_TAGS or name in _BOOLEAN_TAGS:
            found[name] = _checked(name, _json(value or "true"), value, at)
        elif name == "deprecated":
            found[name] = _json(value) is not False
        elif name in _VALUE_TAGS:
            parsed = _json(value or "true")
            found[name] = value if parsed is _NOT_JSON else parsed
    if examples and "examples" not in found:
        found["examples"] = examples
    if "examples" in found and not isinstance(found["examples"], list):
        found["examples"] = [found["examples"]]
    return found


_NOT_JSON = object()


def _json(text: str) -> Any:
    if len(text) >= 2 and text[0] == text[-1] == "'" and "'" not in text[1:-1]:
        return text[1:-1]  # (JSON5's single-quoted string, as the reference tool reads it)
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return _NOT_JSON


def _checked(name: str, parsed: Any, text: str, at: str) -> Any:
    """``parsed`` when it is the kind of value tag ``name`` takes, else an error."""
    if name in _BOOLEAN_TAGS:
        ok = isinstance(parsed, bool)
        kind = "true or false"
    elif name in _COUNT_TAGS:
        ok = isinstance(parsed, int) and not isinstance(parsed, bool) and parsed >= 0
        kind = "a non-negative integer"
    else:
        ok = isinstance(parsed, (int, float)) and not isinstance(parsed, bool)
        kind = "a number"
    if not ok:
        raise InvalidSchemaError(f"{at}: `@{name} {text}`: the value must be {kind}")
    return parsed


def _body_lines(comment: str) -> list[tuple[int, str]]:
    """The lines of a ``/** ... */`` comment without the delimiters and each line's
    leading ``*``: (the column where the kept text starts, 0-based; the text)."""
    body = comment[3:-2] if comment.endswith("*/") else comment[3:]
    lines: list[tuple[int, str]] = []
    for index, line in enumerate(body.split("\n")):
        start = 3 if index == 0 else 0
        stripped = line.lstrip()
        start += len(line) - len(stripped)
        if index > 0 and stripped.startswith("*"):
            stripped = stripped[1:]
            start += 1
            if stripped.startswith(" "):
                stripped = stripped[1:]
                start += 1
        lines.append((start, stripped.rstrip()))
    return lines
