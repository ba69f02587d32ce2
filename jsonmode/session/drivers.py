"""The drivers that pump a session with backend calls under the transport policy.

- :func:`drive` / :func:`adrive`: to its end, each request through :func:`call` /
  :func:`acall` (blocking, or awaited on the running loop): ``run``, ``text``, ``amap``.
- :func:`steps`: turned inside out, for a driver that makes the calls itself (``map``'s
  worker threads, :mod:`jsonmode.session.pool`).
- :func:`refused`: ends a session whose first call is refused before it is sent.

The streamed driver is :mod:`jsonmode.session.streamed`, the lockstep batch driver
:mod:`jsonmode.session.lockstep`. The sync and async pumps are a few lines each: the
logic is the session's, written once.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Generator
from typing import Any

from jsonmode.backends.base import Completion, Request
from jsonmode.errors import BackendError, JsonModeError
from jsonmode.result import Result
from jsonmode.retry import TransportPolicy
from jsonmode.session.records import Reply, Session

__all__ = ["acall", "adrive", "call", "drive", "refused", "steps", "tries"]

Complete = Callable[[Request], Completion]
AComplete = Callable[[Request], Awaitable[Completion]]


def drive(session: Session, transport: TransportPolicy, complete: Complete) -> Result[Any]:
    """Run ``session`` to its end, each request through :func:`call`."""
    request = next(session)
    while True:
        try:
            request = session.send(call(transport, request, complete))
        except StopIteration as done:
            result: Result[Any] = done.value
            return result


async def adrive(session: Session, transport: TransportPolicy, acomplete: AComplete) -> Result[Any]:
    """Async :func:`drive`."""
    request = next(session)
    while True:
        try:
            request = session.send(await acall(transport, request, acomplete))
        except StopIteration as done:
            result: Result[Any] = done.value
            return result


def call(transport: TransportPolicy, request: Request, complete: Complete) -> Reply:
    """One backend call under the transport policy, as the session's Reply."""
    started = time.perf_counter()
    controller = transport.retrying()
    try:
        completion = controller(complete, request)
    except BackendError as error:
        return Reply(None, error, time.perf_counter() - started, _retries(controller))
    return Reply(completion, None, time.perf_counter() - started, _retries(controller))


async def acall(transport: TransportPolicy, request: Request, acomplete: AComplete) -> Reply:
    """Async :func:`call`."""
    started = time.perf_counter()
    controller = transport.aretrying()
    try:
        completion: Completion = await controller(acomplete, request)
    except BackendError as error:
        return Reply(None, error, time.perf_counter() - started, _retries(controller))
    return Reply(completion, None, time.perf_counter() - started, _retries(controller))


def steps(
    session: Session, transport: TransportPolicy
) -> Generator[Request, Completion, Result[Any]]:
    """:func:`drive` turned inside out, for drivers that make the backend calls
    themselves (``map``'s workers): yields each call's Request (a transport retry is
    another call) and is sent its Completion, or thrown its error, by whichever thread
    made the call; returns the Result (or raises the session's error). The transport
    policy's waits are slept in the thread that resumes it. Not thread-safe: one thread
    at a time resumes it."""
    request = next(session)
    while True:
        reply = yield from tries(transport, request)
        try:
            request = session.send(reply)
        except StopIteration as done:
            result: Result[Any] = done.value
            return result


def tries(transport: TransportPolicy, request: Request) -> Generator[Request, Completion, Reply]:
    """:func:`call`'s transport policy over calls made by the resumer (see :func:`steps`)."""
    started = time.perf_counter()
    controller = transport.moving_retrying()
    completion: Completion | None = None
    try:
        for attempt in controller:
            with attempt:
                completion = yield request
    except BackendError as error:
        return Reply(None, error, time.perf_counter() - started, _retries(controller))
    return Reply(completion, None, time.perf_counter() - started, _retries(controller))


def refused(session: Session, error: BackendError) -> JsonModeError:
    """End a session whose first request is refused before it is sent: its one attempt
    is a ``backend_error`` that says why, and the error it raises is returned."""
    next(session)
    try:
        session.send(Reply(None, error, 0.0, 0))
    except JsonModeError as failed:
        return failed
    raise AssertionError("a session went on after its request failed")  # pragma: no cover


def _retries(controller: Any) -> int:
    attempt_number = controller.statistics.get("attempt_number", 1)
    return max(0, int(attempt_number) - 1)
