"""JsonMode.map / amap: input order, bounded concurrency, shared backpressure, summary."""

from __future__ import annotations

import asyncio
import json
import re
import sys
import threading
import time
from typing import Any

import pytest
from pydantic import BaseModel, ValidationInfo, field_validator

from jsonmode import AttemptsExhaustedError, JsonMode, JsonModeError, Result
from jsonmode.backends.base import Completion, Request
from jsonmode.backends.scripted import ScriptedBackend
from jsonmode.batch import BatchResults, BatchSummary, Gate
from jsonmode.errors import (
    InvalidGrammarError,
    InvalidSchemaError,
    PermanentBackendError,
    TransientBackendError,
    UsageError,
)
from jsonmode.result import Usage
from jsonmode.retry import TransportPolicy


async def _no_sleep(_seconds: float) -> None:
    return None


FAST = TransportPolicy(
    max_retries=2, initial_wait=0, max_wait=0, sleep=lambda _s: None, async_sleep=_no_sleep
)
SCHEMA = {
    "type": "object",
    "properties": {"i": {"type": "integer"}},
    "required": ["i"],
    "additionalProperties": False,
}
_INDEX = re.compile(r"prompt #(\d+)")


def prompts(count: int) -> list[str]:
    return [f"prompt #{i}" for i in range(count)]


def index_of(request: Request) -> int:
    found = _INDEX.search(request.prompt_text())  # the user message (a re-ask adds more)
    assert found is not None
    return int(found.group(1))


class Counting:
    """A backend that answers ``{"i": <index>}`` after a delay that depends on the
    prompt, and counts the calls in flight (sync and async)."""

    name = "counting"
    native_schema = False

    def __init__(self, delay: Any = lambda i: 0.0, reply: Any = None) -> None:
        self.delay = delay
        self.reply = reply or (lambda i, call: json.dumps({"i": i}))
        self.lock = threading.Lock()
        self.inflight = 0
        self.peak = 0
        self.calls: dict[int, int] = {}
        self.starts: list[tuple[int, float]] = []

    def _enter(self, i: int) -> int:
        with self.lock:
            self.inflight += 1
            self.peak = max(self.peak, self.inflight)
            self.calls[i] = self.calls.get(i, 0) + 1
            self.starts.append((i, time.monotonic()))
            return self.calls[i]

    def _leave(self) -> None:
        with self.lock:
            self.inflight -= 1

    def _answer(self, i: int, call: int) -> Completion:
        reply = self.reply(i, call)
        if isinstance(reply, BaseException):
            raise reply
        return reply if isinstance(reply, Completion) else Completion(reply)

    def complete(self, request: Request) -> Completion:
        i = index_of(request)
        call = self._enter(i)
        try:
            time.sleep(self.delay(i))
            return self._answer(i, call)
        finally:
            self._leave()

    async def acomplete(self, request: Request) -> Completion:
        i = index_of(request)
        call = self._enter(i)
        try:
            await asyncio.sleep(self.delay(i))
            return self._answer(i, call)
        finally:
            self._leave()

    @property
    def total_calls(self) -> int:
        return sum(self.calls.values())


# -- order, concurrency, failures -------------------------------------------------------------


def test_results_come_in_input_order_whatever_finishes_first():
    backend = Counting(delay=lambda i: 0.005 * (12 - i))  # the first prompt is the slowest
    results = JsonMode(backend).map(prompts(12), SCHEMA, concurrency=4)
    assert isinstance(results, BatchResults)
    assert isinstance(results, list)
    assert len(results) == 12
    assert all(isinstance(entry, Result) for entry in results)
    assert [entry.data for entry in results] == [{"i": i} for i in range(12)]


def test_at_most_concurrency_requests_are_in_flight():
    backend = Counting(delay=lambda i: 0.01)
    results = JsonMode(backend).map(prompts(20), SCHEMA, concurrency=3)
    assert len(results) == 20
    assert backend.peak == 3


