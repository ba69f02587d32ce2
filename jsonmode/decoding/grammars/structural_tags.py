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
formats nest at most ``MAX_DEPTH`` deep and a spec holds at most ``MAX_FORMATS``
formats (:mod:`~jsonmode.decoding.grammars.tag_spec`, which checks the spec); the
regex engine's state budget bounds each free-text automaton; the compile budgets
(``max_compile_seconds``, ``max_rule_states``) apply to the whole.
Thread-safe (the result is immutable and cached).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from jsonmode import limits
from jsonmode import regex as rx
from jsonmode._text import clip
from jsonmode.budget import checkpoint
from jsonmode.decoding.compile.compiler import CompileOptions
from jsonmode.decoding.grammars.compiled import (
    GRAMMAR_NESTING_DEPTH,
    CompiledGrammar,
    bind_schemas,
    compiled_constraint,
)
from jsonmode.decoding.grammars.tag_spec import (
    AnyTextFormat,
    ConstFormat,
    DispatchFormat,
    Format,
    GbnfFormat,
    OrFormat,
    RegexFormat,
    RepeatFormat,
    SchemaFormat,
    SeparatedFormat,
    SeqFormat,
    SpecReader,
    TagFormat,
    TriggeredFormat,
    read_spec,
)
from jsonmode.decoding.ir import (
    EMPTY,
    Alt,
    Call,
    Expr,
    Grammar,
    Lex,
    Lit,
    Rep,
    renamed_calls,
)
from jsonmode.decoding.ir import alt as alt_of
from jsonmode.decoding.ir import seq as seq_of
from jsonmode.errors import (
    BudgetExceededError,
    InvalidGrammarError,
    UnsupportedSchemaError,
)
from jsonmode.regex.syntax import RegexSyntaxError

if TYPE_CHECKING:
    from jsonmode.decoding.vocabulary import Vocabulary

__all__ = ["compile_structural_tag"]


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

    def expr(self, node: Format, ends: tuple[str, ...] | None) -> Expr:
        """``node``'s text, followed by one of ``ends`` when given (the enclosing tag's
        ends, which free text stops at)."""
        checkpoint()
        if isinstance(node, AnyTextFormat):
            return self.free(node.excludes, ends, node.max_chars)
        if isinstance(node, SeqFormat):
            *head, last = node.elements
            return seq_of(*(self.expr(item, None) for item in head), self.expr(last, ends))
        if isinstance(node, OrFormat):
            return alt_of(*(self.expr(item, ends) for item in node.elements))
        if isinstance(node, TriggeredFormat):
            return self.triggered(node, ends)
        if isinstance(node, DispatchFormat):
            return self.dispatch(node, ends)
        return seq_of(self.plain(node), _closing(ends))

    def plain(self, node: Format) -> Expr:
        """A format that does not look at what follows it."""
        if isinstance(node, ConstFormat):
            return Lit(node.value.encode("utf-8")) if node.value else EMPTY
        if isinstance(node, SchemaFormat):
            return Call(node.name)
        if isinstance(node, GbnfFormat):
            return self.gbnf(node)
        if isinstance(node, RegexFormat):
            return self.regex(node)
        if isinstance(node, RepeatFormat):
            return Rep(self.expr(node.content, None), node.low, node.high)
        if isinstance(node, TagFormat):
            return self.tag(node)
        if isinstance(node, SeparatedFormat):
            one = alt_of(*(self.tag(tag) for tag in node.tags))
            many = one
            if not node.stop_after_first:
                many = seq_of(one, Rep(seq_of(Lit(node.separator.encode("utf-8")), one), 0, None))
            return many if node.at_least_one else Rep(many, 0, 1)
        return self.expr(node, None)  # (free text, not followed by anything known)

    def tag(self, tag: TagFormat, skip: int = 0) -> Expr:
        """``tag``'s text, without the first ``skip`` characters of its begin."""
        content: list[Expr] = []
        ends = tuple(end for end in tag.ends if end)
        if ends:
            content.append(self.expr(tag.content, ends))
        if len(ends) < len(tag.ends):  # (an empty end: the content stops at nothing)
            content.append(self.expr(tag.content, None))
        begin = tag.begin[skip:].encode("utf-8")
        return seq_of(Lit(begin) if begin else EMPTY, alt_of(*content))

    def triggered(self, node: TriggeredFormat, ends: tuple[str, ...] | None) -> Expr:
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

    def dispatch(self, node: DispatchFormat, ends: tuple[str, ...] | None) -> Expr:
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
        try:
            dfa = _free_dfa(key[0], last, most)
        except BudgetExceededError:
            raise
        except UnsupportedSchemaError:
            shown = clip(json.dumps(key[0], ensure_ascii=False), 120)
            raise UnsupportedSchemaError(
                f"structural tag: free text that stops at {shown} needs more automaton "
                f"states than the regex engine's budget ({rx.DEFAULT_MAX_STATES})",
                hint="use fewer or shorter triggers, excludes and end strings, "
                "or a smaller max_chars",
            ) from None
        label = f"free:{json.dumps([key[0], last, most], ensure_ascii=False)}"
        made = Alt(()) if dfa.is_empty() else Lex(label, rx.utf8_byte_dfa(dfa))
        self.lexes[key] = made
        return made

    def regex(self, node: RegexFormat) -> Expr:
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

    def gbnf(self, node: GbnfFormat) -> Expr:
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
            self.rules[prefix + name] = renamed_calls(expr, lambda called: prefix + called)
        return Call(prefix + parsed.root)


def _free_dfa(stops: tuple[str, ...], last: str | None, most: int | None) -> rx.CharDFA:
    """The language of :meth:`_Writer.lex`, over code points."""
    states = rx.DEFAULT_MAX_STATES
    alternatives = "|".join(_escaped(stop) for stop in stops if stop)
    if last is None:
        dfa = (
            rx.complement(rx.compile_pattern(alternatives, max_states=states))
            if alternatives
            else rx.any_char_dfa()
        )
    else:
        early = f"[\\s\\S]*(?:{alternatives})[\\s\\S]+" if alternatives else "[]"
        ending = rx.compile_pattern(f"[\\s\\S]*{_escaped(last)}", anchored=True)
        banned = rx.compile_pattern(early, anchored=True, max_states=states)
        dfa = rx.intersect(ending, rx.complement(banned), max_states=states)
    if most is not None:
        extra = len(last) if last is not None else 0
        dfa = rx.intersect(dfa, rx.any_char_dfa(0, most + extra), max_states=states)
    return dfa


def _closing(ends: tuple[str, ...] | None) -> Expr:
    if ends is None:
        return EMPTY
    return alt_of(*(Lit(end.encode("utf-8")) for end in ends))


# -- entry point ----------------------------------------------------------------------------


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
    reader = SpecReader(options)
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
