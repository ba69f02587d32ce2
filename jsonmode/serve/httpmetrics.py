"""The server's own Prometheus families, as an ASGI middleware around the app.

    app.add_middleware(RequestMetrics, registry=registry, routes=ROUTES)

Families (every label value from a fixed set: no user text, no key, no raw path):

    jsonmode_serve_requests_total{route,status}   answered HTTP requests; route is one of
                                                  ``routes`` or ``other``, status the
                                                  response's code, or ``cancelled`` when
                                                  the client left before the answer began
    jsonmode_serve_in_flight                      requests being answered now (summed over
                                                  live workers in multiprocess mode)
    jsonmode_serve_worker_requests                requests this worker process has
                                                  answered; in multiprocess mode one
                                                  sample per live worker (label ``pid``),
                                                  so the spread over workers shows

Works in prometheus-client's multiprocess mode (``PROMETHEUS_MULTIPROC_DIR`` set before
it was imported): the values go to the shared directory and any worker's /metrics,
read with ``MultiProcessCollector``, shows their sum. Cost: a few dictionary lookups
and three metric updates per request. Thread-safe (prometheus-client's metrics are).
"""

from __future__ import annotations

import os
from collections.abc import Collection
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge

from jsonmode.metrics import exposition_registry

__all__ = ["RequestMetrics", "exposition"]

Scope = dict[str, Any]
Message = dict[str, Any]


class RequestMetrics:
    """ASGI middleware counting HTTP requests by route and status, and those in flight.

    ``registry``: where the three families are registered (once per registry: a
    second middleware on the same registry raises prometheus-client's ValueError).
    ``routes``: the paths counted under their own name; any other path is ``other``.
    Non-HTTP scopes (lifespan) pass through uncounted.
    """

    def __init__(self, app: Any, *, registry: CollectorRegistry, routes: Collection[str]) -> None:
        self.app = app
        self._routes = frozenset(routes)
        self._requests = Counter(
            "jsonmode_serve_requests",
            "HTTP requests answered by jsonmode serve, by route and status",
            ["route", "status"],
            registry=registry,
        )
        self._in_flight = Gauge(
            "jsonmode_serve_in_flight",
            "HTTP requests being answered now",
            registry=registry,
            multiprocess_mode="livesum",
        )
        self._worker = Gauge(
            "jsonmode_serve_worker_requests",
            "HTTP requests answered by this worker process",
            registry=registry,
            multiprocess_mode="liveall",
        )

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope.get("path", "")
        route = path if path in self._routes else "other"
        status = "cancelled"

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = str(int(message["status"]))
            await send(message)

        self._in_flight.inc()
        try:
            await self.app(scope, receive, sending)
        except Exception:
            if status == "cancelled":
                status = "500"
            raise
        finally:
            self._in_flight.dec()
            self._requests.labels(route=route, status=status).inc()
            self._worker.inc()


def exposition(registry: CollectorRegistry) -> CollectorRegistry:
    """The registry ``/metrics`` serves: in prometheus-client's multiprocess mode
    (``PROMETHEUS_MULTIPROC_DIR`` set, as ``jsonmode serve --workers N`` does) a fresh
    one that sums every worker's files, else ``registry`` (this process's families).
    Cost: reading the directory's files, once per scrape."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        return exposition_registry()
    return registry
