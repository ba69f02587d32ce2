"""``JsonMode``: the façade every entry point goes through.

``JsonMode`` holds the settings (backend, tier, mode, attempts, transport policy) and
offers the public verbs; each verb starts a session of :mod:`jsonmode.session` (the
attempts: tier, judge, repair, re-ask, events) and pumps it with a driver:

    run / arun            session.schema_session, pumped by session.drive / adrive
    text / run_text ...   session.text_session (a text under a grammar, jsonmode.texts)
    stream / map ...      the same sessions, streamed (jsonmode.streaming) or batched
                          (jsonmode.batch)

The instance itself is the session's :class:`~jsonmode.session.Settings`.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Literal

# jsonmode.texts (the grammar side's public helpers) loads with the façade, as it always
# has: ``import jsonmode; jsonmode.texts.mismatch_message(...)`` keeps working.
import jsonmode.texts  # noqa: F401
from jsonmode import events
from jsonmode.backends import Backend, resolve
from jsonmode.backends.base import Constrains, Prepares
from jsonmode.backends.options import FACADE_OPTIONS, check_spelling, refuse_retry_options
from jsonmode.errors import JsonModeError, UsageError
from jsonmode.reasoning import Reasoning
from jsonmode.repair.parse import Mode, check_mode
from jsonmode.result import Result, Tier
from jsonmode.retry import TransportPolicy
from jsonmode.session import (
    Prompt,
    SchemaWarnings,
    adrive,
    check_reasoning,
    drive,
    schema_session,
    text_session,
)

if TYPE_CHECKING:
    from jsonmode.batch import BatchResults
    from jsonmode.streaming import StreamEvent

__all__ = ["JsonMode"]

TierChoice = Literal["auto", "constrained", "native", "prompted"]


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
        reasoning: how the model thinks before it answers. ``"auto"`` (default):
            thinking in the known spellings (``<think>...</think>``, Magistral's
            ``[THINK]``, gpt-oss's harmony channels; also a reply that starts inside
            its thinking because the chat template pre-filled the start marker) is
            split off every reply before the answer is read, and a backend that knows
            its model's markers (``DetectsReasoning``) gates its mask with them; a
            :class:`~jsonmode.Reasoning`: those markers, sent on every request; None:
            replies are read whole, as written. The thinking is never searched for the
            answer; it is kept on ``Result.reasoning`` (with thinking an API returns
            apart, litellm's ``reasoning_content``). A reply that ends inside its
            thinking fails as ``thinking_truncated`` and is re-asked for a shorter
            thinking.
        strict_schema: refuse a schema with lint warnings (see "Schema warnings"
            below) instead of warning about it.
        **backend_options: passed to the backend (for litellm: ``api_base``,
            ``api_key``, ``timeout``, ``temperature``, ``native`` ...; for an OpenAI
            client: ``model`` ...). Checked before any request: a name close to one of
            jsonmode's (``mdoe``) is refused here, naming it (``did you mean 'mode'?``);
            ``max_retries`` / ``num_retries`` are refused (see ``max_attempts`` and
            ``transport``); the backend refuses names it cannot take (litellm: when
            it is imported, at :meth:`prepare` or the first call).

    Raises:
        UsageError: a bad option (``reasoning`` not ``"auto"``, None or a Reasoning,
            ``strict_schema`` not a bool), a misspelt or unknown one, a tier the backend
            cannot run, or a ``native=`` transport with ``tier="prompted"``/``"constrained"``.

    A ``JsonMode`` holds no per-request state: one instance may serve many threads
    and tasks at once (if its backend can).

    Schema warnings: the first request with a schema emits a
    :class:`~jsonmode.JsonModeWarning` for each of its :attr:`Schema.warnings
    <jsonmode.Schema.warnings>` (an unknown keyword, "did you mean 'required'?",
    ``minimum`` above ``maximum`` ...: the schema lint), once per schema and instance,
    whichever verb; notes are not emitted. With ``strict_schema=True`` such a schema is
    refused instead: every verb (``map``, ``stream_items`` and ``@structured`` too)
    raises :class:`~jsonmode.InvalidSchemaError` listing each warning's JSON pointer and
    fix (its ``warnings`` holds the records) before any request reaches the backend.
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
        reasoning: Reasoning | str | None = "auto",
        strict_schema: bool = False,
        **backend_options: Any,
    ) -> None:
        self.mode: Mode = check_mode(mode)
        if not isinstance(strict_schema, bool):
            raise UsageError(f"strict_schema must be True or False, not {strict_schema!r}")
        self.schema_name = events.check_schema_name(schema_name)
        self.reasoning = check_reasoning(reasoning)
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
        #: emits each schema's warnings once for this instance, or refuses the schema
        #: with strict_schema (see the class docstring)
        self.schema_warnings = SchemaWarnings(strict=strict_schema)
        self.backend: Backend = resolve(backend, **backend_options)
        self.transport = transport or TransportPolicy()
        if tier == "native" and self.backend.native_schema is False:
            raise UsageError(f"backend {self.backend.name} cannot take a JSON Schema natively")
        local = isinstance(self.backend, Constrains) and bool(self.backend.constrained_decoding)
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
        session = schema_session(self, prompt, schema, examples, schema_name, context)
        return drive(session, self.transport, self.backend.complete)

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
        session = schema_session(self, prompt, schema, examples, schema_name, context)
        return await adrive(session, self.transport, self.backend.acomplete)

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
        session = text_session(self, prompt, grammar, examples, schema_name)
        return drive(session, self.transport, self.backend.complete)

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
        session = text_session(self, prompt, grammar, examples, schema_name)
        return await adrive(session, self.transport, self.backend.acomplete)

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
        if isinstance(self.backend, Prepares):
            self.backend.prepare()

    async def aprepare(self) -> None:
        """:meth:`prepare` off the event loop."""
        if isinstance(self.backend, Prepares):
            await asyncio.to_thread(self.prepare)
