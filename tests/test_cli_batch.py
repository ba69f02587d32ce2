"""``jsonmode batch`` and ``jsonmode generate --stream``.

In process against a function backend (answers chosen by the prompt, so any order of
completion can be checked), then end to end: a 200-prompt batch and a streamed
generation as real subprocesses against the scripted OpenAI-compatible server,
through real litellm, with stderr on a pseudo-terminal for the progress bar.
"""

from __future__ import annotations

import fcntl
import itertools
import json
import os
import pathlib
import pty
import re
import struct
import subprocess
import termios
import threading
import time
from typing import Any

import pytest
from support.binaries import JSONMODE, python_env
from support.openai_server import HttpError, OpenAIServer, Recorded, Reply

from jsonmode import JsonMode, cli
from jsonmode.cli import main
from jsonmode.errors import TransientBackendError
from jsonmode.retry import TransportPolicy

SCHEMA = {
    "type": "object",
    "properties": {"n": {"type": "integer"}, "word": {"type": "string"}},
    "required": ["n", "word"],
    "additionalProperties": False,
}
NUMBER = re.compile(r"#(\d+)")
COMMAND = JSONMODE
ENV = python_env(
    LITELLM_LOCAL_MODEL_COST_MAP="True",
    LITELLM_TELEMETRY="False",
    NO_PROXY="127.0.0.1,localhost",
    no_proxy="127.0.0.1,localhost",
)


def number_in(messages: Any) -> int:
    """The n of the prompt "item #n" (the first user message: re-asks come later)."""
    first = next(m["content"] for m in messages if m["role"] == "user")
    found = NUMBER.search(first)
    assert found, first
    return int(found.group(1))


def answer(n: int) -> str:
    """The model's reply to item n: every 10th (3, 13, ...) never conforms."""
    if n % 10 == 3:
        return json.dumps({"n": n})  # "word" missing, every time
    return json.dumps({"n": n, "word": f"w{n}"})


@pytest.fixture
def schema_file(tmp_path: pathlib.Path) -> pathlib.Path:
    path = tmp_path / "schema.json"
    path.write_text(json.dumps(SCHEMA))
    return path


@pytest.fixture
def backend(monkeypatch):
    """``backend(fn)``: the CLI's next JsonMode talks to ``fn(messages)``."""

    def install(fn):
        def build(args):
            return JsonMode(
                fn,
                args.mode,
                args.max_attempts,
                transport=TransportPolicy(sleep=lambda _: None),
            )

        monkeypatch.setattr(cli, "_jsonmode", build)

    return install


def batch(capsys, schema_file, input_path, output, *extra):
    status = main(
        [
            "batch",
            "--schema",
            str(schema_file),
            "--input",
            str(input_path),
            "--output",
            str(output),
            "--model",
            "unused",
            *extra,
        ]
    )
    out, err = capsys.readouterr()
    return status, out, err


def write_lines(path: pathlib.Path, lines: list[str]) -> pathlib.Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


# -- batch, in process ---------------------------------------------------------------------


def test_output_line_i_is_the_entry_of_input_line_i(capsys, backend, schema_file, tmp_path):
    def model(messages: list[dict[str, str]]) -> str:
        n = number_in(messages)
        time.sleep(0.001 * (n % 7))  # finish out of order
        return answer(n)

    backend(model)
    lines = [json.dumps({"prompt": f"item #{n}"}) for n in range(40)]
    lines[5] = "not json"
    lines[8] = ""  # blank
    lines[11] = json.dumps({"text": "no prompt"})
    lines[17] = json.dumps({"prompt": [{"role": "user", "content": "item #17"}]})  # messages
    lines[19] = json.dumps({"prompt": [{"role": "nobody"}]})  # the façade refuses it
    source = write_lines(tmp_path / "in.jsonl", lines)
    target = tmp_path / "out.jsonl"
    status, out, err = batch(capsys, schema_file, source, target, "--concurrency", "6")
    assert status == 1  # some failed
    assert out == ""
    entries = [json.loads(line) for line in target.read_text(encoding="utf-8").splitlines()]
    assert len(entries) == 40
    unreadable = {5: "not JSON", 8: "blank line", 11: "prompt", 19: "message 0"}
    for n, entry in enumerate(entries):
        if n in unreadable:
            assert entry["error"]["type"] == "UsageError"
            assert unreadable[n] in entry["error"]["message"]
        elif n % 10 == 3:
            assert entry["error"]["type"] == "AttemptsExhaustedError"
            assert "'word' is a required property" in entry["error"]["message"]
            assert "hint" not in entry["error"]  # repair cannot add a property
        else:
            assert entry == {"value": {"n": n, "word": f"w{n}"}}
    (summary,) = err.splitlines()
    assert summary == (
        "jsonmode: 40 prompts: 32 conformed (32 first try, 0 repaired, 0 retried), 8 failed; "
        + summary.split("failed; ")[1]
    )
    assert summary.endswith("(3 unreadable lines)")


