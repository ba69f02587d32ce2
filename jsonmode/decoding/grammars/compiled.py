"""Constraints beyond JSON Schema: GBNF grammars, regular expressions, choices.

Each compiles to the same intermediate form as a schema (a
:class:`~jsonmode.decoding.ir.Grammar` of byte-level rules), then to the same
automata, caches and mask engine, so a :class:`CompiledGrammar` keeps the compiled-
schema contract: ``accepts(text)``, ``matcher()`` (``mask``, ``advance``,
``is_finished``), ``unenforced`` (empty unless an embedded schema leaves a keyword to
post-validation), plus :meth:`CompiledGrammar.diagnose`, which says where a text stops
matching and what was expected there (the prompted tier's re-ask uses it).

- :func:`compile_grammar` reads llama.cpp's GBNF (:mod:`jsonmode.decoding.grammars.gbnf`); a
  rule may be bound to a JSON Schema with ``schemas={"answer": Model}``: the rule
  ``answer`` then matches exactly the documents the schema's decoder allows.
- :func:`compile_regex`: the ECMA-262 subset of ``pattern``, anchored to the whole text.
- :func:`compile_choice`: exactly one of the given strings.

Compiled constraints are immutable, thread-safe and cached (by kind, source, bound
schemas, vocabulary fingerprint and options), like compiled schemas.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import re
import sys
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Literal, overload

from jsonmode import events, limits
from jsonmode import regex as rx
from jsonmode._text import clip
from jsonmode.budget import checkpoint, deadline
from jsonmode.decoding.automata.network import build_network
from jsonmode.decoding.automata.rule_graph import calls as calls_of
from jsonmode.decoding.automata.rule_graph import components
from jsonmode.decoding.collector import collector_paused
from jsonmode.decoding.compile.compiler import CompileOptions, build_grammar
from jsonmode.decoding.compiled import Compiled, text_argument
from jsonmode.decoding.grammars.counted import counted_repetitions
from jsonmode.decoding.ir import (
    Alt,
    Call,
    Expr,
    Grammar,
    Lex,
    Lit,
    Members,
    Rep,
    Seq,
    alt,
    renamed_calls,
    seq,
)
from jsonmode.decoding.reasoning_gate import GatedConstraint, gate
from jsonmode.decoding.reference import ReferenceMatcher
from jsonmode.decoding.textcheck import TextChecker, checking, raise_if_time
from jsonmode.errors import (
    BudgetExceededError,
    InvalidGrammarError,
    JsonModeError,
    UnsupportedSchemaError,
    UsageError,
)
from jsonmode.reasoning import Reasoning
from jsonmode.regex.syntax import RegexSyntaxError
from jsonmode.schema.core import Schema

if TYPE_CHECKING:
    from jsonmode.decoding.vocabulary import Vocabulary

__all__ = [
    "CompiledGrammar",
    "Mismatch",
    "bind_schemas",
    "compile_choice",
    "compile_grammar",
    "compile_regex",
    "compile_settings",
    "compiled_constraint",
    "read_schema",
]

# A ``{`` before a digit: where a grammar's text may hold a ``{m,n}`` repetition (the
# counted rewrite has nothing to do in a text without one).
_COUNTS = re.compile(r"\{\s*\d")

Syntax = Literal["gbnf"]
Kind = Literal["gbnf", "regex", "choice", "jsonl", "csv", "structural_tag"]

#: compile_grammar's default ``max_nesting_depth`` (a schema's is 64).
GRAMMAR_NESTING_DEPTH = 256

_CACHE_LIMIT = 128
_cache: dict[tuple[Any, ...], CompiledGrammar] = {}
_lock = threading.Lock()


@dataclass(frozen=True, slots=True)
class Mismatch:
    """Where a text stops matching a constraint.

    Attributes:
        offset: the byte offset (in the text's UTF-8) of the first byte that cannot be
            there, or the text's length when the text is a proper prefix (it ended early).
        expected: what could come at ``offset``, in words (``'"," or "]"'``,
            ``a character in [0-9]``, ``more text``).
        ended: the text ended before the constraint was satisfied.
        depth: set (to ``max_nesting_depth``) when the byte at ``offset`` would be
            allowed but for the nesting bound: the text nests deeper than it allows.
    """

    offset: int
    expected: str
    ended: bool
    depth: int | None = None

    def __str__(self) -> str:
        if self.ended:
            return f"the text ends at byte {self.offset} where {self.expected} must follow"
        return f"the text stops matching at byte {self.offset}: {self.reason}"

    @property
    def reason(self) -> str:
        """Why the byte at ``offset`` cannot be there, in words."""
        if self.depth is None:
            return f"expected {self.expected}"
        return (
            f"nesting deeper than max_nesting_depth ({self.depth}) allows (compile the "
            "grammar with a larger max_nesting_depth=N to raise it); within the limit, "
            f"expected {self.expected}"
        )


@dataclasses.dataclass(frozen=True, eq=False)
class CompiledGrammar(Compiled):
    """A grammar, regular expression or choice compiled for constrained decoding.

    Attributes (beyond :class:`~jsonmode.decoding.compiled.Compiled`'s):
        kind: ``"gbnf"``, ``"regex"``, ``"choice"``, ``"jsonl"`` or ``"csv"``.
        source: the text it was compiled from (a grammar, a pattern; the choices as a
            JSON array), shown to a model by the prompted tier.
        schemas: the JSON Schemas bound to rules, by rule name.
    """

    depth_in_levels: ClassVar[bool] = True
    kind: Kind = dataclasses.field(kw_only=True)
    source: str = dataclasses.field(kw_only=True)
    schemas: Mapping[str, Schema] = dataclasses.field(kw_only=True, default_factory=dict)

    def diagnose(self, text: str | bytes) -> Mismatch | None:
        """None when ``text`` is accepted, else where and why it is not.

        Cost: one walk over the text (like :meth:`accepts`: linear in the text); on a
        refused byte, one more walk up to it with a far larger nesting bound, to tell
        the bound from a mismatch (``Mismatch.depth``).

        Raises:
            UsageError: ``text`` is neither ``str`` nor bytes.
            BudgetExceededError: as :meth:`accepts` (the time budget covers both walks).
        """
        given = text_argument(text, "diagnose")
        data = given.encode("utf-8", "surrogatepass") if isinstance(given, str) else given
        checker = self.checker()
        with checking(self.options.max_compile_seconds, len(data)):
            state = checker.initial()
            for offset, byte in enumerate(data):
                following = checker.step(state, byte)
                if not following:
                    expected = _describe(checker.allowed_bytes(state))
                    depth = self.options.max_nesting_depth
                    deeper = depth if self._deeper_takes(data[: offset + 1]) else None
                    return Mismatch(offset, expected, False, deeper)
                state = following
            if checker.can_end(state):
                return None
            return Mismatch(len(data), _describe(checker.allowed_bytes(state)), True)

    def _deeper_takes(self, data: bytes) -> bool:
        """Whether a matcher with a far larger nesting bound reads all of ``data``
        (a prefix the bounded one refuses at its last byte): the bound is the cause.
        Bounded: a text of n bytes nests at most n levels; the caller's time budget
        running out is raised, not taken for a "no"."""
        deeper = TextChecker(
            ReferenceMatcher(
                self.network,
                max_depth=self.options.max_nesting_depth + len(data) + 64,
                levels=self.depth_in_levels,
            )
        )
        try:
            return bool(deeper.feed(deeper.initial(), data))
        except BudgetExceededError as error:
            raise_if_time(error)
            return False


def _describe(allowed: Any) -> str:
    """Allowed next bytes in words: a few characters quoted, else ranges."""
    ranges: list[tuple[int, int]] = []
    for byte in range(0x80):
        if allowed[byte]:
            if ranges and ranges[-1][1] == byte - 1:
                ranges[-1] = (ranges[-1][0], byte)
            else:
                ranges.append((byte, byte))
    other = bool(allowed[0x80:].any())
    if not ranges and not other:
        return "nothing (the text is complete)"
    count = sum(hi - lo + 1 for lo, hi in ranges)
    if count <= 6:
        words = [json.dumps(chr(b)) for lo, hi in ranges for b in range(lo, hi + 1)]
    else:
        shown = "".join(_show(lo) if lo == hi else f"{_show(lo)}-{_show(hi)}" for lo, hi in ranges)
        words = [f"a character in [{shown}]"]
    if other:
        words.append("a non-ASCII character")
    return " or ".join(words)


def _show(byte: int) -> str:
    char = chr(byte)
    if char in "\\]-^":
        return "\\" + char
    if 0x20 <= byte < 0x7F:
        return char
    return json.dumps(char)[1:-1]


# -- entry points -----------------------------------------------------------------------


@overload
def compile_grammar(
    text: str,
    vocabulary: Vocabulary | None = None,
    syntax: Syntax = "gbnf",
    *,
    schemas: Mapping[str, object] | None = None,
    reasoning: None = None,
    **options: Any,
) -> CompiledGrammar: ...


@overload
def compile_grammar(
    text: str,
    vocabulary: Vocabulary | None = None,
    syntax: Syntax = "gbnf",
    *,
    schemas: Mapping[str, object] | None = None,
    reasoning: Reasoning,
    **options: Any,
) -> GatedConstraint: ...


def compile_grammar(
    text: str,
    vocabulary: Vocabulary | None = None,
    syntax: Syntax = "gbnf",
    *,
    schemas: Mapping[str, object] | None = None,
    reasoning: Reasoning | None = None,
    **options: Any,
) -> CompiledGrammar | GatedConstraint:
    """Compile a grammar (llama.cpp's GBNF; ``root`` is the start rule).

    Args:
        text: the grammar.
        vocabulary: the tokenizer's vocabulary, for masks (None: ``accepts`` only).
        syntax: ``"gbnf"`` (the only one so far).
        schemas: rule name → JSON Schema (anything ``Schema.of`` takes): that rule is
            the schema's JSON document, decoded as ``compile_schema`` would. The text
            may use the name without defining it.
        **options: :class:`~jsonmode.decoding.compile.compiler.CompileOptions` fields (for
            the bound schemas; the budgets apply to the whole grammar). For a grammar
            ``max_nesting_depth`` defaults to :data:`GRAMMAR_NESTING_DEPTH` (256) and
            counts levels: recursive calls open at once, however many rules one level
            passes (``expr → term → factor → "(" expr ")"`` is one level per
            parenthesis; see :mod:`~jsonmode.decoding.automata.headroom`); a rule that calls
            itself only last is a loop and costs no depth. Deeper text cannot be
            produced, and the limit never strands a matcher: no byte is allowed whose
            only continuations nest deeper, so the mask is never empty before the text
            is complete. :meth:`CompiledGrammar.diagnose` of deeper text names the limit
            (``Mismatch.depth``).
        reasoning: a :class:`~jsonmode.Reasoning`: the grammar behind a reasoning gate
            (free thinking, the end marker, then the grammar's text; see
            :mod:`~jsonmode.decoding.reasoning_gate`).

    Raises:
        InvalidGrammarError: malformed GBNF (with the line and column; text in Lark,
            EBNF or BNF notation is told so), an undefined rule, no ``root``.
        UnsupportedSchemaError: left recursion, a construct not supported, a grammar
            that accepts nothing; BudgetExceededError: over a budget.
        UsageError: bad arguments.
    """
    if syntax != "gbnf":
        raise UsageError(f"unknown grammar syntax {syntax!r}", hint='syntax="gbnf"')
    if not isinstance(text, str):
        raise UsageError(f"a grammar is text, not {type(text).__name__}")
    bound = {name: read_schema(schema, options) for name, schema in (schemas or {}).items()}
    key = ("gbnf", text, tuple((n, json.dumps(s.json_schema)) for n, s in bound.items()))

    def build(settings: CompileOptions) -> tuple[Grammar, tuple[str, ...]]:
        from jsonmode.decoding.grammars import gbnf

        parsed = gbnf.parse(text, externals=frozenset(bound))
        for name in bound:
            if name in parsed.rules:
                raise InvalidGrammarError(
                    f"rule {name!r} is both defined in the grammar and bound to a schema",
                    hint="remove its definition, or bind another name",
                )
        inlined = _inlined(parsed, settings.max_rule_states)
        if _COUNTS.search(text):  # (a text without a {m,n} has no counted repetition)
            inlined = counted_repetitions(inlined, settings.max_rule_states)
        return bind_schemas(inlined, bound, settings)

    options.setdefault("max_nesting_depth", GRAMMAR_NESTING_DEPTH)
    compiled = compiled_constraint(key, build, vocabulary, options, "gbnf", text, bound)
    return compiled if reasoning is None else gate(compiled, reasoning, vocabulary)


def compile_regex(
    pattern: str, vocabulary: Vocabulary | None = None, **options: Any
) -> CompiledGrammar:
    """Compile a regular expression (the ECMA-262 subset ``pattern`` takes), anchored:
    the whole text must match (``^``/``$`` are implied; written, they change nothing).

    Raises InvalidGrammarError for a malformed pattern (``(a``, ``a{3,1}``: "invalid
    regular expression", with the offset); UnsupportedSchemaError for syntax outside
    that subset (backreferences, lookaround); BudgetExceededError over the regex
    engine's state budget; UsageError for bad arguments.
    """
    if not isinstance(pattern, str):
        raise UsageError(f"a pattern is text, not {type(pattern).__name__}")

    def build(settings: CompileOptions) -> tuple[Grammar, tuple[str, ...]]:
        try:
            dfa = rx.compile_pattern(pattern, anchored=True)
        except RegexSyntaxError as exc:
            raise _regex_error(exc) from None
        if dfa.is_empty():
            raise UnsupportedSchemaError(f"the pattern {pattern!r} matches no text at all")
        return Grammar("root", {"root": Lex(f"regex:{pattern}", rx.utf8_byte_dfa(dfa))}), ()

    return compiled_constraint(("regex", pattern), build, vocabulary, options, "regex", pattern, {})


def compile_choice(
    choices: Iterable[str], vocabulary: Vocabulary | None = None, **options: Any
) -> CompiledGrammar:
    """Exactly one of ``choices`` (strings, at least one; duplicates are one choice).

    Raises UsageError when there is no choice or one is not a string;
    BudgetExceededError when the list's JSON text is longer than
    :data:`~jsonmode.limits.MAX_SCHEMA_CHARS`, or over a compile budget.
    """
    if isinstance(choices, str):
        raise UsageError("choices must be a list of strings, not one string")
    items = list(choices)
    if not items:
        raise UsageError("compile_choice needs at least one choice")
    for item in items:
        if not isinstance(item, str):
            raise UsageError(f"every choice must be a string, not {type(item).__name__}")
    source = json.dumps(items, ensure_ascii=False)
    limits.check_schema_size(len(source), "the list of choices")

    def build(settings: CompileOptions) -> tuple[Grammar, tuple[str, ...]]:
        return Grammar("root", {"root": alt(*(Lit(item.encode("utf-8")) for item in items))}), ()

    return compiled_constraint(("choice", source), build, vocabulary, options, "choice", source, {})


def _regex_error(exc: RegexSyntaxError) -> JsonModeError:
    """A pattern's syntax error as the regular expression's own (not as a schema
    keyword's, which post-validation would check)."""
    where = f"`{exc.fragment}` at offset {exc.offset} (pattern `{clip(exc.pattern, 120)}`)"
    if exc.malformed:
        return InvalidGrammarError(
            f"invalid regular expression: {exc.what} {where}",
            hint="the pattern is ECMA-262 (JavaScript) syntax, matched against the whole text",
        )
    return UnsupportedSchemaError(
        f"not supported in a regular expression: {exc.what} {where}",
        hint="rewrite the pattern without it (no backreferences, lookaround or flags)",
    )


#: How a budget error names a constraint being compiled (see _reworded).
_NOUNS = {
    "gbnf": "grammar",
    "regex": "regular expression",
    "choice": "choice",
    "jsonl": "grammar",
    "csv": "grammar",
    "structural_tag": "structural tag",
}
_SCHEMA_BUDGET_HINT = "raise the budget in the compile options, or simplify the schema"


def _reworded(exc: BudgetExceededError, kind: Kind) -> BudgetExceededError:
    """``exc`` saying what it compiled ("compiling the grammar exceeds ..."), where it
    says "compiling the schema" (the budget's default wording)."""
    if not exc.message.startswith("compiling the schema "):
        return exc
    noun = _NOUNS[kind]
    hint = exc.hint
    if hint is None or hint == _SCHEMA_BUDGET_HINT:
        hint = f"raise the budget in the compile options, or simplify the {noun}"
    reworded = BudgetExceededError(exc.budget, exc.limit, hint=hint, doing=f"compiling the {noun}")
    return reworded


# -- shared machinery ---------------------------------------------------------------------


def compile_settings(options: Mapping[str, Any]) -> CompileOptions:
    """The :class:`CompileOptions` that keyword ``options`` spell.

    Raises:
        UsageError: an unknown option (the message lists the known ones), or a bad value.
    """
    try:
        return CompileOptions(**options)
    except UsageError:
        raise  # (a TypeError too: an option's value, named in the message)
    except TypeError as exc:
        known = ", ".join(field.name for field in dataclasses.fields(CompileOptions))
        raise UsageError(f"unknown compile option: {exc}", hint=f"known options: {known}") from None


def read_schema(schema: Any, options: Mapping[str, Any]) -> Schema:
    """``Schema.of(schema)`` within the compile time budget ``options`` name
    (``max_compile_seconds``), as ``compile_schema`` reads its schema: a schema bound
    into a grammar, a JSON Lines document or a CSV row is read under the caller's
    budget, not a default one.

    Raises:
        what ``Schema.of`` raises; BudgetExceededError past the budget; UsageError
        for bad options.
    """
    with deadline(compile_settings(options).max_compile_seconds):
        return Schema.of(schema)


def compiled_constraint(
    key: tuple[Any, ...],
    build: Any,
    vocabulary: Vocabulary | None,
    options: dict[str, Any],
    kind: Kind,
    source: str,
    bound: Mapping[str, Schema],
) -> CompiledGrammar:
    """Look up or build one compiled constraint: the cache and budgets of
    ``compile_schema``, shared by every grammar front end (GBNF, regex, choice, and the
    built-in JSON Lines and CSV grammars).

    ``key`` names the constraint's text (with ``vocabulary``'s fingerprint and the
    settings it is the cache key); ``build(settings)`` returns its grammar and the
    unenforced keyword locations, and runs with the rule automata under
    ``max_compile_seconds`` as one deadline; ``kind``, ``source`` and ``bound`` (the
    schemas bound into it) are kept on the result. Thread-safe; a hit costs a lock and a
    dict lookup.

    Raises:
        UsageError: bad options; BudgetExceededError: over a budget;
        UnsupportedSchemaError: what the grammar cannot express, or no text at all.
    """
    settings = compile_settings(options)
    full_key = (*key, vocabulary.fingerprint if vocabulary is not None else "", settings)
    with _lock:
        hit = _cache.get(full_key)
    if hit is not None:
        return hit
    with collector_paused():
        try:
            with deadline(settings.max_compile_seconds):
                started = time.perf_counter()
                grammar, unenforced = build(settings)
                try:
                    network = build_network(grammar, max_states=settings.max_rule_states)
                except UnsupportedSchemaError as exc:
                    if "accepts no value" in exc.message:
                        raise UnsupportedSchemaError(f"the {kind} accepts no text at all") from None
                    raise
                elapsed = time.perf_counter() - started
                if events.listeners:
                    events.emit(events.CompileFinished(elapsed))
                checkpoint()
        except RecursionError:
            # (No option sets this bound, so the hint names what does: the reader
            # bounds nesting and inlining stays under it, so a grammar text never gets here.)
            raise BudgetExceededError(
                "Python's recursion depth (sys.getrecursionlimit())",
                sys.getrecursionlimit(),
                hint=f"split the deepest expressions of the {_NOUNS[kind]} into rules of "
                "their own, or raise Python's limit with sys.setrecursionlimit",
                doing=f"compiling the {_NOUNS[kind]}",
            ) from None
        except BudgetExceededError as exc:
            raise _reworded(exc, kind) from None
    compiled = CompiledGrammar(
        grammar,
        network,
        settings,
        vocabulary,
        elapsed,
        unenforced=unenforced,
        kind=kind,
        source=source,
        schemas=dict(bound),
    )
    with _lock:
        if len(_cache) >= _CACHE_LIMIT:
            _cache.pop(next(iter(_cache)))
        _cache[full_key] = compiled
    return compiled


def bind_schemas(
    grammar: Grammar, bound: Mapping[str, Schema], settings: CompileOptions
) -> tuple[Grammar, tuple[str, ...]]:
    """``grammar`` with each bound rule name made the root of its schema's grammar
    (the schema's own rules are renamed ``name/rule`` so that nothing collides), and
    the unenforced keyword locations of those schemas. Runs inside a compile's
    deadline (``build`` of :func:`compiled_constraint`)."""
    if not bound:
        return grammar, ()
    rules = dict(grammar.rules)
    unenforced: list[str] = []
    for name, spec in bound.items():
        sub, holes = build_grammar(spec.json_schema, settings, _validator_for(spec))
        names = {rule: name if rule == sub.root else f"{name}/{rule}" for rule in sub.rules}
        for rule, expr in sub.rules.items():
            rules[names[rule]] = renamed_calls(expr, functools.partial(_lookup, names))
        unenforced.extend(f"{name}:{pointer}" for pointer in holes)
    return Grammar(grammar.root, rules), tuple(unenforced)


#: A rule whose body (after inlining its own callees) has more expression nodes than
#: this (a repetition's item counted as many times as the automaton writes it out)
#: stays a call, so that inlining never grows a grammar past a small multiple; so does
#: a call inside a counted repetition whose copies would add more nodes than this.
MAX_INLINE_NODES = 400
#: The most nodes inlining adds to the whole grammar (counting each rule's growth past
#: MAX_INLINE_NODES); past it, calls stay calls. Each rule also grows by at most
#: ``max_rule_states`` nodes.
MAX_INLINED_NODES = 1_000_000
#: Inlining never makes an expression deeper than this (the GBNF reader's own bound,
#: ``gbnf.MAX_DEPTH``): the automaton builder walks expressions recursively.
MAX_INLINE_DEPTH = 128
#: Inside a recursive rule, a call to a rule of more nodes than this stays a call
#: (unless it is a repetition's whole item): see :func:`_inlined`.
MAX_STRUCTURAL_INLINE_NODES = 16

_HUGE = 1 << 62  # sizes saturate here (nested counted repetitions multiply)


def _inlined(grammar: Grammar, rule_nodes: int) -> Grammar:
    """``grammar`` with every call to a rule that cannot reach itself replaced by the
    rule's body: only recursion needs a call (a stack); a non-recursive rule is a
    regular part of its caller, and written in place it costs the mask engine no
    call/return at each of its bytes (a GBNF ``char`` rule called once per character of
    a string made masks ~100 times slower). Rules left uncalled are dropped.

    Inlining changes no language, so it stops where it would cost: bodies over
    :data:`MAX_INLINE_NODES` nodes, a body inside a counted repetition whose copies
    would add more than :data:`MAX_INLINE_NODES` nodes (``root ::= turn (" "
    turn){0,59}``: 60 copies of ``turn`` made one 2 700-state automaton, 45 ms to build,
    each copy's states new to the mask cache; called, ``turn`` is built once and its
    masks are shared by every copy), a rule grown by ``rule_nodes`` nodes (the compile's
    ``max_rule_states``), a grammar grown by :data:`MAX_INLINED_NODES`, an expression
    deeper than :data:`MAX_INLINE_DEPTH` — past any of these, calls stay calls (``root
    ::= b b b ...`` with 400 000 calls is 400 001 nodes, where copying ``b`` each time
    made 52 million). Copies are shared, never duplicated in memory.

    Inside a recursive rule (a structural rule of the mask engine: its automaton's
    states are parse states), a rule of more than :data:`MAX_STRUCTURAL_INLINE_NODES`
    nodes stays a call, unless the call is a repetition's whole item (``char*``: a call
    per item): written in place at each of its call sites, its states are copied into
    the caller once per site and each copy is walked anew, where called they are built
    and walked once. llama.cpp's JSON grammars call a white-space rule (a space, or a
    newline and up to 20 blanks of indentation: 22 states) after every token; in the
    benchmark's ``pretty`` grammar written so, the structural rules had 343 states in
    place and 36 now (the white space, strings and numbers called), and the masks cost
    about half as much, mean and p99 (``bench/grammars.py --set more``).

    Cost: linear in the grammar (one pass of strongly connected components, rules
    written callees first, without recursion across rules: a chain of 100 000 rules is
    fine); checks the compile's deadline per rule.
    """
    return _Inliner(grammar.rules, rule_nodes).run(grammar.root)


class _Inliner:
    """One inlining pass (see :func:`_inlined`); single use, not thread-safe."""

    def __init__(self, rules: Mapping[str, Expr], rule_nodes: int) -> None:
        self.rules = rules
        self.rule_nodes = rule_nodes
        self.bodies: dict[str, Expr] = {}
        self.inlinable: set[str] = set()  # the rules that cannot reach themselves
        # id → (node, size, height) of each node written (the node kept: ids stay unique)
        self.measured: dict[int, tuple[Expr, int, int]] = {}
        self.spent = 0  # nodes copied into the grammar so far (see substitute)
        self.added = 0  # nodes copied into the rule being written
        self.structural = False  # whether the rules being written are recursive

    def run(self, root: str) -> Grammar:
        for members, recursive in components(self.rules):  # callees first
            self.structural = recursive
            for name in members:
                checkpoint()
                self.added = 0
                self.bodies[name] = self.substitute(self.rules[name], 0, 1)
            if not recursive:
                self.inlinable.update(members)
        kept = {root: self.bodies[root]}
        todo = [root]
        while todo:  # the rules still called (recursive, or too big to copy), from the root
            checkpoint()
            for callee in calls_of(kept[todo.pop()]):
                if callee in self.rules and callee not in kept:
                    kept[callee] = self.bodies[callee]
                    todo.append(callee)
        return Grammar(root, kept)

    def substitute(self, expr: Expr, depth: int, times: int, item: bool = False) -> Expr:
        """``expr`` with its calls inlined where the budgets allow; ``depth``: its own
        depth in the rule, ``times``: how often the automaton writes it out, ``item``:
        whether it is a repetition's whole item. Recurses into the rule's own expression
        only (the reader bounds its depth)."""
        if isinstance(expr, Call):
            name = expr.rule
            if name not in self.inlinable:
                return expr
            body = self.bodies[name]
            size, height = self.measure(body)
            if self.structural and not item and size > MAX_STRUCTURAL_INLINE_NODES:
                return expr
            cost = min(size * times, _HUGE)
            # (The grammar-wide count takes a rule's growth past MAX_INLINE_NODES
            # only: a body still under it may be copied on and dropped itself.)
            spent = self.spent + max(0, self.added + cost - max(MAX_INLINE_NODES, self.added))
            if (
                size > MAX_INLINE_NODES
                or depth + height > MAX_INLINE_DEPTH
                or self.added + cost > self.rule_nodes
                or (times > 1 and cost > MAX_INLINE_NODES)
                or spent > MAX_INLINED_NODES
            ):
                return expr
            self.added += cost
            self.spent = spent
            return body
        if isinstance(expr, Seq):
            made = seq(*[self.substitute(item, depth + 1, times) for item in expr.items])
        elif isinstance(expr, Alt):
            made = alt(*[self.substitute(option, depth + 1, times) for option in expr.options])
        elif isinstance(expr, Rep):
            copies = min(times * _copies(expr), _HUGE)
            inner = self.substitute(expr.item, depth + 1, copies, item=True)
            made = Rep(inner, expr.low, expr.high)
        else:
            return expr
        self.measure(made)
        return made

    def measure(self, expr: Expr) -> tuple[int, int]:
        """``expr``'s size (nodes, repetitions counted as written out) and height,
        memoised per node: linear in the nodes not measured yet, without recursion."""
        if type(expr) in _LEAVES:
            return 1, 1
        measured = self.measured
        known = measured.get(id(expr))
        if known is None:
            # (A node substitute just made: its composite parts are measured already.)
            known = self.measure_node(expr)
        if known is None:
            stack: list[tuple[Expr, bool]] = [(expr, False)]
            while stack:
                node, ready = stack.pop()
                if id(node) in measured:
                    continue
                if not ready:
                    stack.append((node, True))
                    stack.extend((part, False) for part in _parts(node)[0] if _composite(part))
                    continue
                self.measure_node(node)
            known = measured[id(expr)]
        return known[1], known[2]

    def measure_node(self, node: Expr) -> tuple[Expr, int, int] | None:
        """Measure the composite ``node`` from its parts' sizes, and remember it; None
        (nothing remembered) when one of its composite parts is not measured yet."""
        measured = self.measured
        parts, copies = _parts(node)
        size, height = 1, 0
        for part in parts:
            if type(part) in _LEAVES:
                part_size = part_height = 1
            else:
                known = measured.get(id(part))
                if known is None:
                    return None
                _, part_size, part_height = known
            size += part_size * copies
            if part_height > height:
                height = part_height
        entry = measured[id(node)] = (node, min(size, _HUGE), height + 1)
        return entry


_LEAVES = frozenset((Lit, Lex, Call))


def _composite(expr: Expr) -> bool:
    return isinstance(expr, (Seq, Alt, Rep, Members))


def _copies(rep: Rep) -> int:
    """How many copies of its item the automaton builder writes for ``rep``."""
    return rep.high if rep.high is not None else rep.low + 1


def _parts(expr: Expr) -> tuple[tuple[Expr, ...], int]:
    """A node's parts, and how many copies of each the automaton writes."""
    if isinstance(expr, Seq):
        return expr.items, 1
    if isinstance(expr, Alt):
        return expr.options, 1
    if isinstance(expr, Rep):
        return (expr.item,), max(1, _copies(expr))
    if isinstance(expr, Members):
        extra = () if expr.extra is None else (expr.extra,)
        return (*(member for member, _ in expr.members), expr.sep, *extra), 1
    return (), 1


def _size(expr: Expr) -> int:
    """The number of nodes in ``expr`` (a shared node once per place it appears)."""
    count = 0
    stack = [expr]
    while stack:
        node = stack.pop()
        count += 1
        if isinstance(node, Seq):
            stack.extend(node.items)
        elif isinstance(node, Alt):
            stack.extend(node.options)
        elif isinstance(node, Rep):
            stack.append(node.item)
    return count


def _validator_for(spec: Schema) -> Any:
    """What build_grammar needs: a validator for a subschema, with the root's references."""
    return lambda node: spec.validator.evolve(schema=node)


def _lookup(names: Mapping[str, str], rule: str) -> str:
    """``rule``'s new name in ``names`` (itself when it has none)."""
    return names.get(rule, rule)
