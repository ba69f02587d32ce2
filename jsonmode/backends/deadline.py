"""Deadlines for backend calls: one call (connect, send, the complete reply) ends by its timeout.

Used by every backend here, and usable by any custom one (``call``, ``acall``).

HTTP clients time each operation, not the call: httpx's ``timeout`` bounds one connect
or one read, so a server that sends a byte every second never trips it, and a call
can last as long as the server likes. Here the *whole* call runs under one deadline;
past it the call fails with :class:`~jsonmode.errors.TransientBackendError`, which
the transport policy may retry like any other transient failure.

- ``await acall(...)``: the coroutine runs under ``asyncio.timeout`` (``wait_for`` on
  Python 3.10); at the deadline it is cancelled, which closes its connection. Nothing
  is left running.
- ``call(...)``: synchronous work cannot be interrupted, so it runs in a worker thread
  (a daemon, in a copy of the caller's context) and the caller stops waiting at the
  deadline. The abandoned work runs on until it ends by itself (for an HTTP call: the
  server finishes, stops sending for one client timeout, or closes); its result or
  error is dropped. It holds none of jsonmode's locks, and being a daemon it never
  delays interpreter exit. At most :data:`MAX_ABANDONED` abandoned workers may be
  running at once in a process: while that many are, a new call with a deadline
  fails at once with TransientBackendError instead of starting another thread.
- ``await acall_sync(...)``: synchronous work from async code, the same worker, awaited.
  (Not ``asyncio.to_thread``: ``asyncio.run`` waits for its executor's threads at exit,
  so an abandoned call there would hold the loop's shutdown.)

A stream must be consumed inside the function given, so that every chunk of it falls
under the same deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import math
import sys
import threading
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

from jsonmode.errors import TransientBackendError, UsageError

__all__ = [
    "DEFAULT_TIMEOUT",
    "MAX_ABANDONED",
    "abandoned",
    "acall",
    "acall_sync",
    "call",
    "check_timeout",
]

T = TypeVar("T")

#: Seconds a remote backend call may take, whole reply included, when no ``timeout`` is
#: given. A long structured reply (about 4 000 tokens) at a slow but healthy 40 tokens/s
#: takes about 100 s; a call that outlasts 120 s is far likelier a stalled or trickling
#: server than a generation still going. (litellm's own default is 600 s, and per read.)
DEFAULT_TIMEOUT: float = 120.0

#: Abandoned workers (sync calls past their deadline, still running) allowed at once.
MAX_ABANDONED: int = 32

_lock = threading.Lock()
_abandoned = 0


def abandoned() -> int:
    """How many abandoned workers are running now."""
    with _lock:
        return _abandoned


def check_timeout(value: object) -> float:
    """``value`` as a timeout in seconds: a positive, finite number.

    Raises:
        UsageError: anything else (0, negative, NaN, infinity, a string, a bool,
            an ``httpx.Timeout``: the deadline is one number for the whole call).
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise UsageError(
            f"timeout must be a number of seconds, not {type(value).__name__}",
            hint="one number bounds the whole call: connect, send and the complete reply",
        )
    seconds = float(value)
    if not (seconds > 0 and math.isfinite(seconds)):
        raise UsageError(f"timeout must be a positive, finite number of seconds, not {value!r}")
    return seconds


def timed_out(what: str, timeout: float) -> TransientBackendError:
    """The error for a call that outlasted its deadline."""
    return TransientBackendError(
        f"{what}: no complete reply within the timeout of {timeout:g} s",
        hint="raise timeout= if the model needs longer",
    )


