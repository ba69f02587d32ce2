"""Stopping pure-Python work at a deadline without slowing it down.

Used by repair (:mod:`jsonmode.repair.parse`, :mod:`jsonmode.repair.syntax`) and by the
format checks of validation (:mod:`jsonmode.schema.formats`). json-repair and
jsonmode's own extraction and content check are pure Python, and on hostile text some
of json-repair's paths are quadratic or worse (``'{]' * 8000`` took a minute); so are
some format checkers (``iri``: 10 s for a 50 KB string). A trace or profile hook could
check the clock, but it slows every call ~4x (measured on the repair benchmark
corpus), and a thread cannot be killed. So one daemon *watchdog* thread, shared by
every caller, raises an exception inside the working thread when its deadline passes
(CPython's ``PyThreadState_SetAsyncExc``, delivered at the next bytecode boundary; a
single long C call, such as one regex search, finishes first). The work itself runs at
full speed: arming and disarming cost a few microseconds (a dict entry, no lock); the
watchdog wakes every :data:`TICK` seconds while there is work and sleeps for good
after :data:`LINGER` idle seconds.

Only run code here that holds no locks and keeps no state across calls (json-repair,
the lexer, the content check, jsonschema's format checkers): an interrupt may land at
any bytecode. User code
(validators, hooks) must never run under a deadline. The one foreign code that can
run inside the window is a finalizer or weakref callback called by the cyclic garbage
collector, or another library's ``gc.callbacks`` entry; an interrupt landing there
would be swallowed (and reported as "unraisable"), so the watchdog holds its fire
while that thread is collecting (tracked by two ``gc.callbacks`` entries kept first
and last, around every other callback) and fires again
every :data:`TICK` until the work stops.

:func:`run_until` stops work at a wall-clock time (repair's share of a caller's time
budget). :class:`CpuBudget` stops it once the working thread has spent so many CPU
seconds of its own, garbage collections not counted (format checks: their verdict
must not depend on how many threads wait for the GIL, or on the heap's size); the
watchdog reads the thread's CPU clock only when the wall clock says the budget could
be spent, so it costs nothing more while the work waits.

Where ``PyThreadState_SetAsyncExc`` is unavailable (not CPython), :func:`run_until`
runs the work uninterrupted; callers still check the clock between steps.
"""

from __future__ import annotations

import contextlib
import gc
import math
import os
import queue
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["CpuBudget", "DeadlineExceeded", "run_until"]

T = TypeVar("T")

#: Seconds between the watchdog's checks while work is armed or was recently.
TICK = 0.05
#: Idle seconds after which the watchdog sleeps until the next arming wakes it.
LINGER = 2.0
#: Seconds before a fire held back by a garbage collection is tried again.
RETRY = 0.002

# Threads inside a cyclic garbage collection (whose callbacks may run foreign code),
# each with its CPU time when the collection began (None while no thread is budgeted:
# the clock is only read when a CpuBudget may need it).
_collecting: dict[int, float | None] = {}
# By thread running work under a CPU budget (CpuBudget.run): how many such runs are
# open in it, and the CPU seconds its collections took since the first opened.
_budgeted: dict[int, int] = {}
_collected: dict[int, float] = {}


def _collection_starts(phase: str, info: dict[str, int]) -> None:
    try:
        if phase == "start":
            _collecting[threading.get_ident()] = time.thread_time() if _budgeted else None
    except _Interrupt:
        # Fired just before this collection began: lost here (gc would report it as
        # unraisable), fired again a tick later, once the collection is over.
        _collecting[threading.get_ident()] = time.thread_time() if _budgeted else None


def _collection_stops(phase: str, info: dict[str, int]) -> None:
    try:
        if phase == "stop":
            _count_collection(threading.get_ident())
    except _Interrupt:  # (as above: fired again a tick later)
        _count_collection(threading.get_ident())


