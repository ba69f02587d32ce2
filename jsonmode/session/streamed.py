"""The streamed driver: a session whose replies are read as they stream.

Each backend call (under the transport policy) is read chunk by chunk by a
:class:`Watcher`'s reader, which turns chunks into the caller's events (partial values,
items) and may end the attempt early with a verdict (an invalid item). The session's
verdict on each reply becomes an event too (the watcher's re-ask or final event).

The step logic is written once (:class:`StreamedCall`, :class:`Steps`, sans I/O);
:func:`events` and :func:`aevents` are its thin sync and async pumps. The event types
are the caller's (:mod:`jsonmode.streaming` defines ``Partial``, ``Retry``, ``Final``);
nothing here knows them.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, Callable, Generator, Iterable, Iterator
from contextlib import aclosing, closing
from dataclasses import dataclass, replace
from typing import Any, Generic, Protocol, TypeVar, runtime_checkable

from jsonmode import events as listening
from jsonmode.backends.base import Backend, Chunk, Completion, Request, StreamingBackend
from jsonmode.errors import BackendError, SchemaViolationError
from jsonmode.result import Attempt, Result, Tier
from jsonmode.retry import TransportPolicy
from jsonmode.session.drivers import acall, call
from jsonmode.session.records import Reply, Session, Trace

__all__ = ["Done", "Reading", "Start", "Steps", "StreamedCall", "Watcher", "aevents", "events"]

E = TypeVar("E")

#: Starts one request's session reporting to the trace it is given.
Start = Callable[[Trace], Session]


class Reading(Protocol[E]):
    """One reply read as it streams."""

    @property
    def text(self) -> str: ...

    def feed(self, chunk: Chunk) -> Iterable[E]:
        """Events for one chunk; raises SchemaViolationError to end the attempt."""
        ...

    def flush(self) -> Iterable[E]:
        """Events the reply's end holds that were not read yet."""
        ...

    def finish(self) -> tuple[Completion, list[E], SchemaViolationError | None]:
        """The whole reply, its last events, and the verdict that ends the attempt."""
        ...


class Watcher(Protocol[E]):
    """What a streamed request shows its caller, as the caller's events."""

    def reader(self, attempt: int) -> Reading[E]: ...

    def saw(self, event: E) -> None:
        """An event read from a reply is about to be handed out."""
        ...

    def repairable(self) -> bool | None:
        """For a reply that failed as it streamed: False when repair mode would fail it
        too; None when the judge is to say (see ``Reply.repairable``)."""
        ...

    def transport_retry(self, attempt: int, error: BaseException | None) -> E:
        """The event for the same request sent again after a transient failure."""
        ...

    def reask(self, attempt: int, failed: Attempt | None) -> E:
        """The event for the re-ask that starts ``attempt`` after ``failed``."""
        ...

    def final(self, result: Result[Any]) -> E:
        """The last event: the session's Result."""
        ...

    def finished(self, tier: Tier, ok: bool) -> None:
        """The request failed (``ok`` False): report the stream's end."""
        ...


@dataclass(frozen=True, slots=True)
class Done:
    """The last thing a streamed call yields: its reply for the session."""

    reply: Reply


class StreamedCall(Generic[E]):
    """One backend call under the transport policy, read as it streams (sans I/O: the
    pumps feed it). Each try starts with :meth:`begin`, feeds every chunk to
    :meth:`feed`, and ends with :meth:`end`; the pump yields what they return."""

    def __init__(self, watcher: Watcher[E], attempt: int) -> None:
        self.watcher = watcher
        self.attempt = attempt
        self.started = time.perf_counter()
        self.calls = 0
        self.last: BaseException | None = None  # the last transient failure
        self.reader: Reading[E] | None = None
        self.completion: Completion | None = None

    def begin(self) -> list[E]:
        """A try starts: the transport-retry event when it is not the first."""
        self.calls += 1
        self.reader = self.watcher.reader(self.attempt)
        if self.calls > 1:
            return [self.watcher.transport_retry(self.attempt, self.last)]
        return []

    def feed(self, chunk: Chunk) -> Iterator[E]:
        assert self.reader is not None
        for event in self.reader.feed(chunk):
            self.watcher.saw(event)
            yield event

    def end(self) -> Iterator[E]:
        """The reply's last events; raises the verdict that fails the attempt."""
        assert self.reader is not None
        for event in self.reader.flush():
            self.watcher.saw(event)
            yield event
        self.completion, found, verdict = self.reader.finish()
        yield from found
        if verdict is not None:
            raise verdict

    def violated(self, verdict: SchemaViolationError) -> Done:
        """The attempt failed as it streamed: its reply, judged."""
        assert self.reader is not None
        completion = Completion(self.reader.text)
        repairable = self.watcher.repairable()
        return Done(self._reply(completion, None, verdict, repairable))

    def failed(self, error: BackendError) -> Done:
        return Done(self._reply(None, error))

    def succeeded(self) -> Done:
        return Done(self._reply(self.completion, None))

    def _reply(
        self,
        completion: Completion | None,
        error: BackendError | None,
        verdict: SchemaViolationError | None = None,
        repairable: bool | None = None,
    ) -> Reply:
        latency = time.perf_counter() - self.started
        return Reply(completion, error, latency, self.calls - 1, verdict, repairable)