def test_all_conforming_exits_0_and_writes_stdout(capsys, backend, schema_file, tmp_path):
    backend(lambda messages: answer(number_in(messages)))
    source = write_lines(
        tmp_path / "in.jsonl", [json.dumps({"prompt": f"item #{n}"}) for n in (1, 2, 4)]
    )
    status, out, err = batch(capsys, schema_file, source, "-", "--no-progress")
    assert status == 0
    assert [json.loads(line)["value"]["n"] for line in out.splitlines()] == [1, 2, 4]
    assert err.startswith("jsonmode: 3 prompts: 3 conformed (3 first try")


def test_verbose_lists_failed_lines_and_retries(capsys, backend, schema_file, tmp_path):
    failed_once: set[int] = set()

    def model(messages: list[dict[str, str]]) -> str:
        n = number_in(messages)
        if n == 2 and n not in failed_once:
            failed_once.add(n)
            raise TransientBackendError("overloaded", status_code=503)
        return answer(n)

    backend(model)
    source = write_lines(
        tmp_path / "in.jsonl", [json.dumps({"prompt": f"item #{n}"}) for n in (1, 2, 3)] + ["{"]
    )
    status, _, err = batch(capsys, schema_file, source, tmp_path / "out.jsonl", "-v")
    assert status == 1
    lines = err.splitlines()
    assert lines[0].startswith("transport: call 1 failed (TransientBackendError, HTTP 503: ")
    assert lines[1].startswith("line 3: AttemptsExhaustedError: no conforming JSON")
    assert lines[2].startswith("line 4: UsageError: not JSON")
    assert lines[3].startswith("jsonmode: 4 prompts: 2 conformed")


def test_concurrency_is_passed_on(capsys, backend, schema_file, tmp_path):
    lock = threading.Lock()
    in_flight = peak = 0

    def model(messages: list[dict[str, str]]) -> str:
        nonlocal in_flight, peak
        with lock:
            in_flight += 1
            peak = max(peak, in_flight)
        time.sleep(0.02)
        with lock:
            in_flight -= 1
        return answer(number_in(messages) * 10)  # never ends in 3

    backend(model)
    source = write_lines(
        tmp_path / "in.jsonl", [json.dumps({"prompt": f"item #{n}"}) for n in range(24)]
    )
    status, _, _ = batch(capsys, schema_file, source, tmp_path / "o.jsonl", "--concurrency", "3")
    assert status == 0
    assert peak == 3


def test_what_stops_a_batch_exits_2_and_writes_nothing(capsys, backend, schema_file, tmp_path):
    backend(lambda messages: answer(1))
    source = write_lines(tmp_path / "in.jsonl", [json.dumps({"prompt": "item #1"})])
    target = tmp_path / "out.jsonl"
    bad_schema = tmp_path / "bad.json"
    bad_schema.write_text('{"type": "strin"}')
    status, _, err = batch(capsys, bad_schema, source, target)
    assert status == 2
    assert err.startswith("jsonmode: error: InvalidSchemaError")
    status, _, err = batch(capsys, schema_file, tmp_path / "missing.jsonl", target)
    assert status == 2
    assert "cannot read" in err
    status, _, err = batch(capsys, schema_file, source, target, "--concurrency", "0")
    assert status == 2
    assert "--concurrency must be positive" in err
    status, _, err = batch(capsys, schema_file, source, tmp_path / "no" / "dir" / "out.jsonl")
    assert status == 2
    assert "cannot write" in err
    assert not target.exists()


