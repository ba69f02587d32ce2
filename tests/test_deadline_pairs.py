"""deadline's sync and async halves give the same outcomes on the same scripted work:
``call`` / ``acall`` and ``stream`` / ``astream`` return (or yield) the same, end at the
deadline with the same TransientBackendError, and pass the work's own errors (its own
TimeoutError included) through as they are. ``acall`` and each step of ``astream``
share one async deadline scope."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from jsonmode.backends import deadline
from jsonmode.errors import TransientBackendError

#: (what the work does, its argument): sleep a while then return, or raise.
Script = tuple[str, Any]
CASES: dict[str, tuple[list[Script], float]] = {
    "in time": ([("sleep", 0.0), ("sleep", 0.0)], 2.0),
    "past the deadline": ([("sleep", 0.0), ("sleep", 0.6)], 0.2),
    "own TimeoutError": ([("sleep", 0.0), ("raise", TimeoutError("own"))], 2.0),
    "own error": ([("raise", KeyError("k"))], 2.0),
}


def outcome(run: Any) -> tuple[Any, ...]:
    try:
        return ("value", run())
    except Exception as exc:
        return ("error", type(exc), str(exc))


@pytest.fixture(autouse=True)
def no_worker_left() -> Iterator[None]:
    """A sync worker given up at its deadline runs on for a while: wait for it (bounded),
    so that no later test counts it."""
    yield
    ends = time.monotonic() + 5
    while deadline.abandoned() and time.monotonic() < ends:
        time.sleep(0.02)
    assert deadline.abandoned() == 0


def sync_items(script: list[Script]) -> Iterator[int]:
    for index, (kind, argument) in enumerate(script):
        if kind == "raise":
            raise argument
        time.sleep(argument)
        yield index


async def async_items(script: list[Script]) -> AsyncIterator[int]:
    for index, (kind, argument) in enumerate(script):
        if kind == "raise":
            raise argument
        await asyncio.sleep(argument)
        yield index


def sync_whole(script: list[Script]) -> list[int]:
    return list(sync_items(script))


async def async_whole(script: list[Script]) -> list[int]:
    return [item async for item in async_items(script)]


@pytest.mark.parametrize("case", list(CASES))
def test_call_and_acall_end_alike(case: str) -> None:
    script, timeout = CASES[case]
    sync = outcome(lambda: deadline.call(lambda: sync_whole(script), timeout, "w"))
    asynchronous = outcome(
        lambda: asyncio.run(deadline.acall(lambda: async_whole(script), timeout, "w"))
    )
    assert sync == asynchronous
    expected = {
        "in time": ("value", [0, 1]),
        "past the deadline": (
            "error",
            TransientBackendError,
            f"w: no complete reply within the timeout of {timeout:g} s "
            "(hint: raise timeout= if the model needs longer)",
        ),
        "own TimeoutError": ("error", TimeoutError, "own"),
        "own error": ("error", KeyError, "'k'"),
    }[case]
    assert sync == expected


@pytest.mark.parametrize("case", list(CASES))
def test_stream_and_astream_end_alike(case: str) -> None:
    script, timeout = CASES[case]
    got_sync: list[int] = []
    got_async: list[int] = []

    def run_sync() -> None:
        for item in deadline.stream(lambda: sync_items(script), timeout, "w"):
            got_sync.append(item)

    async def run_async() -> None:
        async for item in deadline.astream(lambda: async_items(script), timeout, "w"):
            got_async.append(item)

    sync = outcome(run_sync)
    asynchronous = outcome(lambda: asyncio.run(run_async()))
    assert (sync, got_sync) == (asynchronous, got_async)
    if case == "past the deadline":
        assert got_sync == [0]
        assert sync[1] is TransientBackendError
