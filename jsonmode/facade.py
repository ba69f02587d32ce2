"""``JsonMode``: the façade every entry point goes through.

Orchestration is an onion, each layer short:

    run / arun            drivers: sync and async, a few lines each
    text / run_text ...   the same for a text under a grammar (jsonmode.texts)
    stream / map ...      the same session, streamed (jsonmode.streaming) or batched
                          (jsonmode.batch)
    _session ...          one request's judge (judging.SchemaJudge: a JSON value under a schema;
                          _text_session: jsonmode.texts.GrammarJudge, a text under a grammar)
    _attempts             validation attempts: tier, first request, re-asks, final error
    _judged               one output → Attempt (the judge's read: strict or repair)
    _call / _acall        one backend call under the transport retry policy

``_session`` is a generator that yields each :class:`Request` and receives the
backend's reply, so the same logic serves the sync and the async driver.
"""

from __future__ import annotations

import asyncio
import sys
import threading
import time
import warnings
import weakref
from collections.abc import AsyncIterator, Callable, Generator, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from jsonmode import events
from jsonmode.backends import Backend, Completion, Request, resolve
from jsonmode.backends.options import FACADE_OPTIONS, check_spelling, refuse_retry_options
from jsonmode.errors import (
    AttemptsExhaustedError,
    BackendError,
    JsonModeError,
    JsonModeWarning,
    OutputError,
    OutputParseError,
    OutputTruncatedError,
    SchemaViolationError,
    UsageError,
)
from jsonmode.judging import SchemaJudge
from jsonmode.prompting import Message, user_messages
from jsonmode.reading import Mode, check_mode
from jsonmode.result import Attempt, Outcome, Result, Tier
from jsonmode.retry import TransportPolicy
from jsonmode.schema.core import Schema
from jsonmode.schema.validation import Issue
from jsonmode.texts import GrammarJudge, Judge, as_grammar

if TYPE_CHECKING:
    from jsonmode.batch import BatchResults
    from jsonmode.streaming import StreamEvent

__all__ = ["JsonMode"]

TierChoice = Literal["auto", "constrained", "native", "prompted"]
Prompt = str | Sequence[Message]


@dataclass(frozen=True, slots=True)
class _Reply:
    """One backend call's outcome, sent into the session.

    ``verdict``: the output was already judged non-conforming while it streamed (an
    item of a streamed list failed its schema); the session records it as is.
    ``repairable``: for such a verdict, whether repair mode would have read the output
    as valid, when the driver knows better than the judge (a streamed list that departs
    from the items already delivered fails in repair mode too); None: the judge says.
    """

    completion: Completion | None
    error: BackendError | None
    latency_s: float
    transport_retries: int
    verdict: OutputError | None = None
    repairable: bool | None = None


_Session = Generator[Request, "_Reply", "Result[Any]"]


@dataclass(slots=True)
class _Trace:
    """What a session shows its driver while it runs: the tier it chose and the
    attempts so far (the streaming driver reports them in its events)."""

    tier: Tier | None = None
    attempts: list[Attempt] = field(default_factory=list)


