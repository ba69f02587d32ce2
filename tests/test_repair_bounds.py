"""Repair mode ends in bounded time on any text, with a value or a typed OutputError.

Each hostile shape runs in a daemon thread joined with a timeout, so a regression
fails the test instead of hanging the suite. Sizes are chosen so that the code
before the bounds took from seconds to minutes (``'{]' * 8000``: 17-64 s).
"""

from __future__ import annotations

import contextlib
import random
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

import jsonmode
import jsonmode.repair.parse
from jsonmode import OutputError, OutputParseError
from jsonmode.repair.extract import find_candidates
from jsonmode.repair.syntax import repair_syntax
from tests.support.bounded import run_python

# Wall-clock budgets: under pytest-xdist these run while no other test runs.
pytestmark = pytest.mark.alone

# The bounds' own names are imported inside the tests that need them, so that every
# other test here runs (and fails for its own reason) against code without them.

#: Wall-clock seconds one parse may take here: REPAIR_TIME_LIMIT plus the linear
#: stages, with room for a loaded 2-core machine.
BOUND = 3.0

SHAPES: dict[str, Callable[[int], str]] = {
    "brace_bracket": lambda n: "{]" * (n // 2),
    "bracket_brace": lambda n: "[}" * (n // 2),
    "close_open": lambda n: "}{" * (n // 2),
    "open_brace": lambda n: "{" * n,
    "open_bracket": lambda n: "[" * n,
    "array_object": lambda n: "[{" * (n // 2),
    "nested_then_mismatched": lambda n: "{[" * (n // 4) + "}]" * (n // 4),
    "deep_balanced": lambda n: "[" * (n // 2) + "]" * (n // 2),
    "parentheses": lambda n: "(" * n,
    "parentheses_in_object": lambda n: '{"a": ' + "(" * n + "}",
    "double_quotes": lambda n: '"' * n,
    "single_quotes": lambda n: "'" * n,
    "quote_escape_pairs": lambda n: '"\\' * (n // 2),
    "backslashes": lambda n: "\\" * n,
    "backticks": lambda n: "`" * n,
    "unclosed_fence": lambda n: "```json\n" + '{"a": [' * (n // 7),
    "many_fences": lambda n: '```json\n{"a": 1,}\n```\n' * (n // 22),
    "many_distinct_candidates": lambda n: "".join(f'{{"a": {i},}} ' for i in range(n // 12)),
    "many_valid_documents": lambda n: "".join(f'{{"a": {i}}} ' for i in range(n // 10)),
    "many_python_dicts": lambda n: "".join(f"{{'a': {i}}} " for i in range(n // 11)),
    "key_colon": lambda n: '{"a":' * (n // 5),
    "single_quote_keys": lambda n: "{'a':" * (n // 5),
    "brace_single_quote": lambda n: "{'" * (n // 2),
    "comment_openers": lambda n: "/*" * (n // 2),
    "hashes": lambda n: "#" * n,
    "hashes_in_braces": lambda n: "{" + "#" * n + "}",
    "slashes": lambda n: "/" * n,
    "slashes_in_brackets": lambda n: "[" + "/" * n + "]",
    "ellipsis_array": lambda n: "[" + "1, " * (n // 3) + "...]",
    "colons": lambda n: '{"a"' + ":" * n + "}",
    "commas": lambda n: "[1" + "," * n + "]",
    "words_in_braces": lambda n: "{" + "a " * (n // 2) + "}",
    "unquoted_pairs": lambda n: "{" + "a:b," * (n // 4) + "}",
}


def _timed_parse(text: str, schema: Any = None, bound: float = BOUND) -> tuple[Any, float]:
    """(Parsed or the exception, seconds); fails when the parse outlives ``bound``."""
    outcome: dict[str, Any] = {}

    def work() -> None:
        start = time.perf_counter()
        try:
            outcome["result"] = jsonmode.parse(text, {} if schema is None else schema, "repair")
        except BaseException as exc:  # reported below, typed or not
            outcome["result"] = exc
        outcome["seconds"] = time.perf_counter() - start

    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    thread.join(bound)
    if thread.is_alive():
        pytest.fail(f"repair of {len(text):,} chars still running after {bound} s")
    return outcome["result"], outcome["seconds"]


def _check_typed(result: Any) -> None:
    if isinstance(result, BaseException):
        assert isinstance(result, OutputError), f"untyped {type(result).__name__}: {result}"
    else:
        assert isinstance(result, jsonmode.Parsed)


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_hostile_shape_ends_in_bounded_time_with_a_typed_result(name: str) -> None:
    text = SHAPES[name](16_000)
    result, seconds = _timed_parse(text)
    _check_typed(result)
    assert seconds < BOUND


# Shapes that took over 2 s (most of them over 10 s) at this size before the bounds.
SLOW_AT_THE_CAP = [
    "backticks",
    "brace_bracket",
    "hashes",
    "many_distinct_candidates",
    "many_fences",
    "nested_then_mismatched",
    "parentheses",
    "slashes",
]


@pytest.mark.parametrize("name", SLOW_AT_THE_CAP)
def test_hostile_shape_at_the_size_cap_ends_in_bounded_time(name: str) -> None:
    cap = jsonmode.repair.parse.MAX_REPAIR_CHARS
    text = SHAPES[name](cap)[:cap]
    assert len(text) > cap * 0.9
    result, _ = _timed_parse(text, bound=2.0)
    _check_typed(result)


def test_output_over_the_size_cap_is_not_repaired_and_says_so() -> None:
    text = "{]" * (jsonmode.repair.parse.MAX_REPAIR_CHARS // 2 + 1)
    result, _ = _timed_parse(text, bound=1.0)
    assert isinstance(result, OutputParseError)
    assert "too long to repair" in str(result)


def test_time_limit_stops_json_repair_with_a_typed_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(jsonmode.repair.parse, "REPAIR_TIME_LIMIT", 0.05)
    result, seconds = _timed_parse("{]" * 8000, bound=2.0)  # minutes of json-repair
    assert isinstance(result, OutputParseError)
    assert "time limit" in str(result)
    assert seconds < 1.0


def test_time_limit_covers_many_candidates(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(jsonmode.repair.parse, "REPAIR_TIME_LIMIT", 0.05)
    text = "".join(f"{{'a': {i}}} " for i in range(20_000))  # each one needs json-repair
    result, _ = _timed_parse(text, bound=2.0)
    assert isinstance(result, OutputParseError)
    assert "time limit" in str(result)


def test_nesting_deeper_than_the_bound_is_refused_before_json_repair() -> None:
    from jsonmode.repair.syntax import MAX_REPAIR_DEPTH, RepairLimitError

    deep = "[" * (MAX_REPAIR_DEPTH + 1) + "1,"  # not valid JSON: goes to repair
    with pytest.raises(RepairLimitError, match="deep"):
        repair_syntax(deep + "]" * (MAX_REPAIR_DEPTH + 1))
    expected: Any = 1
    for _ in range(20):
        expected = [expected]
    assert repair_syntax("[" * 20 + "1," + "]" * 20) == expected


@pytest.mark.parametrize(
    "text",
    [
        "{[" * 20_000 + "}]" * 20_000,  # every opener fails at the same closer
        '{"a": [' * 20_000 + "}",  # the same, strings between the openers
        '```json\n{"a": 1}\n```\n' * 20_000,  # many fences, each a known span
    ],
)
def test_find_candidates_is_linear_on_adversarial_text(text: str) -> None:
    outcome: list[float] = []

    def work() -> None:
        start = time.perf_counter()
        find_candidates(text)
        outcome.append(time.perf_counter() - start)

    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    thread.join(BOUND)
    assert outcome, f"find_candidates still running after {BOUND} s"


def test_realistic_large_reply_is_still_repaired() -> None:
    rng = random.Random(7)
    items = [
        {"id": i, "name": f"Item {i}", "price": round(rng.random() * 100, 2), "ok": i % 2 == 0}
        for i in range(600)
    ]
    text = "Here you go:\n```python\n" + repr(items)[:-1] + ",]\n```"  # ~40 kB
    result, _ = _timed_parse(text, {"type": "array"})
    assert isinstance(result, jsonmode.Parsed), result
    assert result.data == items
    assert [r.kind for r in result.repairs] == ["extract", "python_literal", "syntax"]


def _spin() -> None:
    while True:
        pass


def test_run_until_interrupts_pure_python_work_and_leaves_nothing_pending() -> None:
    from jsonmode._watchdog import DeadlineExceeded, run_until

    start = time.monotonic()
    with pytest.raises(DeadlineExceeded):
        run_until(start + 0.05, _spin)
    assert time.monotonic() - start < 1.5
    rng = random.Random(3)
    for _ in range(300):  # deadlines landing around the end of the work
        with contextlib.suppress(DeadlineExceeded):
            run_until(time.monotonic() + rng.random() * 0.002, sum, range(rng.randint(1, 5000)))
    for _ in range(10_000):  # an interrupt left pending would surface in this loop
        pass
    assert run_until(time.monotonic() + 1.0, int, "42") == 42


def test_run_until_works_in_many_threads_at_once() -> None:
    from jsonmode._watchdog import DeadlineExceeded, run_until

    stopped: list[bool] = []

    def work() -> None:
        try:
            run_until(time.monotonic() + 0.05, _spin)
        except DeadlineExceeded:
            stopped.append(True)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(5.0)
    assert stopped == [True] * 4


def test_an_interrupt_never_lands_in_another_librarys_gc_callback() -> None:
    # Hypothesis registers a gc callback; one registered before the watchdog's ran,
    # unguarded, before the collection was recorded (and one after it, after the stop
    # was), and an interrupt that landed there was swallowed and reported as
    # unraisable (a CI run failed on it). Foreign callbacks first and last, 5 ms each.
    code = """
import gc, sys, time
from jsonmode._watchdog import DeadlineExceeded, run_until

hit, unraisable = [], []

def busy(phase, when):
    if phase != when:
        return
    try:
        end = time.monotonic() + 0.005
        while time.monotonic() < end:
            pass
    except BaseException as error:
        hit.append(type(error).__name__)
        raise

gc.callbacks.insert(0, lambda phase, info: busy(phase, "start"))
gc.callbacks.append(lambda phase, info: busy(phase, "stop"))
sys.unraisablehook = unraisable.append

def work():
    while True:
        end = time.monotonic() + 0.01
        while time.monotonic() < end:
            pass
        gc.collect(0)

stopped = 0
for _ in range(20):
    try:
        run_until(time.monotonic() + 0.03, work)
    except DeadlineExceeded:
        stopped += 1
print(stopped, len(hit), len(unraisable))
"""
    assert run_python(code, 60).split() == ["20", "0", "0"]