def whole(watcher: Watcher[E], reply: Reply, attempt: int) -> Iterator[E | Done]:
    """A reply that came whole (the backend does not stream): its last events, then it."""
    if reply.completion is not None:
        reader = watcher.reader(attempt)
        for _ in reader.feed(reply.completion):
            pass
        _, found, verdict = reader.finish()
        yield from found
        if verdict is not None:
            reply = replace(reply, verdict=verdict, repairable=watcher.repairable())
    yield Done(reply)


def _streamed(
    watcher: Watcher[E],
    backend: Backend,
    transport: TransportPolicy,
    request: Request,
    attempt: int,
) -> Generator[E | Done, None, None]:
    """Sync pump of one :class:`StreamedCall`; its last item is the Done."""
    if not isinstance(backend, StreamingBackend):
        yield from whole(watcher, call(transport, request, backend.complete), attempt)
        return
    state = StreamedCall(watcher, attempt)
    try:
        for retrying in transport.retrying():
            closed = False
            with retrying:  # (it swallows every exception: see `closed`)
                yield from state.begin()
                chunks = backend.stream(request)
                try:
                    for chunk in chunks:
                        yield from state.feed(chunk)
                    yield from state.end()
                except SchemaViolationError as verdict:
                    yield state.violated(verdict)
                    return
                except GeneratorExit:
                    closed = True
                except BackendError as error:
                    state.last = error
                    raise
                finally:
                    _close(chunks)
            if closed:
                return
    except BackendError as error:
        yield state.failed(error)
        return
    yield state.succeeded()


async def _astreamed(
    watcher: Watcher[E],
    backend: Backend,
    transport: TransportPolicy,
    request: Request,
    attempt: int,
) -> AsyncGenerator[E | Done, None]:
    """Async :func:`_streamed`."""
    if not isinstance(backend, StreamingBackend):
        for item in whole(watcher, await acall(transport, request, backend.acomplete), attempt):
            yield item
        return
    state = StreamedCall(watcher, attempt)
    try:
        async for retrying in transport.aretrying():
            closed = False
            with retrying:  # (it swallows every exception: see `closed`)
                for event in state.begin():
                    yield event
                chunks = backend.astream(request)
                try:
                    async for chunk in chunks:
                        for event in state.feed(chunk):
                            yield event
                    for event in state.end():
                        yield event
                except SchemaViolationError as verdict:
                    yield state.violated(verdict)
                    return
                except GeneratorExit:
                    closed = True
                except BackendError as error:
                    state.last = error
                    raise
                finally:
                    await _aclose(chunks)
            if closed:
                return
    except BackendError as error:
        yield state.failed(error)
        return
    yield state.succeeded()


class Steps(Generic[E]):
    """One request's session as the streamed pumps walk it: the request to send, its
    attempt number, and what comes of each reply (the re-ask's event, or the final)."""

    def __init__(self, watcher: Watcher[E], start: Start) -> None:
        self.watcher = watcher
        self.trace = Trace()
        self.session = start(self.trace)
        self.request = next(self.session)
        self.attempt = 1
        self.over = False

    def send(self, reply: Reply | None) -> E:
        """The session's verdict on ``reply``: the final event (``over`` is then set),
        or the re-ask's (the next request is then ``self.request``). Raises what
        ``run`` raises."""
        assert reply is not None
        try:
            self.request = self.session.send(reply)
        except StopIteration as done:
            self.over = True
            return self.watcher.final(done.value)
        self.attempt += 1
        failed = self.trace.attempts[-1] if self.trace.attempts else None
        return self.watcher.reask(self.attempt, failed)

    def failed(self) -> None:
        """The request raised: report the stream's end (an abandoned one reports none)."""
        if self.trace.tier is not None and listening.listeners:
            self.watcher.finished(self.trace.tier, False)


def events(
    watcher: Watcher[E], start: Start, backend: Backend, transport: TransportPolicy
) -> Generator[E, None, None]:
    """Sync pump: every event of one streamed request, the final one last."""
    steps = Steps(watcher, start)
    try:
        while not steps.over:
            reply: Reply | None = None
            call = _streamed(watcher, backend, transport, steps.request, steps.attempt)
            with closing(call) as it:
                for event in it:
                    if isinstance(event, Done):
                        reply = event.reply
                    else:
                        yield event
            yield steps.send(reply)
    except (GeneratorExit, asyncio.CancelledError):
        raise  # abandoned by the caller: no outcome to report
    except BaseException:
        steps.failed()
        raise
    finally:
        steps.session.close()


async def aevents(
    watcher: Watcher[E], start: Start, backend: Backend, transport: TransportPolicy
) -> AsyncGenerator[E, None]:
    """Async :func:`events`."""
    steps = Steps(watcher, start)
    try:
        while not steps.over:
            reply: Reply | None = None
            calls = _astreamed(watcher, backend, transport, steps.request, steps.attempt)
            async with aclosing(calls) as it:
                async for event in it:
                    if isinstance(event, Done):
                        reply = event.reply
                    else:
                        yield event
            yield steps.send(reply)
    except (GeneratorExit, asyncio.CancelledError):
        raise  # abandoned by the caller: no outcome to report
    except BaseException:
        steps.failed()
        raise
    finally:
        steps.session.close()


@runtime_checkable
class _Closes(Protocol):
    def close(self) -> object: ...


@runtime_checkable
class _AsyncCloses(Protocol):
    async def aclose(self) -> object: ...


def _close(chunks: object) -> None:
    """Close a backend's stream (releasing its connection) when it can be closed."""
    if isinstance(chunks, _Closes):
        chunks.close()


async def _aclose(chunks: object) -> None:
    if isinstance(chunks, _AsyncCloses):
        await chunks.aclose()