def test_concurrency_one_runs_one_at_a_time_in_order():
    backend = Counting()
    JsonMode(backend).map(prompts(6), SCHEMA, concurrency=1)
    assert backend.peak == 1
    assert [i for i, _ in backend.starts] == list(range(6))


def test_a_failing_prompt_is_its_entry_and_the_others_have_results():
    def reply(i: int, call: int) -> Any:
        if i == 3:
            return PermanentBackendError("refused")
        if i == 5:
            return "nope"
        return json.dumps({"i": i})

    backend = Counting(reply=reply)
    results = JsonMode(backend, max_attempts=2, transport=FAST).map(prompts(8), SCHEMA)
    assert len(results) == 8
    assert isinstance(results[3], PermanentBackendError)
    assert [a.outcome for a in results[3].attempts] == ["backend_error"]
    assert isinstance(results[5], AttemptsExhaustedError)
    assert [a.outcome for a in results[5].attempts] == ["invalid_json", "invalid_json"]
    for i in set(range(8)) - {3, 5}:
        assert isinstance(results[i], Result)
        assert results[i].data == {"i": i}
    assert all(isinstance(entry, (Result, JsonModeError)) for entry in results)


def test_an_error_that_is_not_a_jsonmode_error_propagates_and_stops_the_batch():
    def reply(i: int, call: int) -> Any:
        if i == 2:
            return RuntimeError("a bug in the backend")
        return json.dumps({"i": i})

    backend = Counting(delay=lambda i: 0.01, reply=reply)
    with pytest.raises(RuntimeError, match="a bug in the backend"):
        JsonMode(backend, transport=FAST).map(prompts(60), SCHEMA, concurrency=2)
    assert backend.total_calls < 60  # the prompts not started were cancelled


def test_an_empty_batch():
    backend = Counting()
    results = JsonMode(backend).map([], SCHEMA)
    assert results == []
    assert results.summary.total == 0
    assert backend.total_calls == 0


def test_prompts_may_be_any_iterable_and_message_lists():
    backend = Counting()
    messages = [{"role": "user", "content": "prompt #1"}]
    results = JsonMode(backend).map(iter(["prompt #0", messages]), SCHEMA)
    assert [entry.data for entry in results] == [{"i": 0}, {"i": 1}]
    assert messages == [{"role": "user", "content": "prompt #1"}]  # not modified


# -- summary ----------------------------------------------------------------------------------


def test_the_summary_counts_outcomes_and_tokens():
    def reply(i: int, call: int) -> Any:
        text = {
            0: '{"i": 0}',  # first try
            1: '```json\n{"i": 1}\n```',  # repaired
            2: "nope" if call == 1 else '{"i": 2}',  # retried
            3: "nope",  # failed after three attempts
        }.get(i)
        if text is None:
            return PermanentBackendError("refused")  # 4: failed, no usage
        return Completion(text, Usage(10, 5))

    backend = Counting(reply=reply)
    jm = JsonMode(backend, mode="repair", max_attempts=3, transport=FAST)
    results = jm.map(prompts(5), SCHEMA)
    summary = results.summary
    assert isinstance(summary, BatchSummary)
    assert (summary.total, summary.conformed, summary.failed) == (5, 3, 2)
    assert (summary.first_try, summary.repaired, summary.retried) == (1, 1, 1)
    # attempts: 1 + 1 + 2 + 3 with usage (the failed ones too), the refused one none
    assert summary.usage == Usage(70, 35)
    assert summary.usage.total_tokens == 105
    assert summary.duration_s >= 0
    line = str(summary)
    assert "\n" not in line
    assert "5 prompts" in line
    assert "3 conformed" in line
    assert "2 failed" in line
    assert "105 tokens" in line


def test_summary_of_a_clean_batch():
    results = JsonMode(Counting()).map(prompts(4), SCHEMA)
    summary = results.summary
    assert (summary.total, summary.conformed, summary.first_try, summary.failed) == (4, 4, 4, 0)
    assert summary.usage.total_tokens == 0  # nothing reported


