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
import signal
import struct
import subprocess
import termios
import threading
import time
from typing import Any

import pytest
from support.binaries import JSONMODE, python_env
from support.openai_server import Delay, HttpError, OpenAIServer, Recorded, Reply

from jsonmode import JsonMode
from jsonmode.cli import common, main
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

        monkeypatch.setattr(common, "build_jsonmode", build)

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
    monkeypatch.setattr(common, "build_jsonmode", lambda args: JsonMode(_Whole(DOC)))
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
    assert "199/199" not in stderr  # the bar counts every line, the unreadable one too
    assert "200/200" in stderr
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


# -- issue 38: finished work is never lost, output lines keep what the input said ----------


def prompts_file(path: pathlib.Path, count: int, **extra: Any) -> pathlib.Path:
    return write_lines(
        path, [json.dumps({"id": f"r{n}", "prompt": f"item #{n}", **extra}) for n in range(count)]
    )


def read_entries(path: pathlib.Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_an_existing_output_is_refused_without_resume_or_overwrite(
    capsys, backend, schema_file, tmp_path
):
    asked: list[int] = []
    backend(lambda messages: asked.append(number_in(messages)) or answer(number_in(messages)))
    source = prompts_file(tmp_path / "in.jsonl", 3)
    target = tmp_path / "out.jsonl"
    target.write_text('{"id":"r0","value":{"n":0,"word":"w0"}}\n', encoding="utf-8")
    status, _, err = batch(capsys, schema_file, source, target, "--no-progress")
    assert status == 2
    assert f"jsonmode: error: UsageError: {target} already exists" in err
    assert "--resume" in err  # the hint names both
    assert "--overwrite" in err
    assert target.read_text(encoding="utf-8") == '{"id":"r0","value":{"n":0,"word":"w0"}}\n'
    assert asked == []
    status, _, _ = batch(capsys, schema_file, source, target, "--no-progress", "--overwrite")
    assert status == 0
    assert [entry["value"]["n"] for entry in read_entries(target)] == [0, 1, 2]
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")  # an empty file holds no work: no flag needed
    assert batch(capsys, schema_file, source, empty, "--no-progress")[0] == 0


def test_input_and_output_the_same_file_is_an_error(capsys, backend, schema_file, tmp_path):
    backend(lambda messages: answer(number_in(messages)))
    source = prompts_file(tmp_path / "in.jsonl", 2)
    before = source.read_bytes()
    (tmp_path / "link.jsonl").symlink_to(source)
    for target in (source, tmp_path / "link.jsonl", tmp_path / "." / "in.jsonl"):
        for flag in ("--overwrite", "--resume"):
            status, _, err = batch(capsys, schema_file, source, target, flag)
            assert status == 2
            assert "--input and --output are the same file" in err
    assert source.read_bytes() == before


def test_resume_appends_only_the_missing_lines(capsys, backend, schema_file, tmp_path):
    """Finished lines are kept byte for byte and never asked again; a torn last line
    (no newline) is written again; the summary says how many were skipped."""
    asked: list[int] = []

    def model(messages: list[dict[str, str]]) -> str:
        asked.append(number_in(messages))
        return answer(number_in(messages))

    backend(model)
    source = prompts_file(tmp_path / "in.jsonl", 8)
    target = tmp_path / "out.jsonl"
    kept = "".join(
        json.dumps({"id": f"r{n}", "value": {"n": n, "word": "earlier"}}) + "\n" for n in range(3)
    )
    target.write_text(kept + '{"id":"r3","val', encoding="utf-8")
    status, _, err = batch(capsys, schema_file, source, target, "--resume", "--no-progress")
    assert status == 1  # item 3 never conforms
    assert sorted(set(asked)) == [3, 4, 5, 6, 7]
    text = target.read_text(encoding="utf-8")
    assert text.startswith(kept)
    entries = read_entries(target)
    assert [entry["id"] for entry in entries] == [f"r{n}" for n in range(8)]
    assert entries[3]["error"]["type"] == "AttemptsExhaustedError"
    assert [entry["value"]["n"] for entry in entries[4:]] == [4, 5, 6, 7]
    assert err.strip().endswith("3 lines already done, skipped (--resume)")
    assert err.startswith("jsonmode: 5 prompts: 4 conformed")
    # all done: nothing is asked, and the exit status counts the failed line kept
    asked.clear()
    status, _, err = batch(capsys, schema_file, source, target, "--resume", "--no-progress")
    assert (status, asked) == (1, [])
    assert "8 lines already done, skipped (--resume), 1 of them failed" in err
    assert target.read_text(encoding="utf-8") == text


def test_resume_refuses_an_output_that_is_not_this_inputs(capsys, backend, schema_file, tmp_path):
    backend(lambda messages: answer(number_in(messages)))
    source = prompts_file(tmp_path / "in.jsonl", 3)
    target = tmp_path / "out.jsonl"
    cases = {
        '{"id":"r0","value":1}\n{"id":"other","value":2}\n': "line 2 is not the output of input",
        '{"id":"r0","value":1}\nnot json\n{"id":"r2","value":2}\n': "line 2 is not an output line",
        "".join(f'{{"id":"r{n}","value":1}}\n' for n in range(4)): "more lines than the input",
    }
    for text, message in cases.items():
        target.write_text(text, encoding="utf-8")
        status, _, err = batch(capsys, schema_file, source, target, "--resume")
        assert status == 2, err
        assert message in err
        assert "--overwrite" in err
        assert target.read_text(encoding="utf-8") == text  # untouched
    status, _, err = batch(capsys, schema_file, source, "-", "--resume")
    assert status == 2
    assert "--resume needs --output FILE" in err


def test_output_lines_carry_the_input_lines_other_keys(capsys, backend, schema_file, tmp_path):
    backend(lambda messages: answer(number_in(messages)))
    lines = [
        json.dumps({"id": 1, "prompt": "item #1", "metadata": {"source": "a.txt", "page": 2}}),
        json.dumps({"custom_id": "c2", "prompt": "item #3"}),  # fails: carried all the same
        json.dumps({"custom_id": "c3", "text": "no prompt"}),
        json.dumps({"id": 4, "value": "clash", "prompt": "item #4"}),
        "not json",
    ]
    source = write_lines(tmp_path / "in.jsonl", lines)
    target = tmp_path / "out.jsonl"
    status, _, _ = batch(capsys, schema_file, source, target, "--no-progress")
    assert status == 1
    first, second, third, fourth, fifth = read_entries(target)
    assert first == {
        "id": 1,
        "metadata": {"source": "a.txt", "page": 2},
        "value": {"n": 1, "word": "w1"},
    }
    assert second["custom_id"] == "c2"
    assert second["error"]["type"] == "AttemptsExhaustedError"
    assert third["custom_id"] == "c3"
    assert third["text"] == "no prompt"
    assert third["error"]["type"] == "UsageError"
    assert fourth["id"] == 4
    assert 'the key "value" is a key of the output line' in fourth["error"]["message"]
    assert set(fifth) == {"error"}


def test_openai_batch_requests_run_from_their_body_messages(capsys, backend, schema_file, tmp_path):
    seen: list[Any] = []

    def model(messages: list[dict[str, str]]) -> str:
        seen.append(messages)
        return answer(number_in(messages))

    backend(model)

    def request(custom_id: str, n: int, **body: Any) -> str:
        messages = [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": f"item #{n}"},
        ]
        return json.dumps(
            {
                "custom_id": custom_id,
                "method": "POST",
                "url": "/v1/chat/completions",
                "body": {"model": "gpt-4o-mini", "messages": messages, **body},
            }
        )

    lines = [
        request("a", 1, max_tokens=100),
        request("b", 2, temperature=0.2),
        json.dumps({"custom_id": "c", "url": "/v1/embeddings", "body": {"input": "x"}}),
        json.dumps({"custom_id": "d", "body": {"model": "m"}}),
    ]
    source = write_lines(tmp_path / "in.jsonl", lines)
    target = tmp_path / "out.jsonl"
    status, _, err = batch(capsys, schema_file, source, target, "--no-progress")
    assert status == 1
    a, b, c, d = read_entries(target)
    assert a == {
        "custom_id": "a",
        "method": "POST",
        "url": "/v1/chat/completions",
        "value": {"n": 1, "word": "w1"},
    }
    assert b["value"] == {"n": 2, "word": "w2"}
    assert "only /v1/chat/completions requests" in c["error"]["message"]
    assert c["custom_id"] == "c"
    assert 'needs "body": {"messages": [...]}' in d["error"]["message"]
    assert any("Be brief." in m["content"] for m in seen[0] if m["role"] == "system")
    note = err.splitlines()[0]
    assert note == (
        "jsonmode: note: not used from the OpenAI Batch request bodies: max_tokens, model, "
        "temperature (this command's options apply: --model, --max-tokens ...)"
    )


def test_repairs_are_recorded_and_details_on_request(capsys, backend, schema_file, tmp_path):
    replies = {1: '{"n": "1", "word": "w1"}', 2: "not json", 4: answer(4)}
    calls: dict[int, int] = {}

    def model(messages: list[dict[str, str]]) -> str:
        n = number_in(messages)
        calls[n] = calls.get(n, 0) + 1
        return replies[n] if calls[n] == 1 else answer(n)

    backend(model)
    source = write_lines(
        tmp_path / "in.jsonl", [json.dumps({"prompt": f"item #{n}"}) for n in (1, 2, 4)]
    )
    target = tmp_path / "out.jsonl"
    status, _, _ = batch(capsys, schema_file, source, target, "--mode", "repair", "--no-progress")
    assert status == 0
    one, two, four = read_entries(target)
    assert one == {
        "value": {"n": 1, "word": "w1"},
        "repairs": [{"path": "$.n", "kind": "string_to_integer"}],
    }
    assert two == {"value": {"n": 2, "word": "w2"}}  # re-asked, nothing repaired
    assert four == {"value": {"n": 4, "word": "w4"}}
    calls.clear()
    status, _, _ = batch(
        capsys, schema_file, source, target, "--mode", "repair", "--details", "--overwrite"
    )
    assert status == 0
    one, two, _ = read_entries(target)
    (attempt,) = one["details"]["attempts"]
    assert attempt["outcome"] == "valid"
    assert attempt["repairs"] == [
        {"path": "$.n", "kind": "string_to_integer", "before": "1", "after": 1}
    ]
    assert one["details"]["tier"] == "prompted"
    failed, valid = two["details"]["attempts"]
    assert failed["outcome"] == "invalid_json"
    assert failed["raw"] == "not json"
    assert failed["calls"] == 1
    assert valid["outcome"] == "valid"
    assert "raw" not in valid


def test_a_bom_or_a_bad_byte_costs_only_its_line(capsys, backend, schema_file, tmp_path):
    backend(lambda messages: answer(number_in(messages)))
    source = tmp_path / "in.jsonl"
    source.write_bytes(
        b'\xef\xbb\xbf{"prompt": "item #1"}\r\n'  # a BOM (Notepad) and CRLF
        b'{"prompt": "item #2 \xff"}\n'  # not UTF-8
        b'\xef\xbb\xbf{"prompt": "item #4"}\n'  # files joined with cat: a BOM mid-file
    )
    target = tmp_path / "out.jsonl"
    status, _, err = batch(capsys, schema_file, source, target, "--no-progress")
    assert status == 1, err
    one, two, four = read_entries(target)
    assert one == {"value": {"n": 1, "word": "w1"}}
    assert two["error"] == {
        "type": "UsageError",
        "message": "not UTF-8 text (at byte 20 of the line)",
    }
    assert four == {"value": {"n": 4, "word": "w4"}}
    assert "(1 unreadable line)" in err


def test_grammar_and_regex_batches_write_the_texts(capsys, backend, tmp_path):
    backend(lambda messages: "yes" if "#1" in messages[-1]["content"] else "maybe")
    source = write_lines(
        tmp_path / "in.jsonl", [json.dumps({"id": n, "prompt": f"item #{n}"}) for n in (1, 2)]
    )
    grammar = tmp_path / "answer.gbnf"
    grammar.write_text('root ::= "yes" | "no"\n')
    for flag, value in (("--grammar", str(grammar)), ("--regex", "yes|no")):
        target = tmp_path / f"out{flag}.jsonl"
        status = main(
            [
                *("batch", flag, value, "--input", str(source), "--output", str(target)),
                *("--model", "unused", "--max-attempts", "1", "--no-progress"),
            ]
        )
        capsys.readouterr()
        assert status == 1
        first, second = read_entries(target)
        assert first == {"id": 1, "value": "yes"}
        assert second["id"] == 2
        assert second["error"]["type"] == "AttemptsExhaustedError"
    with pytest.raises(SystemExit):  # one target, not two
        main(["batch", "--regex", "x", "--schema", "s.json", "--input", "-", "--output", "-"])
    capsys.readouterr()


def test_a_backend_that_never_answers_exits_3_and_each_line_says_why(
    capsys, backend, schema_file, tmp_path
):
    def model(messages: list[dict[str, str]]) -> str:
        raise TransientBackendError("cannot connect to 127.0.0.1:1 (connection refused)")

    backend(model)
    source = prompts_file(tmp_path / "in.jsonl", 30)
    target = tmp_path / "out.jsonl"
    status, _, err = batch(capsys, schema_file, source, target, "--no-progress")
    assert status == 3, err
    entries = read_entries(target)
    assert len(entries) == 30
    for entry in entries:
        assert entry["error"]["type"] == "TransientBackendError"
        assert "cannot connect to 127.0.0.1:1 (connection refused)" in entry["error"]["message"]
    assert any("the batch stopped sending" in e["error"]["message"] for e in entries)


def test_a_failed_write_is_a_typed_error_exit_2(capsys, backend, schema_file, tmp_path):
    backend(lambda messages: answer(number_in(messages)))
    source = prompts_file(tmp_path / "in.jsonl", 3)
    status, _, err = batch(capsys, schema_file, source, "/dev/full", "--no-progress")
    assert status == 2
    assert err.startswith(
        "jsonmode: error: UsageError: cannot write /dev/full after 0 lines: No space left on device"
    )
    assert "Traceback" not in err


class HoldingServer(OpenAIServer):
    """Answers item n with a conforming document, except items from ``hold_from`` on,
    which it holds ``hold_for`` seconds first (a slow model); records each item asked."""

    def __init__(self, hold_from: int | None, hold_for: float = 60.0) -> None:
        super().__init__()
        self.hold_from = hold_from
        self.hold_for = hold_for
        self.asked: list[int] = []

    def _record(self, item: Recorded) -> tuple[Any, int]:
        with self._lock:
            self.recorded.append(item)
            n = number_in(item.body["messages"])
            self.asked.append(n)
            reply = Reply(json.dumps({"n": n, "word": f"w{n}"}))
            if self.hold_from is not None and n >= self.hold_from:
                return Delay(self.hold_for, reply), len(self.recorded)
            return reply, len(self.recorded)


def sigint_default() -> None:
    """In the child: SIGINT as a terminal delivers it (Python then raises KeyboardInterrupt),
    even when this test runs where SIGINT is ignored (a background job)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def finished_lines(path: pathlib.Path) -> int:
    if not path.exists():
        return 0
    return path.read_bytes().count(b"\n")


@pytest.mark.integration
def test_ctrl_c_keeps_the_finished_lines_and_resume_does_only_the_rest(tmp_path, schema_file):
    """SIGINT to a real batch whose lines from 12 on hang: exit 130 at once (the requests
    in flight are abandoned), a summary naming --resume, the 12 finished lines on disk;
    then --resume asks only for lines 12..19 and the file is whole and in order."""
    source = prompts_file(tmp_path / "in.jsonl", 20)
    target = tmp_path / "out.jsonl"
    with HoldingServer(hold_from=12) as server:
        argv = [*COMMAND, "batch", "--schema", str(schema_file), "--input", str(source)]
        argv += ["--output", str(target), "--concurrency", "4", "--no-progress"]
        argv += ["--model", "openai/test", "--api-base", server.base_url, "--timeout", "60"]
        process = subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=ENV,
            preexec_fn=sigint_default,
        )
        try:
            deadline = time.monotonic() + 60
            while finished_lines(target) < 12 or len(server.asked) < 16:
                assert process.poll() is None, process.communicate()
                assert time.monotonic() < deadline, "the first 12 lines never came"
                time.sleep(0.05)
            time.sleep(0.2)
            interrupted = time.monotonic()
            process.send_signal(signal.SIGINT)
            _, stderr = process.communicate(timeout=20)
            took = time.monotonic() - interrupted
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
        first_asked = list(server.asked)
        server.hold_from = None
        done = subprocess.run(
            [*argv, "--resume"], capture_output=True, text=True, env=ENV, timeout=120, check=False
        )
        second_asked = server.asked[len(first_asked) :]
    assert process.returncode == 130, stderr
    assert took < 10  # not the 60 s the held requests would take
    (summary,) = stderr.decode().splitlines()
    assert summary.startswith("jsonmode: interrupted after 12 prompts: 12 conformed")
    assert summary.endswith(
        f"12 of 20 lines written in {target}; run the same command with --resume to do the rest"
    )
    assert sorted(first_asked) == list(range(16))  # 12 done, 4 in flight (concurrency 4)
    assert done.returncode == 0, done.stderr
    assert sorted(second_asked) == list(range(12, 20))  # nothing finished was asked again
    assert done.stderr.strip().endswith("12 lines already done, skipped (--resume)")
    entries = read_entries(target)
    assert entries == [{"id": f"r{n}", "value": {"n": n, "word": f"w{n}"}} for n in range(20)]


@pytest.mark.integration
def test_a_closed_stdout_ends_the_batch_quietly(tmp_path, schema_file):
    """``jsonmode batch --output - | head -1``: the reader goes away after one line; the
    batch ends with status 141 (128 + SIGPIPE, as a shell reports any tool that SIGPIPE
    ends) and nothing on stderr, no traceback."""
    source = prompts_file(tmp_path / "in.jsonl", 10)
    with HoldingServer(hold_from=1, hold_for=1.0) as server:
        argv = [*COMMAND, "batch", "--schema", str(schema_file), "--input", str(source)]
        argv += ["--output", "-", "--no-progress", "--concurrency", "10"]
        argv += ["--model", "openai/test", "--api-base", server.base_url]
        with subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=ENV
        ) as process:
            assert process.stdout is not None
            assert process.stderr is not None
            first = process.stdout.readline()
            process.stdout.close()  # head -1 exits
            stderr = process.stderr.read()
            status = process.wait(timeout=60)
    assert (status, stderr) == (141, b"")
    assert json.loads(first) == {"id": "r0", "value": {"n": 0, "word": "w0"}}
