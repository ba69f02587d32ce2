"""The lockstep batch driver: many sessions advanced together, one batched backend
call per round (``JsonMode.map`` on a local model in the constrained tier)."""

from __future__ import annotations

import collections
import functools
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Generic, TypeVar

from jsonmode.backends.base import CompletesBatch, Request
from jsonmode.errors import BackendError, JsonModeError
from jsonmode.result import Result
from jsonmode.retry import TransportPolicy
from jsonmode.session.records import Reply, Session

__all__ = ["Entry", "Lockstep"]

I = TypeVar("I")  # noqa: E741 - an input item
#: One prompt's entry: its Result, or the error ``run`` would have raised.
Entry = Result[Any] | JsonModeError


class Lockstep(Generic[I]):
    """Sessions advanced together, in the caller's thread: each round sends up to
    ``concurrency`` pending requests to the backend's ``complete_batch`` (one generate
    call), the first requests of prompts not started yet before re-asks and retries;
    prompts are pulled from ``items`` as rounds have room (with a ``window``: no more
    than that many taken and not handed out). Entries come out as ``(item, entry)`` in
    input order, like :class:`~jsonmode.session.pool.Ordered`'s."""

    def __init__(
        self,
        backend: CompletesBatch,
        transport: TransportPolicy,
        items: Iterable[I],
        start: Callable[[I], Session],
        concurrency: int,
        window: int | None,
        finished: Callable[[int, I, Entry], None],
    ) -> None:
        self._backend = backend
        self._transport = transport
        self._items = enumerate(items)
        self._start = start
        self._concurrency = concurrency
        self._window = window
        self._finished = finished
        self._exhausted = False
        self._taken = 0
        self._next = 0
        self._done: dict[int, tuple[I, Entry]] = {}
        self._live: dict[int, tuple[I, Session]] = {}
        self._pending: collections.deque[tuple[int, Request]] = collections.deque()
        self._retries: dict[int, int] = {}  # transport retries of a prompt's current attempt

    def __iter__(self) -> Iterator[tuple[I, Entry]]:
        return self

    def __next__(self) -> tuple[I, Entry]:
        while self._next not in self._done:
            if self._exhausted and not self._pending and not self._live:
                raise StopIteration
            self._round()
        self._next += 1
        return self._done.pop(self._next - 1)

    def ready(self) -> bool:
        """Whether the next entry is known."""
        return self._next in self._done

    def close(self) -> None:
        """Stop: no more rounds, sessions in flight dropped."""
        self._live.clear()
        self._pending.clear()
        self._exhausted = True

    def _settle(self, index: int, step: Callable[[], Request]) -> None:
        try:
            self._pending.append((index, step()))
            return
        except StopIteration as done:
            entry = done.value
        except JsonModeError as error:
            entry = error
        item, _ = self._live.pop(index)
        self._retries.pop(index, None)
        self._finished(index, item, entry)
        self._done[index] = (item, entry)

    def _round(self) -> None:
        fresh: list[tuple[int, Request]] = []
        while (
            len(fresh) < self._concurrency
            and not self._exhausted
            and (self._window is None or self._taken < self._next + self._window)
        ):
            found = next(self._items, None)
            if found is None:
                self._exhausted = True
                break
            index, item = found
            self._taken += 1
            try:
                session = self._start(item)
            except JsonModeError as error:
                self._finished(index, item, error)
                self._done[index] = (item, error)
                continue
            self._live[index] = (item, session)
            self._settle(index, session.__next__)
            if self._pending and self._pending[-1][0] == index:
                fresh.append(self._pending.pop())
        round_ = fresh
        while len(round_) < self._concurrency and self._pending:
            round_.append(self._pending.popleft())
        if not round_:
            return
        started = time.perf_counter()
        replies = self._backend.complete_batch([request for _, request in round_])
        elapsed = time.perf_counter() - started
        for (index, request), reply in zip(round_, replies, strict=True):
            retries = self._retries.get(index, 0)
            if isinstance(reply, BackendError):
                if reply.retryable and retries < self._transport.max_retries:
                    self._retries[index] = retries + 1  # the same request, a later round
                    self._pending.append((index, request))
                    continue
                sent = Reply(None, reply, elapsed, retries)
            else:
                sent = Reply(reply, None, elapsed, retries)
            self._retries.pop(index, None)
            session = self._live[index][1]
            self._settle(index, functools.partial(session.send, sent))