def _count_collection(thread_id: int) -> None:
    """Retire the thread's collection; credit its CPU time to a budgeted thread."""
    started = _collecting.pop(thread_id, None)
    if started is not None and thread_id in _budgeted:
        _collected[thread_id] = _collected.get(thread_id, 0.0) + time.thread_time() - started


class _QuietInterrupts:
    """``sys.unraisablehook`` that drops this module's own interrupt and hands every
    other event to the hook it wraps. An interrupt can still land on the first line of
    :func:`_collection_starts` (fired just as a collection began); gc then reports it
    as unraisable, though nothing is lost (the watchdog fires again a tick later)."""

    def __init__(self, wrapped: Callable[[Any], object]) -> None:
        self.wrapped = wrapped

    def __call__(self, unraisable: Any) -> None:
        if unraisable.exc_type is not _Interrupt:
            self.wrapped(unraisable)


def _quiet_interrupts() -> None:
    """Wrap the current ``sys.unraisablehook`` in :class:`_QuietInterrupts` unless it
    is one (test runners install their own: checked at each arming, one read)."""
    if not isinstance(sys.unraisablehook, _QuietInterrupts):
        sys.unraisablehook = _QuietInterrupts(sys.unraisablehook)


def _bracket_collections() -> None:
    """Keep :func:`_collection_starts` first and :func:`_collection_stops` last in
    ``gc.callbacks``, so that a collection counts from before any other callback runs
    to after the last one: another library's callback (Hypothesis registers one) may
    otherwise run, unguarded, before the start is recorded or after the stop. Cost: two
    list reads when in place (each arming)."""
    callbacks = gc.callbacks
    if callbacks[:1] == [_collection_starts] and callbacks[-1:] == [_collection_stops]:
        return
    with contextlib.suppress(ValueError):
        callbacks.remove(_collection_starts)
    with contextlib.suppress(ValueError):
        callbacks.remove(_collection_stops)
    callbacks.insert(0, _collection_starts)
    callbacks.append(_collection_stops)


class DeadlineExceeded(Exception):
    """The work did not finish before its deadline and was stopped."""


class _Interrupt(BaseException):
    """Raised asynchronously in the working thread. A BaseException, so that the
    ``except Exception`` of interrupted third-party code cannot swallow it."""


def _async_raiser() -> Callable[[int, type[BaseException] | None], int] | None:
    """``raise_in(thread_id, exc)``: make ``exc`` pending in that thread (None clears)."""
    try:
        import ctypes

        set_async_exc = ctypes.pythonapi.PyThreadState_SetAsyncExc
    except (ImportError, AttributeError):  # pragma: no cover - not CPython
        return None

    def raise_in(thread_id: int, exc: type[BaseException] | None) -> int:
        # Arguments are wrapped by hand: None must go through as NULL, which clears.
        pending = ctypes.c_void_p(None) if exc is None else ctypes.py_object(exc)
        return int(set_async_exc(ctypes.c_ulong(thread_id), pending))

    return raise_in


class _Entry:
    """One armed piece of work. ``deadline`` is a :func:`time.monotonic` time; with a
    ``cpu_clock`` (the thread's CPU clock) it is only when to look next, and the work
    is stopped once :func:`_cpu_spent` reaches ``cpu_deadline``."""

    __slots__ = ("cpu_clock", "cpu_deadline", "deadline", "done", "fired_at", "firing", "thread_id")

    def __init__(
        self, deadline: float, cpu_clock: int | None = None, cpu_deadline: float = 0.0
    ) -> None:
        self.thread_id = threading.get_ident()
        self.deadline = deadline
        self.cpu_clock = cpu_clock
        self.cpu_deadline = cpu_deadline
        self.done = False
        self.firing = False
        self.fired_at = 0.0

    def cpu_left(self) -> float:
        """CPU seconds this work may still spend (0 for wall-clock work)."""
        if self.cpu_clock is None:
            return 0.0
        return self.cpu_deadline - _cpu_spent(self.thread_id, self.cpu_clock)


