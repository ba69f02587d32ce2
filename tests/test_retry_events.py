"""The transport policy reports each retry (TransportRetried) before it sleeps."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from jsonmode import JsonMode, events
from jsonmode.backends import ScriptedBackend
from jsonmode.errors import PermanentBackendError, TransientBackendError
from jsonmode.retry import TransportPolicy, describe_failure


@pytest.fixture
def heard() -> Iterator[list[events.TransportRetried]]:
    found: list[events.TransportRetried] = []

    def listen(event: events.Event) -> None:
        if isinstance(event, events.TransportRetried):
            found.append(event)

    unsubscribe = events.subscribe(listen)
    yield found
    unsubscribe()


def flaky(*failures: BaseException, then: str = "ok"):
    script = list(failures)

    def call() -> str:
        if script:
            raise script.pop(0)
        return then

    return call


RATE_LIMITED = TransientBackendError("slow down\nplease", status_code=429)


def test_each_retry_is_reported_before_its_sleep(heard):
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        # the event for this sleep is already out, with the wait it announces
        assert len(heard) == len(slept) + 1
        assert heard[-1].wait_s == seconds
        slept.append(seconds)

    policy = TransportPolicy(sleep=sleep)
    reset = TransientBackendError("connection reset")
    assert policy.retrying()(flaky(RATE_LIMITED, reset)) == "ok"
    assert [event.call for event in heard] == [1, 2]
    assert [event.status_code for event in heard] == [429, None]
    assert heard[0].error == "TransientBackendError: slow down please"  # one line
    assert heard[1].error == "TransientBackendError: connection reset"
    assert [event.wait_s for event in heard] == slept
    assert all(0 <= wait <= policy.initial_wait * 2 for wait in slept)


def test_a_retry_after_is_the_announced_wait(heard):
    asked = TransientBackendError("busy", status_code=503, retry_after=7.5)
    TransportPolicy(sleep=lambda _: None).retrying()(flaky(asked))
    (event,) = heard
    assert (event.status_code, event.wait_s, event.call) == (503, 7.5, 1)


def test_async_retries_are_reported(heard):
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    call = flaky(RATE_LIMITED, RATE_LIMITED)

    async def acall() -> str:
        return call()

    async def main() -> str:
        return await TransportPolicy(async_sleep=sleep).aretrying()(acall)

    assert asyncio.run(main()) == "ok"
    assert [event.call for event in heard] == [1, 2]
    assert [event.wait_s for event in heard] == slept


def test_no_event_without_a_retry(heard):
    policy = TransportPolicy(sleep=lambda _: None)
    with pytest.raises(PermanentBackendError):
        policy.retrying()(flaky(PermanentBackendError("no such model", status_code=404)))
    # the server asks for longer than the budget: it fails at once, nothing is announced
    too_long = TransientBackendError("later", status_code=429, retry_after=120)
    with pytest.raises(TransientBackendError, match="no further retry"):
        TransportPolicy(sleep=lambda _: None, max_delay=10).retrying()(flaky(too_long))
    # the last call fails: no retry follows it, so no event either
    with pytest.raises(TransientBackendError):
        TransportPolicy(max_retries=1, sleep=lambda _: None).retrying()(
            flaky(RATE_LIMITED, RATE_LIMITED)
        )
    assert [event.call for event in heard] == [1]


def test_nothing_is_built_when_nobody_listens(monkeypatch):
    assert not events.listeners

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("an event was built with no listener")

    monkeypatch.setattr(events, "TransportRetried", refuse)
    assert TransportPolicy(sleep=lambda _: None).retrying()(flaky(RATE_LIMITED)) == "ok"


def test_the_facade_reports_the_retries_of_an_attempt(heard):
    backend = ScriptedBackend([RATE_LIMITED, RATE_LIMITED, '{"a": 1}'])
    jm = JsonMode(backend, transport=TransportPolicy(sleep=lambda _: None))
    result = jm.run("x", {"type": "object"})
    assert [event.call for event in heard] == [1, 2]
    assert result.attempts[0].calls == 3


@pytest.mark.parametrize(
    ("error", "line"),
    [
        (
            TransientBackendError(
                "RateLimitError: litellm.RateLimitError: RateLimitError: OpenAIException - "
                "Rate limit reached"
            ),
            "TransientBackendError: RateLimitError: OpenAIException - Rate limit reached",
        ),
        (TransientBackendError("TransientBackendError: boom"), "TransientBackendError: boom"),
        (
            PermanentBackendError("litellm.NotFoundError: NotFoundError: no model\n  m"),
            "PermanentBackendError: litellm.NotFoundError: no model m",
        ),
        (ValueError(""), "ValueError"),
        (ValueError("Error: x: y"), "ValueError: Error: x: y"),
    ],
)
def test_a_failure_in_one_line_names_each_type_once(error, line):
    assert describe_failure(error) == line