class SlowToPrepare(Counting):
    """A backend whose one-time set-up (like importing litellm) takes an hour of the
    clock the test installs, the first time; its calls take none."""

    def __init__(self, clock: list[float]) -> None:
        super().__init__()
        self.clock = clock
        self.prepared = 0

    def prepare(self) -> None:
        self.prepared += 1
        if self.prepared == 1:
            self.clock[0] += 3600.0


@pytest.fixture
def slow_clock(monkeypatch):
    """time.perf_counter as a clock that only the backend's prepare() moves."""
    clock = [1000.0]
    monkeypatch.setattr(time, "perf_counter", lambda: clock[0])
    return clock


@pytest.mark.parametrize("driver", ["map", "amap"])
def test_the_batch_duration_leaves_out_the_backends_set_up(slow_clock, driver):
    # issue 38, item 7: map's clock started before prepare(): 10 fast prompts took 6.5 s
    backend = SlowToPrepare(slow_clock)
    jm = JsonMode(backend)
    if driver == "map":
        results = jm.map(prompts(10), SCHEMA)
    else:
        results = asyncio.run(jm.amap(prompts(10), SCHEMA))
    assert backend.prepared >= 1
    assert slow_clock[0] == 1000.0 + 3600.0  # the set-up ran
    assert results.summary.conformed == 10
    assert results.summary.duration_s == 0.0  # the hour of set-up is not in it
    assert all(entry.duration_s == 0.0 for entry in results)


# -- shared backpressure (Gate) ------------------------------------------------------------------


HOLD = 0.5  # the Retry-After
MARGIN = 0.1  # a call that had passed the gate just before the failure may start late


def _held(starts: list[tuple[int, float]], t0: float) -> None:
    """Every call that started after the failure at ``t0`` (past the margin) waited
    out its Retry-After."""
    later = [at for _, at in starts if at > t0 + MARGIN]
    assert later  # the batch did go on after the failure
    assert all(at >= t0 + HOLD - 0.02 for at in later), [round(at - t0, 3) for at in later]


def test_a_retry_after_from_one_call_holds_every_call_of_the_batch():
    failed_at: list[float] = []

    def reply(i: int, call: int) -> Any:
        if i == 1 and call == 1:
            failed_at.append(time.monotonic())
            return TransientBackendError("rate limited", status_code=429, retry_after=HOLD)
        return json.dumps({"i": i})

    backend = Counting(delay=lambda i: 0.02, reply=reply)
    results = JsonMode(backend, transport=FAST).map(prompts(30), SCHEMA, concurrency=3)
    assert all(isinstance(entry, Result) for entry in results)
    assert results[1].attempts[0].transport_retries == 1
    (t0,) = failed_at
    _held(backend.starts, t0)


def test_a_backend_down_makes_the_rest_of_the_batch_fail_fast():
    backend = Counting(reply=lambda i, call: TransientBackendError("503"))
    results = JsonMode(backend, transport=FAST).map(prompts(10), SCHEMA, concurrency=1)
    assert all(isinstance(entry, TransientBackendError) for entry in results)
    calls_without_gate = 10 * (FAST.max_retries + 1)
    assert backend.total_calls < calls_without_gate
    assert backend.total_calls <= Gate().give_up_after + 1
    assert "batch stopped sending" in str(results[-1])
    assert "batch stopped sending" not in str(results[0])
    assert results[-1].attempts  # still the attempt record of its own prompt


def test_gate_unit_a_success_resets_the_count():
    gate = Gate(give_up_after=3, sleep=lambda _s: None)
    outcomes = iter([False, False, True, False, False, False, True])

    def complete(request: Any) -> Completion:
        if next(outcomes):
            return Completion("ok")
        raise TransientBackendError("503")

    gated = gate.wrap(complete)
    for _ in range(2):
        with pytest.raises(TransientBackendError):
            gated(None)
    assert gated(None).text == "ok"  # two failures, then a success: the count starts over
    for _ in range(3):
        with pytest.raises(TransientBackendError, match="503"):
            gated(None)
    with pytest.raises(TransientBackendError, match="batch stopped sending"):
        gated(None)  # three in a row: not sent
    assert next(outcomes) is True  # the backend was not called


