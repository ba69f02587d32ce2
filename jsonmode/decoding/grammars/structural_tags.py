"""Structural tags: xgrammar's JSON format for free text with constrained regions.

:func:`compile_structural_tag` reads the format vLLM accepts as
``response_format: {"type": "structural_tag", ...}`` and compiles it with jsonmode's own
engine, to the same :class:`~jsonmode.decoding.grammars.compiled.CompiledGrammar` as
``compile_grammar`` (``accepts``, ``matcher``, ``unenforced``), through
:func:`~jsonmode.decoding.grammars.compiled.compiled_constraint` (one cache, one set of
budgets).

Supported formats: ``const_string``, ``json_schema`` (style ``"json"``), ``grammar``
(GBNF), ``regex``, ``any_text`` (``excludes``, ``max_chars``), ``sequence``, ``or``,
``optional``, ``plus``, ``star``, ``repeat``, ``tag`` (string ``begin``; ``end`` a
string or a list of strings), ``triggered_tags`` (``triggers``, ``tags``,
``at_least_one``, ``stop_after_first``, ``excludes``), ``tags_with_separator`` and
``dispatch``; the outer ``{"type": "structural_tag", "format": ...}`` may be left out;
the legacy ``{"type": "structural_tag", "structures": [{"begin", "schema", "end"}],
"triggers": [...]}`` is read as the ``triggered_tags`` it stands for. Token-level
formats (``token``, ``any_tokens``, ...), ``any_text.max_tokens`` and the XML styles
of ``json_schema`` are refused (UnsupportedSchemaError), never enforced loosely.

How free text compiles: a stretch of free text is a regular language built with the
regex engine's Boolean operations. Free text before a trigger is "text whose first
occurrence of any stop string (a trigger, an excluded string, the enclosing tag's end)
is that trigger, at its very end" — the trigger dispatches where it first appears, as
xgrammar's matcher does — and the free text that closes a region ends with the
enclosing tag's end at its first stop occurrence (or, outside any tag, holds no stop
string at all). JSON Schema contents are rules bound to their schemas
(:func:`~jsonmode.decoding.grammars.compiled.bind_schemas`).

Bounds: the spec's JSON text is at most :data:`~jsonmode.limits.MAX_SCHEMA_CHARS`,
formats nest at most :data:`MAX_DEPTH` deep, a spec holds at most :data:`MAX_FORMATS`
formats; the regex engine's state budget bounds each free-text automaton; the
compile budgets (``max_compile_seconds``, ``max_rule_states``) apply to the whole.
Thread-safe (the result is immutable and cached).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from jsonmode import limits
from jsonmode import regex as rx
from jsonmode.budget import checkpoint
from jsonmode.decoding.compile.compiler import CompileOptions
from jsonmode.decoding.grammars.compiled import (
    GRAMMAR_NESTING_DEPTH,
    CompiledGrammar,
    bind_schemas,
    compiled_constraint,
    read_schema,
)
from jsonmode.decoding.ir import EMPTY, Alt, Call, Expr, Grammar, Lex, Lit, Members, Rep, Seq
from jsonmode.decoding.ir import alt as alt_of
from jsonmode.decoding.ir import seq as seq_of
from jsonmode.errors import (
    BudgetExceededError,
    InvalidGrammarError,
    InvalidSchemaError,
    UnsupportedSchemaError,
    UsageError,
)
from jsonmode.regex.syntax import RegexSyntaxError
from jsonmode.schema.core import Schema

if TYPE_CHECKING:
    from jsonmode.decoding.vocabulary import Vocabulary

__all__ = ["MAX_DEPTH", "MAX_FORMATS", "compile_structural_tag"]

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
class _Const:
    value: str


@dataclass(frozen=True)
class _Schema:
    name: str  # the rule bound to the schema


@dataclass(frozen=True)
class _Gbnf:
    text: str
    path: str


@dataclass(frozen=True)
class _Regex:
    pattern: str
    path: str


@dataclass(frozen=True)
class _AnyText:
    excludes: tuple[str, ...]
    max_chars: int | None


@dataclass(frozen=True)
class _Seq:
    elements: tuple[_Node, ...]


@dataclass(frozen=True)
class _Or:
    elements: tuple[_Node, ...]


@dataclass(frozen=True)
class _Repeat:
    content: _Node
    low: int
    high: int | None


@dataclass(frozen=True)
class _Tag:
    begin: str
    content: _Node
    ends: tuple[str, ...]


@dataclass(frozen=True)
class _Triggered:
    triggers: tuple[str, ...]
    tags: tuple[tuple[str, _Tag], ...]  # (its trigger, the tag)
    at_least_one: bool
    stop_after_first: bool
    excludes: tuple[str, ...]


@dataclass(frozen=True)
class _Separated:
    tags: tuple[_Tag, ...]
    separator: str
    at_least_one: bool
    stop_after_first: bool


@dataclass(frozen=True)
class _Dispatch:
    rules: tuple[tuple[str, _Node], ...]
    loop: bool
    excludes: tuple[str, ...]


_Node = (
    _Const
    | _Schema
    | _Gbnf
    | _Regex
    | _AnyText
    | _Seq
    | _Or
    | _Repeat
    | _Tag
    | _Triggered
    | _Separated
    | _Dispatch
)


def _bad(path: str, message: str, hint: str | None = None) -> InvalidGrammarError:
    return InvalidGrammarError(f"structural tag: {path}: {message}", hint=hint)


class _Reader:
    """Checks a spec and builds the tree; reads bound schemas. Single use."""

    def __init__(self, options: Mapping[str, Any]) -> None:
        self.options = options
        self.schemas: dict[str, Schema] = {}
        self.count = 0

    def top(self, spec: object) -> _Node:
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

    def legacy(self, spec: dict[str, Any]) -> _Node:
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

    def node(self, spec: object, path: str, depth: int, *, legacy: bool = False) -> _Node:
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

    def build(self, kind: str, spec: dict[str, Any], path: str, depth: int, legacy: bool) -> _Node:
        if kind == "const_string":
            return _Const(self.string(spec, "value", path))
        if kind == "json_schema":
            return self.schema(spec, path, legacy)
        if kind == "grammar":
            return _Gbnf(self.string(spec, "grammar", path), f"{path}.grammar")
        if kind == "regex":
            return _Regex(self.string(spec, "pattern", path), f"{path}.pattern")
        if kind == "any_text":
            if spec.get("max_tokens") is not None:
                raise UnsupportedSchemaError(
                    f"structural tag: {path}.max_tokens: a token budget is not enforced on text",
                    hint="use max_chars, or leave max_tokens out",
                )
            max_chars = spec.get("max_chars")
            if max_chars is not None and not _count(max_chars):
                raise _bad(f"{path}.max_chars", "expected a non-negative integer or null")
            return _AnyText(self.strings(spec, "excludes", path), max_chars)
        if kind in ("sequence", "or"):
            items = self.array(spec, "elements", path, required=True)
            if not items:
                raise _bad(f"{path}.elements", "needs at least one format")
            nodes = tuple(
                self.node(item, f"{path}.elements[{i}]", depth + 1) for i, item in enumerate(items)
            )
            return _Seq(nodes) if kind == "sequence" else _Or(nodes)
        if kind in ("optional", "plus", "star", "repeat"):
            content = self.node(spec["content"], f"{path}.content", depth + 1)
            low, high = {"optional": (0, 1), "plus": (1, None), "star": (0, None)}.get(kind, (0, 0))
            if kind == "repeat":
                low, high = self.bounds(spec, path)
            return _Repeat(content, low, high)
        if kind == "tag":
            return self.tag(spec, path, depth)
        if kind == "triggered_tags":
            return self.triggered(spec, path, depth)
        if kind == "tags_with_separator":
            tags = self.tags(spec, path, depth)
            return _Separated(
                tags,
                self.string(spec, "separator", path),
                self.flag(spec, "at_least_one", path),
                self.flag(spec, "stop_after_first", path),
            )
        return self.dispatch(spec, path, depth)

    def schema(self, spec: dict[str, Any], path: str, legacy: bool) -> _Node:
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
        return _Schema(name)

    def tag(self, spec: object, path: str, depth: int, *, typed: bool = True) -> _Tag:
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
        return _Tag(begin, content, ends)

    def tags(self, spec: dict[str, Any], path: str, depth: int) -> tuple[_Tag, ...]:
        items = self.array(spec, "tags", path, required=True)
        if not items:
            raise _bad(f"{path}.tags", "needs at least one tag")
        return tuple(self.tag(item, f"{path}.tags[{i}]", depth + 1) for i, item in enumerate(items))

    def triggered(self, spec: dict[str, Any], path: str, depth: int) -> _Node:
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
        return _Triggered(
            triggers,
            tuple(paired),
            self.flag(spec, "at_least_one", path),
            self.flag(spec, "stop_after_first", path),
            self.strings(spec, "excludes", path),
        )

    def dispatch(self, spec: dict[str, Any], path: str, depth: int) -> _Node:
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
        return _Dispatch(tuple(rules), loop, self.strings(spec, "excludes", path))

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
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


# -- compiling the tree ----------------------------------------------------------------------


def _escaped(text: str) -> str:
    """``text`` as a regular expression matching exactly it."""
    return "".join("\\" + ch if ch in "\\^$.|?*+()[]{}/-" else ch for ch in text)


class _Writer:
    """Writes the tree as grammar rules. Single use, inside the compile's deadline."""

    def __init__(self, settings: CompileOptions) -> None:
        self.settings = settings
        self.rules: dict[str, Expr] = {}
        self.lexes: dict[tuple[Any, ...], Expr] = {}
        self.grammars = 0

    def expr(self, node: _Node, ends: tuple[str, ...] | None) -> Expr:
        """``node``'s text, followed by one of ``ends`` when given (the enclosing tag's
        ends, which free text stops at)."""
        checkpoint()
        if isinstance(node, _AnyText):
            return self.free(node.excludes, ends, node.max_chars)
        if isinstance(node, _Seq):
            *head, last = node.elements
            return seq_of(*(self.expr(item, None) for item in head), self.expr(last, ends))
        if isinstance(node, _Or):
            return alt_of(*(self.expr(item, ends) for item in node.elements))
        if isinstance(node, _Triggered):
            return self.triggered(node, ends)
        if isinstance(node, _Dispatch):
            return self.dispatch(node, ends)
        return seq_of(self.plain(node), _closing(ends))

    def plain(self, node: _Node) -> Expr:
        """A format that does not look at what follows it."""
        if isinstance(node, _Const):
            return Lit(node.value.encode("utf-8")) if node.value else EMPTY
        if isinstance(node, _Schema):
            return Call(node.name)
        if isinstance(node, _Gbnf):
            return self.gbnf(node)
        if isinstance(node, _Regex):
            return self.regex(node)
        if isinstance(node, _Repeat):
            return Rep(self.expr(node.content, None), node.low, node.high)
        if isinstance(node, _Tag):
            return self.tag(node)
        if isinstance(node, _Separated):
            one = alt_of(*(self.tag(tag) for tag in node.tags))
            many = one
            if not node.stop_after_first:
                many = seq_of(one, Rep(seq_of(Lit(node.separator.encode("utf-8")), one), 0, None))
            return many if node.at_least_one else Rep(many, 0, 1)
        return self.expr(node, None)  # (free text, not followed by anything known)

    def tag(self, tag: _Tag, skip: int = 0) -> Expr:
        """``tag``'s text, without the first ``skip`` characters of its begin."""
        content: list[Expr] = []
        ends = tuple(end for end in tag.ends if end)
        if ends:
            content.append(self.expr(tag.content, ends))
        if len(ends) < len(tag.ends):  # (an empty end: the content stops at nothing)
            content.append(self.expr(tag.content, None))
        begin = tag.begin[skip:].encode("utf-8")
        return seq_of(Lit(begin) if begin else EMPTY, alt_of(*content))

    def triggered(self, node: _Triggered, ends: tuple[str, ...] | None) -> Expr:
        stops = (*node.triggers, *node.excludes, *(ends or ()))
        by_trigger: dict[str, list[Expr]] = {}
        whole = []
        for trigger, tag in node.tags:
            whole.append(self.tag(tag))
            by_trigger.setdefault(trigger, []).append(self.tag(tag, len(trigger)))
        calls = alt_of(
            *(
                seq_of(self.lex(stops, trigger, None), alt_of(*bodies))
                for trigger, bodies in by_trigger.items()
            )
        )
        closing = self.free_with(stops, ends, None)
        if node.stop_after_first:
            after = _closing(ends)
            if node.at_least_one:
                return seq_of(alt_of(*whole), after)
            return alt_of(closing, seq_of(calls, after))
        loop = seq_of(Rep(calls, 0, None), closing)
        return seq_of(alt_of(*whole), loop) if node.at_least_one else loop

    def dispatch(self, node: _Dispatch, ends: tuple[str, ...] | None) -> Expr:
        stops = (*(pattern for pattern, _ in node.rules), *node.excludes, *(ends or ()))
        calls = alt_of(
            *(
                seq_of(self.lex(stops, pattern, None), self.expr(content, None))
                for pattern, content in node.rules
            )
        )
        closing = self.free_with(stops, ends, None)
        if node.loop:
            return seq_of(Rep(calls, 0, None), closing)
        return alt_of(closing, seq_of(calls, _closing(ends)))

    def free(
        self, excludes: tuple[str, ...], ends: tuple[str, ...] | None, most: int | None
    ) -> Expr:
        return self.free_with((*excludes, *(ends or ())), ends, most)

    def free_with(
        self, stops: tuple[str, ...], ends: tuple[str, ...] | None, most: int | None
    ) -> Expr:
        """Free text holding none of ``stops``, then one of ``ends`` (when given) at the
        first stop; at most ``most`` characters of free text."""
        if ends is None:
            return self.lex(stops, None, most)
        return alt_of(*(self.lex(stops, end, most) for end in ends))

    def lex(self, stops: tuple[str, ...], last: str | None, most: int | None) -> Expr:
        """Text whose first occurrence of a stop string is ``last`` at its end (``last``
        None: text with no stop string), with at most ``most`` characters before ``last``."""
        key = (tuple(sorted(set(stops))), last, most)
        made = self.lexes.get(key)
        if made is not None:
            return made
        states = rx.DEFAULT_MAX_STATES
        alternatives = "|".join(_escaped(stop) for stop in key[0] if stop)
        if last is None:
            if alternatives:
                dfa = rx.complement(rx.compile_pattern(alternatives, max_states=states))
            else:
                dfa = rx.any_char_dfa()
        else:
            early = f"[\\s\\S]*(?:{alternatives})[\\s\\S]+" if alternatives else "[]"
            ending = rx.compile_pattern(f"[\\s\\S]*{_escaped(last)}", anchored=True)
            banned = rx.compile_pattern(early, anchored=True, max_states=states)
            dfa = rx.intersect(ending, rx.complement(banned), max_states=states)
        if most is not None:
            extra = len(last) if last is not None else 0
            dfa = rx.intersect(dfa, rx.any_char_dfa(0, most + extra), max_states=states)
        label = f"free:{json.dumps([key[0], last, most], ensure_ascii=False)}"
        made = Alt(()) if dfa.is_empty() else Lex(label, rx.utf8_byte_dfa(dfa))
        self.lexes[key] = made
        return made

    def regex(self, node: _Regex) -> Expr:
        where = f"structural tag: {node.path}"
        try:
            dfa = rx.compile_pattern(node.pattern, anchored=True)
        except RegexSyntaxError as exc:
            if exc.malformed:
                raise InvalidGrammarError(
                    f"{where}: invalid regular expression: {exc.what}"
                ) from None
            raise UnsupportedSchemaError(f"{where}: not supported: {exc.what}") from None
        if dfa.is_empty():
            raise UnsupportedSchemaError(f"{where}: the pattern matches no text at all")
        return Lex(f"regex:{node.pattern}", rx.utf8_byte_dfa(dfa))

    def gbnf(self, node: _Gbnf) -> Expr:
        from jsonmode.decoding.grammars import gbnf

        try:
            parsed = gbnf.parse(node.text)
        except InvalidGrammarError as exc:
            raise InvalidGrammarError(
                f"structural tag: {node.path}: {exc.message}", hint=exc.hint
            ) from None
        prefix = f"grammar{self.grammars}/"
        self.grammars += 1
        for name, expr in parsed.rules.items():
            self.rules[prefix + name] = _prefixed(expr, prefix)
        return Call(prefix + parsed.root)


