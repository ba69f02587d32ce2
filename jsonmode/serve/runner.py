"""Run ``jsonmode serve`` as real server processes: uvicorn, one or several workers.

    from jsonmode.serve.runner import serve
    status = serve(config)          # blocks until SIGTERM / SIGINT; returns the exit status

Contracts:

- **Socket.** The listening socket is bound and listening before anything is served
  (``config.host``, default ``127.0.0.1``; ``config.port``, ``0`` picks a free port). Once
  every worker has finished its startup, one line goes to stderr::

      jsonmode serve: serving on http://127.0.0.1:PORT

  (:data:`READY_PREFIX`; tests and scripts read the port from it). A port that cannot
  be bound raises :class:`~jsonmode.errors.UsageError` before any worker starts.
- **Workers.** ``config.workers == 1`` serves from this process (the app from
  :func:`jsonmode.serve.app.create_app`). ``workers > 1`` runs uvicorn's multiprocess
  supervisor: that many spawned worker processes share the one pre-bound socket (the
  kernel spreads connections between them); each builds its app from the factory
  :data:`FACTORY` with the configuration passed in the environment variable
  :data:`ENV_CONFIG` (:func:`jsonmode.serve.config.to_env`: the keys included, so they
  stay in this process tree's environment, never on a command line). A worker
  that dies is replaced; one that fails its startup (the app's lifespan) stops the
  server with status 3 (uvicorn's ``STARTUP_FAILURE``, the status of one process too). No
  state is shared between workers or kept between requests. uvicorn's supervisor
  signals work too: SIGHUP replaces the workers one at a time (each new one serving
  before the old one drains), SIGTTIN / SIGTTOU add or remove one.
- **Drain.** SIGTERM or SIGINT stops accepting (the listening socket is closed, so new
  connections are refused), lets in-flight requests finish for up to
  ``config.drain_s`` seconds (uvicorn's ``timeout_graceful_shutdown``; then they are
  cancelled, their upstream calls with them), and returns 0. A second SIGINT cuts
  the drain short. The supervisor kills a worker still alive ``config.drain_s`` + 5 s
  after it asked it to stop.
- **Metrics.** With several workers, ``PROMETHEUS_MULTIPROC_DIR``
  is set to a fresh temporary directory before any worker starts (so before a worker
  imports prometheus-client) and removed, with its files, when :func:`serve` returns;
  each worker's ``/metrics`` then serves the sum over all workers
  (``MultiProcessCollector``). The supervisor marks each worker that ended as dead
  (live gauges drop it). One worker: the app's own registry.
- **Logs.** uvicorn's own log on stderr from ``warning`` up; its access log only with
  ``config.access_log``, on stdout (client address, request line, status; never a
  header, so never a key). The runner prints no key.

:func:`serve` must be called from the main thread (it installs signal handlers) and
at most once at a time per process; it changes ``os.environ`` while it runs (the two
variables above) and restores it before returning.
"""

from __future__ import annotations

import contextlib
import copy
import math
import os
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Generator, Iterator
from typing import Any

import uvicorn
from uvicorn.config import LOGGING_CONFIG, STARTUP_FAILURE
from uvicorn.supervisors.multiprocess import Multiprocess

from jsonmode.errors import UsageError
from jsonmode.serve.config import ENV, ServeConfig, to_env

__all__ = ["ENV_CONFIG", "FACTORY", "READY_PREFIX", "serve"]

#: The environment variable that carries the configuration to the workers.
ENV_CONFIG = ENV
#: The app factory each worker of ``--workers N`` builds its app with.
FACTORY = "jsonmode.serve.app:app_from_env"
#: What the line on stderr starts with once the server accepts connections.
READY_PREFIX = "jsonmode serve: serving on "

_MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
#: Seconds a worker may take to start (import the app, build it) before the
#: supervisor stops waiting to announce the address (it keeps serving regardless).
_STARTUP_WAIT_S = 60.0
#: Seconds past ``drain_s`` before a worker that has not ended is killed.
_KILL_GRACE_S = 5.0
#: uvicorn's logging, its own messages from warning up (its access log, when asked
#: for, at info on stdout: a level set for both would silence it).
_LOGGING = copy.deepcopy(LOGGING_CONFIG)
_LOGGING["loggers"]["uvicorn.error"]["level"] = "WARNING"


def serve(config: ServeConfig) -> int:
    """Serve ``config`` until SIGTERM or SIGINT; the exit status (0 after a drain).

    Raises :class:`~jsonmode.errors.UsageError` for ``workers < 1`` or an address that
    cannot be bound. Blocks; call from the main thread.
    """
    if config.workers < 1:
        raise UsageError(f"workers must be at least 1, got {config.workers}")
    sock = _bind(config.host, config.port)
    try:
        if config.workers == 1:
            return _serve_here(config, sock)
        return _serve_workers(config, sock)
    finally:
        sock.close()


def _uvicorn_config(config: ServeConfig, app: Any, *, factory: bool) -> uvicorn.Config:
    return uvicorn.Config(
        app,
        factory=factory,
        host=config.host,
        port=config.port,
        workers=config.workers,
        access_log=config.access_log,
        log_config=_LOGGING,
        log_level=None,
        server_header=False,
        proxy_headers=False,
        lifespan="on",  # the app needs its startup (its upstream client); a failure stops it
        timeout_graceful_shutdown=math.ceil(config.drain_s),
        timeout_worker_healthcheck=30,
    )