def test_gate_unit_permanent_errors_do_not_count():
    gate = Gate(give_up_after=1, sleep=lambda _s: None)

    def complete(request: Any) -> Completion:
        raise PermanentBackendError("400")

    gated = gate.wrap(complete)
    for _ in range(3):
        with pytest.raises(PermanentBackendError):
            gated(None)


def test_gate_unit_waits_out_a_retry_after_with_the_injected_sleep():
    slept: list[float] = []
    gate = Gate(sleep=slept.append)
    replies = iter([TransientBackendError("429", retry_after=5.0), Completion("ok")])

    def complete(request: Any) -> Completion:
        reply = next(replies)
        if isinstance(reply, BaseException):
            raise reply
        return reply

    gated = gate.wrap(complete)
    with pytest.raises(TransientBackendError):
        gated(None)
    started = time.monotonic()
    # the fake sleep does not pass time: the gate keeps asking; stop it by time travel
    calls = 0

    def sleep(seconds: float) -> None:
        nonlocal calls
        calls += 1
        slept.append(seconds)
        gate._not_before = 0.0  # as if the time had passed

    gate._sleep = sleep
    assert gated(None).text == "ok"
    assert calls == 1
    assert 4.5 < slept[-1] <= 5.0
    assert time.monotonic() - started < 1.0


def test_gate_unit_async():
    slept: list[float] = []

    async def fake_sleep(seconds: float) -> None:
        slept.append(seconds)
        gate._not_before = 0.0

    gate = Gate(async_sleep=fake_sleep)
    replies = iter([TransientBackendError("429", retry_after=2.0), Completion("ok")])

    async def acomplete(request: Any) -> Completion:
        reply = next(replies)
        if isinstance(reply, BaseException):
            raise reply
        return reply

    gated = gate.awrap(acomplete)

    async def main() -> str:
        with pytest.raises(TransientBackendError):
            await gated(None)
        return (await gated(None)).text

    assert asyncio.run(main()) == "ok"
    assert len(slept) == 1
    assert 1.5 < slept[0] <= 2.0


# -- progress -------------------------------------------------------------------------------------


def test_progress_true_draws_a_bar_on_stderr(capsys):
    JsonMode(Counting()).map(prompts(3), SCHEMA, progress=True)
    captured = capsys.readouterr()
    assert "jsonmode" in captured.err
    assert "3/3" in captured.err
    assert captured.out == ""


def test_progress_counts_failures(capsys):
    def reply(i: int, call: int) -> Any:
        return PermanentBackendError("no") if i == 0 else json.dumps({"i": i})

    JsonMode(Counting(reply=reply)).map(prompts(3), SCHEMA, progress=True)
    assert "failed=1" in capsys.readouterr().err


@pytest.mark.parametrize("progress", [None, False])
def test_no_bar_when_stderr_is_not_a_terminal_or_when_asked(capsys, progress):
    assert not sys.stderr.isatty()
    JsonMode(Counting()).map(prompts(3), SCHEMA, progress=progress)
    assert capsys.readouterr().err == ""


def test_progress_none_draws_a_bar_on_a_terminal(capsys, monkeypatch):
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True, raising=False)
    JsonMode(Counting()).map(prompts(3), SCHEMA)
    assert "3/3" in capsys.readouterr().err


# -- misuse ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "options",
    [
        {"concurrency": 0},
        {"concurrency": -1},
        {"concurrency": True},
        {"concurrency": "2"},
        {"concurrency": 2.0},
        {"progress": "yes"},
        {"progress": 1},
        {"progress": 0},
    ],
)
def test_bad_options_are_usage_errors(options):
    backend = Counting()
    with pytest.raises(UsageError):
        JsonMode(backend).map(prompts(2), SCHEMA, **options)
    with pytest.raises(UsageError):
        asyncio.run(JsonMode(backend).amap(prompts(2), SCHEMA, **options))
    assert backend.total_calls == 0


