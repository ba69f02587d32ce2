"""Keyword spelling: the keywords of a schema that its draft does not know.

JSON Schema ignores a keyword it does not know, so ``"requried": ["name"]`` is a legal
schema that requires nothing: every value then passes without a word. :func:`unknown_keywords`
finds such keywords, with a "did you mean" when a keyword of the draft is close, for
:attr:`jsonmode.Schema.warnings` (and through it the CLI's ``jsonmode: warning:`` lines
and the façade's :class:`~jsonmode.errors.JsonModeWarning`).

What counts as known, per draft (the root's ``$schema``, else Draft 2020-12; a nested
``$schema`` switches): every keyword jsonschema's validator for that draft checks, every
keyword its metaschema (and its vocabularies) describes (``title``, ``description``,
``examples``, ``$comment``, ``$id`` ...), and the annotations every jsonmode consumer
ignores (:data:`~jsonmode.schema.keywords.ANNOTATIONS`, OpenAPI's ``discriminator``
among them). Never reported:

- ``x-`` vendor extensions (``x-order``, ``x-go-type`` ...);
- OpenAPI's annotations ``example``, ``xml`` and ``externalDocs`` (they say nothing
  about the value), and ``"nullable": false``;
- names under ``properties``, ``patternProperties``, ``$defs``/``definitions`` and
  ``dependentSchemas``: those are names, not keywords. Only keyword positions are
  walked (:func:`jsonmode.schema.refs.schema_positions`), never the inside of
  ``enum``, ``const``, ``default``, ``examples`` or of an unknown keyword.

OpenAPI's ``"nullable": true`` gets a note (severity ``"note"``), not a warning: JSON
Schema ignores it, so null is *not* allowed there unless the type allows it. A
pydantic-generated schema has no unknown keyword (short of ``json_schema_extra``).

Bounded: one pass over the keys of each subschema; "did you mean" is computed only
for the first :data:`MAX_WARNINGS` findings and only for keywords of at most
:data:`MAX_SUGGESTED_LENGTH` characters; past :data:`MAX_WARNINGS`, one last record
counts the rest. Pure functions; thread-safe.
"""

from __future__ import annotations

import difflib
import functools
import urllib.parse
from collections.abc import Iterator
from typing import Any

import jsonschema
from jsonschema_specifications import REGISTRY as _METASCHEMAS

from jsonmode._text import shown
from jsonmode.records import SchemaWarning
from jsonmode.schema.keywords import ANNOTATIONS
from jsonmode.schema.refs import schema_positions

__all__ = [
    "MAX_SUGGESTED_LENGTH",
    "MAX_WARNINGS",
    "SchemaWarning",
    "draft_title",
    "draft_uri",
    "instead",
    "is_unknown",
    "json_pointer",
    "known_keywords",
    "unknown_keywords",
    "unknown_record",
]

#: Findings listed at most; one more record then says how many were left out.
MAX_WARNINGS = 20
#: Longer unknown keywords get no "did you mean" (no keyword is this long).
MAX_SUGGESTED_LENGTH = 64


def unknown_keywords(schema: Any, dialect: str | None) -> tuple[SchemaWarning, ...]:
    """Every keyword of ``schema`` its draft does not know (see the module docstring),
    in document order, at most :data:`MAX_WARNINGS` of them plus one counting record.

    ``dialect``: the root's metaschema URI (None: Draft 2020-12).
    """
    found: list[SchemaWarning] = []
    more = 0
    for parts, keyword, name in _unknown(schema, dialect):
        if len(found) >= MAX_WARNINGS:
            more += 1
            continue
        found.append(unknown_record(json_pointer((*parts, keyword)), keyword, name))
    if more:
        found.append(
            SchemaWarning("", "", f"{more} more unknown keyword{'s' * (more != 1)} not listed")
        )
    return tuple(found)


_NULLABLE = (
    "'nullable' is OpenAPI's, not JSON Schema's: it is ignored, so null is allowed "
    'here only if the type allows it ("type": [..., "null"])'
)
# OpenAPI's annotations (Schema Object): they say nothing about the value.
_OPENAPI = frozenset({"example", "xml", "externalDocs"})


