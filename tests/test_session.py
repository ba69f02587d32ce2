"""The attempt session driven by hand, without a backend call: requests out, replies in
(jsonmode.session is sans I/O), and its drivers compared on the same scripted replies."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from jsonmode.backends.base import Backend, Completion, Request
from jsonmode.backends.scripted import ScriptedBackend
from jsonmode.errors import (
    AttemptsExhaustedError,
    BackendError,
    PermanentBackendError,
    TransientBackendError,
)
from jsonmode.reasoning import Reasoning
from jsonmode.repair.parse import Mode
from jsonmode.result import Result, Tier
from jsonmode.retry import TransportPolicy
from jsonmode.session import (
    Lockstep,
    Reply,
    SchemaWarnings,
    Session,
    Trace,
    adrive,
    drive,
    schema_session,
    steps,
    text_session,
)

SCHEMA = {
    "type": "object",
    "properties": {"a": {"type": "integer"}},
    "required": ["a"],
    "additionalProperties": False,
}


async def _no_wait(_: float) -> None:
    return None


@dataclass
class Settings:
    """A plain record standing in for JsonMode (the session's Settings protocol)."""

    backend: Backend = field(default_factory=lambda: ScriptedBackend([]))
    tier: Tier = "prompted"
    mode: Mode = "strict"
    max_attempts: int = 3
    schema_name: str | None = None
    transport: TransportPolicy = field(
        default_factory=lambda: TransportPolicy(
            sleep=lambda _: None, async_sleep=_no_wait, max_retries=2
        )
    )
    schema_warnings: SchemaWarnings = field(default_factory=SchemaWarnings)
    reasoning: Reasoning | str | None = "auto"
    prepared: int = 0

    def prepare(self) -> None:
        self.prepared += 1

    async def aprepare(self) -> None:
        self.prepare()


def reply(text: str, retries: int = 0) -> Reply:
    return Reply(Completion(text), None, 0.25, retries)


def finish(session: Session, sent: Reply) -> Result[Any]:
    with pytest.raises(StopIteration) as done:
        session.send(sent)
    result: Result[Any] = done.value.value
    return result


def contents(request: Request) -> str:
    return "\n".join(str(message.get("content")) for message in request.messages)


def test_a_strict_session_reasks_with_the_errors_then_returns_the_result() -> None:
    settings = Settings()
    trace = Trace()
    session = schema_session(settings, "Give a.", SCHEMA, (), None, trace=trace)
    first = next(session)
    assert settings.prepared == 1  # the backend is prepared before the clock starts
    assert trace.tier == "prompted"
    assert not first.native
    assert not first.constrained
    assert "Give a." in contents(first)

    second = session.send(reply('{"a": "one"}'))  # valid JSON, not conforming
    assert isinstance(second, Request)
    assert len(second.messages) > len(first.messages)  # the re-ask shows the failure
    assert '{"a": "one"}' in contents(second)
    assert "$.a" in contents(second)  # ... and where it failed
    assert [attempt.outcome for attempt in trace.attempts] == ["schema_violation"]

    result = finish(session, reply('{"a": 1}', retries=1))
    assert result.value == {"a": 1}
    assert result.tier == "prompted"
    assert [attempt.outcome for attempt in result.attempts] == ["schema_violation", "valid"]
    assert result.attempts[1].transport_retries == 1
    assert result.attempts[1].raw == '{"a": 1}'


def test_a_strict_session_gives_up_after_max_attempts_with_the_repair_hint() -> None:
    session = schema_session(Settings(max_attempts=2), "p", SCHEMA, (), None)
    next(session)
    session.send(reply('{"a": 1,}'))
    with pytest.raises(AttemptsExhaustedError) as raised:
        session.send(reply('{"a": 1,}'))
    error = raised.value
    assert [attempt.outcome for attempt in error.attempts] == ["invalid_json", "invalid_json"]
    assert error.repairable is True
    assert error.hint == "mode='repair' would repair the last output"


def test_a_repair_session_records_the_repair_without_a_reask() -> None:
    session = schema_session(Settings(mode="repair"), "p", SCHEMA, (), None)
    next(session)
    result = finish(session, reply('{"a": 1,}'))
    assert result.value == {"a": 1}
    assert result.mode == "repair"
    assert len(result.attempts) == 1
    assert result.attempts[0].repairs  # what was changed is on the record
    assert result.repairs == result.attempts[0].repairs


def test_a_backend_error_ends_the_session_with_every_attempt() -> None:
    session = schema_session(Settings(), "p", SCHEMA, (), None)
    next(session)
    session.send(reply("nope"))
    failure = PermanentBackendError("refused")
    with pytest.raises(PermanentBackendError) as raised:
        session.send(Reply(None, failure, 0.5, 2))
    assert raised.value is failure
    assert [attempt.outcome for attempt in failure.attempts] == ["invalid_json", "backend_error"]
    assert failure.attempts[-1].transport_retries == 2


def test_a_text_session_judges_against_the_grammar() -> None:
    from jsonmode import compile_regex

    session = text_session(Settings(), "A code.", compile_regex("[A-Z]{3}"), (), None)
    first = next(session)
    assert first.grammar is not None
    second = session.send(reply("abc"))
    assert "byte 0" in contents(second)
    result = finish(session, reply("ABC"))
    assert result.value == "ABC"
    assert [attempt.outcome for attempt in result.attempts] == ["schema_violation", "valid"]


SCRIPT: list[Any] = [TransientBackendError("busy"), '{"a": "x"}', "not json", '{"a": 7}']


def summary(result: Result[Any]) -> tuple[Any, ...]:
    return (
        result.value,
        result.tier,
        result.mode,
        [
            (a.index, a.outcome, a.raw, a.error, a.issues, a.transport_retries)
            for a in result.attempts
        ],
    )


def test_the_sync_and_async_drivers_give_equal_results() -> None:
    sync_backend = ScriptedBackend(SCRIPT)
    settings = Settings(backend=sync_backend)
    sync = drive(
        schema_session(settings, "p", SCHEMA, (), None), settings.transport, sync_backend.complete
    )
    async_backend = ScriptedBackend(SCRIPT)
    settings = Settings(backend=async_backend)
    session = schema_session(settings, "p", SCHEMA, (), None)
    async_ = asyncio.run(adrive(session, settings.transport, async_backend.acomplete))
    assert summary(sync) == summary(async_)
    assert sync.value == {"a": 7}
    assert [a.outcome for a in sync.attempts] == ["schema_violation", "invalid_json", "valid"]
    assert sync.attempts[0].transport_retries == 1  # the transient failure, retried
    assert sync_backend.requests == async_backend.requests  # the same requests, in order


def test_the_drivers_retry_a_transient_failure_inside_one_attempt() -> None:
    script = [TransientBackendError("busy"), '{"a": 2}']
    backend = ScriptedBackend(script)
    settings = Settings(backend=backend)
    result = drive(
        schema_session(settings, "p", SCHEMA, (), None), settings.transport, backend.complete
    )
    assert len(result.attempts) == 1
    assert result.attempts[0].transport_retries == 1
    assert len(backend.requests) == 2


def test_the_inside_out_driver_takes_completions_and_errors_from_its_resumer() -> None:
    settings = Settings()
    job = steps(schema_session(settings, "p", SCHEMA, (), None), settings.transport)
    first = next(job)
    again = job.throw(TransientBackendError("busy"))  # the transport policy retries
    assert again == first  # the same request, sent again
    reask = job.send(Completion("[]"))
    assert reask != first
    with pytest.raises(StopIteration) as done:
        job.send(Completion('{"a": 3}'))
    result = done.value.value
    assert result.value == {"a": 3}
    assert [(a.outcome, a.transport_retries) for a in result.attempts] == [
        ("schema_violation", 1),
        ("valid", 0),
    ]


class Batched:
    """A CompletesBatch backend: one reply per request from a function, calls counted."""

    name = "batched"
    native_schema = False

    def __init__(self) -> None:
        self.rounds: list[int] = []

    def complete_batch(self, requests: Sequence[Request]) -> list[Completion | BackendError]:
        self.rounds.append(len(requests))
        out: list[Completion | BackendError] = []
        for request in requests:
            text = contents(request)
            if "three" in text and "oops" not in text:
                out.append(Completion("oops"))  # its first attempt fails: re-asked
            else:
                out.append(Completion('{"a": 1}'))
        return out


def test_the_lockstep_driver_batches_first_requests_then_reasks() -> None:
    backend = Batched()
    settings = Settings()
    finished: list[int] = []
    run = Lockstep(
        backend,
        settings.transport,
        ["one", "three", "five"],
        lambda prompt: schema_session(settings, prompt, SCHEMA, (), None),
        8,
        None,
        lambda index, _, __: finished.append(index),
    )
    entries = list(run)
    assert [item for item, _ in entries] == ["one", "three", "five"]  # input order
    outcomes = [[a.outcome for a in entry.attempts] for _, entry in entries]
    assert outcomes[0] == ["valid"]
    assert outcomes[2] == ["valid"]
    assert outcomes[1] == ["invalid_json", "valid"]
    assert backend.rounds == [3, 1]  # the first requests together, then the re-ask
    assert sorted(finished) == [0, 1, 2]
