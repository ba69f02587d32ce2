"""Metrics read back from a fresh registry after scripted requests."""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys
from collections.abc import Iterator
from itertools import product

import pytest
from prometheus_client import CollectorRegistry
from pydantic import BaseModel

import jsonmode.metrics
from jsonmode import (
    AttemptsExhaustedError,
    Completion,
    JsonMode,
    PermanentBackendError,
    TransientBackendError,
    TransportPolicy,
    Usage,
    UsageError,
    events,
)
from jsonmode.backends import ScriptedBackend
from jsonmode.metrics._collectors import FAILURE_REASONS, KEYWORDS
from jsonmode.repair.report import REPAIR_KINDS
from jsonmode.result import OUTCOMES, TIERS

GOOD = '{"name": "Ada", "age": 36}'
FENCED_STRING_AGE = 'Here:\n```json\n{"name": "Ada", "age": "36"}\n```'
MISSING_AGE = '{"name": "Ada"}'
NEGATIVE_AGE = '{"name": "Ada", "age": -1}'


class Person(BaseModel):
    name: str
    age: int


PERSON = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer", "minimum": 0}},
    "required": ["name", "age"],
}


def no_wait(**overrides: object) -> TransportPolicy:
    async def no_sleep(seconds: float) -> None:
        return None

    return TransportPolicy(sleep=lambda s: None, async_sleep=no_sleep, **overrides)


@pytest.fixture
def registry() -> Iterator[CollectorRegistry]:
    fresh = CollectorRegistry()
    assert jsonmode.metrics.enable(fresh) is fresh
    yield fresh
    jsonmode.metrics.disable()


def value(registry: CollectorRegistry, name: str, **labels: str) -> float:
    found = registry.get_sample_value(name, labels)
    assert found is not None, f"no sample {name}{labels}"
    return found


def requests(registry: CollectorRegistry, tier: str = "prompted", mode: str = "strict") -> dict:
    return {
        outcome: value(registry, "jsonmode_requests_total", tier=tier, mode=mode, outcome=outcome)
        for outcome in events.REQUEST_OUTCOMES
    }


# -- import and registration ------------------------------------------------------------