def test_a_bad_schema_raises_before_any_backend_call():
    backend = Counting()
    with pytest.raises(InvalidSchemaError):
        JsonMode(backend).map(prompts(3), {"type": "strin"})
    with pytest.raises(InvalidSchemaError):
        asyncio.run(JsonMode(backend).amap(prompts(3), {"type": "strin"}))
    assert backend.total_calls == 0


@pytest.mark.parametrize(
    "options",
    [{"examples": [("x", {"i": "not an int"})]}, {"schema_name": "not a name!"}],
    ids=["examples", "schema_name"],
)
def test_other_misuse_raises_once_rather_than_failing_every_entry(options):
    backend = Counting()
    with pytest.raises(UsageError):
        JsonMode(backend).map(prompts(3), SCHEMA, **options)
    with pytest.raises(UsageError):
        asyncio.run(JsonMode(backend).amap(prompts(3), SCHEMA, **options))
    assert backend.total_calls == 0


# -- amap ---------------------------------------------------------------------------------------


def test_amap_keeps_input_order_and_bounds_concurrency():
    backend = Counting(delay=lambda i: 0.002 * (15 - i))

    async def main() -> BatchResults:
        return await JsonMode(backend).amap(prompts(15), SCHEMA, concurrency=4)

    results = asyncio.run(main())
    assert isinstance(results, BatchResults)
    assert [entry.data for entry in results] == [{"i": i} for i in range(15)]
    assert backend.peak == 4


def test_amap_failures_are_entries_and_bugs_propagate():
    def reply(i: int, call: int) -> Any:
        if i == 1:
            return PermanentBackendError("refused")
        if i == 2:
            return "nope"
        return json.dumps({"i": i})

    backend = Counting(reply=reply)
    results = asyncio.run(
        JsonMode(backend, max_attempts=2, transport=FAST).amap(prompts(4), SCHEMA)
    )
    assert isinstance(results[1], PermanentBackendError)
    assert isinstance(results[2], AttemptsExhaustedError)
    assert [results[0].data, results[3].data] == [{"i": 0}, {"i": 3}]
    assert results.summary.failed == 2

    def buggy(i: int, call: int) -> Any:
        return RuntimeError("bug") if i == 0 else json.dumps({"i": i})

    with pytest.raises(RuntimeError, match="bug"):
        asyncio.run(JsonMode(Counting(reply=buggy), transport=FAST).amap(prompts(4), SCHEMA))


def test_amap_shares_a_retry_after():
    failed_at: list[float] = []

    def reply(i: int, call: int) -> Any:
        if i == 0 and call == 1:
            failed_at.append(time.monotonic())
            return TransientBackendError("rate limited", retry_after=HOLD)
        return json.dumps({"i": i})

    backend = Counting(delay=lambda i: 0.02, reply=reply)
    results = asyncio.run(
        JsonMode(backend, transport=FAST).amap(prompts(30), SCHEMA, concurrency=3)
    )
    assert all(isinstance(entry, Result) for entry in results)
    (t0,) = failed_at
    _held(backend.starts, t0)


# -- context, callables, scale ----------------------------------------------------------------


class Scaled(BaseModel):
    i: int

    @field_validator("i")
    @classmethod
    def scale(cls, value: int, info: ValidationInfo) -> int:
        return value * (info.context or {}).get("factor", 1)


def test_map_and_amap_pass_the_validation_context():
    results = JsonMode(Counting()).map(prompts(3), Scaled, context={"factor": 10})
    assert [entry.value.i for entry in results] == [0, 10, 20]
    results = asyncio.run(JsonMode(Counting()).amap(prompts(3), Scaled, context={"factor": 3}))
    assert [entry.value.i for entry in results] == [0, 3, 6]


def test_map_over_a_scripted_backend():
    backend = ScriptedBackend(['{"i": 1}', "nope", '{"i": 1}'])
    results = JsonMode(backend, max_attempts=2).map(["a"], SCHEMA, concurrency=1)
    assert [a.outcome for a in results[0].attempts] == ["valid"]


