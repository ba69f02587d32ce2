"""The ``jsonmode`` command, run as a real subprocess against a local OpenAI-compatible server."""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from support.openai_server import Action, HttpError, OpenAIServer, Reply

pytestmark = pytest.mark.integration

PERSON = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "Person",
    "type": "object",
    "properties": {
        "name": {"type": "string", "minLength": 1},
        "age": {"type": "integer", "minimum": 0},
        "email": {"type": "string"},
    },
    "required": ["name", "age", "email"],
    "additionalProperties": False,
}
ADA = {"name": "Ada", "age": 36, "email": "ada@example.com"}
ADA_JSON = json.dumps(ADA)
SLIPPY = "Here it is:\n```json\n{'name': 'Ada', 'age': '36', 'email': 'ada@example.com',}\n```"
PROMPT = "Extract the person: Ada, 36, ada@example.com"


def _command() -> list[str]:
    """The console script installed next to this interpreter, else the same entry point."""
    script = shutil.which("jsonmode", path=str(pathlib.Path(sys.executable).parent))
    if script:
        return [script]
    return [sys.executable, "-c", "import sys; from jsonmode.cli import main; sys.exit(main())"]


COMMAND = _command()


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    env["LITELLM_TELEMETRY"] = "False"
    env.pop("OPENAI_API_KEY", None)  # --api-base needs no real key
    env.pop("JSONMODE_MODEL", None)
    env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost"
    return env


ENV = _env()


def jsonmode(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*COMMAND, *args],
        input=stdin,
        stdin=None if stdin is not None else subprocess.DEVNULL,
        capture_output=True,
        text=True,
        env=ENV,
        timeout=300,
        check=False,
    )


@pytest.fixture
def schema_file(tmp_path: pathlib.Path) -> str:
    path = tmp_path / "person.json"
    path.write_text(json.dumps(PERSON), encoding="utf-8")
    return str(path)


def lines(text: str) -> list[str]:
    return text.splitlines()


# -- generate ---------------------------------------------------------------------------
# Each `generate` run imports litellm (seconds of CPU), so every scenario's process is
# started at once, each against its own server, and the tests read their outcomes.

RATE = "rate_limit_error"
INVALID = ["no JSON here", '{"name": "Ada"}', '{"name": "", "age": -1, "email": "x"}']
SCENARIOS: dict[str, tuple[list[Action], list[str]]] = {
    "strict": ([Reply(ADA_JSON)], ["--mode", "strict"]),
    "strict-reask": ([Reply(SLIPPY), Reply(ADA_JSON)], ["--mode", "strict", "--verbose"]),
    "repair": ([Reply(SLIPPY)], ["--mode", "repair", "--verbose"]),
    "invalid": ([Reply(text) for text in INVALID], ["--mode", "strict"]),
    "invalid-verbose": ([Reply(text) for text in INVALID], ["--mode", "repair", "--verbose"]),
    "refused": ([HttpError(400, "Invalid 'messages': bad", "invalid_request_error")], []),
    "rate-limited": ([HttpError(429, "Rate limit reached", RATE), Reply(ADA_JSON)], ["-v"]),
    "rate-limited-out": ([HttpError(429, "Rate limit reached", RATE)] * 5, ["-v"]),
    "repairable": ([Reply(SLIPPY)] * 2, ["--mode", "strict", "--max-attempts", "2"]),
    "max-tokens": ([Reply(ADA_JSON)], ["--max-tokens", "7", "--temperature", "0"]),
}