def _closing(ends: tuple[str, ...] | None) -> Expr:
    if ends is None:
        return EMPTY
    return alt_of(*(Lit(end.encode("utf-8")) for end in ends))


def _prefixed(expr: Expr, prefix: str) -> Expr:
    """``expr`` with every rule it calls renamed ``prefix + name``."""
    if isinstance(expr, Call):
        return Call(prefix + expr.rule)
    if isinstance(expr, Seq):
        return Seq(tuple(_prefixed(item, prefix) for item in expr.items))
    if isinstance(expr, Alt):
        return Alt(tuple(_prefixed(option, prefix) for option in expr.options))
    if isinstance(expr, Rep):
        return Rep(_prefixed(expr.item, prefix), expr.low, expr.high)
    if isinstance(expr, Members):
        return Members(
            tuple((_prefixed(member, prefix), needed) for member, needed in expr.members),
            None if expr.extra is None else _prefixed(expr.extra, prefix),
            _prefixed(expr.sep, prefix),
            expr.any_order,
        )
    return expr


# -- entry point ----------------------------------------------------------------------------


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


def compile_structural_tag(
    spec: object, vocabulary: Vocabulary | None = None, **options: Any
) -> CompiledGrammar:
    """Compile an xgrammar structural tag (see the module) for constrained decoding.

    Args:
        spec: the structural tag, a dict or its JSON text, with or without the outer
            ``{"type": "structural_tag", "format": ...}`` (or the legacy
            ``structures``/``triggers`` form).
        vocabulary: the tokenizer's vocabulary, for masks (None: ``accepts`` only).
        **options: :class:`~jsonmode.decoding.compile.compiler.CompileOptions` fields, as
            for ``compile_grammar`` (``max_nesting_depth`` defaults to 256 levels).

    Returns:
        a :class:`~jsonmode.decoding.grammars.compiled.CompiledGrammar` of kind
        ``"structural_tag"`` (``source``: the spec's JSON text; ``schemas``: the JSON
        Schema contents, by rule name). Cached like every compiled constraint.

    Raises:
        InvalidGrammarError: a malformed spec; the message names the JSON path of the
            problem (``$.format.tags[1].content.type``). A GBNF or regex content's own
            syntax errors are raised with the path too.
        UnsupportedSchemaError: a format or field jsonmode does not enforce (token-level
            formats, ``max_tokens``, XML styles), a content that accepts nothing, a
            free-text automaton over the regex engine's state budget.
        BudgetExceededError: a spec over the size, depth or format-count bounds, or a
            compile budget. UsageError: ``spec`` of another type, bad options.
    """
    value = read_spec(spec)
    options.setdefault("max_nesting_depth", GRAMMAR_NESTING_DEPTH)
    reader = _Reader(options)
    tree = reader.top(value)
    source = json.dumps(value, ensure_ascii=False, sort_keys=True)
    limits.check_schema_size(len(source), "the structural tag")

    def build(settings: CompileOptions) -> tuple[Grammar, tuple[str, ...]]:
        writer = _Writer(settings)
        root = writer.expr(tree, None)
        grammar = Grammar("root", {"root": root, **writer.rules})
        return bind_schemas(grammar, reader.schemas, settings)

    return compiled_constraint(
        ("structural_tag", source),
        build,
        vocabulary,
        options,
        "structural_tag",
        source,
        reader.schemas,
    )
