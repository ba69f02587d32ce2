"""Format checks are bounded by the checking thread's CPU time, not the wall clock.

A valid IRI that a busy process took long to check (other threads holding the GIL, a
garbage collection of a big heap) was called "undecided", so not conforming: a verdict
that depended on the load. CI found it (one worker, 2 cores); these tests set the load
up on purpose.
"""

from __future__ import annotations

import gc
import re
import threading
import time

import pytest

from jsonmode import Schema
from jsonmode._watchdog import CpuBudget, DeadlineExceeded, run_until
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


def test_a_valid_iri_conforms_while_other_threads_hold_the_gil() -> None:
    schema = Schema.of({"type": "array", "items": {"type": "string", "format": "iri"}})
    value = [f"urn:isbn:04514505{n:02d}" for n in range(10)]
    assert schema.conforms(value)  # (also loads the checker, outside the test)
    stop = threading.Event()

    def hog() -> None:
        # Each match is one C call of ~0.07 s that holds the GIL throughout.
        while not stop.is_set():
            re.fullmatch(r"(x+x+)+y", "x" * 21)

    thread = threading.Thread(target=hog)
    thread.start()
    try:
        started = time.monotonic()
        verdict = schema.conforms(value)
        issues = schema.issues(value)
        waited = time.monotonic() - started
    finally:
        stop.set()
        thread.join(30)
    assert waited > 2 * FORMAT_TIME_LIMIT  # the load was there
    assert verdict is True
    assert issues == []