@dataclass
class Generated:
    done: subprocess.CompletedProcess[str]
    server: OpenAIServer


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Generated]]:
    schema = tmp_path_factory.mktemp("cli") / "person.json"
    schema.write_text(json.dumps(PERSON), encoding="utf-8")
    servers = {name: OpenAIServer(script) for name, (script, _) in SCENARIOS.items()}
    processes: dict[str, subprocess.Popen[str]] = {}
    try:
        processes = {
            name: subprocess.Popen(
                [
                    *COMMAND,
                    "generate",
                    "--model",
                    "openai/test-model",
                    "--api-base",
                    servers[name].base_url,
                    "--schema",
                    str(schema),
                    "--timeout",
                    "20",
                    *extra,
                    PROMPT,
                ],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=ENV,
            )
            for name, (_, extra) in SCENARIOS.items()
        }
        results = {}
        # One deadline for all: the scenarios start together, and each process spends
        # ~10 s of CPU importing litellm, so on two busy cores the last one may finish
        # minutes after the first (a hang still fails, at the deadline).
        deadline = time.monotonic() + 600
        for name, process in processes.items():
            stdout, stderr = process.communicate(timeout=max(1.0, deadline - time.monotonic()))
            done = subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)
            results[name] = Generated(done, servers[name])
        yield results
    finally:
        for process in processes.values():
            if process.returncode is None:  # (a hang: at the deadline) reap it, close its pipes
                process.kill()
                process.communicate()
        for server in servers.values():
            server.close()


def test_generate_strict_prints_the_value(generated: dict[str, Generated]) -> None:
    done, server = generated["strict"].done, generated["strict"].server
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == ADA
    assert lines(done.stdout) == [json.dumps(ADA, separators=(",", ":"))]
    assert done.stderr == ""
    assert server.request_count == 1
    (recorded,) = server.recorded
    assert recorded.headers["authorization"] == "Bearer unused"
    assert recorded.body["model"] == "test-model"
    assert recorded.body["messages"][-1] == {"role": "user", "content": PROMPT}


def test_generate_strict_reasks_then_prints_the_value(generated: dict[str, Generated]) -> None:
    done, server = generated["strict-reask"].done, generated["strict-reask"].server
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == ADA
    assert server.request_count == 2
    assert "attempt 1: invalid_json" in done.stderr
    assert "attempt 2: valid" in done.stderr


def test_generate_repair_prints_the_repaired_value(generated: dict[str, Generated]) -> None:
    done, server = generated["repair"].done, generated["repair"].server
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == ADA
    assert server.request_count == 1
    assert "tier: prompted, mode: repair" in done.stderr
    for kind in ("extract", "syntax", "string_to_integer"):
        assert f" {kind} " in done.stderr


def test_generate_every_attempt_invalid_fails_on_one_line(
    generated: dict[str, Generated],
) -> None:
    done, server = generated["invalid"].done, generated["invalid"].server
    assert done.returncode == 1
    assert done.stdout == ""
    (line,) = lines(done.stderr)
    assert line.startswith("jsonmode: error: AttemptsExhaustedError: ")
    assert server.request_count == 3


def test_generate_every_attempt_invalid_verbose_shows_every_attempt(
    generated: dict[str, Generated],
) -> None:
    done, server = generated["invalid-verbose"].done, generated["invalid-verbose"].server
    assert done.returncode == 1
    assert done.stdout == ""
    assert lines(done.stderr)[0].startswith("jsonmode: error: AttemptsExhaustedError: ")
    for index in (1, 2, 3):
        assert f"attempt {index}" in done.stderr
    for text in INVALID:
        assert f"raw: {text}" in done.stderr
    assert server.request_count == 3


def test_generate_refused_request_exits_3_on_one_line(generated: dict[str, Generated]) -> None:
    done, server = generated["refused"].done, generated["refused"].server
    assert done.returncode == 3
    assert done.stdout == ""
    (line,) = lines(done.stderr)
    assert line.startswith("jsonmode: error: PermanentBackendError: ")
    assert "Invalid 'messages': bad" in line
    assert server.request_count == 1


def test_generate_verbose_shows_transport_retries_and_calls(
    generated: dict[str, Generated],
) -> None:
    done, server = generated["rate-limited"].done, generated["rate-limited"].server
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == ADA
    assert server.request_count == 2
    retry, tier, attempt, *_ = lines(done.stderr)
    assert retry.startswith("transport: call 1 failed (TransientBackendError")
    assert retry.count("HTTP 429") == 1, retry
    assert "Rate limit reached); retrying in " in retry
    assert tier == "tier: prompted, mode: strict"
    assert attempt.startswith("attempt 1: valid (")
    assert attempt.endswith(" ms, 2 calls)")


