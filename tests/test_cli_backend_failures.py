"""The ``jsonmode`` command against backends that fail, and its start-up (issue 38).

Real subprocesses against the scripted server (tests/support/openai_server.py) or a
port on 127.0.0.1 that refuses connections. Each ``generate`` imports litellm (seconds
of CPU), so the scenarios that only need their outcome run at once, in one fixture.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from support.openai_server import Action, Delay, Drop, HttpError, OpenAIServer, Reply

from jsonmode.backends.deadline import DEFAULT_TIMEOUT

pytestmark = pytest.mark.integration

PERSON = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
    "required": ["name", "age"],
}
ADA_JSON = '{"name": "Ada", "age": 36}'
PROMPT = "Extract the person: Ada, 36"


def _command() -> list[str]:
    script = shutil.which("jsonmode", path=str(pathlib.Path(sys.executable).parent))
    if script:
        return [script]
    return [sys.executable, "-c", "import sys; from jsonmode.cli import main; sys.exit(main())"]


COMMAND = _command()
ENV = {
    **os.environ,
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    "LITELLM_TELEMETRY": "False",
    "NO_PROXY": "127.0.0.1,localhost",
    "no_proxy": "127.0.0.1,localhost",
}
ENV.pop("JSONMODE_MODEL", None)


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*COMMAND, *args],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        env=ENV,
        timeout=180,
        check=False,
    )


@pytest.fixture(scope="module")
def schema_file(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("failures") / "person.json"
    path.write_text(json.dumps(PERSON), encoding="utf-8")
    return str(path)


def refusing_socket() -> socket.socket:
    """A socket bound on 127.0.0.1 but not listening: connections to its port are refused."""
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    return holder


# -- generate against failing backends, all at once -------------------------------------------


@dataclass
class Outcome:
    done: subprocess.CompletedProcess[str]
    where: str  # host:port the command was pointed at
    server: OpenAIServer | None

    @property
    def lines(self) -> list[str]:
        return self.done.stderr.splitlines()

    def retry_lines(self) -> list[str]:
        return [line for line in self.lines if line.startswith("transport: ")]


# name: (script, "http" | "https" | "refused", extra arguments)
SCENARIOS: dict[str, tuple[list[Action], str, list[str]]] = {
    "refused": ([], "refused", ["-v"]),
    "tls": ([], "https", ["-v"]),
    "dropped": ([Drop()] * 5, "http", ["-v"]),
    "server-error": ([HttpError(500, "the model crashed", "server_error")] * 5, "http", []),
    "retry-after": (
        [HttpError(429, "Rate limit reached", "rate_limit_error", headers={"Retry-After": "30"})],
        "http",
        ["--max-retry-wait", "5"],
    ),
    "default-timeout": ([Reply(ADA_JSON)], "http", []),
}


@pytest.fixture(scope="module")
def outcomes(schema_file: str) -> Iterator[dict[str, Outcome]]:
    holder = refusing_socket()
    servers: dict[str, OpenAIServer] = {}
    processes: dict[str, tuple[subprocess.Popen[str], str]] = {}
    try:
        for name, (script, kind, extra) in SCENARIOS.items():
            if kind == "refused":
                where = f"127.0.0.1:{holder.getsockname()[1]}"
                base = f"http://{where}/v1"
            else:
                servers[name] = server = OpenAIServer(script)
                where = f"127.0.0.1:{server.port}"
                base = f"{kind}://{where}/v1"
            argv = ["generate", "--schema", schema_file, "--model", "openai/test-model"]
            process = subprocess.Popen(
                [*COMMAND, *argv, "--api-base", base, *extra, PROMPT],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=ENV,
            )
            processes[name] = (process, where)
        results = {}
        for name, (process, where) in processes.items():
            stdout, stderr = process.communicate(timeout=240)
            done = subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)
            results[name] = Outcome(done, where, servers.get(name))
        yield results
    finally:
        holder.close()
        for process, _ in processes.values():
            if process.poll() is None:
                process.kill()
                process.communicate()
        for server in servers.values():
            server.close()


def test_a_closed_port_is_named_with_its_reason_and_exits_3(outcomes: dict[str, Outcome]) -> None:
    # issue 38, item 6: was "InternalServerError (HTTP 500): Connection error."
    outcome = outcomes["refused"]
    said = f"cannot connect to {outcome.where} (connection refused)"
    assert outcome.done.returncode == 3, outcome.done.stderr
    assert outcome.done.stdout == ""
    assert f"jsonmode: error: TransientBackendError: {said}" in outcome.lines
    # -v: every retry, with what happened (the default policy: 5 calls)
    retries = outcome.retry_lines()
    assert len(retries) == 4
    for number, line in enumerate(retries, 1):
        assert line.startswith(
            f"transport: call {number} failed (TransientBackendError: {said}); retrying in "
        )
    assert "HTTP 500" not in outcome.done.stderr
    assert "Connection error" not in outcome.done.stderr


def test_a_failed_tls_handshake_is_named(outcomes: dict[str, Outcome]) -> None:
    outcome = outcomes["tls"]  # https:// to a server that speaks plain HTTP
    assert outcome.done.returncode == 3, outcome.done.stderr
    said = f"cannot connect to {outcome.where} (TLS handshake failed: wrong version number)"
    assert f"jsonmode: error: TransientBackendError: {said}" in outcome.lines
    assert outcome.retry_lines()
    assert "HTTP 500" not in outcome.done.stderr
    assert outcome.server is not None
    assert outcome.server.request_count == 0


def test_a_connection_closed_without_an_answer_is_named(outcomes: dict[str, Outcome]) -> None:
    outcome = outcomes["dropped"]
    assert outcome.done.returncode == 3, outcome.done.stderr
    said = f"lost the connection to {outcome.where} (the server closed it without answering)"
    assert f"jsonmode: error: TransientBackendError: {said}" in outcome.lines
    assert len(outcome.retry_lines()) == 4
    assert outcome.server is not None
    assert outcome.server.request_count == 5


def test_a_real_http_500_stays_what_it_is(outcomes: dict[str, Outcome]) -> None:
    outcome = outcomes["server-error"]
    assert outcome.done.returncode == 3, outcome.done.stderr
    assert outcome.lines[0] == (
        "jsonmode: error: TransientBackendError: InternalServerError (HTTP 500): the model crashed"
    )


def test_a_retry_after_past_the_retry_budget_hints_the_cli_flag(
    outcomes: dict[str, Outcome],
) -> None:
    # issue 38, item 10: the hint named TransportPolicy(max_delay=...), which the CLI cannot set
    outcome = outcomes["retry-after"]
    assert outcome.done.returncode == 3, outcome.done.stderr
    assert outcome.server is not None
    assert outcome.server.request_count == 1
    error, hint = outcome.lines
    assert re.fullmatch(
        r"jsonmode: error: TransientBackendError: RateLimitError \(HTTP 429\): Rate limit "
        r"reached; no further retry: the server asked to wait 30 s \(Retry-After\), longer "
        r"than the [0-9.]+ s left of --max-retry-wait \(5 s\)",
        error,
    ), error
    assert hint == "jsonmode: hint: try later, or raise --max-retry-wait"


def test_the_cli_timeout_default_is_the_librarys(outcomes: dict[str, Outcome]) -> None:
    # issue 38, item 10: the CLI's default was 60 s, the library's 120 s
    outcome = outcomes["default-timeout"]
    assert outcome.done.returncode == 0, outcome.done.stderr
    assert json.loads(outcome.done.stdout) == {"name": "Ada", "age": 36}
    assert outcome.server is not None
    (request,) = outcome.server.recorded
    # litellm passes the timeout on to the OpenAI SDK, which sends it along
    assert float(request.headers["x-stainless-read-timeout"]) == DEFAULT_TIMEOUT


def test_help_states_the_timeout_and_retry_defaults() -> None:
    done = run("generate", "--help")
    text = " ".join(done.stdout.split())
    assert f"(default {DEFAULT_TIMEOUT:g} for an API model;" in text
    assert "--max-retry-wait S" in text
    assert "(default 60)" in text


# -- retries show as they happen -------------------------------------------------------------


def test_verbose_shows_each_retry_while_the_command_still_runs(schema_file: str) -> None:
    # the second call hangs until the server closes: the first retry's line must be out by then
    with OpenAIServer([Drop(), Delay(120.0, Reply(ADA_JSON))]) as server:
        process = subprocess.Popen(
            [
                *COMMAND,
                "generate",
                "-v",
                "--schema",
                schema_file,
                "--model",
                "openai/test-model",
                "--api-base",
                server.base_url,
                "--timeout",
                "150",
                PROMPT,
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=ENV,
        )
        try:
            assert process.stderr is not None
            first = process.stderr.readline()
            running = process.poll() is None
        finally:
            server.close()  # the delayed call ends, unanswered
            process.communicate(timeout=120)
    where = f"127.0.0.1:{server.port}"
    assert first.startswith(
        f"transport: call 1 failed (TransientBackendError: lost the connection to {where} "
        "(the server closed it without answering)); retrying in "
    )
    assert running  # shown while the second call was still waiting for its answer


# -- usage -------------------------------------------------------------------------------------


def test_max_retry_wait_must_be_seconds(schema_file: str) -> None:
    done = run(
        "generate", "--schema", schema_file, "--model", "openai/x", "--max-retry-wait", "-1", "hi"
    )
    assert done.returncode == 2
    assert done.stderr.splitlines()[0] == (
        "jsonmode: error: UsageError: --max-retry-wait must be a number of seconds >= 0, not -1"
    )


@pytest.mark.parametrize("command", ["dashboard", "metrics"])
def test_a_port_in_use_is_named(command: str, tmp_path: pathlib.Path) -> None:
    # issue 38, item 10: was "cannot listen: Address already in use", without the port
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        argv = ["dashboard"] if command == "dashboard" else ["metrics", "serve"]
        done = subprocess.run(
            [*COMMAND, *argv, "--port", str(port)],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            env={**ENV, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)},
            timeout=60,
            check=False,
        )
    assert done.returncode == 2
    assert done.stderr.splitlines()[0] == (
        f"jsonmode: error: UsageError: cannot listen on 127.0.0.1:{port}: Address already in use"
    )


# -- start-up: litellm's import starts early, off the main thread -------------------------------

WATCH = r"""
import json, sys, threading

