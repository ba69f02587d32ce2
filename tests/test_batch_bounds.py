"""Batches in bounded memory and threads (issue 39, items 6 and 9).

``jsonmode batch`` streams its input and drops each output line once written: its peak
memory is the same for an input four times larger, whether the lines or the replies
are large. ``map`` runs at most ``concurrency`` worker threads plus one for deadlines
(a backend call runs in its worker, never in a thread of its own), a call past its
deadline goes on in another worker, and a thread that cannot start never costs the
results.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import pytest
from support.binaries import python_env
from support.bounded import PEAK_MB, run_python

from jsonmode import JsonMode, Result
from jsonmode.backends import deadline
from jsonmode.retry import TransportPolicy

# The child runs `jsonmode batch` three times in one process against a fast function
# backend: 50 lines (imports, caches), n lines, then 4n. peak_mb() is a high-water
# mark: a batch whose memory does not grow with its input leaves it where n put it.
BATCH_TWICE = r"""
import json, os, sys, tempfile
import jsonmode.cli.startup as startup
from jsonmode import JsonMode, cli
from jsonmode.cli import common
from jsonmode.retry import TransportPolicy

startup.import_litellm_early = lambda *args, **kwargs: None  # not this test's memory
count, line_bytes, reply_bytes = map(int, sys.argv[1:4])
folder = tempfile.mkdtemp()
schema = os.path.join(folder, "schema.json")
with open(schema, "w") as file:
    json.dump({"type": "object", "properties": {"n": {"type": "integer"}, "w": {"type": "string"}},
               "required": ["n", "w"]}, file)
word = "w" * reply_bytes

def model(prompt: str) -> str:
    n = int(prompt.split("#", 1)[1].split(" ", 1)[0])
    return '{"n": %d, "w": "%s"}' % (n, word)

common.build_jsonmode = lambda args: JsonMode(model, args.mode, args.max_attempts)
peaks = []
for lines in (50, count, 4 * count):  # the first run takes the one-time costs
    source = os.path.join(folder, f"in{lines}.jsonl")
    with open(source, "w") as file:
        pad = "x" * line_bytes
        for n in range(lines):
            file.write(json.dumps({"id": n, "prompt": f"item #{n} {pad}"}) + "\n")
    out = os.path.join(folder, f"out{lines}.jsonl")
    status = cli.main(["batch", "--schema", schema, "--input", source, "--output", out,
                       "--model", "x", "--no-progress", "--concurrency", "8"])
    assert status == 0, status
    with open(out, "rb") as file:
        assert sum(1 for _ in file) == lines
    os.remove(source)
    peaks.append(peak_mb())