def _unknown(schema: Any, dialect: str | None) -> Iterator[tuple[tuple[str | int, ...], str, str]]:
    """(location of the subschema, unknown keyword, draft name), in document order."""
    for parts, node, name in schema_positions(schema, dialect):
        for keyword in node:
            if is_unknown(keyword, node[keyword], name):
                yield parts, keyword, name


def is_unknown(keyword: str, value: Any, draft: str) -> bool:
    """Whether ``keyword`` (holding ``value``) is one :func:`unknown_keywords` reports
    in a subschema of ``draft`` (a draft name such as ``"draft2020-12"``). A set lookup."""
    if keyword in known_keywords(draft) or keyword.startswith("x-"):
        return False
    return keyword != "nullable" or value is True


def unknown_record(location: str, keyword: str, draft: str) -> SchemaWarning:
    """The record for the unknown ``keyword`` at ``location`` (its JSON pointer) in a
    subschema of ``draft``: "did you mean", or what to write instead when it is
    another draft's keyword; a note for OpenAPI's ``"nullable": true``."""
    if keyword == "nullable":
        return SchemaWarning(location, keyword, _NULLABLE, "note")
    return SchemaWarning(location, keyword, _message(keyword, draft))


def _message(keyword: str, draft: str) -> str:
    name = shown(keyword)
    other = _drafts_knowing(keyword)
    if other:
        return (
            f"unknown keyword '{name}' is ignored: it is a keyword of {draft_title(other[-1])}, "
            f"not of {draft_title(draft)} (this schema's draft); {instead(keyword, draft)}"
        )
    suggestion = _suggestion(keyword, draft)
    if suggestion is None:
        return f"unknown keyword '{name}' is ignored"
    return f"unknown keyword '{name}' (did you mean '{suggestion}'?)"


def _suggestion(keyword: str, draft: str) -> str | None:
    """The known keyword of ``draft`` closest to ``keyword`` (case aside), if close."""
    if len(keyword) > MAX_SUGGESTED_LENGTH:
        return None
    by_lower = _lowered(draft)
    lower = keyword.lower()
    close = difflib.get_close_matches(lower, by_lower, n=1, cutoff=0.8)
    if close:
        return by_lower[close[0]]
    if len(lower) >= 4:  # (one slip in a short word is below difflib's cutoff: "tyep")
        for known, spelt in by_lower.items():
            if len(known) >= 4 and _one_slip(lower, known):
                return spelt
    return None


def _one_slip(a: str, b: str) -> bool:
    """Whether ``a`` and ``b`` differ by exactly one typing slip: a character added,
    dropped or replaced, or two neighbours swapped. Linear time."""
    if a == b or abs(len(a) - len(b)) > 1:
        return False
    start = 0
    while start < min(len(a), len(b)) and a[start] == b[start]:
        start += 1
    if len(a) == len(b):
        swapped = a[start + 1 : start + 2] + a[start : start + 1]
        return a[start + 1 :] == b[start + 1 :] or (
            swapped == b[start : start + 2] and a[start + 2 :] == b[start + 2 :]
        )
    shorter, longer = (a, b) if len(a) < len(b) else (b, a)
    return shorter[start:] == longer[start + 1 :]


@functools.cache
def _lowered(draft: str) -> dict[str, str]:
    """The draft's keywords that a schema author writes, by their lower-case spelling."""
    return {keyword.lower(): keyword for keyword in sorted(known_keywords(draft))}


def _drafts_knowing(keyword: str) -> list[str]:
    return [draft for draft in _VALIDATORS if keyword in known_keywords(draft)]


def draft_title(draft: str) -> str:
    """``draft2020-12`` → ``Draft 2020-12``, ``draft-07`` → ``Draft 7``."""
    number = draft.removeprefix("draft").lstrip("-").lstrip("0")
    return f"Draft {number}"


def draft_uri(draft: str) -> str:
    """The ``$schema`` URI that declares ``draft`` (a name as above)."""
    cls = _VALIDATORS.get(draft, jsonschema.Draft202012Validator)
    return str(cls.ID_OF(cls.META_SCHEMA))


