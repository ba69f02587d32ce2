"""Verdicts bounded in time count the checking thread's CPU time, not the wall clock.

A valid IRI that a busy process took long to check (other threads holding the GIL, a
garbage collection of a big heap) was called "undecided", so not conforming: a verdict
that depended on the load. CI found it (one worker, 2 cores). Pattern searches outside
the DFA (the lazy DFA, the backtracking fallback) had the same flaw, remembered per
process. These tests set the load up on purpose.
"""

from __future__ import annotations

import gc
import re
import threading
import time

import pytest

from jsonmode import Schema
from jsonmode._watchdog import CpuBudget, DeadlineExceeded, run_until
from jsonmode.schema import patterns
from jsonmode.schema.formats import FORMAT_TIME_LIMIT


def _spin(seconds: float) -> int:
    """Pure-Python work for ``seconds`` of this thread's CPU time."""
    end = time.thread_time() + seconds
    turns = 0
    while time.thread_time() < end:
        turns += 1
    return turns


def test_waiting_spends_no_cpu_budget() -> None:
    budget = CpuBudget(0.2)
    budget.run(time.sleep, 0.6)  # returns: the sleep spent no CPU
    assert budget.left > 0.15

    def sleep_then_spin() -> int:
        time.sleep(0.6)
        return _spin(0.05)

    # The wall clock, for contrast, stops the same work.
    with pytest.raises(DeadlineExceeded):
        run_until(time.monotonic() + 0.2, sleep_then_spin)


def test_work_that_spends_its_cpu_is_stopped_and_the_budget_is_shared() -> None:
    budget = CpuBudget(0.3)
    assert budget.run(_spin, 0.1) > 0
    assert 0.1 < budget.left < 0.2 + 0.01
    started = time.thread_time()
    with pytest.raises(DeadlineExceeded):
        budget.run(_spin, 10.0)
    assert time.thread_time() - started < 1.0
    assert budget.left <= 0
    with pytest.raises(DeadlineExceeded, match="no time left"):
        budget.run(_spin, 0.0)


def test_garbage_collections_are_not_charged_to_the_work() -> None:
    heap = [[i] for i in range(1_500_000)]  # every full collection walks them all
    started = time.thread_time()
    gc.collect()
    one = time.thread_time() - started
    rounds = int(0.6 / max(one, 1e-3)) + 1  # > 0.6 s of collections in all

    def collect() -> float:
        begun = time.thread_time()
        for _ in range(rounds):
            gc.collect()
        return time.thread_time() - begun

    budget = CpuBudget(0.3)
    spent = budget.run(collect)
    assert spent > 0.3  # the collections did run, past the budget
    assert budget.left > 0.25
    del heap


def test_a_budget_per_thread_and_its_collections_are_its_own() -> None:
    results: list[object] = []

    def worker() -> None:
        budget = CpuBudget(0.2)
        try:
            results.append(budget.run(_spin, 5.0))
        except DeadlineExceeded:
            results.append("stopped")

    threads = [threading.Thread(target=worker) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert results == ["stopped"] * 3


class _Hog:
    """A thread that holds the GIL in C calls of ~0.07 s each until stopped."""

    def __enter__(self) -> _Hog:
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run)
        self.thread.start()
        return self

    def _run(self) -> None:
        while not self.stop.is_set():
            re.fullmatch(r"(x+x+)+y", "x" * 21)

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(30)


def test_a_valid_iri_conforms_while_other_threads_hold_the_gil() -> None:
    schema = Schema.of({"type": "array", "items": {"type": "string", "format": "iri"}})
    value = [f"urn:isbn:04514505{n:02d}" for n in range(10)]
    assert schema.conforms(value)  # (also loads the checker, outside the test)
    with _Hog():
        started = time.monotonic()
        verdict = schema.conforms(value)
        issues = schema.issues(value)
        waited = time.monotonic() - started
    assert waited > 2 * FORMAT_TIME_LIMIT  # the load was there
    assert verdict is True
    assert issues == []


def test_a_lazy_dfa_search_that_waited_still_decides() -> None:
    # a{1999}b is over the DFA's state budget: searched lazily, ~0.25 us a character.
    schema = Schema.of({"not": {"pattern": "a{1999}b"}})
    text = "x" * 1_000_000
    assert schema.conforms("x")
    with _Hog():
        started = time.monotonic()
        verdict = schema.conforms(text)
        waited = time.monotonic() - started
    assert waited > patterns.LAZY_TIMEOUT_S  # the load was there
    assert verdict is True  # (undecided is never a pass: it would be False)
    assert schema.conforms(text + "x")  # and the pattern is not marked hostile


class _WaitingSearch:
    """A ``regex`` pattern stand-in whose first tries wait ``wall`` seconds without
    running (as on a busy core) and then time out like regex does."""

    def __init__(self, waits: int, wall: float, spin: float = 0.0) -> None:
        self.waits, self.wall, self.spin = waits, wall, spin
        self.timeouts: list[float] = []

    def search(self, text: str, timeout: float) -> object:
        self.timeouts.append(timeout)
        if len(self.timeouts) <= self.waits:
            time.sleep(min(self.wall, timeout))
            raise TimeoutError("regex time out")
        if self.spin:
            _spin(min(self.spin, timeout))
            raise TimeoutError("regex time out")
        return object()


def test_a_backtracking_search_that_waited_is_tried_again() -> None:
    waiting = _WaitingSearch(waits=1, wall=0.3)
    assert patterns._backtracking_search(waiting, "abc", 0.1) is True
    assert len(waiting.timeouts) == 2
    assert waiting.timeouts[1] > waiting.timeouts[0]  # stretched by the waiting seen


def test_a_backtracking_search_that_ran_its_time_is_undecided() -> None:
    running = _WaitingSearch(waits=0, wall=0.0, spin=1.0)
    started = time.thread_time()
    assert patterns._backtracking_search(running, "abc", 0.1) is None
    assert len(running.timeouts) == 1
    assert time.thread_time() - started < 0.3


def test_a_thread_kept_waiting_gives_up_after_a_few_tries() -> None:
    starved = _WaitingSearch(waits=100, wall=0.05)
    assert patterns._backtracking_search(starved, "abc", 0.01) is None
    assert len(starved.timeouts) == patterns._WAITED_TRIES == 3
    assert patterns._MOST_WAITING == 4.0
    assert max(starved.timeouts) <= 4 * 0.01 + 1e-9
