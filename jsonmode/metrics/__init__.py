"""Prometheus metrics for every ``JsonMode``, fed by :mod:`jsonmode.events`.

    import jsonmode.metrics

    registry = jsonmode.metrics.enable()      # None: prometheus-client's default registry
    exporter = jsonmode.metrics.serve(9464)   # http://127.0.0.1:9464/metrics

Importing this module registers nothing; :func:`enable` registers the families on
the registry you choose and subscribes them to the events. ``import jsonmode``
never imports this module (nor prometheus-client).

Metric families (every label value from a fixed set, except ``schema``):

    jsonmode_requests_total{tier,mode,outcome}       first_try | repaired | retried | failed
    jsonmode_attempts_total{tier,result}             valid | invalid_json | schema_violation
                                                     | truncated | thinking_truncated
                                                     | backend_error
    jsonmode_failures_total{tier,reason}             failed requests by their last attempt
    jsonmode_repairs_total{kind}                     jsonmode.repair.report.REPAIR_KINDS
    jsonmode_validation_errors_total{keyword}        JSON Schema keyword (or other)
    jsonmode_tokens_total{tier,kind}                 prompt | completion, where reported
    jsonmode_thinking_tokens_total{tier,source}      reported (the API's reasoning_tokens)
                                                     | estimated (thinking text, 4 chars a token)
    jsonmode_transport_retries_total{tier}
    jsonmode_tier_fallbacks_total                    constrained asked, prompted ran
    jsonmode_schema_requests_total{schema,outcome}   schema: the schema_name= you give
    jsonmode_request_duration_seconds{tier}          histogram
    jsonmode_attempts_per_request{tier}              histogram
    jsonmode_stream_first_partial_seconds{tier}      histogram, JsonMode.stream only
    jsonmode_stream_duration_seconds{tier,ok}        histogram, JsonMode.stream only
    jsonmode_compile_duration_seconds                histogram (cache hits excluded)
    jsonmode_mask_duration_seconds                   histogram, one decoding step in 8
    jsonmode_mask_cache_hits_total, jsonmode_mask_cache_misses_total

Multiprocess (gunicorn, several workers): set ``PROMETHEUS_MULTIPROC_DIR`` to an empty
directory *before* prometheus-client is imported, call :func:`enable` in every worker,
and expose the aggregate with ``serve(port)`` in one process or ``jsonmode metrics
serve --port P`` beside them. Schema names are bounded per process.

Grafana dashboard, Prometheus recording and alert rules: :data:`ASSETS` (``jsonmode
metrics assets`` prints the path).
"""

from __future__ import annotations

import os
import pathlib
import threading
import weakref
from typing import Any

from prometheus_client import REGISTRY, CollectorRegistry, start_http_server

from jsonmode import events
from jsonmode.errors import UsageError
from jsonmode.metrics._collectors import Collectors

__all__ = [
    "ASSETS",
    "Exporter",
    "active_registry",
    "disable",
    "enable",
    "exposition_registry",
    "serve",
]

#: The packaged dashboards and rules: ``grafana-dashboard.json``, ``prometheus-rules.yml``,
#: ``prometheus.yml`` (an example scrape configuration) and the live page's files.
ASSETS = pathlib.Path(__file__).resolve().parent / "assets"

_lock = threading.Lock()
_active: Collectors | None = None
# Families stay registered after disable(): re-enabling on the same registry reuses them.
_by_registry: weakref.WeakKeyDictionary[CollectorRegistry, Collectors] = weakref.WeakKeyDictionary()


def _multiprocess_dir() -> str | None:
    return os.environ.get("PROMETHEUS_MULTIPROC_DIR") or None


def _check_multiprocess() -> None:
    directory = _multiprocess_dir()
    if directory is None:
        return
    from prometheus_client import values

    if values.ValueClass is values.MutexValue:
        raise UsageError(
            "PROMETHEUS_MULTIPROC_DIR was set after prometheus_client was imported",
            hint="set it in the environment before the process starts",
        )
    if not os.path.isdir(directory):
        raise UsageError(f"PROMETHEUS_MULTIPROC_DIR={directory} is not a directory")


def enable(
    registry: CollectorRegistry | None = None, *, max_schema_names: int = 20
) -> CollectorRegistry:
    """Turn metrics on for every ``JsonMode`` in this process; returns the registry.

    Args:
        registry: where the families are registered (None: prometheus-client's
            default ``REGISTRY``). Enabling on another registry moves the
            subscription there; enabling again on the same one is a no-op.
        max_schema_names: distinct ``schema_name`` values kept as labels; later
            names are counted under ``other``.

    Every label combination of the fixed sets is created at zero now. Raises
    :class:`~jsonmode.errors.UsageError` when multiprocess mode is misconfigured.
    Thread-safe.
    """
    global _active
    target = REGISTRY if registry is None else registry
    with _lock:
        if _active is not None and _active.registry is target:
            return target
        _check_multiprocess()
        collectors = _by_registry.get(target)
        if collectors is None:
            collectors = Collectors(target, max_schema_names=max_schema_names)
            _by_registry[target] = collectors
        if _active is not None:
            events.unsubscribe(_active)
        events.subscribe(collectors)
        _active = collectors
    return target


def disable() -> None:
    """Stop counting (the families stay registered with their values)."""
    global _active
    with _lock:
        if _active is not None:
            events.unsubscribe(_active)
        _active = None


def active_registry() -> CollectorRegistry | None:
    """The registry metrics are being counted on, or None when disabled."""
    active = _active
    return None if active is None else active.registry


def exposition_registry(registry: CollectorRegistry | None = None) -> CollectorRegistry:
    """The registry an exporter should serve.

    ``registry`` if given; else, in multiprocess mode, a fresh registry that
    aggregates every process's files; else the enabled registry, else the default.
    """
    if registry is not None:
        return registry
    if _multiprocess_dir() is not None:
        _check_multiprocess()
        from prometheus_client import multiprocess

        aggregate = CollectorRegistry()
        multiprocess.MultiProcessCollector(aggregate)  # type: ignore[no-untyped-call]
        return aggregate
    return active_registry() or REGISTRY


class Exporter:
    """A running ``/metrics`` HTTP endpoint (a daemon thread). Close it when done."""

    def __init__(self, server: Any, thread: threading.Thread, addr: str) -> None:
        self._server = server
        self._thread = thread
        self.addr = addr
        self.port: int = int(server.server_port)

    @property
    def url(self) -> str:
        host = f"[{self.addr}]" if ":" in self.addr else self.addr
        return f"http://{host}:{self.port}/metrics"

    def close(self) -> None:
        """Stop serving and release the port. Idempotent."""
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> Exporter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Exporter({self.url!r})"


def serve(
    port: int, registry: CollectorRegistry | None = None, addr: str = "127.0.0.1"
) -> Exporter:
    """Serve ``/metrics`` on ``addr:port`` from a daemon thread (``port=0``: any free port).

    ``registry`` as in :func:`exposition_registry`: None serves the enabled registry
    (the multiprocess aggregate when ``PROMETHEUS_MULTIPROC_DIR`` is set). Loopback by
    default: pass ``addr="0.0.0.0"`` to let a Prometheus elsewhere scrape it.

    Raises OSError when the port cannot be bound.
    """
    target = exposition_registry(registry)
    server, thread = start_http_server(port, addr=addr, registry=target)
    return Exporter(server, thread, addr)
