"""``compile_schema`` and :class:`CompiledSchema`: compile once, match many.

A compiled schema is immutable and thread-safe: the grammar (printable), the
per-rule automata, and the list of schema locations left to post-validation.
Compiling is cached by schema, vocabulary fingerprint and options, so compiling
the same schema again costs a dictionary lookup.
"""

from __future__ import annotations

import dataclasses
import functools
import sys
import threading
import time
from concurrent.futures import Future, wait
from typing import TYPE_CHECKING, Any, ClassVar, overload

from jsonmode import events
from jsonmode._text import clip
from jsonmode.budget import TIME_BUDGET, checkpoint, deadline
from jsonmode.decoding.automata.network import Network, build_network
from jsonmode.decoding.collector import collector_paused
from jsonmode.decoding.compile.compiler import CompileOptions, build_grammar
from jsonmode.decoding.ir import Grammar
from jsonmode.decoding.matcher import MaskEngine, Matcher
from jsonmode.decoding.reasoning_gate import GatedConstraint, gate
from jsonmode.decoding.reference import ReferenceMatcher
from jsonmode.decoding.textcheck import TextChecker, checking
from jsonmode.errors import (
    BudgetExceededError,
    JsonModeError,
    UnsupportedSchemaError,
    UsageError,
)
from jsonmode.reasoning import Reasoning
from jsonmode.schema.core import Schema

if TYPE_CHECKING:
    from jsonmode.decoding.vocabulary import Vocabulary

__all__ = ["Compiled", "CompiledSchema", "compile_schema", "text_argument"]


def text_argument(text: object, method: str) -> str | bytes:
    """``text`` as given to ``method`` (``accepts``, ``diagnose``): a ``str``, or
    ``bytes`` for ``bytes``/``bytearray``.

    Raises:
        UsageError: any other type (a caller's mistake, reported typed).
    """
    if isinstance(text, str):
        return text
    if isinstance(text, (bytes, bytearray)):
        return bytes(text)
    raise UsageError(
        f"{method}() takes the text to check as str or bytes, not {type(text).__name__}",
        hint="pass a JSON document as text: json.dumps(value)",
    )


_CACHE_LIMIT = 128
# What the repr of a compiled constraint shows of ``unenforced``: this many pointers,
# each cut to this many characters.
_SHOWN_UNENFORCED = 4
_SHOWN_CHARS = 80
_cache: dict[tuple[str, str, CompileOptions], CompiledSchema] = {}
# Compiles under way, by the same key: a thread asking for a schema another thread is
# compiling waits for that result instead of compiling it again.
_running: dict[tuple[str, str, CompileOptions], Future[CompiledSchema]] = {}
_lock = threading.Lock()


