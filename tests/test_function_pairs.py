"""FunctionBackend's sync and async halves end alike: on the same scripted replies a
sync callable and an async one give the same Completion through ``complete`` and
``acomplete`` (and the same chunks through ``stream`` and ``astream``), or the same
typed error: plain text, a Completion, pieces (a sync generator, which an async
callable may also return), a reply of the wrong type, the callable's own errors, a
deadline passed."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from jsonmode import Schema
from jsonmode.backends.base import Completion, Request
from jsonmode.backends.deadline import abandoned
from jsonmode.backends.function import FunctionBackend
from jsonmode.result import Usage

REQUEST = Request(({"role": "user", "content": "hi"},), Schema.of({"type": "string"}))


def pieces() -> Iterator[Any]:
    yield '"a'
    yield 'b"'


def pieces_then_whole() -> Iterator[Any]:
    yield '"a'
    yield Completion('"ab"', Usage(1, 2))


def fails(exc: BaseException) -> Callable[[], Any]:
    def reply() -> Any:
        raise exc

    return reply


def slow() -> Any:
    time.sleep(0.5)
    return '"late"'


REPLIES: dict[str, Callable[[], Any]] = {
    "text": lambda: '"ab"',
    "a Completion": lambda: Completion('"ab"', Usage(3, 4), truncated=True),
    "pieces": pieces,
    "pieces then the whole": pieces_then_whole,
    "a wrong type": lambda: 42,
    "a Completion of no text": lambda: Completion(None),  # type: ignore[arg-type]
    "a piece of a wrong type": lambda: iter(['"a', 7]),
    "its own TimeoutError": fails(TimeoutError("slow")),
    "its own ValueError": fails(ValueError("bad")),
    "past the deadline": slow,
}


def backends(reply: Callable[[], Any]) -> tuple[FunctionBackend, FunctionBackend]:
    def sync_fn(messages: list[dict[str, Any]]) -> Any:
        return reply()

    async def async_fn(messages: list[dict[str, Any]]) -> Any:
        if reply is slow:
            await asyncio.sleep(0.5)
            return '"late"'
        return reply()

    sync_fn.__qualname__ = async_fn.__qualname__ = "scripted"  # the same name in errors
    return (
        FunctionBackend(sync_fn, timeout=0.2),
        FunctionBackend(async_fn, timeout=0.2),
    )


def outcome(run: Callable[[], Any]) -> tuple[Any, ...]:
    try:
        return ("value", run())
    except Exception as exc:
        return ("error", type(exc).__name__, str(exc))


async def collected(backend: FunctionBackend) -> list[Any]:
    return [chunk async for chunk in backend.astream(REQUEST)]


@pytest.fixture(autouse=True)
def no_worker_left() -> Iterator[None]:
    yield
    ends = time.monotonic() + 5
    while abandoned() and time.monotonic() < ends:
        time.sleep(0.02)
    assert abandoned() == 0


@pytest.mark.parametrize("case", list(REPLIES))
def test_complete_and_acomplete_end_alike(case: str) -> None:
    sync_backend, async_backend = backends(REPLIES[case])
    results = [
        outcome(lambda: sync_backend.complete(REQUEST)),
        outcome(lambda: asyncio.run(sync_backend.acomplete(REQUEST))),
        outcome(lambda: asyncio.run(async_backend.acomplete(REQUEST))),
        outcome(lambda: async_backend.complete(REQUEST)),  # on a private loop
    ]
    assert results[1:] == results[:-1]
    if case in ("text", "pieces"):
        assert results[0] == ("value", Completion('"ab"'))
    if case == "past the deadline":
        assert results[0][1] == "TransientBackendError"


@pytest.mark.parametrize("case", list(REPLIES))
def test_stream_and_astream_end_alike(case: str) -> None:
    sync_backend, async_backend = backends(REPLIES[case])
    results = [
        outcome(lambda: list(sync_backend.stream(REQUEST))),
        outcome(lambda: asyncio.run(collected(sync_backend))),
        outcome(lambda: asyncio.run(collected(async_backend))),
        outcome(lambda: list(async_backend.stream(REQUEST))),  # on a private loop
    ]
    assert results[1:] == results[:-1]
    if case == "pieces":
        assert results[0] == ("value", ['"a', 'b"'])