class JsonMode:
    """Make a backend return JSON that conforms to a schema.

    Args:
        backend: a litellm model string (``"openai/gpt-4o-mini"``), a callable that
            takes a prompt or a message list and returns text (sync or async), or a
            :class:`~jsonmode.backends.Backend`.
        mode: ``"strict"`` never repairs; ``"repair"`` repairs and records every repair.
        max_attempts: validation attempts; each re-ask shows the model its previous
            output and every error found in it.
        tier: ``"auto"`` (constrained for a local model, native when the endpoint is
            known to take a JSON Schema or a ``native=`` transport is given, else
            prompted), or one of those by name. A schema the decoder cannot compile
            (unsupported, over a budget) falls back from constrained to prompted for
            that request; ``Result.tier`` says which ran.
        transport: retry policy for transient backend failures, separate from
            ``max_attempts``.
        schema_name: a name for the schema in metrics (``"invoice"``), for every
            request unless a call names its own; see :mod:`jsonmode.metrics`.
        **backend_options: passed to the backend (for litellm: ``api_base``,
            ``api_key``, ``timeout``, ``temperature``, ``native`` ...; for an OpenAI
            client: ``model`` ...). Checked before any request: a name close to one of
            jsonmode's (``mdoe``) is refused here, naming it (``did you mean 'mode'?``);
            ``max_retries`` / ``num_retries`` are refused (see ``max_attempts`` and
            ``transport``); the backend refuses names it cannot take (litellm: when
            it is imported, at :meth:`prepare` or the first call).

    Raises:
        UsageError: a bad option, a misspelt or unknown one, a tier the backend cannot
            run, or a ``native=`` transport with ``tier="prompted"``/``"constrained"``.

    A ``JsonMode`` holds no per-request state: one instance may serve many threads
    and tasks at once (if its backend can).

    Schema warnings: the first request with a schema emits a
    :class:`~jsonmode.JsonModeWarning` for each of its :attr:`Schema.warnings
    <jsonmode.Schema.warnings>` (an unknown keyword, "did you mean 'required'?"),
    once per schema and instance, whichever verb; notes are not emitted.
    """

    def __init__(
        self,
        backend: object,
        mode: Mode = "strict",
        max_attempts: int = 3,
        *,
        tier: TierChoice = "auto",
        transport: TransportPolicy | None = None,
        schema_name: str | None = None,
        **backend_options: Any,
    ) -> None:
        self.mode: Mode = check_mode(mode)
        self.schema_name = events.check_schema_name(schema_name)
        if not isinstance(max_attempts, int) or isinstance(max_attempts, bool) or max_attempts < 1:
            raise UsageError(f"max_attempts must be a positive integer, not {max_attempts!r}")
        if tier not in ("auto", "constrained", "native", "prompted"):
            raise UsageError(
                f"tier must be 'auto', 'constrained', 'native' or 'prompted', not {tier!r}"
            )
        # model= names an OpenAI client's model (other backends refuse it themselves)
        check_spelling(backend_options, FACADE_OPTIONS, "JsonMode", others=("model",))
        refuse_retry_options(backend_options)
        if "native" in backend_options:
            # asking for a transport asks for the tier that uses it
            if tier == "auto":
                tier = "native"
            elif tier != "native":
                raise UsageError(
                    f"native={backend_options['native']!r} is how the native tier sends the "
                    f"schema, and tier={tier!r} sends none",
                    hint="leave tier at 'auto' (native= then selects the native tier), or "
                    "drop native=",
                )
        self.max_attempts = max_attempts
        self._warned: weakref.WeakSet[Schema] = weakref.WeakSet()  # (see _warn_about)
        self._warned_lock = threading.Lock()
        self.backend: Backend = resolve(backend, **backend_options)
        self.transport = transport or TransportPolicy()
        if tier == "native" and self.backend.native_schema is False:
            raise UsageError(f"backend {self.backend.name} cannot take a JSON Schema natively")
        local = bool(getattr(self.backend, "constrained_decoding", False))
        if tier == "constrained" and not local:
            raise UsageError(f"backend {self.backend.name} exposes no logits to constrain")
        self.tier: Tier
        if tier == "constrained" or (tier == "auto" and local):
            self.tier = "constrained"
        elif tier == "native" or (tier == "auto" and self.backend.native_schema is True):
            self.tier = "native"
        else:
            self.tier = "prompted"

    def __repr__(self) -> str:
        return f"JsonMode({self.backend.name!r}, mode={self.mode!r}, tier={self.tier!r})"

    # -- drivers ---------------------------------------------------------------

    def run(
        self,
        prompt: Prompt,
        schema: object,
        *,
        examples: Sequence[tuple[str, Any]] = (),
        schema_name: str | None = None,
        context: Any = None,
    ) -> Result[Any]:
        """Generate a conforming value and the record of how it was obtained.

        Args:
            prompt: a prompt string or a list of chat messages (never modified).
            schema: a pydantic model, a Python type, a JSON Schema dict or JSON text.
            examples: few-shot (prompt, value) pairs; each value must conform.
            schema_name: the schema's name in metrics (default: the instance's).
            context: handed to pydantic validators as ``info.context`` (pydantic's
                validation context), for every attempt.

        Raises:
            AttemptsExhaustedError: no attempt conformed; ``.attempts`` holds them all.
            TransientBackendError: transient failures outlasted the transport policy.
            PermanentBackendError: the backend refused the request (never retried).
            InvalidSchemaError, UnsupportedSchemaError, UsageError: bad input.
        """
        return self._drive(self._session(prompt, schema, examples, schema_name, context))

    async def arun(
        self,
        prompt: Prompt,
        schema: object,
        *,
        examples: Sequence[tuple[str, Any]] = (),
        schema_name: str | None = None,
        context: Any = None,
    ) -> Result[Any]:
        """Async :meth:`run`."""
        await self.aprepare()
        return await self._adrive(self._session(prompt, schema, examples, schema_name, context))

    def generate(
        self,
        prompt: Prompt,
        schema: object,
        *,
        examples: Sequence[tuple[str, Any]] = (),
        schema_name: str | None = None,
        context: Any = None,
    ) -> Any:
        """The conforming value alone: a model instance for a pydantic model, else JSON."""
        return self.run(
            prompt, schema, examples=examples, schema_name=schema_name, context=context
        ).value

    async def agenerate(
        self,
        prompt: Prompt,
        schema: object,
        *,
        examples: Sequence[tuple[str, Any]] = (),
        schema_name: str | None = None,
        context: Any = None,
    ) -> Any:
        """Async :meth:`generate`."""
        result = await self.arun(
            prompt, schema, examples=examples, schema_name=schema_name, context=context
        )
        return result.value

    # -- text under a grammar (jsonmode.texts) ----------------------------------------

    def run_text(
        self,
        prompt: Prompt,
        grammar: object,
        *,
        examples: Sequence[tuple[str, str]] = (),
        schema_name: str | None = None,
    ) -> Result[str]:
        """Generate a text that matches ``grammar``, and the record of how.

        The session of :meth:`run` (tiers, re-asks, transport policy, events, typed
        errors), judging each output against the grammar instead of a schema.
        Constrained (a local model): decoded under the grammar's token mask. Native
        (a vLLM endpoint, for GBNF, regex and choice): sent as vLLM's
        ``structured_outputs``. Otherwise prompted: the grammar is described to the
        model. Every tier post-validates with ``grammar.diagnose``; a re-ask says where
        the text stopped matching (byte offset, the text before it, what was expected).
        ``Result.value`` and ``Result.data`` are the text. Strict mode never changes
        it; repair mode only strips surrounding whitespace or one code fence (see
        :mod:`jsonmode.texts`, also for rules bound to JSON Schemas).

        Args:
            prompt: a prompt string or a list of chat messages (never modified).
            grammar: a :class:`~jsonmode.CompiledGrammar` (``compile_grammar``,
                ``compile_regex``, ``compile_choice`` ...), or GBNF text.
            examples: few-shot (prompt, text) pairs; each text must match.
            schema_name: a name for the grammar in metrics (default: the instance's).

        Raises:
            AttemptsExhaustedError: no attempt matched; ``.attempts`` holds them all.
            TransientBackendError, PermanentBackendError: as for :meth:`run`.
            InvalidGrammarError, UnsupportedSchemaError, UsageError: bad input.
        """
        return self._drive(self._text_session(prompt, grammar, examples, schema_name))

    async def arun_text(
        self,
        prompt: Prompt,
        grammar: object,
        *,
        examples: Sequence[tuple[str, str]] = (),
        schema_name: str | None = None,
    ) -> Result[str]:
        """Async :meth:`run_text`."""
        await self.aprepare()
        return await self._adrive(self._text_session(prompt, grammar, examples, schema_name))

    def text(
        self,
        prompt: Prompt,
        grammar: object,
        *,
        examples: Sequence[tuple[str, str]] = (),
        schema_name: str | None = None,
    ) -> str:
        """The matching text alone (see :meth:`run_text`)."""
        return self.run_text(prompt, grammar, examples=examples, schema_name=schema_name).value

    async def atext(
        self,
        prompt: Prompt,
        grammar: object,
        *,
        examples: Sequence[tuple[str, str]] = (),
        schema_name: str | None = None,
    ) -> str:
        """Async :meth:`text`."""
        result = await self.arun_text(prompt, grammar, examples=examples, schema_name=schema_name)
        return result.value

    # -- streaming and batches (jsonmode.streaming, jsonmode.batch) -------------------

    def stream(
        self,
        prompt: Prompt,
        schema: object,
        *,
        examples: Sequence[tuple[str, Any]] = (),
        schema_name: str | None = None,
        context: Any = None,
        partial_strings: bool = False,
    ) -> Iterator[StreamEvent]:
        """Watch the value grow: partial values while the reply streams, then the Result.

        Yields :class:`~jsonmode.streaming.Partial` events (``kind == "partial"``,
        ``.value``: what the finished document will hold so far, **never validated**;
        a partial twin of a pydantic model, every field optional; strings appear once
        closed unless ``partial_strings=True``), a :class:`~jsonmode.streaming.Retry`
        (``kind == "retry"``) when an attempt failed and the re-ask (or a transport
        retry) starts, so the partials shown so far are void, and last a
        :class:`~jsonmode.streaming.Final` (``kind == "final"``, ``.result``: exactly
        what :meth:`run` returns). On failure the error :meth:`run` raises is raised
        instead of the final event. A backend that cannot stream yields no partials.
        Arguments as for :meth:`run`. Closing the iterator early closes the backend's
        stream. See :mod:`jsonmode.streaming` for costs.

        A grammar in place of ``schema`` (what :meth:`run_text` takes: a compiled
        grammar, or GBNF text; a string is JSON Schema text only when it starts with
        ``{`` or is ``true``/``false``) streams a text: each partial's ``.value`` is the
        reply's text so far (taken back only by a ``retry`` event, as for JSON; in
        repair mode the final text may lack the surrounding whitespace or code fence
        the partials showed), and the final event holds :meth:`run_text`'s Result.
        ``examples`` are then (prompt, text) pairs; ``context`` must be None.
        """
        from jsonmode import streaming

        return streaming.stream(
            self, prompt, schema, examples, schema_name, context, partial_strings
        )

    def astream(
        self,
        prompt: Prompt,
        schema: object,
        *,
        examples: Sequence[tuple[str, Any]] = (),
        schema_name: str | None = None,
        context: Any = None,
        partial_strings: bool = False,
    ) -> AsyncIterator[StreamEvent]:
        """Async :meth:`stream` (``async for event in jm.astream(...)``)."""
        from jsonmode import streaming

        return streaming.astream(
            self, prompt, schema, examples, schema_name, context, partial_strings
        )

    def stream_items(
        self,
        prompt: Prompt,
        item_schema: object,
        *,
        examples: Sequence[tuple[str, Any]] = (),
        schema_name: str | None = None,
        context: Any = None,
    ) -> Iterator[Any]:
        """Ask for a list of ``item_schema`` and yield each item once it is complete and
        valid (a model instance for a pydantic model), while the list still streams.

        An item that fails its schema (a pydantic validator included) ends the attempt
        at once and goes through the re-ask. Items already yielded are never taken
        back: a re-asked attempt must repeat them first (one that does not is re-asked
        in turn), and yields only the items after them. Raises what :meth:`run`
        raises. ``examples`` are (prompt, list) pairs.
        """
        from jsonmode import streaming

        return streaming.stream_items(self, prompt, item_schema, examples, schema_name, context)

    def astream_items(
        self,
        prompt: Prompt,
        item_schema: object,
        *,
        examples: Sequence[tuple[str, Any]] = (),
        schema_name: str | None = None,
        context: Any = None,
    ) -> AsyncIterator[Any]:
        """Async :meth:`stream_items`."""
        from jsonmode import streaming

        return streaming.astream_items(self, prompt, item_schema, examples, schema_name, context)

    def map(
        self,
        prompts: Iterable[Prompt],
        schema: object,
        *,
        concurrency: int = 8,
        progress: bool | None = None,
        examples: Sequence[tuple[str, Any]] = (),
        schema_name: str | None = None,
        context: Any = None,
        on_result: Callable[[int, Result[Any] | JsonModeError], object] | None = None,
    ) -> BatchResults:
        """Run every prompt; one :class:`Result` or one :class:`JsonModeError` per prompt,
        in input order (one failure never loses the others' results).

        ``schema`` is what :meth:`run` takes, or what :meth:`run_text` takes (a
        CompiledGrammar, or GBNF text: a string is JSON Schema text only when it
        starts with ``{``); with a grammar each Result is like ``run_text``'s.

        At most ``concurrency`` requests are in flight at once (for a local model: the
        batch size of one ``generate`` call, a matcher per row). A ``Retry-After`` from
        the server holds every request of the batch, and a backend that fails many
        calls in a row with no success fails the rest fast. ``progress``: a progress
        bar on stderr (None: when stderr is a terminal). ``results.summary`` counts
        what happened. ``on_result(index, entry)`` is called as each prompt finishes
        (from a worker thread, one call at a time), so results can be saved as they
        come. Errors that are not a :class:`JsonModeError` (a bug, Ctrl-C, an error
        raised by ``on_result``) stop the batch and propagate at once (requests in
        flight are abandoned; ``on_result`` is not called again). See
        :mod:`jsonmode.batch`.
        """
        from jsonmode import batch

        return batch.run_map(
            self,
            prompts,
            schema,
            batch.Options(concurrency, progress, examples, schema_name, context, on_result),
        )

    async def amap(
        self,
        prompts: Iterable[Prompt],
        schema: object,
        *,
        concurrency: int = 8,
        progress: bool | None = None,
        examples: Sequence[tuple[str, Any]] = (),
        schema_name: str | None = None,
        context: Any = None,
        on_result: Callable[[int, Result[Any] | JsonModeError], object] | None = None,
    ) -> BatchResults:
        """Async :meth:`map`: at most ``concurrency`` tasks at once on this event loop
        (``on_result`` is called in the loop)."""
        from jsonmode import batch

        return await batch.run_amap(
            self,
            prompts,
            schema,
            batch.Options(concurrency, progress, examples, schema_name, context, on_result),
        )

    # -- set-up outside the clock --------------------------------------------------

    def prepare(self) -> None:
        """One-time slow set-up of the backend (importing litellm takes seconds), done
        before a request's clock starts so that no latency includes it. Cheap after the
        first call; called by every driver, callable ahead of time."""
        prepare = getattr(self.backend, "prepare", None)
        if callable(prepare):
            prepare()

    async def aprepare(self) -> None:
        """:meth:`prepare` off the event loop."""
        if callable(getattr(self.backend, "prepare", None)):
            await asyncio.to_thread(self.prepare)

    # -- backend calls under the transport policy --------------------------------

    def _drive(self, session: _Session, complete: Any = None) -> Result[Any]:
        """Run ``session`` to its end, each request through :meth:`_call`."""
        request = next(session)
        while True:
            try:
                request = session.send(self._call(request, complete))
            except StopIteration as done:
                return done.value  # type: ignore[no-any-return]

    async def _adrive(self, session: _Session, acomplete: Any = None) -> Result[Any]:
        """Async :meth:`_drive`."""
        request = next(session)
        while True:
            try:
                request = session.send(await self._acall(request, acomplete))
            except StopIteration as done:
                return done.value  # type: ignore[no-any-return]

    def _steps(self, session: _Session) -> Generator[Request, Completion, Result[Any]]:
        """:meth:`_drive` turned inside out, for drivers that make the backend calls
        themselves (``map``'s workers): yields each call's Request (a transport retry is
        another call) and is sent its Completion, or thrown its error, by whichever
        thread made the call; returns the Result (or raises the session's error). The
        transport policy's waits are slept in the thread that resumes it. Not
        thread-safe: one thread at a time resumes it."""
        request = next(session)
        while True:
            reply = yield from self._tries(request)
            try:
                request = session.send(reply)
            except StopIteration as done:
                return done.value  # type: ignore[no-any-return]

    def _tries(self, request: Request) -> Generator[Request, Completion, _Reply]:
        """:meth:`_call`'s transport policy over calls made by the resumer (see
        :meth:`_steps`)."""
        started = time.perf_counter()
        controller = self.transport.moving_retrying()
        completion: Completion | None = None
        try:
            for attempt in controller:
                with attempt:
                    completion = yield request
        except BackendError as error:
            return _Reply(None, error, time.perf_counter() - started, _retries(controller))
        return _Reply(completion, None, time.perf_counter() - started, _retries(controller))

    def _call(self, request: Request, complete: Any = None) -> _Reply:
        started = time.perf_counter()
        controller = self.transport.retrying()
        try:
            completion = controller(complete or self.backend.complete, request)
        except BackendError as error:
            return _Reply(None, error, time.perf_counter() - started, _retries(controller))
        return _Reply(completion, None, time.perf_counter() - started, _retries(controller))

    async def _acall(self, request: Request, acomplete: Any = None) -> _Reply:
        started = time.perf_counter()
        controller = self.transport.aretrying()
        try:
            completion: Completion = await controller(acomplete or self.backend.acomplete, request)
        except BackendError as error:
            return _Reply(None, error, time.perf_counter() - started, _retries(controller))
        return _Reply(completion, None, time.perf_counter() - started, _retries(controller))

    # -- validation attempts -------------------------------------------------------

    def _warn_about(self, spec: Schema) -> None:
        """Emit ``spec``'s warnings (severity ``"warning"``) as
        :class:`~jsonmode.JsonModeWarning`, pointing at the caller's code, unless this
        instance already did for this schema object (a weak set: schemas are cached by
        :meth:`Schema.of`, so a request with the same schema is the same object).
        Thread-safe; costs a set lookup after the first time."""
        records = [record for record in spec.warnings if record.severity == "warning"]
        if not records:
            return
        with self._warned_lock:
            if spec in self._warned:
                return
            self._warned.add(spec)
        level = _outside_jsonmode()
        for record in records:
            warnings.warn(JsonModeWarning(str(record), record), stacklevel=level)

    def _session(
        self,
        prompt: Prompt,
        schema: object,
        examples: Sequence[tuple[str, Any]],
        schema_name: str | None,
        context: Any = None,
        trace: _Trace | None = None,
        warn: bool = True,
    ) -> _Session:
        """The attempts of one request for a JSON value under ``schema``: yields each
        Request, receives its _Reply, returns the Result or raises. The backend is
        prepared before the clock starts (a no-op when the async driver already did it
        off the loop). ``warn``: emit the schema's warnings (see :meth:`_warn_about`)."""
        self.prepare()
        started = time.perf_counter()
        spec = Schema.of(schema)
        if warn:
            self._warn_about(spec)
        judge = SchemaJudge(spec, self.mode, context)
        return (yield from self._attempts(prompt, judge, examples, schema_name, started, trace))

    def _text_session(
        self,
        prompt: Prompt,
        grammar: object,
        examples: Sequence[tuple[str, str]],
        schema_name: str | None,
        trace: _Trace | None = None,
    ) -> _Session:
        """:meth:`_session` for a text under ``grammar``."""
        self.prepare()
        started = time.perf_counter()
        judge = GrammarJudge(as_grammar(grammar), self.mode)
        return (yield from self._attempts(prompt, judge, examples, schema_name, started, trace))

    def _attempts(
        self,
        prompt: Prompt,
        judge: Judge,
        examples: Sequence[tuple[str, Any]],
        schema_name: str | None,
        started: float,
        trace: _Trace | None,
    ) -> _Session:
        name = self.schema_name if schema_name is None else events.check_schema_name(schema_name)
        tier = judge.tier(self.tier, self.backend)
        trace = trace if trace is not None else _Trace()
        trace.tier = tier
        # what the events need; a tuple costs nothing when nobody listens
        fallback = self.tier == "constrained" and tier != "constrained"
        report: _Context = (tier, self.mode, name, started, fallback)
        first = judge.first_messages(user_messages(prompt), examples)
        request = judge.request(first, tier)
        attempts = trace.attempts
        for index in range(1, self.max_attempts + 1):
            reply = yield request
            if reply.error is not None:
                attempts.append(
                    Attempt(
                        index,
                        "backend_error",
                        error=str(reply.error),
                        latency_s=reply.latency_s,
                        transport_retries=reply.transport_retries,
                    )
                )
                reply.error.attempts = tuple(attempts)
                if events.listeners:
                    _attempt_finished(report, attempts[-1])
                    _request_finished(report, attempts, ok=False)
                raise reply.error
            attempt, value = _judged(index, reply, judge)
            attempts.append(attempt)
            if events.listeners:
                _attempt_finished(report, attempt)
            if attempt.ok:
                result = Result(
                    value,
                    attempt.value,
                    tier,
                    self.mode,
                    tuple(attempts),
                    time.perf_counter() - started,
                )
                if events.listeners:
                    _request_finished(report, attempts, ok=True, duration_s=result.duration_s)
                return result
            request = judge.request(judge.reask_messages(first, attempt, self.max_attempts), tier)
        if events.listeners:
            _request_finished(report, attempts, ok=False)
        last = attempts[-1]
        repairable = self.mode == "strict" and (
            judge.repairable(last) if reply.repairable is None else reply.repairable
        )
        error = AttemptsExhaustedError(
            f"no {judge.wanted} after {len(attempts)} attempt(s); last: "
            f"{last.outcome}: {last.error}",
            attempts=attempts,
            hint="mode='repair' would repair the last output" if repairable else None,
        )
        error.repairable = repairable
        raise error