def _thread_clock(thread_id: int) -> int | None:
    """The CPU-time clock of ``thread_id``, read once to be sure it can be (None where
    the platform has none, or refuses it)."""
    try:
        clock = time.pthread_getcpuclockid(thread_id)
        time.clock_gettime(clock)
    except (AttributeError, OSError):  # pragma: no cover - no per-thread clocks
        return None
    return clock


def _cpu_spent(thread_id: int, clock: int) -> float:
    """CPU seconds the thread has run, less what its garbage collections took while it
    was budgeted (a collection's cost comes from the whole heap, not the work). Readable
    from any thread; infinite once the thread is gone."""
    try:
        return time.clock_gettime(clock) - _collected.get(thread_id, 0.0)
    except OSError:  # pragma: no cover - the thread has ended
        return math.inf


class _Watchdog:
    """One daemon thread that interrupts armed work past its deadline.

    The working thread takes no lock (an interrupt landing inside a Python-level lock
    wrapper would leave it held): it only sets attributes, uses a dict and puts on a
    C ``SimpleQueue``, each atomic under the GIL. The handshake: the watchdog sets
    ``firing``, checks ``done``, fires, clears ``firing``; the worker sets ``done``,
    waits out ``firing``, then clears any interrupt still pending.
    """

    def __init__(self, raise_in: Callable[[int, type[BaseException] | None], int]) -> None:
        self._raise_in = raise_in
        self._reset()

    def _reset(self) -> None:
        _collecting.clear()
        _budgeted.clear()
        _collected.clear()
        self._armed: dict[int, _Entry] = {}
        self._wakeups: queue.SimpleQueue[None] = queue.SimpleQueue()
        self._start_lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._wake_at = math.inf  # when the watchdog looks next (published before rescan)

    def arm(self, entry: _Entry) -> None:
        if self._thread is None or not self._thread.is_alive():
            with self._start_lock:
                if self._thread is None or not self._thread.is_alive():
                    self._thread = threading.Thread(
                        target=self._run, name="jsonmode-watchdog", daemon=True
                    )
                    self._thread.start()
        _bracket_collections()
        _quiet_interrupts()
        self._armed[id(entry)] = entry
        if entry.deadline < self._wake_at:
            self._wakeups.put(None)

    def disarm(self, entry: _Entry) -> None:
        """Retire ``entry``; cancel an interrupt fired but not yet delivered."""
        entry.done = True
        while entry.firing:
            time.sleep(0)
        self._armed.pop(id(entry), None)
        if entry.fired_at:
            self._raise_in(entry.thread_id, None)

    def _scan(self, now: float) -> float:
        """Fire what is due; the next time to look."""
        wake = now + TICK
        for entry in list(self._armed.values()):
            if entry.done:
                continue
            if now >= entry.deadline and now >= entry.fired_at + TICK:
                if entry.thread_id in _collecting:
                    wake = min(wake, now + RETRY)  # let the collection finish first
                    continue
                left = 0.0 if entry.fired_at else entry.cpu_left()
                if left > 0:  # waited (for the GIL, for a core): look again when due
                    entry.deadline = now + left
                    wake = min(wake, entry.deadline)
                    continue
                # Fired again each tick until disarmed, in case one was swallowed.
                entry.firing = True
                if not entry.done:
                    entry.fired_at = now
                    self._raise_in(entry.thread_id, _Interrupt)
                entry.firing = False
            wake = min(wake, max(entry.deadline, entry.fired_at + TICK))
        return wake

    def _run(self) -> None:
        idle_since = time.monotonic()
        while True:
            now = time.monotonic()
            wake = self._scan(now)
            if self._armed:
                idle_since = now
            elif now - idle_since > LINGER:
                wake = math.inf
            self._wake_at = wake
            # Rescan after publishing: an entry armed before the publish is seen
            # here; one armed after it read the new wake time and woke us if needed.
            if any(not e.done and e.deadline < wake for e in list(self._armed.values())):
                continue
            with contextlib.suppress(queue.Empty):
                self._wakeups.get(timeout=None if wake == math.inf else max(wake - now, 0.001))


