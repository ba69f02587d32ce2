"""The metric families and the event listener that feeds them.

Every label value comes from a fixed tuple below, except ``schema``: a name the
developer gives (``schema_name=``), at most ``max_schema_names`` distinct values per
process, later ones counted as ``other``. Every label combination of the fixed sets
is created at zero when metrics are enabled, so ``rate()`` is defined from the first
scrape and a series never appears out of nowhere.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from itertools import product
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram

from jsonmode import events
from jsonmode.repair.parse import MODES
from jsonmode.repair.report import REPAIR_KINDS
from jsonmode.result import OUTCOMES, TIERS, Attempt

__all__ = ["FAILURE_REASONS", "KEYWORDS", "THINKING_SOURCES", "TOKEN_KINDS", "Collectors"]

#: Why a request failed: how its last attempt ended.
FAILURE_REASONS = tuple(outcome for outcome in OUTCOMES if outcome != "valid")
TOKEN_KINDS = ("prompt", "completion")
#: Where a count of thinking tokens comes from: the API's usage
#: (``completion_tokens_details.reasoning_tokens``), or estimated from the thinking's
#: text at :data:`CHARS_PER_TOKEN` characters a token.
THINKING_SOURCES = ("reported", "estimated")
CHARS_PER_TOKEN = 4
#: Validation keywords counted by name (JSON Schema drafts 3 to 2020-12, plus
#: ``parse``/``model`` for failures outside JSON Schema); anything else is ``other``.
KEYWORDS = (
    "type",
    "enum",
    "const",
    "required",
    "properties",
    "additionalProperties",
    "patternProperties",
    "propertyNames",
    "unevaluatedProperties",
    "minProperties",
    "maxProperties",
    "dependentRequired",
    "dependentSchemas",
    "dependencies",
    "items",
    "prefixItems",
    "additionalItems",
    "unevaluatedItems",
    "contains",
    "minContains",
    "maxContains",
    "minItems",
    "maxItems",
    "uniqueItems",
    "minLength",
    "maxLength",
    "pattern",
    "format",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "multipleOf",
    "anyOf",
    "oneOf",
    "allOf",
    "not",
    "if",
    "$ref",
    "$dynamicRef",
    "parse",
    "model",
    "other",
)
UNNAMED = "unnamed"
OTHER = "other"

_LATENCY_BUCKETS = (
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    120.0,
)
_ATTEMPT_BUCKETS = (1, 2, 3, 4, 5, 6, 8, 10)
_COMPILE_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
_MASK_BUCKETS = (
    0.00001,
    0.000025,
    0.00005,
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
)


def _children(metric: Any, *label_sets: Iterable[str]) -> dict[tuple[str, ...], Any]:
    """Create every combination of ``label_sets`` now; return them by label tuple."""
    return {labels: metric.labels(*labels) for labels in product(*label_sets)}


class Collectors:
    """jsonmode's metric families on one registry, and the listener that feeds them.

    Construction registers every family on ``registry`` (a second ``Collectors`` on
    the same registry raises ``ValueError``: duplicate time series). Calling the
    instance with an event updates the metrics; thread-safe (prometheus-client's
    metric objects lock their own values).

    Cost: a request with one attempt costs a few microseconds (see ``bench/metrics.py``);
    label children are resolved once, not per event.
    """

    def __init__(self, registry: CollectorRegistry, *, max_schema_names: int = 20) -> None:
        if max_schema_names < 0:
            raise ValueError("max_schema_names must be >= 0")
        self.registry = registry
        self.max_schema_names = max_schema_names
        self._names: set[str] = set()
        self._names_lock = threading.Lock()
        r = registry

        requests = Counter(
            "jsonmode_requests",
            "Requests by how they ended: first_try (valid as generated), repaired (valid "
            "after repair on the first attempt), retried (valid on a later attempt), failed.",
            ["tier", "mode", "outcome"],
            registry=r,
        )
        attempts = Counter(
            "jsonmode_attempts",
            "Attempts (backend calls with validation) by result.",
            ["tier", "result"],
            registry=r,
        )
        failures = Counter(
            "jsonmode_failures",
            "Failed requests by reason: how the last attempt ended.",
            ["tier", "reason"],
            registry=r,
        )
        repairs = Counter(
            "jsonmode_repairs", "Repairs applied to model outputs, by kind.", ["kind"], registry=r
        )
        validation = Counter(
            "jsonmode_validation_errors",
            "Schema violations found in model outputs, by JSON Schema keyword.",
            ["keyword"],
            registry=r,
        )
        tokens = Counter(
            "jsonmode_tokens",
            "Tokens in (prompt) and out (completion), where the backend reports them.",
            ["tier", "kind"],
            registry=r,
        )
        thinking = Counter(
            "jsonmode_thinking_tokens",
            "Tokens a reasoning model spent thinking (part of the completion tokens): "
            "as the API reported them, or estimated from the thinking's text.",
            ["tier", "source"],
            registry=r,
        )
        retries = Counter(
            "jsonmode_transport_retries",
            "Transient backend failures retried by the transport policy.",
            ["tier"],
            registry=r,
        )
        self._fallbacks = Counter(
            "jsonmode_tier_fallbacks",
            "Requests that asked for the constrained tier but ran prompted because the "
            "decoder could not compile their schema.",
            registry=r,
        )
        self._by_schema = Counter(
            "jsonmode_schema_requests",
            "Requests by schema name (as given with schema_name=; bounded) and outcome.",
            ["schema", "outcome"],
            registry=r,
        )
        duration = Histogram(
            "jsonmode_request_duration_seconds",
            "Wall time of a request, every attempt and transport retry included.",
            ["tier"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        per_request = Histogram(
            "jsonmode_attempts_per_request",
            "Attempts a request needed (failed requests included).",
            ["tier"],
            buckets=_ATTEMPT_BUCKETS,
            registry=r,
        )
        first_partial = Histogram(
            "jsonmode_stream_first_partial_seconds",
            "Time from the start of a streamed request to its first partial value "
            "(streams that showed none are not counted).",
            ["tier"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        stream_duration = Histogram(
            "jsonmode_stream_duration_seconds",
            "Wall time of a streamed request (JsonMode.stream), by whether it returned a value.",
            ["tier", "ok"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self._compile = Histogram(
            "jsonmode_compile_duration_seconds",
            "Time to compile a schema for constrained decoding (compile-cache hits excluded).",
            buckets=_COMPILE_BUCKETS,
            registry=r,
        )
        self._mask = Histogram(
            "jsonmode_mask_duration_seconds",
            "Decoder time per decoding step (advance, mask lookup or computation, apply), "
            "sampled: one step in jsonmode.events.mask_sample_every.",
            buckets=_MASK_BUCKETS,
            registry=r,
        )
        self._cache_hits = Counter(
            "jsonmode_mask_cache_hits", "Token-mask cache lookups that found the mask.", registry=r
        )
        self._cache_misses = Counter(
            "jsonmode_mask_cache_misses",
            "Token-mask cache lookups that had to compute the mask.",
            registry=r,
        )

        self._requests = _children(requests, TIERS, MODES, events.REQUEST_OUTCOMES)
        self._attempts = _children(attempts, TIERS, OUTCOMES)
        self._failures = _children(failures, TIERS, FAILURE_REASONS)
        self._repairs = _children(repairs, REPAIR_KINDS)
        self._keywords = _children(validation, KEYWORDS)
        self._tokens = _children(tokens, TIERS, TOKEN_KINDS)
        self._thinking = _children(thinking, TIERS, THINKING_SOURCES)
        self._retries = _children(retries, TIERS)
        self._duration = _children(duration, TIERS)
        self._per_request = _children(per_request, TIERS)
        self._first_partial = _children(first_partial, TIERS)
        self._stream_duration = _children(stream_duration, TIERS, ("true", "false"))
        self._schemas: dict[tuple[str, str], Any] = {}
        self._schema_children(UNNAMED)
        self._handlers: dict[type, Callable[[Any], None]] = {
            events.RequestFinished: self._request,
            events.StreamFinished: self._streamed,
            events.AttemptFinished: self._attempt,
            events.CompileFinished: self._compiled,
            events.MaskTimed: self._masked,
            events.MaskCacheUsed: self._cache,
        }

    def __call__(self, event: events.Event) -> None:
        handler = self._handlers.get(type(event))
        if handler is not None:
            handler(event)

    # -- label bounding ------------------------------------------------------------------

    def _schema_children(self, label: str) -> None:
        for outcome in events.REQUEST_OUTCOMES:
            self._schemas[label, outcome] = self._by_schema.labels(label, outcome)

    def schema_label(self, name: str | None) -> str:
        """The ``schema`` label for ``name``: itself while fewer than
        ``max_schema_names`` names are known, else ``other``."""
        if name is None or name == UNNAMED:
            return UNNAMED
        if name in self._names:
            return name
        with self._names_lock:
            if name in self._names:
                return name
            if name == OTHER or len(self._names) >= self.max_schema_names:
                if (OTHER, "failed") not in self._schemas:
                    self._schema_children(OTHER)
                return OTHER
            self._schema_children(name)
            self._names.add(name)
            return name

    # -- handlers --------------------------------------------------------------------------

    def _request(self, event: events.RequestFinished) -> None:
        tier = event.tier
        self._requests[tier, event.mode, event.outcome].inc()
        self._schemas[self.schema_label(event.schema_name), event.outcome].inc()
        self._duration[tier,].observe(event.duration_s)
        self._per_request[tier,].observe(len(event.attempts))
        if event.outcome == "failed" and event.attempts:
            self._failures[tier, event.attempts[-1].outcome].inc()
        if event.fallback:
            self._fallbacks.inc()

    def _attempt(self, event: events.AttemptFinished) -> None:
        tier = event.tier
        attempt: Attempt = event.attempt
        self._attempts[tier, attempt.outcome].inc()
        for repair in attempt.repairs:
            self._repairs[repair.kind,].inc()
        for issue in attempt.issues:
            child = self._keywords.get((issue.keyword,))
            (child if child is not None else self._keywords["other",]).inc()
        usage = attempt.usage
        if usage is not None:
            if usage.prompt_tokens:
                self._tokens[tier, "prompt"].inc(usage.prompt_tokens)
            if usage.completion_tokens:
                self._tokens[tier, "completion"].inc(usage.completion_tokens)
        if usage is not None and usage.reasoning_tokens is not None:
            if usage.reasoning_tokens:
                self._thinking[tier, "reported"].inc(usage.reasoning_tokens)
        elif attempt.reasoning:
            estimate = -(-len(attempt.reasoning) // CHARS_PER_TOKEN)
            self._thinking[tier, "estimated"].inc(estimate)
        if attempt.transport_retries:
            self._retries[tier,].inc(attempt.transport_retries)

    def _streamed(self, event: events.StreamFinished) -> None:
        if event.first_partial_s is not None:
            self._first_partial[event.tier,].observe(event.first_partial_s)
        ok = "true" if event.ok else "false"
        self._stream_duration[event.tier, ok].observe(event.duration_s)

    def _compiled(self, event: events.CompileFinished) -> None:
        self._compile.observe(event.seconds)

    def _masked(self, event: events.MaskTimed) -> None:
        self._mask.observe(event.seconds)

    def _cache(self, event: events.MaskCacheUsed) -> None:
        if event.hits:
            self._cache_hits.inc(event.hits)
        if event.misses:
            self._cache_misses.inc(event.misses)