# -- generate --stream, in process -----------------------------------------------------------

DOC = '{"n": 7, "word": "seven"}'


def event_lines(err: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in err.splitlines() if line.startswith("{")]


def test_stream_writes_partials_and_retries_as_json_lines(capsys, backend, schema_file):
    replies = iter([("{'n': 7", ""), tuple(DOC[i : i + 4] for i in range(0, len(DOC), 4))])

    def model(messages: list[dict[str, str]]):
        yield from next(replies)

    backend(model)
    status = main(["generate", "--stream", "--schema", str(schema_file), "--model", "x", "hi"])
    out, err = capsys.readouterr()
    assert status == 0, err
    assert json.loads(out) == json.loads(DOC)
    found = event_lines(err)
    assert len(found) == len(err.splitlines())  # nothing else without --verbose
    kinds = [next(iter(event)) for event in found]
    assert kinds.count("retry") == 1
    retry = found[kinds.index("retry")]["retry"]
    assert retry["attempt"] == 2
    assert retry["transport"] is False
    assert "not JSON" in retry["error"]
    after = [event["partial"] for event in found[kinds.index("retry") + 1 :]]
    assert after[-1] == json.loads(DOC)
    assert {"n": 7} in after  # the value grew piece by piece
    for before, later in itertools.pairwise(after):
        assert set(before) <= set(later)


def test_stream_of_a_backend_that_cannot_stream_shows_only_the_value(
    capsys, monkeypatch, schema_file
):
    monkeypatch.setattr(cli, "_jsonmode", lambda args: JsonMode(_Whole(DOC)))
    status = main(["generate", "--stream", "--schema", str(schema_file), "--model", "x", "hi"])
    out, err = capsys.readouterr()
    assert (status, json.loads(out), err) == (0, json.loads(DOC), "")


class _Whole:
    """A backend with ``complete`` only: it cannot stream."""

    name = "whole"
    native_schema = False

    def __init__(self, text: str) -> None:
        self.text = text

    def complete(self, request):
        from jsonmode.backends import Completion

        return Completion(self.text)

    async def acomplete(self, request):
        return self.complete(request)


# -- end to end: subprocesses, the scripted server, real litellm -------------------------------


class EchoServer(OpenAIServer):
    """The scripted server, answering each request by the prompt's item number (so that
    a batch's replies do not depend on the order its requests arrive in): item n gets
    :func:`answer`; items 5, 25, 45 ... are rate limited (429) on their first request."""

    def __init__(self) -> None:
        super().__init__()
        self.limited: set[int] = set()

    def _record(self, item: Recorded) -> tuple[Any, int]:
        with self._lock:
            self.recorded.append(item)
            number = len(self.recorded)
            n = number_in(item.body["messages"])
            if n % 20 == 5 and n not in self.limited:
                self.limited.add(n)
                return HttpError(429, "Rate limit reached", "rate_limit_error"), number
        return Reply(answer(n)), number


def on_a_terminal(argv: list[str]) -> tuple[int, str, str]:
    """Run ``argv`` with stderr on a pseudo-terminal; returns (status, stdout, stderr)."""
    master, slave = pty.openpty()
    # a terminal has a size (tqdm draws nothing in zero columns)
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    process = subprocess.Popen(
        argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=slave, env=ENV
    )
    os.close(slave)
    seen = bytearray()

    def drain() -> None:
        while True:
            try:
                data = os.read(master, 4096)
            except OSError:  # EIO: the terminal's other side is closed
                return
            if not data:
                return
            seen.extend(data)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    stdout, _ = process.communicate(timeout=240)
    reader.join(timeout=10)
    os.close(master)
    return process.returncode, stdout.decode(), seen.decode("utf-8", "replace")