print(json.dumps(peaks[1:]))
"""


def batch_peaks(count: int, line_bytes: int, reply_bytes: int) -> tuple[float, float]:
    import os

    env = python_env()
    saved = dict(os.environ)
    os.environ.update(env)  # PYTHONPATH: this checkout
    try:
        out = run_python(PEAK_MB + BATCH_TWICE, 120, str(count), str(line_bytes), str(reply_bytes))
    finally:
        os.environ.clear()
        os.environ.update(saved)
    first, second = json.loads(out.splitlines()[-1])
    return first, second


def test_batch_memory_does_not_grow_with_the_input_lines():
    """2 500 then 10 000 lines of 4 KB (10 MB, then 40 MB): the old command read the
    whole input and kept every line and result, and its peak rose by ~100 MB for the
    second; now by at most a few MB."""
    first, second = batch_peaks(2500, 4000, 0)
    assert second - first < 8, (first, second)


def test_batch_memory_does_not_grow_with_the_replies():
    """400 then 1 600 replies of 50 KB (20 MB, then 80 MB of output): the old command
    kept every Result (its peak rose by ~110 MB for the second); now by a few MB."""
    first, second = batch_peaks(400, 0, 50_000)
    assert second - first < 8, (first, second)


def sampled_peak_threads(work: Any) -> tuple[Any, int]:
    peak = threading.active_count()
    stop = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not stop.is_set():
            peak = max(peak, threading.active_count())
            time.sleep(0.002)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        result = work()
    finally:
        stop.set()
        sampler.join()
    return result, peak


def test_map_runs_at_most_concurrency_threads_with_deadlines():
    """concurrency=1000 and a backend with a timeout, all 1000 calls in flight at once:
    1000 workers and one watchdog (the old map ran a second thread per call: 2 001
    threads then)."""
    lock = threading.Lock()
    all_in = threading.Event()
    in_flight = 0
    counted: list[int] = []

    def model(prompt: str) -> str:
        nonlocal in_flight
        with lock:
            in_flight += 1
            if in_flight == 1000:
                counted.append(threading.active_count())
                all_in.set()
        all_in.wait(60)
        return '{"n": 1}'

    jm = JsonMode(model, timeout=120)
    before = threading.active_count()
    results = jm.map([f"p{i}" for i in range(1000)], {"type": "object"}, concurrency=1000)
    assert all(isinstance(entry, Result) for entry in results)
    assert counted, "the 1000 calls were never in flight at once"
    assert counted[0] - before <= 1000 + 1, counted  # the workers and the watchdog


def test_a_call_past_its_deadline_goes_on_in_another_thread():
    """Prompt 0's first call hangs past the 0.3 s timeout: the batch does not wait for
    it; the transport policy retries it (in another worker), and the stuck thread, once
    its call returns, is dropped (counted as abandoned until then)."""
    end = time.monotonic() + 30  # calls other tests abandoned
    while deadline.abandoned() and time.monotonic() < end:
        time.sleep(0.05)
    assert deadline.abandoned() == 0
    release = threading.Event()
    calls: list[str] = []

    def model(prompt: str) -> str:
        calls.append("p0" if "p0" in prompt else "other")
        if calls[-1] == "p0" and calls.count("p0") == 1:
            release.wait(20)  # the stuck call
            return '{"stuck": true}'
        return '{"n": 1}'

    jm = JsonMode(
        model,
        timeout=0.3,
        transport=TransportPolicy(initial_wait=0, max_wait=0, sleep=lambda _: None),
    )
    started = time.monotonic()
    before = threading.active_count()
    results, peak = sampled_peak_threads(
        lambda: jm.map([f"p{i}" for i in range(6)], {"type": "object"}, concurrency=2)
    )
    took = time.monotonic() - started
    assert took < 10
    assert [entry.data for entry in results] == [{"n": 1}] * 6
    assert results[0].attempts[0].transport_retries == 1
    assert calls.count("p0") == 2
    # two workers, the stuck one, the watchdog (and the sampler)
    assert peak - before - 1 <= 2 + 1 + 1, peak
    assert deadline.abandoned() == 1  # still in its call
    release.set()
    end = time.monotonic() + 10
    while deadline.abandoned() and time.monotonic() < end:
        time.sleep(0.01)
    assert deadline.abandoned() == 0


@pytest.mark.parametrize("can_start", [0, 3])
def test_a_thread_that_cannot_start_loses_nothing(monkeypatch, can_start):
    """Thread.start fails after ``can_start`` threads (an address-space or pid limit):
    map runs with the threads it has (none: the caller's own thread does the work) and
    returns every result. The old map raised the untyped RuntimeError and lost all."""
    started = 0
    real_start = threading.Thread.start

    def start(self: threading.Thread) -> None:
        nonlocal started
        if started >= can_start:
            raise RuntimeError("can't start new thread")
        started += 1
        real_start(self)

    def model(prompt: str) -> str:
        time.sleep(0.01)
        return json.dumps({"p": prompt.rsplit("\n", 1)[-1]})

    monkeypatch.setattr(threading.Thread, "start", start)
    results = JsonMode(model).map(
        [f"p{i}" for i in range(20)], {"type": "object"}, concurrency=10, progress=False
    )
    monkeypatch.undo()
    assert [entry.data for entry in results] == [{"p": f"p{i}"} for i in range(20)]
    assert started == can_start


# The real command in a child, as `python -m jsonmode.cli` runs it, against a function
# backend whose calls from line 3 on never return, with a non-daemon thread that never
# ends (as litellm's logging pool would if a task of it hung): the interpreter's exit
# joins such a thread.
HELD_AT_EXIT = r"""
import runpy, sys, threading
import jsonmode.cli.startup as startup
from jsonmode import JsonMode
from jsonmode.cli import common

startup.import_litellm_early = lambda *args, **kwargs: None
forever = threading.Event()
threading.Thread(target=forever.wait, name="held-at-exit").start()  # not a daemon

def model(prompt: str) -> str:
    n = int(prompt.rsplit("#", 1)[1])
    if n >= 3:
        forever.wait()  # a request still in flight at Ctrl-C
    return '{"n": %d, "word": "w"}' % n

common.build_jsonmode = lambda args: JsonMode(model, args.mode, args.max_attempts)
sys.argv = ["jsonmode", *sys.argv[1:]]
runpy.run_module("jsonmode.cli", run_name="__main__", alter_sys=True)
"""


def test_ctrl_c_ends_the_command_even_when_a_thread_would_hold_the_exit(tmp_path):
    """SIGINT with requests in flight: exit 130 at once, the finished lines on disk. The
    old command returned 130 and the interpreter's exit then waited on the thread."""
    import os
    import signal
    import subprocess
    import sys

    schema = tmp_path / "schema.json"
    schema.write_text(json.dumps({"type": "object", "required": ["n", "word"]}))
    source = tmp_path / "in.jsonl"
    source.write_text("".join(json.dumps({"prompt": f"item #{n}"}) + "\n" for n in range(8)))
    target = tmp_path / "out.jsonl"
    argv = [sys.executable, "-c", HELD_AT_EXIT, "batch", "--schema", str(schema)]
    argv += ["--input", str(source), "--output", str(target), "--no-progress", "--model", "x"]
    process = subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=python_env(),
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        end = time.monotonic() + 60
        while not (target.exists() and target.read_bytes().count(b"\n") == 3):
            assert process.poll() is None, process.communicate()
            assert time.monotonic() < end, "the first 3 lines never came"
            time.sleep(0.05)
        time.sleep(0.2)
        process.send_signal(signal.SIGINT)
        try:
            _, stderr = process.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            pytest.fail("the command was still running 15 s after Ctrl-C")
    finally:
        if process.poll() is None:
            os.kill(process.pid, signal.SIGKILL)
            process.wait()
    assert process.returncode == 130, stderr
    (message,) = stderr.decode().splitlines()
    assert message.startswith("jsonmode: interrupted after 3 prompts: 3 conformed")
    assert message.endswith(
        f"3 of 8 lines written in {target}; run the same command with --resume to do the rest"
    )
    assert [json.loads(line)["value"]["n"] for line in target.read_text().splitlines()] == [0, 1, 2]


ECHO_BATCH = r"""
import sys
import jsonmode.cli.startup as startup
from jsonmode import JsonMode, cli
from jsonmode.cli import common

startup.import_litellm_early = lambda *args, **kwargs: None

def model(prompt: str) -> str:
    return '{"n": %s, "word": "w"}' % prompt.rsplit("#", 1)[1]

common.build_jsonmode = lambda args: JsonMode(model, args.mode, args.max_attempts)
sys.exit(cli.main(sys.argv[1:]))
"""


def test_batch_answers_a_line_before_the_input_ends(tmp_path):
    """``producer | jsonmode batch --input - --output -``: line 1's output comes while
    the producer is still writing (the old command read all of stdin first)."""
    import subprocess
    import sys

    schema = tmp_path / "schema.json"
    schema.write_text(json.dumps({"type": "object", "required": ["n", "word"]}))
    argv = [sys.executable, "-c", ECHO_BATCH, "batch", "--schema", str(schema)]
    argv += ["--input", "-", "--output", "-", "--no-progress", "--model", "x"]
    with subprocess.Popen(
        argv,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=python_env(),
    ) as process:
        assert process.stdin is not None
        assert process.stdout is not None
        process.stdin.write(b'{"prompt": "item #1"}\n')
        process.stdin.flush()
        got: list[bytes] = []
        reader = threading.Thread(target=lambda: got.append(process.stdout.readline()))
        reader.start()
        reader.join(30)
        alive = reader.is_alive()
        out, err = process.communicate(b'{"prompt": "item #2"}\n', timeout=60)
        reader.join()
    assert not alive, "no output line before the input ended"
    assert json.loads(got[0]) == {"value": {"n": 1, "word": "w"}}
    assert json.loads(out) == {"value": {"n": 2, "word": "w"}}
    assert process.returncode == 0, err
