"""The attempt session, sans I/O: one request's tier, attempts, judging, repair,
re-asks and events, as a generator.

A session yields each backend :class:`~jsonmode.backends.base.Request` and is sent
that call's :class:`~jsonmode.session.records.Reply`; it returns the
:class:`~jsonmode.Result` or raises the request's error (AttemptsExhaustedError, the
BackendError, a UsageError for bad input). It makes no backend call and never sleeps:
the drivers (:mod:`jsonmode.session.drivers`, :mod:`jsonmode.session.streamed`,
:mod:`jsonmode.session.lockstep`) make the calls, sync, async, streamed or batched.
Not thread-safe: one thread (or task) at a time resumes a session.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from jsonmode import events
from jsonmode.errors import (
    AttemptsExhaustedError,
    OutputError,
    OutputParseError,
    OutputTruncatedError,
    SchemaViolationError,
)
from jsonmode.result import Attempt, Outcome, Result
from jsonmode.schema.core import Schema
from jsonmode.schema.validation import Issue
from jsonmode.session.grammar_judge import GrammarJudge, as_grammar
from jsonmode.session.judges import Judge, SchemaJudge
from jsonmode.session.prompts import Message, user_messages
from jsonmode.session.records import Context, Reply, Session, Settings, Trace

__all__ = ["attempts", "judged", "outcome", "schema_session", "text_session"]

#: A prompt: a string, or chat messages.
Prompt = str | Sequence[Message]


def schema_session(
    settings: Settings,
    prompt: Prompt,
    schema: object,
    examples: Sequence[tuple[str, Any]],
    schema_name: str | None,
    context: Any = None,
    trace: Trace | None = None,
    warn: bool = True,
) -> Session:
    """The attempts of one request for a JSON value under ``schema``. The backend is
    prepared before the clock starts (a no-op when the async driver already did it off
    the loop). ``warn``: emit the schema's warnings (``settings.schema_warnings``)."""
    settings.prepare()
    started = time.perf_counter()
    spec = Schema.of(schema)
    if warn:
        settings.schema_warnings.emit(spec)
    judge = SchemaJudge(spec, settings.mode, context)
    return (yield from attempts(settings, prompt, judge, examples, schema_name, started, trace))


def text_session(
    settings: Settings,
    prompt: Prompt,
    grammar: object,
    examples: Sequence[tuple[str, str]],
    schema_name: str | None,
    trace: Trace | None = None,
) -> Session:
    """:func:`schema_session` for a text under ``grammar`` (compiled, or GBNF text)."""
    settings.prepare()
    started = time.perf_counter()
    judge = GrammarJudge(as_grammar(grammar), settings.mode)
    return (yield from attempts(settings, prompt, judge, examples, schema_name, started, trace))


def attempts(
    settings: Settings,
    prompt: Prompt,
    judge: Judge,
    examples: Sequence[tuple[str, Any]],
    schema_name: str | None,
    started: float,
    trace: Trace | None = None,
) -> Session:
    """The validation attempts of one request judged by ``judge``: the tier, the first
    request, a re-ask with the errors after each failed attempt (up to
    ``settings.max_attempts``), then the final error; ``trace`` shows the tier and the
    attempts as they come. Events are emitted only when someone listens."""
    name = settings.schema_name if schema_name is None else events.check_schema_name(schema_name)
    tier = judge.tier(settings.tier, settings.backend)
    trace = trace if trace is not None else Trace()
    trace.tier = tier
    mode = settings.mode
    max_attempts = settings.max_attempts
    # what the events need; a tuple costs nothing when nobody listens
    fallback = settings.tier == "constrained" and tier != "constrained"
    report = Context(tier, mode, name, started, fallback)
    first = judge.first_messages(user_messages(prompt), examples)
    request = judge.request(first, tier)
    done = trace.attempts
    for index in range(1, max_attempts + 1):
        reply = yield request
        if reply.error is not None:
            done.append(
                Attempt(
                    index,
                    "backend_error",
                    error=str(reply.error),
                    latency_s=reply.latency_s,
                    transport_retries=reply.transport_retries,
                )
            )
            reply.error.attempts = tuple(done)
            if events.listeners:
                _attempt_finished(report, done[-1])
                _request_finished(report, done, ok=False)
            raise reply.error
        attempt, value = judged(index, reply, judge)
        done.append(attempt)
        if events.listeners:
            _attempt_finished(report, attempt)
        if attempt.ok:
            result = Result(
                value, attempt.value, tier, mode, tuple(done), time.perf_counter() - started
            )
            if events.listeners:
                _request_finished(report, done, ok=True, duration_s=result.duration_s)
            return result
        request = judge.request(judge.reask_messages(first, attempt, max_attempts), tier)
    if events.listeners:
        _request_finished(report, done, ok=False)
    last = done[-1]
    repairable = mode == "strict" and (
        judge.repairable(last) if reply.repairable is None else reply.repairable
    )
    error = AttemptsExhaustedError(
        f"no {judge.wanted} after {len(done)} attempt(s); last: {last.outcome}: {last.error}",
        attempts=done,
        hint="mode='repair' would repair the last output" if repairable else None,
    )
    error.repairable = repairable
    raise error


def judged(index: int, reply: Reply, judge: Judge) -> tuple[Attempt, Any]:
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
            outcome(failure),
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


def outcome(failure: OutputError) -> Outcome:
    """The attempt outcome an output error records."""
    if isinstance(failure, OutputTruncatedError):
        return "truncated"
    if isinstance(failure, OutputParseError):
        return "invalid_json"
    return "schema_violation"


def _attempt_finished(context: Context, attempt: Attempt) -> None:
    events.emit(events.AttemptFinished(context.tier, context.mode, context.schema_name, attempt))


def _request_finished(
    context: Context, attempts: list[Attempt], *, ok: bool, duration_s: float | None = None
) -> None:
    done = tuple(attempts)
    if duration_s is None:
        duration_s = time.perf_counter() - context.started
    events.emit(
        events.RequestFinished(
            context.tier,
            context.mode,
            context.schema_name,
            events.request_outcome(done, ok),
            done,
            duration_s,
            context.fallback,
        )
    )