@dataclasses.dataclass(frozen=True, eq=False, repr=False)
class Compiled:
    """What every compiled constraint shares (a schema, a grammar, a regex, a choice):
    the printable grammar, its automata, the vocabulary, and the matchers. Immutable;
    thread-safe.

    Attributes:
        grammar: the printable intermediate form.
        network: one automaton per grammar rule.
        options: the compile options.
        vocabulary: the tokenizer vocabulary masks are computed for (None: text only).
        compile_seconds: how long compiling took.
        unenforced: locations left to post-validation (for a schema, JSON pointers to
            its keywords); empty when everything is enforced while decoding.
    """

    grammar: Grammar
    network: Network
    options: CompileOptions
    vocabulary: Vocabulary | None
    compile_seconds: float
    unenforced: tuple[str, ...] = dataclasses.field(default=(), kw_only=True)
    #: How ``max_nesting_depth`` counts a stack's depth: levels of recursion (grammars)
    #: or frames (schemas); see :mod:`jsonmode.decoding.automata.headroom`.
    depth_in_levels: ClassVar[bool] = False

    def __repr__(self) -> str:
        """A one-line summary, bounded whatever the grammar's size (print ``grammar``
        for the rules themselves)."""
        return f"<{type(self).__name__} {self._summary()}>"

    def _summary(self) -> str:
        rules = len(self.grammar.rules)
        parts = [f"{rules} rule{'' if rules == 1 else 's'} (root {self.grammar.root!r})"]
        if self.unenforced:
            shown = ", ".join(
                repr(clip(where, _SHOWN_CHARS)) for where in self.unenforced[:_SHOWN_UNENFORCED]
            )
            more = len(self.unenforced) - _SHOWN_UNENFORCED
            parts.append(f"unenforced [{shown}{f', ... {more} more' if more > 0 else ''}]")
        else:
            parts.append("fully enforced")
        parts.append(f"spelling={self.options.spelling!r}")
        if self.vocabulary is None:
            parts.append("no vocabulary")
        else:
            parts.append(f"vocabulary {self.vocabulary.fingerprint[:12]}")
        parts.append(f"compiled in {self.compile_seconds * 1000:.1f} ms")
        return ", ".join(parts)

    def accepts(self, text: str | bytes | bytearray) -> bool:
        """Whether ``text`` is in the constraint's language (no vocabulary needed).

        Cost: one byte-at-a-time walk (:meth:`checker`'s, linear in the text however
        deep it nests) — for tests and diagnostics, not for the generation hot path. A
        ``str`` that is not Unicode text (a lone surrogate: no UTF-8 bytes spell it) is
        not accepted.

        Raises:
            UsageError: ``text`` is neither ``str`` nor bytes (``bytes``,
                ``bytearray``).
            BudgetExceededError: an ambiguous schema makes a state of the walk hold
                more than ``MAX_STACKS`` parse stacks (see
                :class:`~jsonmode.decoding.reference.ReferenceMatcher`); checking takes
                longer than ``max_compile_seconds`` plus 0.1 ms per byte of the text
                (see :mod:`~jsonmode.decoding.textcheck`).
        """
        data = text_argument(text, "accepts")
        if isinstance(data, str):
            try:
                data = data.encode("utf-8")
            except UnicodeEncodeError:
                return False
        checker = self.checker()
        with checking(self.options.max_compile_seconds, len(data)):
            return checker.accepts(data)

    def _acceptor(self) -> ReferenceMatcher:
        """The reference matcher :meth:`accepts` walks (the decoder's own here)."""
        return self.reference()

    def checker(self) -> TextChecker:
        """The walk :meth:`accepts` checks a text with: the reference matcher's, over
        linked stacks (see :mod:`~jsonmode.decoding.textcheck`). Made on first use,
        then shared; thread-safe."""
        return self._checker

    @functools.cached_property
    def _checker(self) -> TextChecker:
        return TextChecker(self._acceptor())

    def reference(self) -> ReferenceMatcher:
        """The slow, obviously correct byte-level matcher for this constraint."""
        return ReferenceMatcher(
            self.network,
            max_depth=self.options.max_nesting_depth,
            levels=self.depth_in_levels,
        )

    @property
    def fully_enforced(self) -> bool:
        return not self.unenforced

    @functools.cached_property
    def engine(self) -> MaskEngine:
        """The mask engine shared by every matcher (its caches live here)."""
        if self.vocabulary is None:
            raise UsageError(
                "this was compiled without a vocabulary",
                hint="pass vocabulary=Vocabulary.from_tokenizer(tokenizer) when compiling",
            )
        return MaskEngine(
            self.network,
            self.vocabulary,
            max_depth=self.options.max_nesting_depth,
            levels=self.depth_in_levels,
        )

    def matcher(self) -> Matcher:
        """A fresh matcher for one sequence (cheap: the engine and its caches are shared)."""
        return Matcher(self.engine)


