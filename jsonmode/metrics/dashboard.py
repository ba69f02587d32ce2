"""``jsonmode dashboard``: a live page over an exporter's ``/metrics``, no Prometheus needed.

A small stdlib HTTP server hands out one self-contained page (HTML, CSS and
JavaScript shipped in the package: no CDN, works offline) and proxies the
exporter's ``/metrics`` under its own origin, so the browser needs no CORS. The
page polls it, keeps a few minutes of history in memory and draws conformance,
outcomes, latency percentiles, attempts, failures, repairs, decoder mask time and
cache hit rate.

    handle = serve_dashboard("http://127.0.0.1:9464/metrics", port=8765)
    ...                       # open handle.url
    handle.close()
"""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import Any

from jsonmode.errors import UsageError

__all__ = ["Dashboard", "metrics_url", "serve_dashboard"]

_FILES = {
    "/": ("dashboard.html", "text/html; charset=utf-8"),
    "/index.html": ("dashboard.html", "text/html; charset=utf-8"),
    "/dashboard.css": ("dashboard.css", "text/css; charset=utf-8"),
    "/dashboard.js": ("dashboard.js", "text/javascript; charset=utf-8"),
}
_EXPOSITION = "text/plain; version=0.0.4; charset=utf-8"

Fetch = Callable[[], bytes]


def metrics_url(url: str) -> str:
    """Normalise an exporter address: ``host:port`` or a URL without a path gets
    ``http://`` and ``/metrics``. Raises :class:`UsageError` for anything not HTTP(S)."""
    text = url.strip()
    if "://" not in text:
        text = "http://" + text
    parts = urllib.parse.urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise UsageError(f"not an HTTP URL: {url!r}", hint="e.g. http://127.0.0.1:9464/metrics")
    path = parts.path if parts.path not in ("", "/") else "/metrics"
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, path, parts.query, ""))


def _http_fetch(url: str, timeout: float) -> Fetch:
    def fetch() -> bytes:
        request = urllib.request.Request(url, headers={"Accept": "text/plain"})
        with urllib.request.urlopen(request, timeout=timeout) as response:
            body: bytes = response.read()
        return body

    return fetch


def _asset(name: str) -> bytes:
    return resources.files("jsonmode.metrics").joinpath("assets").joinpath(name).read_bytes()


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        path = urllib.parse.urlsplit(self.path).path
        if path == "/metrics":
            self._proxy()
        elif path == "/config.json":
            config = {"metricsUrl": self.server.source_label, "interval": self.server.interval}
            self._send(HTTPStatus.OK, json.dumps(config).encode(), "application/json")
        elif path in _FILES:
            name, content_type = _FILES[path]
            self._send(HTTPStatus.OK, _asset(name), content_type)
        else:
            self._send(HTTPStatus.NOT_FOUND, b"not found\n", "text/plain; charset=utf-8")

    def _proxy(self) -> None:
        try:
            body = self.server.fetch()
        except (OSError, urllib.error.URLError, ValueError) as exc:
            reason = getattr(exc, "reason", exc)
            message = f"exporter unreachable at {self.server.source_label}: {reason}\n"
            self._send(HTTPStatus.BAD_GATEWAY, message.encode(), "text/plain; charset=utf-8")
            return
        self._send(HTTPStatus.OK, body, _EXPOSITION)

    def _send(self, status: HTTPStatus, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass  # one line per poll would drown the terminal


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], fetch: Fetch, label: str, interval: float):
        super().__init__(address, _Handler)
        self.fetch = fetch
        self.source_label = label
        self.interval = interval


class Dashboard:
    """A running dashboard server (daemon thread). Close it when done."""

    def __init__(self, server: _Server, thread: threading.Thread) -> None:
        self._server = server
        self._thread = thread
        self.addr: str = server.server_address[0]  # type: ignore[assignment]
        self.port: int = int(server.server_address[1])

    @property
    def url(self) -> str:
        host = f"[{self.addr}]" if ":" in self.addr else self.addr
        return f"http://{host}:{self.port}/"

    def close(self) -> None:
        """Stop serving and release the port. Idempotent."""
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> Dashboard:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def serve_dashboard(
    metrics: str | Fetch,
    port: int = 8765,
    addr: str = "127.0.0.1",
    *,
    interval: float = 2.0,
    timeout: float = 5.0,
) -> Dashboard:
    """Serve the live page on ``addr:port`` (``port=0``: any free port).

    Args:
        metrics: the exporter's URL (``http://127.0.0.1:9464/metrics``; see
            :func:`metrics_url`), or a function returning the exposition text.
        interval: seconds between the page's polls (``?interval=`` overrides).
        timeout: seconds to wait for the exporter per poll.

    Raises OSError when the port cannot be bound, UsageError for a bad URL.
    """
    if interval <= 0:
        raise UsageError("interval must be positive")
    if callable(metrics):
        fetch, label = metrics, "(in-process)"
    else:
        label = metrics_url(metrics)
        fetch = _http_fetch(label, timeout)
    server = _Server((addr, port), fetch, label, interval)
    thread = threading.Thread(target=server.serve_forever, name="jsonmode-dashboard", daemon=True)
    thread.start()
    return Dashboard(server, thread)
