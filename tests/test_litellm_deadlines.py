"""The litellm backend against hostile loopback servers: deadlines and Retry-After (issue 22).

httpx's timeouts are per operation: a server that sends a byte now and then never
trips them. jsonmode's ``timeout`` bounds the whole call: connect, send, the complete
reply. A server's ``Retry-After`` is waited for, within the transport policy's budget.
Servers are real sockets on 127.0.0.1 (tests/support/raw_http.py, openai_server.py).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from typing import Any

import pytest
from support import raw_http
from support.openai_server import HttpError, OpenAIServer, Reply
from support.raw_http import RawServer, Send, Silent, Trickle

from jsonmode import JsonMode, PermanentBackendError, TransientBackendError, TransportPolicy

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("no_implicit_event_loop")]

Start = Callable[..., OpenAIServer]

PERSON: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "age": {"type": "integer"},
        "email": {"type": "string"},
    },
    "required": ["name", "age", "email"],
}
ADA = {"name": "Ada", "age": 36, "email": "ada@example.com"}
ADA_JSON = json.dumps(ADA)
PROMPT = "Extract the person: Ada, 36, ada@example.com"
FAST = TransportPolicy(max_retries=3, initial_wait=0.01, max_wait=0.02)


@pytest.fixture(autouse=True, scope="module")
def _litellm_imported() -> None:
    """litellm's first import takes seconds; it happens before a deadline starts, not in it,
    but it would count in the times measured here."""
    from jsonmode.backends.litellm import _litellm

    _litellm()


def jsonmode(api_base: str, **options: Any) -> JsonMode:
    options.setdefault("timeout", 5.0)
    options.setdefault("transport", FAST)
    return JsonMode("openai/test-model", api_base=api_base, api_key="unused", **options)


# -- deadlines -----------------------------------------------------------------------------

ONE_CALL = TransportPolicy(max_retries=0)
SLACK = 1.5  # seconds allowed past the deadline (thread start, error mapping, a loaded CI box)


def _loris(kind: str) -> Trickle:
    """A slow-loris answer: the head (status line and headers) or the body a byte at a time."""
    whole = raw_http.completion(ADA_JSON)
    if kind == "head":
        return Trickle(whole, every=0.2)
    head, _, body = whole.partition(b"\r\n\r\n")
    return Trickle(body, every=0.2, head=head + b"\r\n\r\n")


@pytest.mark.parametrize("kind", ["head", "body"])
def test_slow_loris_reply_ends_at_the_timeout(
    raw_server: Callable[..., RawServer], kind: str
) -> None:
    server = raw_server(_loris(kind))
    jm = jsonmode(server.base_url, timeout=1.0, transport=ONE_CALL)
    started = time.perf_counter()
    with pytest.raises(TransientBackendError) as caught:
        jm.run(PROMPT, PERSON)
    elapsed = time.perf_counter() - started
    assert 1.0 <= elapsed < 1.0 + SLACK
    assert "timeout" in str(caught.value)
    (attempt,) = caught.value.attempts
    assert attempt.outcome == "backend_error"
    assert attempt.calls == 1


@pytest.mark.parametrize("kind", ["head", "body"])
def test_async_slow_loris_reply_ends_at_the_timeout_and_its_connection_closes(
    raw_server: Callable[..., RawServer], kind: str
) -> None:
    server = raw_server(_loris(kind))
    jm = jsonmode(server.base_url, timeout=1.0, transport=ONE_CALL)
    started = time.perf_counter()
    with pytest.raises(TransientBackendError) as caught:
        asyncio.run(jm.arun(PROMPT, PERSON))
    ended = time.monotonic()
    assert 1.0 <= time.perf_counter() - started < 1.0 + SLACK
    assert "timeout" in str(caught.value)
    # cancelled, not abandoned: the client closed the connection, the server noticed
    for _ in range(40):
        if server.closed_by_client[0] is not None:
            break
        time.sleep(0.05)
    closed = server.closed_by_client[0]
    assert closed is not None
    assert closed - ended < 1.5


def test_slow_loris_stream_ends_at_the_timeout(raw_server: Callable[..., RawServer]) -> None:
    """``stream=True`` reads the events inside the same deadline."""
    head, body = raw_http.events(['{"name": ', '"Ada", ', '"age": 36, ', '"email": "a"}'])
    server = raw_server(*[Trickle(body, every=0.2, head=head)] * 2)
    jm = jsonmode(server.base_url, timeout=1.0, transport=ONE_CALL, stream=True)
    for run in (jm.run, lambda p, s: asyncio.run(jm.arun(p, s))):
        started = time.perf_counter()
        with pytest.raises(TransientBackendError) as caught:
            run(PROMPT, PERSON)
        assert time.perf_counter() - started < 1.0 + SLACK
        assert "timeout" in str(caught.value)


def test_stream_reply_is_read_whole(raw_server: Callable[..., RawServer]) -> None:
    head, body = raw_http.events(['{"name": "Ada", ', '"age": 36, ', '"email": "ada@example.com"}'])
    server = raw_server(Send(head + body), Send(head + body))
    jm = jsonmode(server.base_url, stream=True)
    assert jm.run(PROMPT, PERSON).value == ADA
    assert asyncio.run(jm.arun(PROMPT, PERSON)).value == ADA
    assert server.request_count == 2


def test_no_timeout_given_means_the_default_deadline(
    raw_server: Callable[..., RawServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    from jsonmode.backends import deadline as _deadline

    assert _deadline.DEFAULT_TIMEOUT == 120.0
    assert JsonMode("openai/x", api_base="http://127.0.0.1:9/v1").backend.timeout == 120.0  # type: ignore[attr-defined]
    monkeypatch.setattr(_deadline, "DEFAULT_TIMEOUT", 1.0)
    server = raw_server(Silent(), Silent())
    jm = JsonMode(
        "openai/test-model", api_base=server.base_url, api_key="unused", transport=ONE_CALL
    )
    assert jm.backend.timeout == 1.0  # type: ignore[attr-defined]
    for run in (jm.run, lambda p, s: asyncio.run(jm.arun(p, s))):
        started = time.perf_counter()
        with pytest.raises(TransientBackendError) as caught:
            run(PROMPT, PERSON)
        assert 1.0 <= time.perf_counter() - started < 1.0 + SLACK
        assert "timeout of 1 s" in str(caught.value)


@pytest.mark.parametrize("bad", [0, -1.0, float("nan"), float("inf"), "5", True])
def test_timeout_must_be_a_positive_number(bad: object) -> None:
    from jsonmode import UsageError

    with pytest.raises(UsageError):
        JsonMode("openai/x", api_base="http://127.0.0.1:9/v1", timeout=bad)


# -- Retry-After -------------------------------------------------------------------------------


def _refusal(status: int, headers: dict[str, str]) -> Send:
    return Send(raw_http.response(status, raw_http.error_body(f"slow down ({status})"), headers))


def _sleeps_recorded(**overrides: Any) -> tuple[TransportPolicy, list[float]]:
    slept: list[float] = []

    async def asleep(seconds: float) -> None:
        slept.append(seconds)

    options: dict[str, Any] = {"initial_wait": 0.01, "max_wait": 0.02, **overrides}
    return TransportPolicy(sleep=slept.append, async_sleep=asleep, **options), slept


@pytest.mark.parametrize("status", [429, 503, 500, 408])
@pytest.mark.parametrize("driver", ["sync", "async"])
def test_retry_after_seconds_is_honoured(
    raw_server: Callable[..., RawServer], status: int, driver: str
) -> None:
    server = raw_server(_refusal(status, {"Retry-After": "2"}), Send(raw_http.completion(ADA_JSON)))
    policy, slept = _sleeps_recorded()
    jm = jsonmode(server.base_url, transport=policy)
    result = jm.run(PROMPT, PERSON) if driver == "sync" else asyncio.run(jm.arun(PROMPT, PERSON))
    assert result.value == ADA
    assert server.request_count == 2
    assert slept == [2.0]
    (attempt,) = result.attempts
    assert attempt.transport_retries == 1
    assert attempt.calls == 2


def test_retry_after_http_date_is_honoured(raw_server: Callable[..., RawServer]) -> None:
    from datetime import datetime, timedelta, timezone
    from email.utils import format_datetime

    when = format_datetime(datetime.now(timezone.utc) + timedelta(seconds=30), usegmt=True)
    server = raw_server(_refusal(429, {"Retry-After": when}), Send(raw_http.completion(ADA_JSON)))
    policy, slept = _sleeps_recorded(max_delay=120)
    assert jsonmode(server.base_url, transport=policy).run(PROMPT, PERSON).value == ADA
    (waited,) = slept
    assert 28.0 <= waited <= 30.0


def test_retry_after_ms_is_honoured(raw_server: Callable[..., RawServer]) -> None:
    server = raw_server(
        _refusal(429, {"retry-after-ms": "1500", "Retry-After": "1"}),
        Send(raw_http.completion(ADA_JSON)),
    )
    policy, slept = _sleeps_recorded()
    assert jsonmode(server.base_url, transport=policy).run(PROMPT, PERSON).value == ADA
    assert slept == [1.5]


@pytest.mark.parametrize("driver", ["sync", "async"])
def test_retry_after_beyond_max_delay_gives_up_at_once(
    raw_server: Callable[..., RawServer], driver: str
) -> None:
    server = raw_server(_refusal(429, {"Retry-After": "120"}), Send(raw_http.completion(ADA_JSON)))
    policy, slept = _sleeps_recorded(max_delay=10)
    jm = jsonmode(server.base_url, transport=policy)
    started = time.perf_counter()
    with pytest.raises(TransientBackendError) as caught:
        jm.run(PROMPT, PERSON) if driver == "sync" else asyncio.run(jm.arun(PROMPT, PERSON))
    assert time.perf_counter() - started < 5.0
    assert slept == []
    assert server.request_count == 1
    error = caught.value
    assert error.retry_after == 120.0
    assert error.status_code == 429
    assert "Retry-After" in str(error)
    assert "max_delay" in str(error)
    (attempt,) = error.attempts
    assert attempt.calls == 1
    assert "Retry-After" in (attempt.error or "")


@pytest.mark.parametrize("value", ["soon", "-5", "", "1e3", "nan", "inf", "2, 3"])
def test_unreadable_retry_after_falls_back_to_backoff(
    raw_server: Callable[..., RawServer], value: str
) -> None:
    server = raw_server(_refusal(429, {"Retry-After": value}), Send(raw_http.completion(ADA_JSON)))
    policy, slept = _sleeps_recorded()
    result = jsonmode(server.base_url, transport=policy).run(PROMPT, PERSON)
    assert result.value == ADA
    (waited,) = slept
    assert 0.0 <= waited <= 0.02  # the policy's own backoff
    assert result.attempts[0].calls == 2


@pytest.mark.parametrize("status", [400, 401, 403, 404, 422])
def test_permanent_error_with_retry_after_is_never_retried(
    raw_server: Callable[..., RawServer], status: int
) -> None:
    server = raw_server(_refusal(status, {"Retry-After": "1"}))
    policy, slept = _sleeps_recorded()
    with pytest.raises(PermanentBackendError) as caught:
        jsonmode(server.base_url, transport=policy).run(PROMPT, PERSON)
    assert server.request_count == 1
    assert slept == []
    assert caught.value.retry_after == 1.0
    assert caught.value.attempts[0].calls == 1


def test_cli_verbose_shows_the_calls_of_each_attempt(
    openai_server: Start, tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    from jsonmode.cli import main

    schema = tmp_path / "person.json"
    schema.write_text(json.dumps(PERSON))
    server = openai_server(
        HttpError(500, "blip", "server_error"), Reply("not json"), Reply(ADA_JSON)
    )
    status = main(
        [
            "generate",
            "--schema",
            str(schema),
            "--model",
            "openai/test-model",
            "--api-base",
            server.base_url,
            "-v",
            PROMPT,
        ]
    )
    captured = capsys.readouterr()
    assert status == 0
    assert json.loads(captured.out) == ADA
    lines = [line for line in captured.err.splitlines() if line.startswith("attempt ")]
    assert len(lines) == 2
    assert "2 calls" in lines[0]
    assert "1 call)" in lines[1]