@dataclasses.dataclass(frozen=True, eq=False, repr=False)
class CompiledSchema(Compiled):
    """A schema compiled for constrained decoding. Immutable; thread-safe.

    Attributes (beyond :class:`Compiled`'s): ``schema``, the normalised schema
    (post-validation uses it). ``unenforced`` holds JSON pointers to the schema's
    keywords that decoding does not enforce exactly.
    """

    schema: Schema = dataclasses.field(kw_only=True)

    def accepts(self, text: str | bytes | bytearray) -> bool:
        """Whether ``text`` is a document of the schema's language *in any JSON
        spelling* (``3.0`` for an integer, ``"\\u00e9"``, ``"\\/"``), as far as decoding
        enforces the schema (``unenforced`` lists the rest). Decoding itself writes
        only canonical spellings (``CompileOptions.spelling``), so a text ``accepts``
        takes is not always one the matcher would let a model write.

        Cost: the first call builds the all-spellings automata (about the compile's
        cost again; cached on the object), then one byte-at-a-time walk. Thread-safe.

        Raises:
            UsageError: ``text`` is neither ``str`` nor bytes.
            BudgetExceededError: as :meth:`Compiled.accepts`.
        """
        return super().accepts(text)

    def _acceptor(self) -> ReferenceMatcher:
        network = self._all_spellings if self.options.spelling == "canonical" else self.network
        return ReferenceMatcher(network, max_depth=self.options.max_nesting_depth)

    @functools.cached_property
    def _all_spellings(self) -> Network:
        """The automata of the same schema with ``spelling="complete"`` (built on first
        use; the decoder's own where that build exceeds a budget)."""
        settings = dataclasses.replace(self.options, spelling="complete")
        try:
            with collector_paused(), deadline(settings.max_compile_seconds):
                return _automata(self.schema, settings)[1]
        except (JsonModeError, RecursionError):
            return self.network


@overload
def compile_schema(
    schema: object,
    vocabulary: Vocabulary | None = None,
    *,
    reasoning: None = None,
    **options: Any,
) -> CompiledSchema: ...


@overload
def compile_schema(
    schema: object,
    vocabulary: Vocabulary | None = None,
    *,
    reasoning: Reasoning,
    **options: Any,
) -> GatedConstraint: ...


def compile_schema(
    schema: object,
    vocabulary: Vocabulary | None = None,
    *,
    reasoning: Reasoning | None = None,
    **options: Any,
) -> CompiledSchema | GatedConstraint:
    """Compile ``schema`` (a dict, JSON text, or pydantic model/type) for decoding.

    ``options`` are :class:`CompileOptions` fields. Cached by schema, vocabulary
    fingerprint and options. With ``reasoning`` (a :class:`~jsonmode.Reasoning`), the
    result is the schema behind a reasoning gate
    (:class:`~jsonmode.decoding.reasoning_gate.GatedConstraint`): its text is free
    thinking, the end marker, then the document (see that module for exactly what is
    allowed, and its errors).

    Raises:
        InvalidSchemaError: the schema is not valid.
        UnsupportedSchemaError: it uses something decoding cannot handle (with
            ``strict=True``: anything not enforced exactly), or accepts nothing; an
            unknown ``whitespace``/``property_order``/``spelling`` name.
        BudgetExceededError: compiling exceeds a budget (see :class:`CompileOptions`).
        UsageError: an unknown option, or an option of the wrong type or range.
        UnsupportedSchemaError: also (a safety net) where a builder cannot read a part
            of a schema its metaschema accepts.
    """
    try:
        settings = CompileOptions(**options)
    except UsageError:
        raise  # (a TypeError too: an option's value, named in the message)
    except TypeError as exc:
        known = ", ".join(field.name for field in dataclasses.fields(CompileOptions))
        raise UsageError(f"unknown compile option: {exc}", hint=f"known options: {known}") from None
    if reasoning is not None:
        return gate(compile_schema(schema, vocabulary, **options), reasoning, vocabulary)
    with collector_paused():
        try:
            return _compile(schema, vocabulary, settings)
        except RecursionError:
            # A safety net: the builders recurse on the schema's and the grammar's
            # nesting, which the schema depth bound and _MAX_OPTIONAL_PREFIX keep
            # far from Python's limit; a shape they miss is refused, not a crash.
            raise BudgetExceededError("expression nesting depth", sys.getrecursionlimit()) from None
        except (TypeError, ValueError, AttributeError, LookupError) as exc:
            # A safety net too: the metaschema check runs first (on every subschema a
            # reference reaches as well), so the builders meet only what it lets
            # through; a shape it passes that a builder cannot read (a keyword the
            # declared draft does not know, holding a malformed subschema) is refused.
            raise UnsupportedSchemaError(
                f"the schema could not be compiled: {exc!r}",
                hint="check the keywords against the schema's draft; if the schema is "
                "valid, this is a jsonmode bug worth reporting",
            ) from exc


