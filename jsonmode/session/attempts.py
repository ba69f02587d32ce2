"""The attempt session, sans I/O: one request's tier, attempts, judging, repair,
re-asks and events, as a generator.

A session yields each backend :class:`~jsonmode.backends.base.Request` and is sent
that call's :class:`~jsonmode.session.records.Reply`; it returns the
:class:`~jsonmode.Result` or raises the request's error (AttemptsExhaustedError, the
BackendError, a UsageError for bad input). It makes no backend call and never sleeps:
the drivers (:mod:`jsonmode.session.drivers`, :mod:`jsonmode.session.streamed`,
:mod:`jsonmode.session.lockstep`) make the calls, sync, async, streamed or batched.
Not thread-safe: one thread (or task) at a time resumes a session.

Thinking: every reply, in every tier and for every judge, is cut into thinking and
answer (:func:`jsonmode.repair.reasoning.split_reasoning`, by the markers
:func:`reasoning_of` picks from ``settings.reasoning``) before it is read; thinking an
API returned apart (``Completion.reasoning``) joins it. The thinking lands on the
attempt (``Attempt.reasoning``), never in the judge's reading. A reply that ended
inside its thinking is a :class:`~jsonmode.errors.ThinkingTruncatedError`
(outcome ``thinking_truncated``), whose re-ask asks for a shorter thinking.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from typing import Any

from jsonmode import events
from jsonmode.backends.base import Backend, DetectsReasoning, Request
from jsonmode.errors import (
    AttemptsExhaustedError,
    OutputError,
    OutputParseError,
    OutputTruncatedError,
    SchemaViolationError,
    ThinkingTruncatedError,
    UsageError,
)
from jsonmode.reasoning import Reasoning
from jsonmode.repair.reasoning import AUTO, Split, split_gated, split_reasoning
from jsonmode.result import Attempt, Outcome, Result
from jsonmode.schema.core import Schema
from jsonmode.schema.validation import Issue
from jsonmode.session.grammar_judge import GrammarJudge, as_grammar
from jsonmode.session.judges import Judge, SchemaJudge
from jsonmode.session.prompts import Message, user_messages
from jsonmode.session.records import Context, Reply, Session, Settings, Trace

__all__ = [
    "attempts",
    "check_reasoning",
    "judged",
    "outcome",
    "reasoning_of",
    "schema_session",
    "text_session",
]

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


def check_reasoning(reasoning: object) -> Reasoning | str | None:
    """``reasoning`` as ``JsonMode(reasoning=...)`` takes it: ``"auto"``, None or a
    :class:`~jsonmode.Reasoning`.

    Raises:
        UsageError: anything else.
    """
    if reasoning is None or reasoning == "auto" or isinstance(reasoning, Reasoning):
        return reasoning
    raise UsageError(
        f"reasoning must be 'auto', None or a jsonmode.Reasoning, not {reasoning!r}",
        hint="jsonmode.Reasoning(end='</think>', start='<think>') names a model's markers",
    )


def reasoning_of(
    choice: Reasoning | str | None, backend: Backend
) -> tuple[tuple[Reasoning, ...], Reasoning | None]:
    """The markers replies are split by, and the :class:`Reasoning` set on every
    :class:`~jsonmode.backends.base.Request` (a constraining backend gates its mask with
    it), for ``JsonMode(reasoning=choice)``: ``"auto"`` splits by the known families
    and, for a backend that :class:`DetectsReasoning`, by what it detected (sent on each
    request too); a :class:`Reasoning` by those markers (sent on each request); None:
    no split, nothing sent. Cheap: the detection is cached by the backend."""
    if choice is None:
        return (), None
    if isinstance(choice, Reasoning):
        return (choice,), choice
    detected = backend.detected_reasoning() if isinstance(backend, DetectsReasoning) else None
    if detected is None:
        return AUTO, None
    return (detected, *(family for family in AUTO if family != detected)), detected


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
    markers, gate = reasoning_of(settings.reasoning, settings.backend)
    first = judge.first_messages(user_messages(prompt), examples)
    request = _gated(judge.request(first, tier), gate)
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
        # a constraining backend gated this reply: thinking, end marker, document, exactly
        gated = gate if request.constrained else None
        attempt, value = judged(index, reply, judge, markers, gate, gated)
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
        request = _gated(
            judge.request(judge.reask_messages(first, attempt, max_attempts), tier), gate
        )
    if events.listeners:
        _request_finished(report, done, ok=False)
    last = done[-1]
    answer = split_reasoning(last.raw, markers).answer if last.reasoning is not None else last.raw
    repairable = mode == "strict" and (
        judge.repairable(dataclasses.replace(last, raw=answer))
        if reply.repairable is None
        else reply.repairable
    )
    hint = "mode='repair' would repair the last output" if repairable else None
    if last.outcome == "thinking_truncated":
        hint = (
            "the model ran out of tokens while thinking: raise max_tokens, or cap its thinking "
            "(jsonmode.Reasoning(..., max_tokens=N) on a constraining backend)"
        )
    error = AttemptsExhaustedError(
        f"no {judge.wanted} after {len(done)} attempt(s); last: {last.outcome}: {last.error}",
        attempts=done,
        hint=hint,
    )
    error.repairable = repairable
    raise error


def _gated(request: Request, gate: Reasoning | None) -> Request:
    return request if gate is None else dataclasses.replace(request, reasoning=gate)


def judged(
    index: int,
    reply: Reply,
    judge: Judge,
    markers: Sequence[Reasoning] = (),
    gate: Reasoning | None = None,
    gated: Reasoning | None = None,
) -> tuple[Attempt, Any]:
    """One output as an Attempt, and its value when it is valid. The reply's thinking
    (by ``markers``, and what the API returned apart) is split off before the judge
    reads the answer, and kept on the attempt. ``gate``: the markers sent with the
    request; when they have no start marker (the reply always begins inside the
    thinking), a reply cut off at the length limit before their end marker ended
    inside its thinking. ``gated``: the markers a constraining backend decoded this
    reply under; it is then exactly thinking, end marker, document, and split so
    (:func:`~jsonmode.repair.reasoning.split_gated`), whatever the thinking looks like."""
    completion = reply.completion
    assert completion is not None
    if gated is not None:
        split = split_gated(completion.text, gated)
    else:
        split = split_reasoning(completion.text, markers)
    if (
        split.thinking is None
        and completion.truncated
        and gate is not None
        and gate.start is None
        and gate.end not in completion.text
    ):
        split = Split("", completion.text.strip(), True, gate)
    thinking = _joined(completion.reasoning, split.thinking)
    common: dict[str, Any] = {
        "raw": completion.text,
        "latency_s": reply.latency_s,
        "usage": completion.usage,
        "transport_retries": reply.transport_retries,
        "reasoning": thinking,
    }
    try:
        if reply.verdict is not None:
            raise reply.verdict
        if completion.problem is not None:  # e.g. a call to another function than asked
            problem = completion.problem
            raise SchemaViolationError(
                problem, raw=completion.text, issues=(Issue("$", "tool", problem),)
            )
        if split.unfinished:
            end = split.markers.end if split.markers is not None else "?"
            raise _thinking_truncated(completion.text, completion.truncated, end)
        parsed = judge.read(split.answer, completion.truncated)
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


def _joined(apart: str | None, inline: str | None) -> str | None:
    if apart and inline:
        return f"{apart}\n{inline}"
    return apart or inline


def _thinking_truncated(text: str, truncated: bool, end: str) -> ThinkingTruncatedError:
    why = "ran out of tokens" if truncated else "ended"
    return ThinkingTruncatedError(
        f"the reply {why} inside its thinking ({len(text):,} characters, no end marker "
        f"{end!r}): it holds no answer",
        raw=text,
        hint="raise max_tokens, or ask for a shorter thinking",
    )


def outcome(failure: OutputError) -> Outcome:
    """The attempt outcome an output error records."""
    if isinstance(failure, ThinkingTruncatedError):
        return "thinking_truncated"
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