def test_generate_rate_limited_out_shows_every_call_and_names_each_type_once(
    generated: dict[str, Generated],
) -> None:
    done, server = generated["rate-limited-out"].done, generated["rate-limited-out"].server
    assert done.returncode == 3
    assert done.stdout == ""
    assert server.request_count == 5
    found = lines(done.stderr)
    assert [line.split(" failed (")[0] for line in found[:4]] == [
        f"transport: call {call}" for call in (1, 2, 3, 4)
    ]
    error = found[4]
    assert error.startswith("jsonmode: error: TransientBackendError: ")
    assert "Rate limit reached" in error
    for name in ("TransientBackendError", "RateLimitError"):
        assert error.count(name) <= 1, error
    assert found[5].startswith("attempt 1: backend_error (")
    assert found[5].endswith(", 5 calls)")


def test_generate_strict_hints_repair_in_cli_syntax_when_it_would_help(
    generated: dict[str, Generated],
) -> None:
    repairable = generated["repairable"].done
    assert repairable.returncode == 1
    assert lines(repairable.stderr)[1:] == [
        "jsonmode: hint: --mode repair would repair the last output"
    ]
    # nothing to repair in the last output: no hint; never the Python spelling
    hopeless = generated["invalid"].done
    assert len(lines(hopeless.stderr)) == 1
    for done in (repairable, hopeless):
        assert "mode='repair'" not in done.stderr


def test_generate_max_tokens_goes_to_the_request(generated: dict[str, Generated]) -> None:
    done, server = generated["max-tokens"].done, generated["max-tokens"].server
    assert done.returncode == 0, done.stderr
    (body,) = server.requests
    assert body["max_tokens"] == 7
    assert body["temperature"] == 0


# -- validate / repair (no server, no litellm) --------------------------------------------


@pytest.mark.parametrize("source", ["file", "stdin"])
def test_validate(tmp_path: pathlib.Path, schema_file: str, source: str) -> None:
    def run(text: str) -> subprocess.CompletedProcess[str]:
        if source == "stdin":
            return jsonmode("validate", "--schema", schema_file, stdin=text)
        path = tmp_path / "input.json"
        path.write_text(text, encoding="utf-8")
        return jsonmode("validate", "--schema", schema_file, str(path))

    good = run(ADA_JSON)
    assert good.returncode == 0, good.stderr
    assert json.loads(good.stdout) == ADA
    assert good.stderr == ""

    for bad_text, error in ((SLIPPY, "OutputParseError"), ('{"name": "Ada"}', "SchemaViolation")):
        bad = run(bad_text)
        assert bad.returncode == 1
        assert bad.stdout == ""
        (line,) = lines(bad.stderr)
        assert line.startswith(f"jsonmode: error: {error}")


@pytest.mark.parametrize("source", ["file", "stdin"])
def test_repair(tmp_path: pathlib.Path, schema_file: str, source: str) -> None:
    def run(text: str, *extra: str) -> subprocess.CompletedProcess[str]:
        if source == "stdin":
            return jsonmode("repair", "--schema", schema_file, *extra, stdin=text)
        path = tmp_path / "input.txt"
        path.write_text(text, encoding="utf-8")
        return jsonmode("repair", "--schema", schema_file, *extra, str(path))

    fixed = run(SLIPPY, "--verbose")
    assert fixed.returncode == 0, fixed.stderr
    assert json.loads(fixed.stdout) == ADA
    assert [line.split()[2] for line in lines(fixed.stderr)] == [
        "extract",
        "syntax",
        "string_to_integer",
    ]
    quiet = run(SLIPPY)
    assert quiet.returncode == 0
    assert quiet.stderr == ""

    hopeless = run('{"name": "Ada"} and nothing else')
    assert hopeless.returncode == 1
    assert hopeless.stdout == ""
    (line,) = lines(hopeless.stderr)
    assert line.startswith("jsonmode: error: SchemaViolationError")


def test_validate_missing_input_file_is_a_usage_error(schema_file: str) -> None:
    done = jsonmode("validate", "--schema", schema_file, "/nonexistent/input.json")
    assert done.returncode == 2
    assert done.stdout == ""
    assert len(lines(done.stderr)) == 1