def _compile(
    schema: object, vocabulary: Vocabulary | None, settings: CompileOptions
) -> CompiledSchema:
    """:func:`compile_schema` once the options are read: normalise, look up, build.

    The time budget runs from here and is checked while compiling (see
    :mod:`jsonmode.budget`): an over-budget schema stops near
    ``max_compile_seconds`` instead of running to the end and being refused then.
    """
    with deadline(settings.max_compile_seconds):
        spec = Schema.of(schema)
        key = (
            spec.json_text(),  # not sorted: property order is decoding order
            vocabulary.fingerprint if vocabulary is not None else "",
            settings,
        )
        with _lock:
            hit = _cache.get(key)
            running = _running.get(key) if hit is None else None
            if hit is None and running is None:
                _running[key] = mine = Future[CompiledSchema]()
        if hit is not None:
            return hit
        if running is not None:
            shared = _wait_for(running, settings.max_compile_seconds)
            return shared if shared is not None else _compile(spec, vocabulary, settings)
        try:
            compiled = _build(spec, vocabulary, settings)
        except BaseException as error:
            with _lock:
                del _running[key]
            mine.set_exception(error)
            raise
        with _lock:
            if len(_cache) >= _CACHE_LIMIT:
                _cache.pop(next(iter(_cache)))
            _cache[key] = compiled
            del _running[key]
        mine.set_result(compiled)
    return compiled


def _build(spec: Schema, vocabulary: Vocabulary | None, settings: CompileOptions) -> CompiledSchema:
    """Build one schema (under the caller's deadline)."""
    started = time.perf_counter()
    grammar, network, unenforced = _automata(spec, settings)
    elapsed = time.perf_counter() - started
    if events.listeners:
        events.emit(events.CompileFinished(elapsed))
    checkpoint()  # (finished, but past the deadline: refused alike)
    return CompiledSchema(
        grammar, network, settings, vocabulary, elapsed, schema=spec, unenforced=unenforced
    )


def _wait_for(running: Future[CompiledSchema], seconds: float) -> CompiledSchema | None:
    """The result of the same compile running in another thread, waited for at most
    this caller's own budget. Its JsonModeError (a bad schema, a budget) is raised
    here too; None when it stopped for another reason (an interrupt in that thread):
    the caller compiles for itself."""
    if not wait([running], timeout=seconds).done:
        raise BudgetExceededError(TIME_BUDGET, seconds)
    error = running.exception()
    if error is None:
        return running.result()
    if isinstance(error, JsonModeError):
        raise error
    return None


def _automata(spec: Schema, settings: CompileOptions) -> tuple[Grammar, Network, tuple[str, ...]]:
    """The schema's grammar, its automata and its unenforced locations (under the
    caller's deadline)."""
    grammar, unenforced = build_grammar(
        spec.json_schema, settings, lambda sub: spec.validator.evolve(schema=sub)
    )
    return grammar, build_network(grammar, max_states=settings.max_rule_states), unenforced