def _judged(index: int, reply: _Reply, judge: Judge) -> tuple[Attempt, Any]:
    """One output as an Attempt, and its value when it is valid."""
    completion = reply.completion
    assert completion is not None
    common: dict[str, Any] = {
        "raw": completion.text,
        "latency_s": reply.latency_s,
        "usage": completion.usage,
        "transport_retries": reply.transport_retries,
    }
    try:
        if reply.verdict is not None:
            raise reply.verdict
        if completion.problem is not None:  # e.g. a call to another function than asked
            problem = completion.problem
            raise SchemaViolationError(
                problem, raw=completion.text, issues=(Issue("$", "tool", problem),)
            )
        parsed = judge.read(completion.text, completion.truncated)
    except OutputError as failure:
        attempt = Attempt(
            index,
            _outcome(failure),
            error=failure.message,
            issues=failure.issues,
            repairs=failure.repairs,
            value=failure.value,
            **common,
        )
        return attempt, None
    return Attempt(index, "valid", repairs=parsed.repairs, value=parsed.data, **common), (
        parsed.value
    )


# One request's tier, mode, schema name, start time and whether it fell back from the
# constrained tier: what its events carry (see jsonmode.events).
_Context = tuple[Tier, Mode, str | None, float, bool]


def _attempt_finished(context: _Context, attempt: Attempt) -> None:
    tier, mode, name, _, _ = context
    events.emit(events.AttemptFinished(tier, mode, name, attempt))


def _request_finished(
    context: _Context, attempts: list[Attempt], *, ok: bool, duration_s: float | None = None
) -> None:
    tier, mode, name, started, fallback = context
    done = tuple(attempts)
    if duration_s is None:
        duration_s = time.perf_counter() - started
    outcome = events.request_outcome(done, ok)
    events.emit(events.RequestFinished(tier, mode, name, outcome, done, duration_s, fallback))


def _outcome(failure: OutputError) -> Outcome:
    if isinstance(failure, OutputTruncatedError):
        return "truncated"
    if isinstance(failure, OutputParseError):
        return "invalid_json"
    return "schema_violation"


def _outside_jsonmode() -> int:
    """The ``stacklevel`` of the innermost caller outside jsonmode (for warnings)."""
    frame = sys._getframe(1)
    level = 1
    while frame.f_back is not None and frame.f_globals.get("__name__", "").startswith("jsonmode"):
        frame = frame.f_back
        level += 1
    return level


def _retries(controller: Any) -> int:
    attempt_number = controller.statistics.get("attempt_number", 1)
    return max(0, int(attempt_number) - 1)