_MODERN = ("draft2019-09", "draft2020-12")
# What a document of one family of drafts writes for another's keyword: (keyword,
# whether the document's draft is 2019-09 or later) → the fix.
_INSTEAD: dict[tuple[str, bool], str] = {
    ("prefixItems", False): "in {draft} write 'items' as an array of schemas "
    "('additionalItems' for the items after them)",
    ("dependentRequired", False): "in {draft} write 'dependencies' (a name → a list of names)",
    ("dependentSchemas", False): "in {draft} write 'dependencies' (a name → a schema)",
    ("$anchor", False): 'in {draft} name a subschema with "$id": "#name"',
    ("const", False): "in {draft} write 'enum' with the one value",
    ("additionalItems", True): "in {draft} 'items' beside 'prefixItems' takes its place",
    ("prefixItems", True): "in {draft} write 'items' as an array of schemas",
    ("$dynamicRef", True): "in {draft} write '$recursiveRef'",
    ("$dynamicAnchor", True): "in {draft} write '$recursiveAnchor'",
    ("$recursiveRef", True): "in {draft} write '$dynamicRef'",
    ("$recursiveAnchor", True): "in {draft} write '$dynamicAnchor'",
    ("dependencies", True): "in {draft} write 'dependentRequired' (a name → a list of "
    "names) or 'dependentSchemas' (a name → a schema)",
}


def instead(keyword: str, draft: str) -> str:
    """What to write in a subschema of ``draft`` for ``keyword``, a keyword of another
    draft: the equivalent when there is one, and always the other way, declaring the
    newest draft that knows ``keyword`` with ``$schema`` (one line)."""
    other = [
        name for name, cls in _VALIDATORS.items() if name != draft and keyword in cls.VALIDATORS
    ] or [name for name in _drafts_knowing(keyword) if name != draft]
    declare = (
        f'declare {draft_title(other[-1])} with "$schema": "{draft_uri(other[-1])}"'
        if other
        else ""
    )
    fix = _INSTEAD.get((keyword, draft in _MODERN))
    if fix is None:
        return declare or "remove it"
    fix = fix.format(draft=draft_title(draft))
    return f"{fix}, or {declare}" if declare else fix


_VALIDATORS: dict[str, type[Any]] = {
    "draft-03": jsonschema.Draft3Validator,
    "draft-04": jsonschema.Draft4Validator,
    "draft-06": jsonschema.Draft6Validator,
    "draft-07": jsonschema.Draft7Validator,
    "draft2019-09": jsonschema.Draft201909Validator,
    "draft2020-12": jsonschema.Draft202012Validator,
}


@functools.cache
def known_keywords(draft: str) -> frozenset[str]:
    """The keywords of ``draft`` (a name as :func:`~jsonmode.schema.refs.schema_positions`
    gives it; an unknown name: Draft 2020-12's), annotations included (see the module
    docstring). Computed once per draft."""
    cls = _VALIDATORS.get(draft, jsonschema.Draft202012Validator)
    described: set[str] = set()
    pending = [str(cls.ID_OF(cls.META_SCHEMA))]
    seen: set[str] = set()
    while pending:
        uri = pending.pop().rstrip("#")
        if uri in seen:
            continue
        seen.add(uri)
        try:
            metaschema = _METASCHEMAS.contents(uri)
        except LookupError:  # pragma: no cover - jsonschema ships every vocabulary
            continue
        if not isinstance(metaschema, dict):  # pragma: no cover
            continue
        described.update(metaschema.get("properties", {}))
        for part in metaschema.get("allOf", ()):
            ref = part.get("$ref") if isinstance(part, dict) else None
            if isinstance(ref, str):
                pending.append(urllib.parse.urljoin(uri, ref))
    return frozenset(cls.VALIDATORS) | described | ANNOTATIONS | _OPENAPI


def json_pointer(parts: tuple[str | int, ...]) -> str:
    """RFC 6901: ``("properties", "a/b")`` → ``/properties/a~1b``."""
    return "".join("/" + str(part).replace("~", "~0").replace("/", "~1") for part in parts)