from jsonmode.schema.core import Schema

seen = {}
read = Schema.of.__func__


def of(cls, *args, **kwargs):
    importing = any(t.name == "jsonmode-import-litellm" for t in threading.enumerate())
    seen.setdefault("importing when the schema was read", importing or "litellm" in sys.modules)
    return read(cls, *args, **kwargs)


Schema.of = classmethod(of)


class Watch:
    def find_spec(self, name, path=None, target=None):
        if name == "litellm":
            seen["litellm imported on"] = threading.current_thread().name
        return None


sys.meta_path.insert(0, Watch())
from jsonmode.cli import main

status = main(sys.argv[1:])
print("seen: " + json.dumps(seen, sort_keys=True), file=sys.stderr)
sys.exit(status)
"""


@pytest.mark.parametrize("command", ["generate", "batch"])
def test_litellm_is_imported_in_the_background_from_the_start(
    command: str, schema_file: str, tmp_path: pathlib.Path
) -> None:
    # issue 38, item 7: the import (seconds) ran on the main thread, in the first request
    with OpenAIServer([Reply(ADA_JSON)]) as server:
        options = ["--model", "openai/test-model", "--api-base", server.base_url]
        if command == "generate":
            argv = ["generate", "--schema", schema_file, *options, PROMPT]
        else:
            source = tmp_path / "in.jsonl"
            source.write_text(json.dumps({"prompt": PROMPT}) + "\n", encoding="utf-8")
            target = tmp_path / "out.jsonl"
            argv = ["batch", "--schema", schema_file, "--input", str(source)]
            argv += ["--output", str(target), "--no-progress", *options]
        done = subprocess.run(
            [sys.executable, "-c", WATCH, *argv],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            env=ENV,
            timeout=180,
            check=False,
        )
    assert done.returncode == 0, done.stderr
    seen = [line for line in done.stderr.splitlines() if line.startswith("seen: ")]
    assert json.loads(seen[0].removeprefix("seen: ")) == {
        "importing when the schema was read": True,
        "litellm imported on": "jsonmode-import-litellm",
    }
