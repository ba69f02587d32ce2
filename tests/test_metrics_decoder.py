"""Decoder metrics: compile time, sampled mask time per step, mask-cache hits and misses."""

from __future__ import annotations

import copy
import math
import uuid
from collections.abc import Iterator

import pytest
import torch
from prometheus_client import CollectorRegistry

import jsonmode.metrics
from jsonmode import AttemptsExhaustedError, JsonMode, Schema, events
from jsonmode.demo import CONSTRAINED_SCHEMA, random_local_model


@pytest.fixture(scope="module")
def local():
    return random_local_model(seed=3)


@pytest.fixture
def registry() -> Iterator[CollectorRegistry]:
    fresh = jsonmode.metrics.enable(CollectorRegistry())
    yield fresh
    jsonmode.metrics.disable()


def fresh_schema() -> dict:
    """CONSTRAINED_SCHEMA under a title never compiled before: the compile cache misses."""
    schema = copy.deepcopy(CONSTRAINED_SCHEMA)
    schema["title"] = f"metrics-{uuid.uuid4().hex}"
    return schema


def value(registry: CollectorRegistry, name: str, **labels: str) -> float:
    found = registry.get_sample_value(name, labels)
    assert found is not None, f"no sample {name}{labels}"
    return found


def test_compile_mask_and_cache_metrics(local, registry, monkeypatch):
    monkeypatch.setattr(events, "mask_sample_every", 1)
    model, tokenizer = local
    schema = fresh_schema()
    # (fast_forward=False: one sampled step, one mask, per token)
    jm = JsonMode(
        model, tokenizer=tokenizer, max_new_tokens=256, do_sample=True, fast_forward=False
    )
    results = []
    for seed in range(2):
        torch.manual_seed(seed)
        results.append(jm.run("Extract the person.", schema))

    assert [r.tier for r in results] == ["constrained", "constrained"]
    assert value(registry, "jsonmode_compile_duration_seconds_count") == 1  # then cached
    assert value(registry, "jsonmode_compile_duration_seconds_sum") > 0
    # every decoding step timed (one step per generated token)
    generated = sum(r.attempts[-1].usage.completion_tokens for r in results)
    assert value(registry, "jsonmode_mask_duration_seconds_count") == generated
    assert value(registry, "jsonmode_mask_duration_seconds_sum") > 0
    # the engine's own counters, all reported
    engine = jm.backend.constrain(Schema.of(schema)).engine
    assert value(registry, "jsonmode_mask_cache_hits_total") == engine.hits
    assert value(registry, "jsonmode_mask_cache_misses_total") == engine.misses
    assert engine.misses > 0
    assert engine.hits > 0, "the second request revisits the first one's states"
    assert (
        value(registry, "jsonmode_tokens_total", tier="constrained", kind="completion") == generated
    )
    assert value(registry, "jsonmode_tokens_total", tier="constrained", kind="prompt") > 0
    outcomes = ("first_try", "repaired", "retried", "failed")
    counted = {
        o: value(registry, "jsonmode_requests_total", tier="constrained", mode="strict", outcome=o)
        for o in outcomes
    }
    assert counted == {"first_try": 2, "repaired": 0, "retried": 0, "failed": 0}


def test_mask_time_is_sampled(local, registry, monkeypatch):
    monkeypatch.setattr(events, "mask_sample_every", 4)
    model, tokenizer = local
    # (fast_forward=False: one sampled step, one mask, per token)
    jm = JsonMode(
        model, tokenizer=tokenizer, max_new_tokens=256, do_sample=True, fast_forward=False
    )
    torch.manual_seed(5)
    steps = jm.run("Extract the person.", fresh_schema()).attempts[-1].usage.completion_tokens
    sampled = value(registry, "jsonmode_mask_duration_seconds_count")
    # one step in four of a run of consecutive steps, wherever the global count stood
    assert sampled in (math.floor(steps / 4), math.ceil(steps / 4))
    assert sampled >= 1


def test_cache_totals_are_exact_after_each_request_however_sparse_the_sampling(
    local, registry, monkeypatch
):
    monkeypatch.setattr(events, "mask_sample_every", 10_000)
    model, tokenizer = local
    schema = fresh_schema()
    # (fast_forward=False: one sampled step, one mask, per token)
    jm = JsonMode(
        model, tokenizer=tokenizer, max_new_tokens=256, do_sample=True, fast_forward=False
    )
    for seed in range(2):
        torch.manual_seed(seed)
        jm.run("Extract the person.", schema)
        engine = jm.backend.constrain(Schema.of(schema)).engine
        assert value(registry, "jsonmode_mask_cache_hits_total") == engine.hits
        assert value(registry, "jsonmode_mask_cache_misses_total") == engine.misses
    assert engine.hits + engine.misses > 0
    assert value(registry, "jsonmode_mask_duration_seconds_count") <= 1


def test_a_schema_the_decoder_cannot_compile_counts_as_a_fallback(local, registry):
    model, tokenizer = local
    jm = JsonMode(
        model,
        tokenizer=tokenizer,
        max_new_tokens=8,
        max_attempts=1,
        compile_options={"max_rule_states": 3},
    )
    with pytest.raises(AttemptsExhaustedError):
        jm.run("Extract the person.", fresh_schema())
    assert value(registry, "jsonmode_tier_fallbacks_total") == 1
    assert value(registry, "jsonmode_compile_duration_seconds_count") == 0
    failed = value(
        registry, "jsonmode_requests_total", tier="prompted", mode="strict", outcome="failed"
    )
    assert failed == 1
