"""deadline.stream / deadline.astream: a whole stream (opening it and every item) under one
deadline; early close releases the worker and closes the iterator; errors pass through."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Iterator
from typing import TypeVar

import pytest

from jsonmode import TransientBackendError
from jsonmode.backends import deadline

T = TypeVar("T")
SLACK = 1.0  # seconds allowed past a deadline (thread start, a loaded CI box)


@pytest.fixture(autouse=True)
def _no_abandoned_workers() -> None:
    """Counts below are exact: wait for workers other tests abandoned to end."""
    for _ in range(500):
        if deadline.abandoned() == 0:
            return
        time.sleep(0.01)


def _until(condition: object, seconds: float = 3.0) -> bool:
    ends = time.monotonic() + seconds
    while time.monotonic() < ends:
        if condition():  # type: ignore[operator]
            return True
        time.sleep(0.01)
    return bool(condition())  # type: ignore[operator]


def drain(stream: Iterator[T], into: list[T]) -> None:
    for item in stream:
        into.append(item)


class Trickle:
    """A sync stream that yields an item every ``every`` seconds, ``count`` of them,
    and records whether it was closed and in which threads it ran."""

    def __init__(self, every: float, count: int = 1000, *, opening: float = 0.0) -> None:
        self.every = every
        self.count = count
        self.opening = opening
        self.closed = threading.Event()
        self.threads: set[int] = set()

    def __call__(self) -> Iterator[int]:
        self.threads.add(threading.get_ident())
        time.sleep(self.opening)
        return self._items()

    def _items(self) -> Iterator[int]:
        try:
            for number in range(self.count):
                self.threads.add(threading.get_ident())
                time.sleep(self.every)
                yield number
        finally:
            self.closed.set()


# -- sync -------------------------------------------------------------------------------------


def test_a_stream_within_its_deadline_yields_every_item_in_order() -> None:
    source = Trickle(0.01, count=5)
    assert list(deadline.stream(source, 5.0, "test")) == [0, 1, 2, 3, 4]
    assert source.closed.is_set()
    assert threading.get_ident() not in source.threads  # a worker drove it
    assert _until(lambda: deadline.abandoned() == 0)


def test_a_trickling_stream_ends_at_the_deadline_though_every_item_comes_in_time() -> None:
    source = Trickle(0.1)  # each item well inside any per-read timeout
    got: list[int] = []
    started = time.monotonic()
    with pytest.raises(TransientBackendError, match=r"timeout of 0\.5 s") as caught:
        drain(deadline.stream(source, 0.5, "trickle"), got)
    elapsed = time.monotonic() - started
    assert 0.5 <= elapsed < 0.5 + SLACK
    assert caught.value.retryable
    assert 2 <= len(got) <= 5
    assert got == list(range(len(got)))
    # the worker was told to stop: it closes the iterator after its current step
    assert source.closed.wait(2)
    assert _until(lambda: deadline.abandoned() == 0)


def test_opening_the_stream_counts_against_the_deadline() -> None:
    source = Trickle(0.0, count=3, opening=2.0)
    started = time.monotonic()
    with pytest.raises(TransientBackendError, match="timeout"):
        list(deadline.stream(source, 0.3, "slow open"))
    assert time.monotonic() - started < 0.3 + SLACK


def test_creating_the_stream_starts_nothing() -> None:
    source = Trickle(0.0, count=1)
    iterator = deadline.stream(source, 1.0, "lazy")
    time.sleep(0.1)
    assert source.threads == set()
    iterator.close()
    assert source.threads == set()


def test_early_close_stops_the_worker_and_closes_the_iterator() -> None:
    source = Trickle(0.05)
    iterator = deadline.stream(source, 30.0, "early")
    assert next(iterator) == 0
    iterator.close()
    # the worker notices at its next item and closes the stream: it does not read to the end
    assert source.closed.wait(2)
    assert _until(lambda: deadline.abandoned() == 0)


def test_break_out_of_a_for_loop_releases_the_stream() -> None:
    source = Trickle(0.02)
    for item in deadline.stream(source, 30.0, "break"):
        if item == 2:
            break
    assert source.closed.wait(2)


def test_an_early_closed_stream_blocked_in_a_step_counts_as_abandoned_until_it_returns() -> None:
    release = threading.Event()
    closed = threading.Event()

    def held() -> Iterator[int]:
        try:
            yield 1
            release.wait(30)  # a read that the consumer cannot interrupt
            yield 2
        finally:
            closed.set()

    iterator = deadline.stream(held, 30.0, "held")
    assert next(iterator) == 1
    iterator.close()
    assert _until(lambda: deadline.abandoned() == 1)
    assert not closed.is_set()
    release.set()
    assert closed.wait(2)
    assert _until(lambda: deadline.abandoned() == 0)


def test_errors_pass_through_where_they_happen() -> None:
    boom = ValueError("broken stream")

    def failing() -> Iterator[str]:
        yield "a"
        yield "b"
        raise boom

    for timeout in (None, 5.0):
        got: list[str] = []
        with pytest.raises(ValueError, match="broken stream") as caught:
            drain(deadline.stream(failing, timeout, "failing"), got)
        assert caught.value is boom
        assert got == ["a", "b"]


def test_an_error_opening_the_stream_passes_through() -> None:
    def refuses() -> Iterator[str]:
        raise ConnectionError("refused")

    with pytest.raises(ConnectionError, match="refused"):
        list(deadline.stream(refuses, 5.0, "refused"))


def test_without_a_timeout_the_stream_runs_in_the_callers_thread() -> None:
    source = Trickle(0.0, count=3)
    iterator = deadline.stream(source, None, "plain")
    assert next(iterator) == 0
    assert source.threads == {threading.get_ident()}
    iterator.close()
    assert source.closed.is_set()  # closed at once, in this thread


def test_items_that_came_in_time_reach_a_late_consumer() -> None:
    source = Trickle(0.0, count=3)
    iterator = deadline.stream(source, 0.3, "late reader")
    assert next(iterator) == 0
    time.sleep(0.5)  # past the deadline, but the stream had already ended
    assert list(iterator) == [1, 2]


def test_an_item_that_came_after_the_deadline_is_not_delivered() -> None:
    def late() -> Iterator[int]:
        yield 0
        time.sleep(0.5)
        yield 1  # after the deadline of 0.3 s

    iterator = deadline.stream(late, 0.3, "late item")
    assert next(iterator) == 0
    time.sleep(0.8)  # the late item is waiting in the queue by now
    with pytest.raises(TransientBackendError, match="timeout"):
        next(iterator)


def test_streams_share_the_abandoned_workers_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(deadline, "MAX_ABANDONED", 1)
    release = threading.Event()

    def stuck() -> Iterator[int]:
        release.wait(30)
        yield 1

    try:
        with pytest.raises(TransientBackendError, match="timeout"):
            list(deadline.stream(stuck, 0.1, "stuck"))
        started = time.monotonic()
        with pytest.raises(TransientBackendError, match="still running"):
            list(deadline.stream(stuck, 0.1, "stuck"))
        assert time.monotonic() - started < 0.1  # refused at once, no thread started
    finally:
        release.set()
    assert _until(lambda: deadline.abandoned() == 0)


# -- async ------------------------------------------------------------------------------------


class ATrickle:
    def __init__(self, every: float, count: int = 1000) -> None:
        self.every = every
        self.count = count
        self.cancelled = False
        self.closed = False

    async def __call__(self) -> AsyncIterator[int]:
        try:
            for number in range(self.count):
                await asyncio.sleep(self.every)
                yield number
        except asyncio.CancelledError:
            self.cancelled = True
            raise
        finally:
            self.closed = True


async def _collect(iterator: AsyncIterator[int], into: list[int]) -> None:
    async for item in iterator:
        into.append(item)


def test_async_stream_within_its_deadline_yields_every_item() -> None:
    source = ATrickle(0.01, count=4)
    got: list[int] = []
    asyncio.run(_collect(deadline.astream(source, 5.0, "a"), got))
    assert got == [0, 1, 2, 3]
    assert source.closed


def test_async_trickling_stream_is_cancelled_at_the_deadline() -> None:
    source = ATrickle(0.1)
    got: list[int] = []
    started = time.monotonic()
    with pytest.raises(TransientBackendError, match=r"timeout of 0\.5 s"):
        asyncio.run(_collect(deadline.astream(source, 0.5, "a"), got))
    assert 0.5 <= time.monotonic() - started < 0.5 + SLACK
    assert 2 <= len(got) <= 5
    assert source.cancelled
    assert source.closed


def test_async_early_close_closes_the_iterator() -> None:
    source = ATrickle(0.01)

    async def first_two() -> list[int]:
        got = []
        stream = deadline.astream(source, 30.0, "a")
        async for item in stream:
            got.append(item)
            if len(got) == 2:
                break
        await stream.aclose()
        return got

    assert asyncio.run(first_two()) == [0, 1]
    assert source.closed
    assert not source.cancelled


def test_async_errors_pass_through_and_an_own_timeout_error_is_not_the_deadline() -> None:
    async def failing() -> AsyncIterator[int]:
        yield 1
        raise TimeoutError("its own")

    for timeout in (None, 5.0):
        got: list[int] = []
        with pytest.raises(TimeoutError, match="its own"):
            asyncio.run(_collect(deadline.astream(failing, timeout, "a"), got))
        assert got == [1]


def test_async_stream_without_a_timeout_has_no_deadline() -> None:
    source = ATrickle(0.05, count=4)
    got: list[int] = []
    asyncio.run(_collect(deadline.astream(source, None, "a"), got))
    assert got == [0, 1, 2, 3]