def _bind(host: str, port: int) -> socket.socket:
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
    except socket.gaierror as exc:
        raise UsageError(f"cannot resolve host {host!r}: {exc.strerror}") from None
    # IPPROTO_TCP named: asyncio sets TCP_NODELAY on accepted sockets only when the
    # listening socket's proto says TCP (without it every small reply waits out the
    # client's delayed ACK, ~40 ms)
    sock = socket.socket(family, kind, proto or socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        raise UsageError(
            f"cannot listen on {host}:{port}: {exc.strerror or exc}",
            hint="pick another --port (0: any free port) or stop what holds this one",
        ) from None
    sock.set_inheritable(True)
    return sock


def _announce(host: str, sock: socket.socket) -> None:
    port = sock.getsockname()[1]
    shown = f"[{host}]" if ":" in host else host
    print(f"{READY_PREFIX}http://{shown}:{port}", file=sys.stderr, flush=True)


class _Server(uvicorn.Server):
    """uvicorn's server that announces its address once started and exits quietly
    after a signal (uvicorn re-raises the signal it drained on, which would end the
    process with SIGTERM's status instead of 0)."""

    def __init__(self, config: uvicorn.Config, host: str) -> None:
        super().__init__(config)
        self._host = host

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        if self.started and not self.should_exit and sockets:
            _announce(self._host, sockets[0])

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        handled = (signal.SIGINT, signal.SIGTERM)
        original = {sig: signal.signal(sig, self.handle_exit) for sig in handled}
        try:
            yield
        finally:
            for sig, handler in original.items():
                signal.signal(sig, handler)


def _serve_here(config: ServeConfig, sock: socket.socket) -> int:
    from jsonmode.serve.app import create_app

    app = create_app(config)
    server = _Server(_uvicorn_config(config, app, factory=False), config.host)
    server.run(sockets=[sock])
    return 0


def _serve_workers(config: ServeConfig, sock: socket.socket) -> int:
    with _environment(config) as multiproc_dir:
        supervisor = _Supervisor(_uvicorn_config(config, FACTORY, factory=True), [sock])
        supervisor.host = config.host
        supervisor.drain_s = config.drain_s
        supervisor.multiproc_dir = multiproc_dir
        return supervisor.serve()


@contextlib.contextmanager
def _environment(config: ServeConfig) -> Iterator[str]:
    """ENV_CONFIG and PROMETHEUS_MULTIPROC_DIR (a fresh directory) set
    for the workers to inherit; both restored and the directory removed at the end."""
    saved = {name: os.environ.get(name) for name in (ENV_CONFIG, _MULTIPROC_ENV)}
    directory = tempfile.mkdtemp(prefix="jsonmode-serve-metrics-")
    try:
        os.environ.update(to_env(config))
        os.environ[_MULTIPROC_ENV] = directory
        yield directory
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        if directory is not None:
            shutil.rmtree(directory, ignore_errors=True)


class _Supervisor(Multiprocess):
    """uvicorn's supervisor, which announces the address once every worker is ready,
    closes its copy of the socket before stopping the workers (so new connections
    are refused during the drain), bounds the wait for them and reports a failed
    startup as status 3."""

    host: str = "127.0.0.1"
    drain_s: float = 30.0
    multiproc_dir: str | None = None

    def serve(self) -> int:
        self.init_processes()
        if self._wait_ready():
            _announce(self.host, self.sockets[0])
        while not self.should_exit.wait(0.25):
            self.handle_signals()
            self.keep_subprocess_alive()
        failed = any(process.exitcode == STARTUP_FAILURE for process in self.processes)
        for sock in self.sockets:
            sock.close()
        self.terminate_all()
        deadline = time.monotonic() + self.drain_s + _KILL_GRACE_S
        for process in self.processes:
            process.process.join(max(0.0, deadline - time.monotonic()))
            if process.process.is_alive():
                process.kill()
                process.process.join()
            self._mark_dead(process.pid)
        return STARTUP_FAILURE if failed else 0

    def _wait_ready(self) -> bool:
        """Whether every worker finished its startup (False at once on a signal or a
        worker that ended, and after _STARTUP_WAIT_S)."""
        deadline = time.monotonic() + _STARTUP_WAIT_S
        waiting = list(self.processes)
        while waiting:
            if self.signal_queue or time.monotonic() > deadline:
                return False
            if not all(process.process.is_alive() for process in waiting):
                return False
            waiting = [process for process in waiting if not process.is_ready(timeout=1)]
            if waiting:
                time.sleep(0.05)
        return True

    def keep_subprocess_alive(self) -> None:
        dead = [process.pid for process in self.processes if not process.process.is_alive()]
        super().keep_subprocess_alive()
        for pid in dead:
            self._mark_dead(pid)

    def restart_all(self) -> None:
        before = {process.pid for process in self.processes}
        super().restart_all()
        for pid in before - {process.pid for process in self.processes}:
            self._mark_dead(pid)

    def handle_ttou(self) -> None:
        before = {process.pid for process in self.processes}
        super().handle_ttou()
        for pid in before - {process.pid for process in self.processes}:
            self._mark_dead(pid)

    def _mark_dead(self, pid: int | None) -> None:
        if self.multiproc_dir is None or pid is None:
            return
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(pid, self.multiproc_dir)  # type: ignore[no-untyped-call]
