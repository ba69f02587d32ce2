"""Many jobs on a bounded pool of threads, their entries handed out in input order.

The engine under ``JsonMode.map`` and ``jsonmode batch`` (see :mod:`jsonmode.batch`).
Each input item becomes a *job*: a generator that yields the backend requests it
needs (:func:`jsonmode.session.steps`) and returns its entry. A worker thread takes an item,
makes the job's calls itself, one at a time, and records the entry; :class:`Ordered`
hands the entries out in input order as they become known.

- **Threads**: at most ``concurrency`` workers (started as work arrives), plus one
  :class:`~jsonmode.backends.deadline.Watchdog` thread for the calls' deadlines: a
  backend call runs in its worker (:func:`~jsonmode.backends.deadline.inline`), never
  in a thread of its own. A call past its deadline is given up: its job goes on with
  the timeout error in another worker (an idle one, or one started to replace the
  stuck thread) while the stuck thread, once its call returns, drops the result and
  rejoins the pool if the pool has room. So threads stay within ``concurrency`` plus
  the calls still stuck past their deadlines (at most
  :data:`~jsonmode.backends.deadline.MAX_ABANDONED` armed anew) plus one.
- **A thread that cannot start** (out of memory for stacks, a pid limit): the pool
  works on with the threads it has; with none at all, the consumer's own thread runs
  the jobs, one at a time. Nothing finished is lost.
- **Memory**: items are pulled from the input one at a time, as workers need them;
  with a ``window``, item *i* is not taken before the entries up to *i - window* were
  handed out, so at most ``window`` items and entries are held whatever the input's
  size (a slow first item holds the others back rather than letting them pile up).
- **Stopping**: an error that is not a JsonModeError (a bug, a callback's error, an
  unreadable input, ``KeyboardInterrupt`` raised by a backend) stops the pool and is
  raised to the consumer; :meth:`Ordered.close` stops it too. Workers are daemon
  threads: calls in flight are abandoned, each thread ends at its next call, and no
  ``finished`` callback runs after the stop.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable, Generator, Iterable, Iterator
from typing import Any, Generic, TypeVar

from jsonmode.backends import deadline
from jsonmode.backends.base import Completion, Request
from jsonmode.errors import JsonModeError

__all__ = ["Job", "Ordered"]

I = TypeVar("I")  # noqa: E741 - an input item
#: A job: yields requests, is sent each Completion (or thrown the call's error),
#: returns its entry (or raises it, a JsonModeError).
Job = Generator[Request, Completion, Any]
_END = object()


class _Hand:
    """One thread working for the pool: the job whose call it is making."""

    __slots__ = ("task",)

    def __init__(self) -> None:
        self.task: tuple[int, Any, Job] | None = None


class Ordered(Generic[I]):
    """The entries of ``items``, as ``(item, entry)`` in input order (see the module
    docstring). Iterate it in one thread (the consumer), then :meth:`close` it.

    Args:
        items: the input, pulled one item at a time (from worker threads, one at a
            time); an error it raises stops the pool.
        start: ``start(item)`` -> the item's :data:`Job`; may raise a JsonModeError
            (then the item's entry), and is called in a worker thread.
        call: makes one request (in a worker thread), e.g. a gated ``backend.complete``.
        concurrency: worker threads at most.
        window: items taken but not yet handed out, at most (None: no bound).
        finished: ``finished(index, item, entry)``, as each job ends (in finish order,
            one call at a time, under the pool's lock: keep it short); its error stops
            the pool.
        expired: ``expired(error)`` for each call given up at its deadline (under the
            watchdog's lock: keep it short).
        stopped: called once when the pool stops early (:meth:`close` before the end,
            or an error).
    """

    def __init__(
        self,
        items: Iterable[I],
        start: Callable[[I], Job],
        call: Callable[[Request], Completion],
        *,
        concurrency: int,
        window: int | None,
        finished: Callable[[int, I, Any], None],
        expired: Callable[[BaseException], None],
        stopped: Callable[[], None],
    ) -> None:
        self._items = iter(items)
        self._start = start
        self._call = call
        self._concurrency = concurrency
        self._window = window
        self._finished = finished
        self._expired = expired
        self._stopped = stopped
        self._lock = threading.Lock()
        self._room = threading.Condition(self._lock)  # workers wait here
        self._out = threading.Condition(self._lock)  # the consumer waits here
        self._read_lock = threading.Lock()  # one reader of the input at a time
        self._read = 0  # items read
        self._taken = 0  # items read or being read
        self._exhausted = False
        self._next = 0  # the index of the next entry to hand out
        self._done: dict[int, tuple[I, Any]] = {}
        self._resumed: collections.deque[tuple[int, I, Job, BaseException]] = collections.deque()
        self._running = 0  # items taken whose entry is not known yet
        self._live = 0  # threads working for the pool (not stuck past a deadline)
        self._idle = 0  # of them, waiting for work
        self._can_grow = True
        self._over = False
        self._failure: BaseException | None = None
        self._watchdog = deadline.Watchdog()
        self._began = False

    # -- the consumer -------------------------------------------------------------

    def __iter__(self) -> Iterator[tuple[I, Any]]:
        return self

    def __next__(self) -> tuple[I, Any]:
        if not self._began:
            self._began = True
            self._grow()
        while True:
            with self._lock:
                while True:
                    if self._failure is not None:
                        raise self._failure
                    if self._over:
                        raise StopIteration
                    found = self._done.pop(self._next, None)
                    if found is not None:
                        self._next += 1
                        self._room.notify()
                        return found
                    if self._exhausted and self._next >= self._taken:
                        raise StopIteration
                    if self._live == 0 and self._has_work():
                        self._live += 1  # no thread could start: this one works
                        break
                    self._out.wait()
            self._help()

    def ready(self) -> bool:
        """The next entry is known (``next`` returns without waiting)."""
        with self._lock:
            return self._next in self._done

    def close(self) -> None:
        """Stop (idempotent): no item is taken any more, the calls in flight are
        abandoned; ``stopped`` is called when this ends the pool early."""
        with self._lock:
            early = not self._over and not (self._exhausted and self._next >= self._taken)
            self._over = True
            self._room.notify_all()
            self._out.notify_all()
        self._watchdog.close()
        if early:
            self._stopped()

    def _help(self) -> None:
        """Work in the consumer's thread until a thread of the pool could take over."""
        hand = _Hand()
        given_up = False  # then the watchdog no longer counts this thread
        try:
            with deadline.inline(lambda timeout, what: self._arm(hand, timeout, what)):
                task = self._take(wait=False)
                if task is not None:
                    given_up = not self._do(hand, task)
        except BaseException as error:
            self._fail(error)
            raise
        finally:
            if not given_up:
                with self._lock:
                    self._live -= 1

    # -- the workers ----------------------------------------------------------------

    def _has_work(self) -> bool:
        """Under the lock: a job to resume or an item that may be taken now."""
        return bool(self._resumed) or (
            not self._exhausted
            and (self._window is None or self._taken < self._next + self._window)
        )

    def _grow(self) -> None:
        """Start one more worker when there is work and no idle worker for it."""
        with self._lock:
            if not (
                self._can_grow
                and not self._over
                and self._idle == 0
                and self._live < self._concurrency
                and self._has_work()
            ):
                return
            self._live += 1
        if not self._spawn():
            with self._lock:
                self._live -= 1
                self._can_grow = False  # run with the threads there are
                self._out.notify()  # none at all: the consumer works

    def _spawn(self) -> bool:
        number = self._read  # a name, not an identity
        thread = threading.Thread(target=self._work, name=f"jsonmode-map-{number}", daemon=True)
        try:
            thread.start()
        except RuntimeError:  # "can't start new thread"
            return False
        return True

    def _work(self) -> None:
        hand = _Hand()
        try:
            with deadline.inline(lambda timeout, what: self._arm(hand, timeout, what)):
                while True:
                    task = self._take(wait=True)
                    if task is None:
                        break
                    if not self._do(hand, task) and not self._rejoin():
                        return  # stuck past a deadline, and replaced
        except BaseException as error:  # a bug, an unreadable input, a callback's error
            self._fail(error)
        with self._lock:
            self._live -= 1

    def _take(self, *, wait: bool) -> tuple[int, I, Job | None, BaseException | None] | None:
        """The next task: a job to resume, else a new item; None when there is none
        (``wait``: wait while one may still come)."""
        while True:
            with self._lock:
                while True:
                    if self._over:
                        return None
                    if self._resumed:
                        return self._resumed.popleft()
                    if self._has_work():
                        self._taken += 1
                        break
                    if not wait or (self._exhausted and self._running == 0):
                        return None
                    self._idle += 1
                    self._room.wait()
                    self._idle -= 1
            with self._read_lock:
                index = self._read
                got: Any = next(self._items, _END)
                if got is not _END:
                    self._read += 1
            with self._lock:
                if got is _END:
                    self._taken -= 1
                    self._exhausted = True
                    self._room.notify_all()
                    self._out.notify_all()
                    continue
                self._running += 1
            self._grow()
            return index, got, None, None

    def _do(self, hand: _Hand, task: tuple[int, I, Job | None, BaseException | None]) -> bool:
        """Run a task's job to its end, or until a call is given up at its deadline
        (False: the job goes on in another thread, this one is stuck past it)."""
        index, item, job, error = task
        try:
            if job is None:
                job = self._start(item)
                request = job.send(None)  # type: ignore[arg-type]
            else:
                assert error is not None
                request = job.throw(error)
            while True:
                if self._over:
                    return True  # the batch stopped: end at this call
                hand.task = (index, item, job)
                try:
                    completion = self._call(request)
                except deadline.GivenUp:
                    return False
                except BaseException as failure:  # the call's error, for the job
                    hand.task = None
                    request = job.throw(failure)
                else:
                    hand.task = None
                    request = job.send(completion)
        except StopIteration as done:
            entry = done.value
        except JsonModeError as failed:
            entry = failed
        finally:
            hand.task = None
        with self._lock:
            self._running -= 1
            if self._exhausted and self._running == 0:
                self._room.notify_all()
            if self._over:
                return True
            self._finished(index, item, entry)
            self._done[index] = (item, entry)
            if index == self._next:
                self._out.notify()
        return True

    def _arm(self, hand: _Hand, timeout: float, what: str) -> Callable[[], bool] | None:
        """A call of ``hand``'s job starts (in ``hand``'s thread): watch its deadline.
        None for a call outside a job's (made by a ``finished`` callback): as usual."""
        task = hand.task
        if task is None:
            return None
        index, item, job = task

        def expire(error: BaseException) -> None:  # on the watchdog's thread
            self._expired(error)
            with self._lock:
                if self._over:
                    return
                self._live -= 1  # the stuck thread no longer counts
                self._resumed.append((index, item, job, error))
                self._room.notify()
                self._out.notify()  # with no thread left, the consumer resumes it
            self._grow()

        return self._watchdog.arm(timeout, what, expire)

    def _rejoin(self) -> bool:
        """A thread whose call was given up is back: work on if the pool has room."""
        with self._lock:
            if self._over or self._live >= self._concurrency:
                return False
            self._live += 1
            return True

    def _fail(self, error: BaseException) -> None:
        with self._lock:
            if self._failure is None and not self._over:
                self._failure = error
            first = not self._over
            self._over = True
            self._room.notify_all()
            self._out.notify_all()
        self._watchdog.close()
        if first:
            self._stopped()
