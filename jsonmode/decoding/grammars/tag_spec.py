"""The structural-tag spec, checked: xgrammar's JSON read into a tree of formats.

:class:`SpecReader` checks a spec (every field's type, unknown fields, the triggers of
``triggered_tags``) and builds the tree that
:mod:`~jsonmode.decoding.grammars.structural_tags` compiles; JSON Schema contents are
read here (``Schema.of``, under the compile's time budget) and named by the rule that
will be bound to them. Every problem is an :class:`~jsonmode.errors.InvalidGrammarError`
naming the JSON path of the problem (``$.format.tags[1].content.type``), or an
:class:`~jsonmode.errors.UnsupportedSchemaError` for what jsonmode does not enforce.
Bounded: :data:`MAX_DEPTH` levels, :data:`MAX_FORMATS` formats, the text's size.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from jsonmode import limits
from jsonmode.budget import checkpoint
from jsonmode.decoding.grammars.compiled import read_schema
from jsonmode.errors import (
    BudgetExceededError,
    InvalidGrammarError,
    InvalidSchemaError,
    UnsupportedSchemaError,
    UsageError,
)
from jsonmode.schema.core import Schema

__all__ = [
    "MAX_DEPTH",
    "MAX_FORMATS",
    "AnyTextFormat",
    "ConstFormat",
    "DispatchFormat",
    "Format",
    "GbnfFormat",
    "OrFormat",
    "RegexFormat",
    "RepeatFormat",
    "SchemaFormat",
    "SeparatedFormat",
    "SeqFormat",
    "SpecReader",
    "TagFormat",
    "TriggeredFormat",
    "read_spec",
]

#: How deep formats may nest (a ``tag`` in a ``sequence`` in a ``tag`` ... ).
MAX_DEPTH = 64
#: How many format objects one spec may hold.
MAX_FORMATS = 10_000

_TOKEN_LEVEL = frozenset(
    {"token", "exclude_token", "any_tokens", "token_triggered_tags", "token_dispatch"}
)
_FIELDS: dict[str, tuple[frozenset[str], frozenset[str]]] = {
    # type: (required fields, optional fields), "type" aside
    "const_string": (frozenset({"value"}), frozenset()),
    "json_schema": (
        frozenset({"json_schema"}),
        frozenset({"style", "any_order", "max_whitespace_cnt"}),
    ),
    "grammar": (frozenset({"grammar"}), frozenset()),
    "regex": (frozenset({"pattern"}), frozenset()),
    "any_text": (frozenset(), frozenset({"excludes", "max_tokens", "max_chars"})),
    "sequence": (frozenset({"elements"}), frozenset()),
    "or": (frozenset({"elements"}), frozenset()),
    "optional": (frozenset({"content"}), frozenset()),
    "plus": (frozenset({"content"}), frozenset()),
    "star": (frozenset({"content"}), frozenset()),
    "repeat": (frozenset({"content", "min", "max"}), frozenset()),
    "tag": (frozenset({"begin", "content", "end"}), frozenset()),
    "triggered_tags": (
        frozenset({"triggers", "tags"}),
        frozenset({"at_least_one", "stop_after_first", "excludes"}),
    ),
    "tags_with_separator": (
        frozenset({"tags", "separator"}),
        frozenset({"at_least_one", "stop_after_first"}),
    ),
    "dispatch": (frozenset({"rules"}), frozenset({"loop", "excludes"})),
}


# -- the checked tree ----------------------------------------------------------------------


@dataclass(frozen=True)
class ConstFormat:
    value: str


@dataclass(frozen=True)
class SchemaFormat:
    name: str  # the rule bound to the schema


@dataclass(frozen=True)
class GbnfFormat:
    text: str
    path: str


@dataclass(frozen=True)
class RegexFormat:
    pattern: str
    path: str


@dataclass(frozen=True)
class AnyTextFormat:
    excludes: tuple[str, ...]
    max_chars: int | None


@dataclass(frozen=True)
class SeqFormat:
    elements: tuple[Format, ...]


@dataclass(frozen=True)
class OrFormat:
    elements: tuple[Format, ...]


@dataclass(frozen=True)
class RepeatFormat:
    content: Format
    low: int
    high: int | None


@dataclass(frozen=True)
class TagFormat:
    begin: str
    content: Format
    ends: tuple[str, ...]


@dataclass(frozen=True)
class TriggeredFormat:
    triggers: tuple[str, ...]
    tags: tuple[tuple[str, TagFormat], ...]  # (its trigger, the tag)
    at_least_one: bool
    stop_after_first: bool
    excludes: tuple[str, ...]


@dataclass(frozen=True)
class SeparatedFormat:
    tags: tuple[TagFormat, ...]
    separator: str
    at_least_one: bool
    stop_after_first: bool


@dataclass(frozen=True)
class DispatchFormat:
    rules: tuple[tuple[str, Format], ...]
    loop: bool
    excludes: tuple[str, ...]


Format = (
    ConstFormat
    | SchemaFormat
    | GbnfFormat
    | RegexFormat
    | AnyTextFormat
    | SeqFormat
    | OrFormat
    | RepeatFormat
    | TagFormat
    | TriggeredFormat
    | SeparatedFormat
    | DispatchFormat
)


def _bad(path: str, message: str, hint: str | None = None) -> InvalidGrammarError:
    return InvalidGrammarError(f"structural tag: {path}: {message}", hint=hint)


class SpecReader:
    """Checks a spec and builds the tree; reads bound schemas. Single use."""

    def __init__(self, options: Mapping[str, Any]) -> None:
        self.options = options
        self.schemas: dict[str, Schema] = {}
        self.count = 0

    def top(self, spec: object) -> Format:
        if not isinstance(spec, dict):
            raise _bad("$", f"a structural tag is a JSON object, not {_kind(spec)}")
        if spec.get("type") != "structural_tag":
            return self.node(spec, "$", 0)
        if "format" in spec:
            self.fields(spec, "$", frozenset({"type", "format"}))
            return self.node(spec["format"], "$.format", 0)
        if "structures" in spec or "triggers" in spec:
            return self.legacy(spec)
        raise _bad("$", 'no "format"', hint='write {"type": "structural_tag", "format": {...}}')

    def legacy(self, spec: dict[str, Any]) -> Format:
        """The legacy ``structures``/``triggers`` form: ``triggered_tags`` of JSON tags."""
        self.fields(spec, "$", frozenset({"type", "structures", "triggers"}))
        structures = self.array(spec, "structures", "$", required=True)
        tags = []
        for index, item in enumerate(structures):
            path = f"$.structures[{index}]"
            if not isinstance(item, dict):
                raise _bad(path, f"expected an object, not {_kind(item)}")
            self.fields(item, path, frozenset({"begin", "schema", "end"}))
            for name in ("begin", "schema", "end"):
                if name not in item:
                    raise _bad(path, f'missing "{name}"')
            schema = item["schema"]
            if isinstance(schema, str):
                try:
                    schema = json.loads(schema)
                except ValueError as exc:
                    raise _bad(f"{path}.schema", f"not JSON: {exc}") from None
            tags.append(
                {
                    "type": "tag",
                    "begin": item["begin"],
                    "content": {"type": "json_schema", "json_schema": schema},
                    "end": item["end"],
                }
            )
        triggers = self.array(spec, "triggers", "$", required=True)
        return self.node(
            {"type": "triggered_tags", "triggers": triggers, "tags": tags}, "$", 0, legacy=True
        )

    def node(self, spec: object, path: str, depth: int, *, legacy: bool = False) -> Format:
        self.count += 1
        if self.count > MAX_FORMATS:
            raise _bad(path, f"more than {MAX_FORMATS} formats", hint="split the structural tag")
        if depth > MAX_DEPTH:
            raise _bad(path, f"formats nest deeper than {MAX_DEPTH}")
        if not self.count & 63:
            checkpoint()
        if not isinstance(spec, dict):
            raise _bad(path, f"a format is a JSON object, not {_kind(spec)}")
        kind = spec.get("type")
        if not isinstance(kind, str):
            raise _bad(f"{path}.type", 'missing or not a string: every format names its "type"')
        if kind in _TOKEN_LEVEL:
            raise UnsupportedSchemaError(
                f"structural tag: {path}.type: the token-level format {kind!r} is not supported",
                hint="write the delimiter as text (a const_string, or a tag's begin/end)",
            )
        if kind == "qwen_xml_parameter":
            raise UnsupportedSchemaError(
                f"structural tag: {path}.type: {kind!r} is not supported",
                hint='use {"type": "json_schema"} with JSON arguments',
            )
        if kind not in _FIELDS:
            known = ", ".join(sorted(_FIELDS))
            raise _bad(f"{path}.type", f"unknown format {kind!r}", hint=f"known: {known}")
        required, optional = _FIELDS[kind]
        self.fields(spec, path, required | optional | {"type"})
        for name in sorted(required):
            if name not in spec:
                raise _bad(path, f'a {kind} format needs "{name}"')
        return self.build(kind, spec, path, depth, legacy)

    def build(self, kind: str, spec: dict[str, Any], path: str, depth: int, legacy: bool) -> Format:
        if kind == "const_string":
            return ConstFormat(self.string(spec, "value", path))
        if kind == "json_schema":
            return self.schema(spec, path, legacy)
        if kind == "grammar":
            return GbnfFormat(self.string(spec, "grammar", path), f"{path}.grammar")
        if kind == "regex":
            return RegexFormat(self.string(spec, "pattern", path), f"{path}.pattern")
        if kind == "any_text":
            if spec.get("max_tokens") is not None:
                raise UnsupportedSchemaError(
                    f"structural tag: {path}.max_tokens: a token budget is not enforced on text",
                    hint="use max_chars, or leave max_tokens out",
                )
            max_chars = spec.get("max_chars")
            if max_chars is not None and not _count(max_chars):
                raise _bad(f"{path}.max_chars", "expected a non-negative integer or null")
            return AnyTextFormat(self.strings(spec, "excludes", path), max_chars)
        if kind in ("sequence", "or"):
            items = self.array(spec, "elements", path, required=True)
            if not items:
                raise _bad(f"{path}.elements", "needs at least one format")
            nodes = tuple(
                self.node(item, f"{path}.elements[{i}]", depth + 1) for i, item in enumerate(items)
            )
            return SeqFormat(nodes) if kind == "sequence" else OrFormat(nodes)
        if kind in ("optional", "plus", "star", "repeat"):
            content = self.node(spec["content"], f"{path}.content", depth + 1)
            low, high = {"optional": (0, 1), "plus": (1, None), "star": (0, None)}.get(kind, (0, 0))
            if kind == "repeat":
                low, high = self.bounds(spec, path)
            return RepeatFormat(content, low, high)
        if kind == "tag":
            return self.tag(spec, path, depth)
        if kind == "triggered_tags":
            return self.triggered(spec, path, depth)
        if kind == "tags_with_separator":
            tags = self.tags(spec, path, depth)
            return SeparatedFormat(
                tags,
                self.string(spec, "separator", path),
                self.flag(spec, "at_least_one", path),
                self.flag(spec, "stop_after_first", path),
            )
        return self.dispatch(spec, path, depth)

    def schema(self, spec: dict[str, Any], path: str, legacy: bool) -> Format:
        style = spec.get("style", "json")
        if style != "json":
            raise UnsupportedSchemaError(
                f"structural tag: {path}.style: the style {style!r} is not supported",
                hint='use style "json" (the default)',
            )
        if spec.get("any_order", False) is not False:
            raise UnsupportedSchemaError(
                f"structural tag: {path}.any_order: only false (declared order) is supported"
            )
        if spec.get("max_whitespace_cnt") is not None:
            raise UnsupportedSchemaError(
                f"structural tag: {path}.max_whitespace_cnt: not supported",
                hint="leave it out (the schema's decoder bounds whitespace itself)",
            )
        schema = spec["json_schema"]
        if not isinstance(schema, (dict, bool)):
            raise _bad(
                f"{path}.json_schema", f"expected an object or a boolean, not {_kind(schema)}"
            )
        name = f"schema{len(self.schemas)}"
        try:
            self.schemas[name] = read_schema(schema, self.options)
        except InvalidSchemaError as exc:
            raise _bad(f"{path}.json_schema", exc.message, exc.hint) from None
        except BudgetExceededError:
            raise
        except UnsupportedSchemaError as exc:
            raise UnsupportedSchemaError(
                f"structural tag: {path}.json_schema: {exc.message}", hint=exc.hint
            ) from None
        return SchemaFormat(name)

    def tag(self, spec: object, path: str, depth: int, *, typed: bool = True) -> TagFormat:
        if not isinstance(spec, dict):
            raise _bad(path, f"a tag is a JSON object, not {_kind(spec)}")
        kind = spec.get("type", "tag")
        if kind != "tag":
            raise _bad(f"{path}.type", f'expected "tag", not {kind!r}')
        if typed:
            self.count += 1
        self.fields(spec, path, frozenset({"type", "begin", "content", "end"}))
        for name in ("begin", "content", "end"):
            if name not in spec:
                raise _bad(path, f'a tag needs "{name}"')
        if isinstance(spec["begin"], dict):
            raise UnsupportedSchemaError(
                f"structural tag: {path}.begin: a token begin is not supported",
                hint="write the begin as text",
            )
        begin = self.string(spec, "begin", path)
        end = spec["end"]
        if isinstance(end, dict):
            raise UnsupportedSchemaError(
                f"structural tag: {path}.end: a token end is not supported",
                hint="write the end as text",
            )
        if isinstance(end, str):
            ends: tuple[str, ...] = (end,)
        else:
            ends = self.strings(spec, "end", path)
            if not ends:
                raise _bad(f"{path}.end", "needs at least one end string")
        content = self.node(spec["content"], f"{path}.content", depth + 1)
        return TagFormat(begin, content, ends)

    def tags(self, spec: dict[str, Any], path: str, depth: int) -> tuple[TagFormat, ...]:
        items = self.array(spec, "tags", path, required=True)
        if not items:
            raise _bad(f"{path}.tags", "needs at least one tag")
        return tuple(self.tag(item, f"{path}.tags[{i}]", depth + 1) for i, item in enumerate(items))

    def triggered(self, spec: dict[str, Any], path: str, depth: int) -> Format:
        triggers = self.strings(spec, "triggers", path)
        if not triggers:
            raise _bad(f"{path}.triggers", "needs at least one trigger")
        for index, trigger in enumerate(triggers):
            if not trigger:
                raise _bad(f"{path}.triggers[{index}]", "a trigger is not empty")
        tags = self.tags(spec, path, depth)
        paired = []
        for index, tag in enumerate(tags):
            matching = [t for t in triggers if tag.begin.startswith(t)]
            if len(matching) != 1:
                what = "no trigger" if not matching else f"several triggers ({matching})"
                raise _bad(
                    f"{path}.tags[{index}].begin",
                    f"{tag.begin!r} starts with {what}",
                    hint="each tag's begin starts with exactly one of the triggers",
                )
            paired.append((matching[0], tag))
        return TriggeredFormat(
            triggers,
            tuple(paired),
            self.flag(spec, "at_least_one", path),
            self.flag(spec, "stop_after_first", path),
            self.strings(spec, "excludes", path),
        )

    def dispatch(self, spec: dict[str, Any], path: str, depth: int) -> Format:
        items = self.array(spec, "rules", path, required=True)
        if not items:
            raise _bad(f"{path}.rules", "needs at least one rule")
        rules = []
        for index, item in enumerate(items):
            where = f"{path}.rules[{index}]"
            if not isinstance(item, list) or len(item) != 2:
                raise _bad(where, "a rule is a [pattern, format] pair")
            if not isinstance(item[0], str) or not item[0]:
                raise _bad(f"{where}[0]", "a pattern is a non-empty string")
            rules.append((item[0], self.node(item[1], f"{where}[1]", depth + 1)))
        loop = spec.get("loop", True)
        if not isinstance(loop, bool):
            raise _bad(f"{path}.loop", f"expected true or false, not {_kind(loop)}")
        return DispatchFormat(tuple(rules), loop, self.strings(spec, "excludes", path))

    # -- fields ------------------------------------------------------------------------

    def fields(self, spec: dict[str, Any], path: str, allowed: frozenset[str]) -> None:
        for name in spec:
            if name not in allowed:
                raise _bad(
                    f"{path}.{name}",
                    "unknown field",
                    hint=f"known here: {', '.join(sorted(allowed))}",
                )

    def string(self, spec: dict[str, Any], name: str, path: str) -> str:
        value = spec[name]
        if not isinstance(value, str):
            raise _bad(f"{path}.{name}", f"expected a string, not {_kind(value)}")
        return value

    def strings(self, spec: dict[str, Any], name: str, path: str) -> tuple[str, ...]:
        items = self.array(spec, name, path, required=False)
        for index, item in enumerate(items):
            if not isinstance(item, str):
                raise _bad(f"{path}.{name}[{index}]", f"expected a string, not {_kind(item)}")
        return tuple(dict.fromkeys(items))

    def array(self, spec: dict[str, Any], name: str, path: str, *, required: bool) -> list[Any]:
        if name not in spec:
            if required:
                raise _bad(path, f'missing "{name}"')
            return []
        value = spec[name]
        if not isinstance(value, list):
            raise _bad(f"{path}.{name}", f"expected an array, not {_kind(value)}")
        return value

    def flag(self, spec: dict[str, Any], name: str, path: str) -> bool:
        value = spec.get(name, False)
        if not isinstance(value, bool):
            raise _bad(f"{path}.{name}", f"expected true or false, not {_kind(value)}")
        return value

    def bounds(self, spec: dict[str, Any], path: str) -> tuple[int, int | None]:
        low, high = spec["min"], spec["max"]
        if not _count(low):
            raise _bad(f"{path}.min", "expected a non-negative integer")
        if high == -1:
            return low, None
        if not _count(high) or high < low:
            raise _bad(f"{path}.max", "expected an integer >= min, or -1 (unbounded)")
        return low, high


def _count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _kind(value: object) -> str:
    """A JSON value's kind in words, for messages."""
    for kinds, word in _KINDS:
        if isinstance(value, kinds):
            return word
    return "null" if value is None else type(value).__name__


_KINDS: tuple[tuple[type | tuple[type, ...], str], ...] = (
    (bool, "a boolean"),
    ((int, float), "a number"),
    (str, "a string"),
    (list, "an array"),
    (dict, "an object"),
)


def read_spec(spec: object) -> object:
    """``spec`` as a JSON value: a dict as given, JSON text parsed (bounded).

    Raises:
        InvalidGrammarError: text that is not JSON; UsageError: neither text nor a dict;
        BudgetExceededError: text over :data:`~jsonmode.limits.MAX_SCHEMA_CHARS`.
    """
    if isinstance(spec, (str, bytes)):
        text = spec.decode("utf-8", "replace") if isinstance(spec, bytes) else spec
        limits.check_schema_size(len(text), "the structural tag")
        try:
            return json.loads(text)
        except ValueError as exc:
            raise _bad("$", f"not JSON: {exc}") from None
        except RecursionError:
            raise _bad("$", "nests too deep to read") from None
    if not isinstance(spec, dict):
        raise UsageError(f"a structural tag is a dict or JSON text, not {type(spec).__name__}")
    return spec
