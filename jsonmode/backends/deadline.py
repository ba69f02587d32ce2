"""Deadlines for backend calls: one call (connect, send, the complete reply) ends by its timeout.

Used by every backend here, and usable by any custom one (``call``, ``acall``,
``stream``, ``astream``).

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

Streams (``stream``, ``astream``) fall under one deadline too: opening the stream and
every item of it, measured from the first request for an item (creating the iterator
starts nothing). Past it the consumer gets TransientBackendError.

- ``astream(...)``: each step of the async iterator is awaited under what is left of
  the deadline and cancelled there; the iterator is closed (``aclose``) when the
  consumer stops, early or not. Nothing reads ahead, so the consumer's own time
  between items counts against the deadline too.
- ``stream(...)``: the iterator is driven by a worker thread, as in ``call``, which
  feeds a queue that the consumer reads with what is left of the deadline. The worker
  reads ahead without bound (a model's reply is small), and an item that arrived in
  time is delivered even when the consumer asks for it late. When the consumer stops early
  (``close()``, ``break``, an exception) or the deadline passes, the worker is told to
  stop: it stops and closes the iterator as soon as its current step returns (for an
  HTTP stream: when the next event arrives or the connection ends). Until then it
  counts as abandoned, under the same :data:`MAX_ABANDONED` limit.

A stream read whole inside the function given to ``call`` / ``acall`` falls under
that call's deadline as well.

**Inline calls** (for a pool of threads that each make one call at a time, such as
``JsonMode.map``'s workers): inside :func:`inline`, ``call(...)`` starts no thread. It
runs the work in the calling thread after arming a :class:`Watchdog` (one daemon
thread for any number of calls); at the deadline the watchdog hands the caller's
continuation a TransientBackendError through the ``on_expire`` callback the pool gave
(the pool goes on without the thread), and when the work returns at last, ``call``
raises :class:`GivenUp` in that thread instead of returning (its result is dropped).
Such a thread counts as abandoned, under the same :data:`MAX_ABANDONED` limit, until
its work returns.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import heapq
import itertools
import math
import queue
import sys
import threading
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Generator, Iterator
from typing import Any, Generic, TypeVar

from jsonmode.errors import TransientBackendError, UsageError

__all__ = [
    "DEFAULT_TIMEOUT",
    "MAX_ABANDONED",
    "GivenUp",
    "Watchdog",
    "abandoned",
    "acall",
    "acall_sync",
    "astream",
    "call",
    "check_timeout",
    "inline",
    "stream",
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


def _refuse_when_too_many(what: str) -> None:
    with _lock:
        if _abandoned >= MAX_ABANDONED:
            raise TransientBackendError(
                f"{what}: {_abandoned} earlier calls abandoned at their deadline are "
                "still running; not starting another",
                hint="the backend is not answering in time; try later",
            )


class GivenUp(BaseException):
    """Raised by :func:`call` under :func:`inline` in the thread that ran the work, once
    it returns, when the watchdog gave the call up at its deadline meanwhile: whoever
    armed it went on without this thread (a BaseException, so that no ``except
    Exception`` on the way out mistakes it for the call's own failure)."""


#: Under :func:`inline`: arm(timeout, what) -> settle() or None; see :func:`inline`.
Arm = Callable[[float, str], Callable[[], bool] | None]
_inline: contextvars.ContextVar[Arm | None] = contextvars.ContextVar(
    "jsonmode_deadline_inline", default=None
)


@contextlib.contextmanager
def inline(arm: Arm) -> Generator[None, None, None]:
    """Within this block (in this thread's context), :func:`call` with a timeout runs
    its work in the calling thread: ``arm(timeout, what)`` first (it may raise
    TransientBackendError to refuse the call), which returns ``settle`` (or None: this
    call runs as usual, in a worker thread); ``settle()`` after the work returns or
    raises: False means the call was given up meanwhile, and :func:`call` then raises
    :class:`GivenUp`. A call made inside that work (nested)
    runs as usual. Use :meth:`Watchdog.arm` to build ``arm``."""
    token = _inline.set(arm)
    try:
        yield
    finally:
        _inline.reset(token)


class _Ticket:
    __slots__ = ("ends", "on_expire", "state", "timeout", "what")

    def __init__(
        self, ends: float, timeout: float, what: str, on_expire: Callable[[BaseException], None]
    ) -> None:
        self.ends = ends
        self.timeout = timeout
        self.what = what
        self.on_expire = on_expire
        self.state = "armed"  # then "settled" (returned in time) or "expired"


class Watchdog:
    """Deadlines of inline calls (see :func:`inline`), all watched by one daemon thread.

    :meth:`arm` registers a call (a few microseconds, a heap push) and starts the thread
    the first time; past the call's deadline the thread calls its ``on_expire`` with
    the TransientBackendError the call would have raised, and the call counts as
    abandoned until it returns. ``on_expire`` runs on the watchdog's thread while it
    holds the watchdog's lock (the ``settle`` of that call waits for it to return): keep
    it short, and never arm or settle inside it. :meth:`close` ends the thread; calls
    still armed are then never given up. Thread-safe. Memory: one entry per armed call
    (settled entries are dropped as they surface, and the heap is rebuilt when they
    outnumber the armed ones).
    """

    def __init__(self, name: str = "jsonmode-deadlines") -> None:
        self._name = name
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int, _Ticket]] = []
        self._armed = 0
        self._order = itertools.count()
        self._thread: threading.Thread | None = None
        self._closed = False

    def arm(
        self, timeout: float, what: str, on_expire: Callable[[BaseException], None]
    ) -> Callable[[], bool]:
        """Watch a call that starts now; returns its ``settle()`` (False: given up).

        Raises:
            TransientBackendError: :data:`MAX_ABANDONED` abandoned calls are still
                running, or the watchdog's thread cannot start.
        """
        _refuse_when_too_many(what)
        ticket = _Ticket(time.monotonic() + timeout, timeout, what, on_expire)
        with self._cond:
            if self._thread is None and not self._closed:
                thread = threading.Thread(target=self._watch, name=self._name, daemon=True)
                try:
                    thread.start()
                except RuntimeError as exc:  # out of threads
                    raise TransientBackendError(
                        f"{what}: cannot start the deadline thread: {exc}"
                    ) from None
                self._thread = thread
            heapq.heappush(self._heap, (ticket.ends, next(self._order), ticket))
            self._armed += 1
            if len(self._heap) > 2 * self._armed + 64:  # settled entries: drop them
                self._heap = [entry for entry in self._heap if entry[2].state == "armed"]
                heapq.heapify(self._heap)
            if self._heap[0][2] is ticket:
                self._cond.notify()
        return lambda: self._settle(ticket)

    def _settle(self, ticket: _Ticket) -> bool:
        global _abandoned
        with self._cond:
            if ticket.state == "expired":
                with _lock:
                    _abandoned -= 1
                return False
            ticket.state = "settled"
            self._armed -= 1
            return True

    def close(self) -> None:
        """End the thread (calls still armed are never given up). Idempotent."""
        with self._cond:
            self._closed = True
            self._cond.notify()

    def _watch(self) -> None:
        global _abandoned
        with self._cond:
            while not self._closed:
                heap = self._heap
                while heap and heap[0][2].state != "armed":
                    heapq.heappop(heap)
                if not heap:
                    self._cond.wait()
                    continue
                left = heap[0][0] - time.monotonic()
                if left > 0:
                    self._cond.wait(left)
                    continue
                ticket = heapq.heappop(heap)[2]
                ticket.state = "expired"
                self._armed -= 1
                with _lock:
                    _abandoned += 1
                ticket.on_expire(timed_out(ticket.what, ticket.timeout))


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
        _refuse_when_too_many(what)
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
    it past the deadline); its exceptions are raised here as they are. Under
    :func:`inline` it runs in the caller's thread, watched (see :func:`inline`).
    """
    if timeout is None:
        return fn()
    arm = _inline.get()
    settle = None if arm is None else arm(timeout, what)
    if settle is not None:
        nested = _inline.set(None)
        try:
            value = fn()
        except BaseException:
            _inline.reset(nested)
            if not settle():
                raise GivenUp from None
            raise
        _inline.reset(nested)
        if not settle():
            raise GivenUp
        return value
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
    try:
        return await _within(make, asyncio.get_running_loop().time() + timeout)
    except _Expired:
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


_END = object()  # the worker's last word on a stream's queue


def stream(
    make: Callable[[], Iterator[T]], timeout: float | None, what: str
) -> Generator[T, None, None]:
    """The items of ``make()``, all of them (opening included) within ``timeout`` seconds.

    A generator: nothing happens until the first item is asked for, and the deadline
    runs from then. Past it the consumer gets TransientBackendError; an error of the
    iterator is raised as it is, where it happened in the stream. With ``timeout=None``
    the iterator runs in the caller's thread, with no deadline. Otherwise a worker
    thread drives it (see the module docstring: what becomes of it when the consumer
    stops early or the deadline passes, and the :data:`MAX_ABANDONED` limit). Either
    way the iterator is closed (when it has ``close``) once the consumer stops.
    """
    if timeout is None:
        iterator = make()
        try:
            yield from iterator
        finally:
            _close(iterator)
        return
    items: queue.SimpleQueue[Any] = queue.SimpleQueue()
    stop = threading.Event()

    def pump() -> None:
        iterator = make()
        try:
            for item in iterator:
                if stop.is_set():
                    return
                items.put((time.monotonic(), item))
                if stop.is_set():
                    return
        finally:
            _close(iterator)

    worker: _Worker[None] = _Worker(pump, on_done=lambda: items.put(_END))
    ends = time.monotonic() + timeout
    worker.start(what)
    try:
        while True:
            try:
                got = items.get(timeout=max(ends - time.monotonic(), 0.0))
            except queue.Empty:
                raise timed_out(what, timeout) from None
            if got is _END:
                worker.outcome()
                return
            arrived, item = got
            if arrived > ends:  # it came too late, though the consumer only now asks
                raise timed_out(what, timeout)
            yield item
    finally:
        stop.set()
        if not worker.done.is_set():
            worker.abandon()


async def astream(
    make: Callable[[], AsyncIterator[T]], timeout: float | None, what: str
) -> AsyncGenerator[T, None]:
    """The items of ``make()`` within ``timeout`` seconds, cancelled at the deadline.

    An async generator: the deadline runs from the first item asked for. Each step of
    the iterator is awaited under what is left of it, in the caller's task (Python
    3.10: in a task of its own per step); at the deadline the step is cancelled and the
    consumer gets TransientBackendError. The iterator is closed (``aclose``) when the
    consumer stops. ``timeout=None``: no deadline.
    """
    iterator = make()
    try:
        if timeout is None:
            async for item in iterator:
                yield item
            return
        loop = asyncio.get_running_loop()
        ends = loop.time() + timeout
        while True:
            try:
                item = await _step(iterator, ends, loop)
            except StopAsyncIteration:
                return
            except _Expired:
                raise timed_out(what, timeout) from None
            yield item
    finally:
        close = getattr(iterator, "aclose", None)
        if close is not None:
            await close()


class _Expired(Exception):
    """A stream's step outlasted the deadline (told apart from the iterator's own errors)."""


async def _step(iterator: AsyncIterator[T], ends: float, loop: asyncio.AbstractEventLoop) -> T:
    if ends <= loop.time():
        raise _Expired
    return await _within(iterator.__anext__, ends)


async def _within(make: Callable[[], Awaitable[T]], ends: float) -> T:
    """``await make()``, cancelled at ``ends`` (the running loop's clock) with _Expired,
    told apart from a TimeoutError of the call's own. (:func:`acall` and each step of
    :func:`astream`.)"""
    if sys.version_info >= (3, 11):
        try:
            async with asyncio.timeout_at(ends) as scope:
                return await make()
        except TimeoutError:
            if scope.expired():
                raise _Expired from None
            raise
    try:  # Python 3.10: asyncio.TimeoutError is not the builtin one the call might raise
        return await asyncio.wait_for(make(), ends - asyncio.get_running_loop().time())
    except asyncio.TimeoutError:
        raise _Expired from None


def _close(iterator: object) -> None:
    close = getattr(iterator, "close", None)
    if callable(close):
        close()
