"""``jsonmode serve`` as a real child process on 127.0.0.1, for tests that drive it with
real clients (the ``openai`` npm package, curl, the ``openai`` Python client).

    with ServeProcess("--upstream", "openai/scripted", "--api-base", url) as served:
        served.base_url   # "http://127.0.0.1:PORT/v1"

It starts ``python -m jsonmode.cli serve ... --port 0`` of this checkout, reads the port
from the line ``serving on http://127.0.0.1:PORT`` on stderr, waits for ``/healthz`` to
answer 200, and keeps reading stderr on a thread (a full pipe would block the server;
``log`` has it all for a failing test's message). ``close`` sends SIGTERM, waits, then
SIGKILL: no process outlives the fixture.
"""

from __future__ import annotations

import re
import signal
import subprocess
import threading
import time
import urllib.request
from typing import Any

from support.binaries import JSONMODE, python_env

__all__ = ["ServeProcess"]

_SERVING = re.compile(r"serving on (http://127\.0\.0\.1:(\d+))")
START_LIMIT = 60.0  # seconds; it serves ~3 s after start here (imports)


def _environment(changes: dict[str, str | None]) -> dict[str, str]:
    """This checkout's environment for a child, with ``changes`` (None: unset)."""
    environ = python_env()
    for name, value in changes.items():
        if value is None:
            environ.pop(name, None)
        else:
            environ[name] = value
    return environ


class ServeProcess:
    """A started ``jsonmode serve``; ``env`` adds environment variables (e.g. a key;
    None unsets one).

    ``wait=False`` returns at once (start several, then :meth:`wait_ready` each).
    ``stdout`` and ``log`` (stderr) hold everything the process printed.
    """

    def __init__(
        self,
        *args: str,
        env: dict[str, str | None] | None = None,
        start_limit: float = START_LIMIT,
        wait: bool = True,
    ) -> None:
        self.args = ["serve", *args, "--port", "0"]
        self._lines: list[str] = []
        self._out: list[str] = []
        self._lock = threading.Lock()
        self._found = threading.Event()
        self._status: int | None = None
        self.root = ""
        self.process = subprocess.Popen(
            [*JSONMODE, *self.args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=_environment(env or {}),
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self._out_reader = threading.Thread(target=self._read_out, daemon=True)
        self._out_reader.start()
        self._start_limit = start_limit
        if wait:
            self.wait_ready()

    @property
    def base_url(self) -> str:
        """The OpenAI-style base URL (``.../v1``) a client is given."""
        return f"{self.root}/v1"

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT``."""
        return self.root

    @property
    def port(self) -> int:
        return int(self.root.rsplit(":", 1)[1])

    @property
    def log(self) -> str:
        """Everything on stderr so far."""
        with self._lock:
            return "".join(self._lines)

    stderr = log

    @property
    def stdout(self) -> str:
        with self._lock:
            return "".join(self._out)

    def _read(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            with self._lock:
                self._lines.append(line)
            found = _SERVING.search(line)
            if found and not self._found.is_set():
                self.root = found.group(1)
                self._found.set()

    def _read_out(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            with self._lock:
                self._out.append(line)

    def wait_ready(self) -> None:
        """Until the address is printed and /healthz answers 200.

        Raises:
            RuntimeError: the process ended first, or ``start_limit`` passed.
        """
        try:
            self._wait_ready(self._start_limit)
        except BaseException:
            self.close()
            raise

    def _wait_ready(self, limit: float) -> None:
        deadline = time.monotonic() + limit
        while not self._found.wait(0.05):
            if self.process.poll() is not None or time.monotonic() > deadline:
                self._reader.join(2)
                raise RuntimeError(
                    f"jsonmode {' '.join(self.args)} did not print 'serving on' "
                    f"(exit {self.process.poll()}):\n{self.log[-4000:]}"
                )
        while True:
            try:
                with urllib.request.urlopen(f"{self.root}/healthz", timeout=2) as reply:
                    if reply.status == 200:
                        return
            except OSError:
                pass
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"/healthz never answered 200:\n{self.log[-4000:]}")
            time.sleep(0.05)

    def close(self, sig: int = signal.SIGTERM) -> int:
        """``sig``, then the exit status (SIGKILL after 30 s: a hang fails the test
        that waits for a clean exit). Idempotent: a closed process's status again."""
        if self._status is not None:
            return self._status
        if self.process.poll() is None:
            self.process.send_signal(sig)
        try:
            status = self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            status = self.process.wait(5)
        self._reader.join(5)
        self._out_reader.join(5)
        for stream in (self.process.stdout, self.process.stderr):
            if stream is not None:
                stream.close()
        self._status = status
        return status

    def __enter__(self) -> ServeProcess:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()