@pytest.mark.integration
def test_a_200_prompt_batch_through_litellm_with_a_progress_bar(tmp_path, schema_file):
    lines = [json.dumps({"prompt": f"Extract item #{n}"}) for n in range(200)]
    lines[100] = "{broken"
    source = write_lines(tmp_path / "in.jsonl", lines)
    target = tmp_path / "out.jsonl"
    with EchoServer() as server:
        options = ["--model", "openai/test", "--api-base", server.base_url, "--timeout", "30"]
        argv = [*COMMAND, "batch", "--schema", str(schema_file), "--input", str(source)]
        status, stdout, stderr = on_a_terminal(
            [*argv, "--output", str(target), "--concurrency", "16", *options]
        )
        requests = server.request_count
        # the same, quietly: no bar
        quiet = on_a_terminal(
            [*argv, "--output", str(tmp_path / "quiet.jsonl"), "--no-progress", *options]
        )
    assert status == 1, stderr
    assert stdout == ""
    entries = [json.loads(line) for line in target.read_text(encoding="utf-8").splitlines()]
    assert len(entries) == 200
    for n, entry in enumerate(entries):
        if n == 100:
            assert entry["error"]["type"] == "UsageError"
        elif n % 10 == 3:
            assert entry["error"]["type"] == "AttemptsExhaustedError"
        else:
            assert entry == {"value": {"n": n, "word": f"w{n}"}}
    # 179 conforming prompts once, 20 failing ones 3 times, 10 rate limits
    assert requests == 179 + 20 * 3 + 10
    assert "200/200" not in stderr  # the bar counts the prompts sent: 199
    assert "199/199" in stderr
    assert "100%" in stderr
    summary = [line for line in re.split(r"[\r\n]+", stderr) if " prompts: " in line]
    assert len(summary) == 1
    assert summary[0].startswith(
        "jsonmode: 200 prompts: 179 conformed (179 first try, 0 repaired, 0 retried), 21 failed; "
    )
    assert summary[0].endswith(" s (1 unreadable line)")
    quiet_status, _, quiet_stderr = quiet
    assert quiet_status == 1
    assert "%" not in quiet_stderr
    assert quiet_stderr.strip().startswith("jsonmode: 200 prompts: 179 conformed")
    assert (tmp_path / "quiet.jsonl").read_text(encoding="utf-8") == target.read_text(
        encoding="utf-8"
    )


@pytest.mark.integration
def test_generate_stream_through_litellm(schema_file):
    doc = answer(7)
    pieces = tuple(doc[i : i + 3] for i in range(0, len(doc), 3))
    with OpenAIServer([Reply(doc, pieces=pieces)]) as server:
        done = subprocess.run(
            [
                *COMMAND,
                "generate",
                "--stream",
                "--schema",
                str(schema_file),
                "--model",
                "openai/test",
                "--api-base",
                server.base_url,
                "item #7",
            ],
            capture_output=True,
            text=True,
            env=ENV,
            timeout=120,
            check=False,
        )
        (body,) = server.requests
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"n": 7, "word": "w7"}
    assert body["stream"] is True
    partials = [event["partial"] for event in event_lines(done.stderr)]
    assert partials[0] in ({}, {"n": 7})
    assert {"n": 7} in partials  # before the word arrived
    assert partials[-1] == {"n": 7, "word": "w7"}


def test_an_interrupted_batch_keeps_every_line_before_the_first_unfinished_one(
    capsys, backend, schema_file, tmp_path
):
    """Output lines are written in order as soon as they are known: Ctrl-C (here at
    item 3) leaves items 0-2 on disk, and exits 130."""

    def model(messages: list[dict[str, str]]) -> str:
        n = number_in(messages)
        if n == 3:
            raise KeyboardInterrupt
        return json.dumps({"n": n, "word": f"w{n}"})

    backend(model)
    lines = ["not json"] + [json.dumps({"prompt": f"item #{n}"}) for n in range(6)]
    source = write_lines(tmp_path / "in.jsonl", lines)
    target = tmp_path / "out.jsonl"
    status, _, _ = batch(capsys, schema_file, source, target, "--concurrency", "1")
    assert status == 130
    written = [json.loads(line) for line in target.read_text(encoding="utf-8").splitlines()]
    assert written[0]["error"]["type"] == "UsageError"
    assert [entry["value"]["n"] for entry in written[1:]] == [0, 1, 2]