def test_two_hundred_prompts_against_a_fast_function_backend():
    def fn(prompt: str) -> str:
        found = _INDEX.search(prompt)
        assert found is not None
        return json.dumps({"i": int(found.group(1))})

    started = time.perf_counter()
    results = JsonMode(fn).map(prompts(200), SCHEMA)
    assert time.perf_counter() - started < 20
    assert len(results) == 200
    assert all(isinstance(entry, Result) for entry in results)
    assert [entry.data["i"] for entry in results] == list(range(200))
    assert results.summary.conformed == 200


def test_amap_of_an_async_callable():
    async def fn(prompt: str) -> str:
        await asyncio.sleep(0)
        found = _INDEX.search(prompt)
        assert found is not None
        return json.dumps({"i": int(found.group(1))})

    results = asyncio.run(JsonMode(fn).amap(prompts(50), SCHEMA, concurrency=5))
    assert [entry.data["i"] for entry in results] == list(range(50))


def test_map_prepares_the_backend_once_before_any_call():
    class Prepared(Counting):
        def __init__(self) -> None:
            super().__init__()
            self.log: list[str] = []

        def prepare(self) -> None:
            with self.lock:
                self.log.append("prepare")

        def complete(self, request: Request) -> Completion:
            with self.lock:
                self.log.append("complete")
            return super().complete(request)

    backend = Prepared()
    JsonMode(backend).map(prompts(4), SCHEMA, concurrency=2)
    assert backend.log[0] == "prepare"
    assert backend.log.count("complete") == 4


# -- the constrained tier: real batches ------------------------------------------------------


SMALL = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "minLength": 1, "maxLength": 8},
        "n": {"type": "integer", "minimum": 0, "maximum": 99},
        "ok": {"type": "boolean"},
    },
    "required": ["name", "n", "ok"],
    "additionalProperties": False,
}


@pytest.fixture(scope="module")
def local():
    pytest.importorskip("torch")
    from jsonmode.demo import random_local_model

    return random_local_model(seed=1)


def test_constrained_map_generates_in_batches_of_at_most_concurrency(local):
    model, tokenizer = local
    jm = JsonMode(model, tokenizer=tokenizer, max_new_tokens=64)
    backend: Any = jm.backend
    sizes: list[int] = []
    real = backend.complete_batch

    def spy(requests: list[Request]) -> Any:
        sizes.append(len(requests))
        return real(requests)

    backend.complete_batch = spy
    asked = [f"Extract the record {'!' * i}" for i in range(5)]  # different lengths: padding
    results = jm.map(asked, SMALL, concurrency=3)
    assert sizes[:2] == [3, 2]
    assert all(size <= 3 for size in sizes)
    assert all(isinstance(entry, Result) for entry in results)
    assert all(entry.tier == "constrained" for entry in results)
    del backend.complete_batch  # back to the class's method
    for prompt, entry in zip(asked, results, strict=True):
        alone = jm.run(prompt, SMALL)  # greedy decoding: one prompt alone gives the same
        assert entry.data == alone.data
        assert entry.attempts[0].raw == alone.attempts[0].raw


def test_constrained_map_reasks_join_a_later_batch(local):
    model, tokenizer = local
    jm = JsonMode(model, tokenizer=tokenizer, max_new_tokens=3, max_attempts=2)
    backend: Any = jm.backend
    sizes: list[int] = []
    real = backend.complete_batch

    def spy(requests: list[Request]) -> Any:
        sizes.append(len(requests))
        return real(requests)

    backend.complete_batch = spy
    results = jm.map([f"r{i}" for i in range(4)], SMALL, concurrency=3)
    assert sizes == [3, 3, 2]  # 4 first requests, then 4 re-asks, 3 at a time
    for entry in results:
        assert isinstance(entry, AttemptsExhaustedError)
        assert [a.outcome for a in entry.attempts] == ["truncated", "truncated"]


def test_constrained_map_a_failed_row_is_that_prompts_entry(local):
    model, tokenizer = local
    jm = JsonMode(model, tokenizer=tokenizer, max_new_tokens=64)
    backend: Any = jm.backend
    real = backend.complete_batch

    def spy(requests: list[Request]) -> Any:
        replies = real(requests)
        replies[0] = PermanentBackendError("row 0 failed")
        return replies

    backend.complete_batch = spy
    results = jm.map(["a", "b"], SMALL, concurrency=2)
    assert isinstance(results[0], PermanentBackendError)
    assert isinstance(results[1], Result)