def test_nothing_is_registered_or_imported_before_enable():
    code = (
        "import sys, jsonmode;"
        "assert 'prometheus_client' not in sys.modules, 'import jsonmode imported prometheus';"
        "assert 'jsonmode.metrics' not in sys.modules;"
        "import jsonmode.metrics;"
        "from prometheus_client import REGISTRY;"
        "names = [n for n in REGISTRY._names_to_collectors if n.startswith('jsonmode')];"
        "assert names == [], names;"
        "jsonmode.metrics.enable();"
        "names = [n for n in REGISTRY._names_to_collectors if n.startswith('jsonmode')];"
        "print(len(names) > 10, jsonmode.metrics.active_registry() is REGISTRY)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["True", "True"]


def test_every_fixed_label_value_exists_at_zero_from_the_start(registry):
    for tier, mode, outcome in product(TIERS, ("strict", "repair"), events.REQUEST_OUTCOMES):
        assert (
            value(registry, "jsonmode_requests_total", tier=tier, mode=mode, outcome=outcome) == 0
        )
    for tier, result in product(TIERS, OUTCOMES):
        assert value(registry, "jsonmode_attempts_total", tier=tier, result=result) == 0
    for tier, reason in product(TIERS, FAILURE_REASONS):
        assert value(registry, "jsonmode_failures_total", tier=tier, reason=reason) == 0
    for kind in REPAIR_KINDS:
        assert value(registry, "jsonmode_repairs_total", kind=kind) == 0
    for keyword in KEYWORDS:
        assert value(registry, "jsonmode_validation_errors_total", keyword=keyword) == 0
    for tier in TIERS:
        assert value(registry, "jsonmode_request_duration_seconds_count", tier=tier) == 0
        assert value(registry, "jsonmode_attempts_per_request_count", tier=tier) == 0
        for kind in ("prompt", "completion"):
            assert value(registry, "jsonmode_tokens_total", tier=tier, kind=kind) == 0
    for outcome in events.REQUEST_OUTCOMES:
        assert (
            value(registry, "jsonmode_schema_requests_total", schema="unnamed", outcome=outcome)
            == 0
        )
    assert value(registry, "jsonmode_compile_duration_seconds_count") == 0
    assert value(registry, "jsonmode_mask_duration_seconds_count") == 0
    assert value(registry, "jsonmode_mask_cache_hits_total") == 0
    assert value(registry, "jsonmode_mask_cache_misses_total") == 0


def test_enable_is_idempotent_and_moves_between_registries(registry):
    assert jsonmode.metrics.enable(registry) is registry
    JsonMode(ScriptedBackend([GOOD])).run("x", Person)
    other = jsonmode.metrics.enable(CollectorRegistry())
    JsonMode(ScriptedBackend([GOOD, GOOD])).run("x", Person)
    assert requests(registry)["first_try"] == 1
    assert requests(other)["first_try"] == 1
    jsonmode.metrics.disable()
    assert jsonmode.metrics.active_registry() is None
    JsonMode(ScriptedBackend([GOOD])).run("x", Person)
    assert requests(other)["first_try"] == 1
    # re-enabling reuses the families already registered there
    assert jsonmode.metrics.enable(registry) is registry
    JsonMode(ScriptedBackend([GOOD])).run("x", Person)
    assert requests(registry)["first_try"] == 2


# -- requests and attempts ------------------------------------------------------------------


def test_request_outcomes_in_strict_mode(registry):
    JsonMode(ScriptedBackend([GOOD])).run("x", Person)
    JsonMode(ScriptedBackend([MISSING_AGE, GOOD])).run("x", Person)
    JsonMode(ScriptedBackend(["prose", NEGATIVE_AGE, GOOD])).run("x", PERSON)
    with pytest.raises(AttemptsExhaustedError):
        JsonMode(ScriptedBackend(["prose", MISSING_AGE]), max_attempts=2).run("x", Person)

    assert requests(registry) == {"first_try": 1, "repaired": 0, "retried": 2, "failed": 1}
    attempts = {
        result: value(registry, "jsonmode_attempts_total", tier="prompted", result=result)
        for result in OUTCOMES
    }
    assert attempts == {
        "valid": 3,
        "invalid_json": 2,
        "schema_violation": 3,
        "truncated": 0,
        "thinking_truncated": 0,
        "backend_error": 0,
    }
    # a failed request counts under the reason its last attempt gave
    assert (
        value(registry, "jsonmode_failures_total", tier="prompted", reason="schema_violation") == 1
    )
    assert value(registry, "jsonmode_failures_total", tier="prompted", reason="invalid_json") == 0
    assert value(registry, "jsonmode_validation_errors_total", keyword="required") == 2
    assert value(registry, "jsonmode_validation_errors_total", keyword="minimum") == 1
    assert value(registry, "jsonmode_repairs_total", kind="extract") == 0
    # histograms: one observation per request; attempts per request sum to all attempts
    assert value(registry, "jsonmode_attempts_per_request_count", tier="prompted") == 4
    assert value(registry, "jsonmode_attempts_per_request_sum", tier="prompted") == 8
    assert value(registry, "jsonmode_attempts_per_request_bucket", tier="prompted", le="1.0") == 1
    assert value(registry, "jsonmode_attempts_per_request_bucket", tier="prompted", le="2.0") == 3
    assert value(registry, "jsonmode_request_duration_seconds_count", tier="prompted") == 4
    assert value(registry, "jsonmode_request_duration_seconds_sum", tier="prompted") > 0
    # nothing leaked into the other mode or tiers
    assert sum(requests(registry, mode="repair").values()) == 0
    assert sum(requests(registry, tier="native").values()) == 0


def test_repair_on_the_first_attempt_is_repaired_and_every_repair_is_counted(registry):
    result = JsonMode(ScriptedBackend([FENCED_STRING_AGE]), "repair").run("x", Person)
    assert [r.kind for r in result.repairs] == ["extract", "string_to_integer"]
    # repaired, then retried: a request that needed another attempt is "retried"
    JsonMode(ScriptedBackend(["no json here", FENCED_STRING_AGE]), "repair").run("x", Person)
    assert requests(registry, mode="repair") == {
        "first_try": 0,
        "repaired": 1,
        "retried": 1,
        "failed": 0,
    }
    assert value(registry, "jsonmode_repairs_total", kind="extract") == 2
    assert value(registry, "jsonmode_repairs_total", kind="string_to_integer") == 2
    assert value(registry, "jsonmode_attempts_total", tier="prompted", result="valid") == 2
    assert value(registry, "jsonmode_attempts_total", tier="prompted", result="invalid_json") == 1


def test_truncation_backend_errors_and_transport_retries(registry):
    cut = Completion('{"name": "Ad', truncated=True)
    JsonMode(ScriptedBackend([cut, GOOD])).run("x", Person)
    flaky = ScriptedBackend([TransientBackendError("429"), TransientBackendError("503"), GOOD])
    JsonMode(flaky, transport=no_wait()).run("x", Person)
    with pytest.raises(PermanentBackendError):
        JsonMode(ScriptedBackend([PermanentBackendError("401")]), transport=no_wait()).run(
            "x", Person
        )
    with pytest.raises(TransientBackendError):
        JsonMode(
            ScriptedBackend([TransientBackendError("503")] * 5), transport=no_wait(max_retries=2)
        ).run("x", Person)

    assert requests(registry) == {"first_try": 1, "repaired": 0, "retried": 1, "failed": 2}
    assert value(registry, "jsonmode_attempts_total", tier="prompted", result="truncated") == 1
    assert value(registry, "jsonmode_attempts_total", tier="prompted", result="backend_error") == 2
    assert value(registry, "jsonmode_failures_total", tier="prompted", reason="backend_error") == 2
    assert value(registry, "jsonmode_transport_retries_total", tier="prompted") == 2 + 2


def test_tokens_are_counted_where_the_backend_reports_them(registry):
    backend = ScriptedBackend([Completion("bad", Usage(10, 2)), Completion(GOOD, Usage(20, 5))])
    JsonMode(backend, "strict").run("x", Person)
    JsonMode(ScriptedBackend([GOOD])).run("x", Person)  # no usage reported: nothing added
    assert value(registry, "jsonmode_tokens_total", tier="prompted", kind="prompt") == 30
    assert value(registry, "jsonmode_tokens_total", tier="prompted", kind="completion") == 7


def test_native_tier_is_labelled_native(registry):
    JsonMode(ScriptedBackend([GOOD], native_schema=True)).run("x", Person)
    assert requests(registry, tier="native")["first_try"] == 1
    assert value(registry, "jsonmode_request_duration_seconds_count", tier="native") == 1


def test_async_requests_are_counted_like_sync_ones(registry):
    async def main() -> None:
        await JsonMode(ScriptedBackend([GOOD])).arun("x", Person)
        await JsonMode(ScriptedBackend([MISSING_AGE, GOOD])).agenerate("x", Person)
        with pytest.raises(AttemptsExhaustedError):
            await JsonMode(ScriptedBackend(["no"]), max_attempts=1).arun("x", Person)

    asyncio.run(main())
    assert requests(registry) == {"first_try": 1, "repaired": 0, "retried": 1, "failed": 1}


def test_streams_record_time_to_first_partial_and_duration(registry):
    pieces = tuple(GOOD[i : i + 4] for i in range(0, len(GOOD), 4))
    list(JsonMode(ScriptedBackend([pieces])).stream("x", Person))
    list(JsonMode(ScriptedBackend([GOOD])).stream("x", Person))  # one piece: no partial
    with pytest.raises(AttemptsExhaustedError):
        list(JsonMode(ScriptedBackend([("n", "o")]), max_attempts=1).stream("x", Person))
    first = "jsonmode_stream_first_partial_seconds_count"
    duration = "jsonmode_stream_duration_seconds_count"
    assert value(registry, first, tier="prompted") == 1
    assert value(registry, duration, tier="prompted", ok="true") == 2
    assert value(registry, duration, tier="prompted", ok="false") == 1
    assert requests(registry)["failed"] == 1  # and counted as requests like any other


# -- schema names ---------------------------------------------------------------------------


def test_schema_names_label_their_own_series(registry):
    jm = JsonMode(ScriptedBackend([GOOD, GOOD, MISSING_AGE, GOOD]), schema_name="person")
    jm.run("x", Person)
    jm.run("x", Person, schema_name="contact")  # a call may name its own
    jm.generate("x", Person)
    JsonMode(ScriptedBackend([GOOD])).run("x", Person)

    def by_schema(schema: str, outcome: str) -> float:
        return value(registry, "jsonmode_schema_requests_total", schema=schema, outcome=outcome)

    assert by_schema("person", "first_try") == 1
    assert by_schema("person", "retried") == 1
    assert by_schema("contact", "first_try") == 1
    assert by_schema("contact", "failed") == 0  # created with its first request
    assert by_schema("unnamed", "first_try") == 1


def test_schema_names_are_bounded():
    fresh = CollectorRegistry()
    jsonmode.metrics.disable()
    # max_schema_names applies when the families are created on a registry
    try:
        jsonmode.metrics.enable(fresh, max_schema_names=2)
        backend = ScriptedBackend([GOOD] * 5)
        jm = JsonMode(backend)
        for name in ("a", "b", "c", "d", "a"):
            jm.run("x", Person, schema_name=name)
    finally:
        jsonmode.metrics.disable()
    assert value(fresh, "jsonmode_schema_requests_total", schema="a", outcome="first_try") == 2
    assert value(fresh, "jsonmode_schema_requests_total", schema="b", outcome="first_try") == 1
    assert value(fresh, "jsonmode_schema_requests_total", schema="other", outcome="first_try") == 2
    assert (
        fresh.get_sample_value(
            "jsonmode_schema_requests_total", {"schema": "c", "outcome": "first_try"}
        )
        is None
    )


@pytest.mark.parametrize("name", ["", "has space", "x" * 65, "9lives", "ünïcode", "a/b"])
def test_schema_names_must_be_identifiers(name):
    with pytest.raises(UsageError, match="schema_name"):
        JsonMode(ScriptedBackend([GOOD]), schema_name=name)
    with pytest.raises(UsageError, match="schema_name"):
        JsonMode(ScriptedBackend([GOOD])).run("x", Person, schema_name=name)


@pytest.mark.parametrize("name", ["invoice", "support.ticket", "v2:order-line", "_x"])
def test_valid_schema_names(name):
    assert events.check_schema_name(name) == name


# -- events ---------------------------------------------------------------------------------


def test_a_failing_listener_never_breaks_a_request(registry, caplog):
    def broken(event: events.Event) -> None:
        raise RuntimeError("listener bug")

    unsubscribe = events.subscribe(broken)
    try:
        with caplog.at_level(logging.ERROR, logger="jsonmode.events"):
            result = JsonMode(ScriptedBackend([GOOD])).run("x", Person)
    finally:
        unsubscribe()
    assert result.value == Person(name="Ada", age=36)
    assert "listener bug" in caplog.text
    assert requests(registry)["first_try"] == 1  # the other listener still ran
    assert broken not in events.listeners


def test_events_carry_the_attempts_in_order():
    seen: list[events.Event] = []
    unsubscribe = events.subscribe(seen.append)
    try:
        JsonMode(ScriptedBackend(["nope", GOOD]), schema_name="person").run("x", Person)
    finally:
        unsubscribe()
    kinds = [type(e).__name__ for e in seen]
    assert kinds == ["AttemptFinished", "AttemptFinished", "RequestFinished"]
    finished = seen[-1]
    assert isinstance(finished, events.RequestFinished)
    assert finished.outcome == "retried"
    assert finished.schema_name == "person"
    assert [a.outcome for a in finished.attempts] == ["invalid_json", "valid"]
    assert finished.duration_s > 0
    assert not finished.fallback


def test_no_events_are_built_when_nobody_listens(monkeypatch):
    assert events.listeners == ()

    def forbidden(event: events.Event) -> None:
        raise AssertionError(f"built {event!r} with no listener")

    monkeypatch.setattr(events, "emit", forbidden)
    JsonMode(ScriptedBackend(["nope", GOOD])).run("x", Person)