class _Worker(Generic[T]):
    """One call in a daemon thread; counted while abandoned and still running."""

    def __init__(self, fn: Callable[[], T], on_done: Callable[[], None] | None = None) -> None:
        self._fn = fn
        self._on_done = on_done
        self.done = threading.Event()
        self.value: T | None = None
        self.error: BaseException | None = None
        self._abandoned = False
        self._finished = False

    def start(self, what: str) -> None:
        with _lock:
            if _abandoned >= MAX_ABANDONED:
                raise TransientBackendError(
                    f"{what}: {_abandoned} earlier calls abandoned at their deadline are "
                    "still running; not starting another",
                    hint="the backend is not answering in time; try later",
                )
        context = contextvars.copy_context()
        thread = threading.Thread(
            target=context.run, args=(self._run,), name="jsonmode-call", daemon=True
        )
        try:
            thread.start()
        except RuntimeError as exc:  # "can't start new thread": out of threads for now
            raise TransientBackendError(f"{what}: cannot start a worker thread: {exc}") from None

    def _run(self) -> None:
        global _abandoned
        try:
            self.value = self._fn()
        except BaseException as exc:  # delivered to the caller, never lost in the thread
            self.error = exc
        finally:
            with _lock:
                self._finished = True
                if self._abandoned:
                    _abandoned -= 1
            self.done.set()
            if self._on_done is not None:
                self._on_done()

    def abandon(self) -> None:
        """The caller stopped waiting: count the thread until it ends."""
        global _abandoned
        with _lock:
            if not self._finished and not self._abandoned:
                self._abandoned = True
                _abandoned += 1

    def outcome(self) -> T:
        if self.error is not None:
            raise self.error
        return self.value  # type: ignore[return-value]


def call(fn: Callable[[], T], timeout: float | None, what: str) -> T:
    """``fn()``, or TransientBackendError once ``timeout`` seconds have passed.

    With ``timeout=None`` ``fn`` runs in the caller's thread, with no deadline.
    Otherwise it runs in a worker thread (see the module docstring for what becomes of
    it past the deadline); its exceptions are raised here as they are.
    """
    if timeout is None:
        return fn()
    worker: _Worker[T] = _Worker(fn)
    worker.start(what)
    try:
        finished = worker.done.wait(timeout)
    except BaseException:  # KeyboardInterrupt while waiting
        worker.abandon()
        raise
    if not finished:
        worker.abandon()
        if not worker.done.is_set():
            raise timed_out(what, timeout)
    return worker.outcome()


async def acall(make: Callable[[], Awaitable[T]], timeout: float | None, what: str) -> T:
    """``await make()``, cancelled at the deadline with TransientBackendError."""
    if timeout is None:
        return await make()
    if sys.version_info >= (3, 11):
        # asyncio.timeout tells its own expiry from a TimeoutError raised by the call
        try:
            async with asyncio.timeout(timeout) as scope:
                return await make()
        except TimeoutError:
            if scope.expired():
                raise timed_out(what, timeout) from None
            raise
    try:  # Python 3.10: asyncio.TimeoutError is not the builtin one the call might raise
        return await asyncio.wait_for(make(), timeout)
    except asyncio.TimeoutError:
        raise timed_out(what, timeout) from None


async def acall_sync(fn: Callable[[], T], timeout: float | None, what: str) -> T:
    """``fn()`` in a worker thread, awaited until ``timeout`` (None: no deadline)."""
    loop = asyncio.get_running_loop()
    settled: asyncio.Future[None] = loop.create_future()

    def settle() -> None:
        if not settled.done():
            settled.set_result(None)

    def wake() -> None:  # in the worker's thread
        with contextlib.suppress(RuntimeError):  # a closed loop: nobody waits any more
            loop.call_soon_threadsafe(settle)

    worker: _Worker[T] = _Worker(fn, on_done=wake)
    worker.start(what)
    try:
        if timeout is None:
            await settled
        else:
            await asyncio.wait_for(settled, timeout)
    except asyncio.TimeoutError:
        worker.abandon()
        if not worker.done.is_set():
            raise timed_out(what, timeout) from None  # type: ignore[arg-type]
    except BaseException:  # cancelled while waiting
        worker.abandon()
        raise
    return worker.outcome()