def test_constrained_map_retries_a_transient_row_failure_in_a_later_batch(local):
    """A row that fails transiently (its generation timed out) is sent again, up to the
    transport policy's max_retries, as run() would retry it; the attempt counts it."""
    model, tokenizer = local
    jm = JsonMode(
        model,
        tokenizer=tokenizer,
        max_new_tokens=64,
        transport=TransportPolicy(max_retries=1, initial_wait=0, max_wait=0),
    )
    backend: Any = jm.backend
    real = backend.complete_batch
    calls: list[int] = []

    def flaky(requests: list[Request]) -> Any:
        calls.append(len(requests))
        replies = real(requests)
        if len(calls) == 1:  # the first row of the first batch times out
            replies[0] = TransientBackendError("row timed out")
        if len(calls) >= 3:  # a second failure of the same row is beyond the policy
            replies[0] = TransientBackendError("row timed out again")
        return replies

    backend.complete_batch = flaky
    first = jm.map(["a", "b"], SMALL, concurrency=2)
    assert calls[:2] == [2, 1]
    assert all(isinstance(entry, Result) for entry in first)
    assert first[0].attempts[0].transport_retries == 1
    assert first[1].attempts[0].transport_retries == 0
    second = jm.map(["c"], SMALL, concurrency=2)  # calls 3 and 4: fails twice
    assert isinstance(second[0], TransientBackendError)
    assert second[0].attempts[0].transport_retries == 1


def test_on_result_sees_each_entry_once_as_it_finishes():
    seen: list[tuple[int, Any]] = []
    backend = ScriptedBackend(['{"i": 1}', "nope", '{"i": 3}'] + ["nope"] * 3)
    results = JsonMode(backend, max_attempts=1).map(
        ["a", "b", "c"], SCHEMA, concurrency=1, on_result=lambda i, e: seen.append((i, e))
    )
    assert sorted(index for index, _ in seen) == [0, 1, 2]
    assert all(results[index] is entry for index, entry in seen)

    aseen: list[int] = []
    backend = ScriptedBackend(['{"i": 1}'] * 4)
    asyncio.run(
        JsonMode(backend).amap(
            prompts(4), SCHEMA, concurrency=2, on_result=lambda i, e: aseen.append(i)
        )
    )
    assert sorted(aseen) == [0, 1, 2, 3]


def test_an_on_result_that_raises_stops_the_batch():
    class Stop(Exception):
        pass

    def on_result(index: int, entry: Any) -> None:
        raise Stop

    backend = Counting()
    with pytest.raises(Stop):
        JsonMode(backend).map(prompts(20), SCHEMA, concurrency=1, on_result=on_result)
    assert backend.total_calls < 20
    with pytest.raises(Stop):
        asyncio.run(JsonMode(Counting()).amap(prompts(3), SCHEMA, on_result=on_result))
    with pytest.raises(UsageError):
        JsonMode(Counting()).map(prompts(1), SCHEMA, on_result="print")


# -- issue 38: grammars, a backend that is down, stopping ---------------------------------------