_RAISE_IN = _async_raiser()
_WATCHDOG = _Watchdog(_RAISE_IN) if _RAISE_IN is not None else None
if _WATCHDOG is not None and hasattr(os, "register_at_fork"):
    # A child process has no watchdog thread.
    os.register_at_fork(after_in_child=_WATCHDOG._reset)


def run_until(deadline: float, work: Callable[..., T], *args: Any) -> T:
    """``work(*args)``, stopped with :class:`DeadlineExceeded` at ``deadline``.

    ``deadline`` is a :func:`time.monotonic` time. Exceptions of ``work`` propagate
    unchanged. Costs a few microseconds beyond ``work`` itself; the interrupt lands
    within a few milliseconds of the deadline (the interpreter's switch interval)
    unless ``work`` is inside one long C call. Thread-safe: any number of threads
    may run work under their own deadlines.
    """
    if time.monotonic() >= deadline:
        raise DeadlineExceeded("no time left")
    if _WATCHDOG is None:  # pragma: no cover - not CPython
        return work(*args)
    return _run_armed(_WATCHDOG, _Entry(deadline), work, args)


class CpuBudget:
    """CPU seconds that several pieces of work in one thread share.

    :meth:`run` counts the working thread's own CPU time, less what the cyclic garbage
    collector took in it meanwhile: waiting for the GIL while other threads run, or for
    a core on a busy machine, spends nothing, so a verdict bounded this way depends on
    the work, not on the load. Where the platform has no per-thread CPU clock, or no
    watchdog (not CPython), wall-clock time is counted instead (:func:`run_until`).
    Not thread-safe: a budget is spent by one thread at a time.
    """

    def __init__(self, seconds: float) -> None:
        self.left = seconds

    def run(self, work: Callable[..., T], *args: Any) -> T:
        """``work(*args)``, stopped with :class:`DeadlineExceeded` when the budget is
        spent (at once when nothing is left); what it spent, however it ends, is taken
        from :attr:`left`. Costs a few microseconds beyond ``work``."""
        if self.left <= 0:
            raise DeadlineExceeded("no time left")
        thread_id = threading.get_ident()
        clock = _thread_clock(thread_id)
        if clock is None or _WATCHDOG is None:  # pragma: no cover - no per-thread clocks
            started = time.monotonic()
            try:
                return run_until(started + self.left, work, *args)
            finally:
                self.left -= time.monotonic() - started
        _budgeted[thread_id] = _budgeted.get(thread_id, 0) + 1
        try:
            started = _cpu_spent(thread_id, clock)
            entry = _Entry(time.monotonic() + self.left, clock, started + self.left)
            try:
                return _run_armed(_WATCHDOG, entry, work, args)
            finally:
                self.left -= _cpu_spent(thread_id, clock) - started
        finally:
            if _budgeted[thread_id] > 1:
                _budgeted[thread_id] -= 1
            else:
                del _budgeted[thread_id]
                _collected.pop(thread_id, None)


def _run_armed(watchdog: _Watchdog, entry: _Entry, work: Callable[..., T], args: Any) -> T:
    """``work(*args)`` with ``entry`` armed; :class:`DeadlineExceeded` if it fired."""
    interrupted = False
    try:
        watchdog.arm(entry)
        result = work(*args)
    except _Interrupt:
        interrupted = True
    finally:
        # An interrupt fired just before disarming may land anywhere in here: retry
        # until the entry is retired, so none escapes to the caller.
        while True:
            try:
                watchdog.disarm(entry)
                break
            except _Interrupt:
                interrupted = True
    if interrupted and not entry.fired_at:
        # Not ours: the deadline of an enclosing run_until in this thread. Let it on.
        raise _Interrupt
    if interrupted:
        raise DeadlineExceeded("stopped at the deadline")
    return result