def test_map_and_amap_take_a_grammar_like_run_text():
    from jsonmode import compile_choice, compile_regex

    def reply(i: int, call: int) -> Any:
        return "yes" if i % 2 == 0 or call > 1 else "perhaps"  # odd ones are re-asked

    for grammar in (
        compile_regex("yes|no"),
        compile_choice(["yes", "no"]),
        'root ::= "yes" | "no"',
    ):
        jm = JsonMode(Counting(reply=reply), max_attempts=2)
        results = jm.map(prompts(4), grammar, concurrency=2)
        single = jm.run_text("prompt #0", grammar)
        assert [entry.value for entry in results] == ["yes"] * 4
        assert [entry.data for entry in results] == ["yes"] * 4
        assert results[0].tier == single.tier == "prompted"
        assert [a.outcome for a in results[1].attempts] == ["schema_violation", "valid"]
        assert results.summary.retried == 2
    aresults = asyncio.run(jm.amap(prompts(3), compile_regex("yes|no")))
    assert [entry.value for entry in aresults] == ["yes"] * 3
    # JSON Schema text is still a schema; what cannot compile raises before any call
    assert JsonMode(Counting()).map(prompts(1), json.dumps(SCHEMA))[0].data == {"i": 0}
    backend = Counting()
    with pytest.raises(InvalidGrammarError):
        JsonMode(backend).map(prompts(2), "root ::= undefined_rule")
    with pytest.raises(UsageError, match="example 0 does not match"):
        JsonMode(backend).map(prompts(2), compile_regex("yes|no"), examples=[("q", "maybe")])
    with pytest.raises(UsageError, match="context"):
        JsonMode(backend).map(prompts(2), compile_regex("yes|no"), context={"a": 1})
    assert backend.total_calls == 0


def test_the_gate_gives_up_quoting_the_last_failure():
    gate = Gate(give_up_after=2, sleep=lambda _s: None)
    failures = iter(["HTTP 503: busy", "cannot connect to 127.0.0.1:1 (connection refused)"])

    def complete(request: Any) -> Completion:
        raise TransientBackendError(next(failures))

    gated = gate.wrap(complete)
    for _ in range(2):
        with pytest.raises(TransientBackendError):
            gated(None)
    with pytest.raises(TransientBackendError) as refused:
        gated(None)
    assert refused.value.message == (
        "the batch stopped sending: the backend failed 2 calls in a row with transient "
        "errors; the last: cannot connect to 127.0.0.1:1 (connection refused)"
    )


def test_prompts_not_started_when_the_backend_is_down_fail_without_backoff():
    """Each prompt after the gate gave up fails at once: no call, no transport wait
    (before, each waited out its policy's retries against the refusing gate)."""
    slept: list[float] = []
    policy = TransportPolicy(max_retries=2, initial_wait=0.001, max_wait=0.001, sleep=slept.append)
    backend = Counting(reply=lambda i, call: TransientBackendError("connection refused"))
    results = JsonMode(backend, transport=policy).map(prompts(40), SCHEMA, concurrency=1)
    assert backend.total_calls == Gate().give_up_after
    # 16 calls: prompts 0-4 three each, prompt 5 one, then its two retries are refused
    assert len(slept) == 2 * 6
    for entry in results[6:]:
        assert isinstance(entry, TransientBackendError)
        assert entry.message.endswith("the last: connection refused")
        assert [a.outcome for a in entry.attempts] == ["backend_error"]
        assert entry.attempts[0].transport_retries == 0
    down = Counting(reply=lambda i, c: TransientBackendError("down"))
    aresults = asyncio.run(JsonMode(down, transport=FAST).amap(prompts(40), SCHEMA, concurrency=1))
    assert down.total_calls == Gate().give_up_after
    assert aresults[-1].message.endswith("the last: down")
    assert [a.outcome for a in aresults[-1].attempts] == ["backend_error"]


def test_a_stopped_batch_raises_at_once_and_drops_what_was_in_flight():
    """A bug in one request stops the batch without waiting for the slow request in
    flight, whose late entry never reaches on_result."""
    release = threading.Event()
    seen: list[int] = []

    def reply(i: int, call: int) -> Any:
        if i == 0:
            release.wait(5)
        if i == 1:
            return RuntimeError("a bug")
        return json.dumps({"i": i})

    backend = Counting(reply=reply)
    started = time.monotonic()
    with pytest.raises(RuntimeError, match="a bug"):
        JsonMode(backend, transport=FAST).map(
            prompts(10), SCHEMA, concurrency=2, on_result=lambda i, e: seen.append(i)
        )
    assert time.monotonic() - started < 2.5  # not the 5 s prompt 0 still takes
    release.set()
    deadline = time.monotonic() + 5
    while backend.inflight and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.05)
    assert 0 not in seen
    assert backend.total_calls <= 3
