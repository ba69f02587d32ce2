"""The metrics commands as real subprocesses: multiprocess aggregation, the demo's
exporter while its traffic flows, the dashboard server."""

from __future__ import annotations

import queue
import signal
import subprocess
import sys
import textwrap
import threading
import time
import urllib.request
from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families
from support.binaries import JSONMODE, python_env

import jsonmode
import jsonmode.metrics
from jsonmode.backends import ScriptedBackend

pytestmark = pytest.mark.integration


class Running:
    """A subprocess whose stdout lines arrive on a queue."""

    def __init__(self, command: list[str], env: dict[str, str]) -> None:
        self.process = subprocess.Popen(
            command,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.lines: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.put(line)

    def wait_line(self, starts: str, timeout: float = 60) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=0.5)
            except queue.Empty:
                if self.process.poll() is not None and self.lines.empty():
                    break
                continue
            self.seen.append(line)
            if line.startswith(starts):
                return line.strip()
        pytest.fail(f"no line starting {starts!r}; output so far:\n{''.join(self.seen)}")

    def interrupt(self) -> int:
        self.process.send_signal(signal.SIGINT)
        try:
            return self.process.wait(timeout=20)
        finally:
            if self.process.poll() is None:
                self.process.kill()
                self.process.wait()

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        if self.process.stdout:
            self.process.stdout.close()


@pytest.fixture
def spawn() -> Iterator[type[Running]]:
    started: list[Running] = []

    class Tracked(Running):
        def __init__(self, command: list[str], env: dict[str, str]) -> None:
            super().__init__(command, env)
            started.append(self)

    yield Tracked
    for running in started:
        running.close()


def scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def sample(samples: dict, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


WORKER = textwrap.dedent(
    """
    import sys
    import jsonmode, jsonmode.metrics
    from jsonmode.backends import ScriptedBackend
    jsonmode.metrics.enable()
    good, bad = '{"a": 1}', '{"a": "x"}'
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    for plan in sys.argv[1:]:
        replies = {"first_try": [good], "retried": [bad, good], "failed": [bad, bad, bad]}[plan]
        try:
            jsonmode.JsonMode(ScriptedBackend(replies), schema_name="thing").run("x", schema)
        except jsonmode.AttemptsExhaustedError:
            pass
    """
)


def test_metrics_serve_aggregates_every_worker_process(tmp_path, spawn):
    env = python_env(PROMETHEUS_MULTIPROC_DIR=str(tmp_path))
    for plans in (["first_try"] * 3, ["retried", "retried", "failed"]):
        subprocess.run([sys.executable, "-c", WORKER, *plans], env=env, check=True, timeout=120)
    assert sorted(p.name.split("_")[0] for p in tmp_path.glob("*.db"))  # files per process

    server = spawn([*JSONMODE, "metrics", "serve", "--port", "0"], env)
    url = server.wait_line("serving ").split()[1]
    samples = scrape(url)
    counts = {
        outcome: sample(
            samples, "jsonmode_requests_total", tier="prompted", mode="strict", outcome=outcome
        )
        for outcome in ("first_try", "repaired", "retried", "failed")
    }
    assert counts == {"first_try": 3, "repaired": 0, "retried": 2, "failed": 1}
    assert sample(samples, "jsonmode_attempts_total", tier="prompted", result="valid") == 5
    assert (
        sample(samples, "jsonmode_attempts_total", tier="prompted", result="schema_violation") == 5
    )
    assert sample(samples, "jsonmode_attempts_per_request_count", tier="prompted") == 6
    assert sample(samples, "jsonmode_attempts_per_request_sum", tier="prompted") == 3 + 4 + 3
    assert sample(samples, "jsonmode_schema_requests_total", schema="thing", outcome="retried") == 2
    # label values pre-created in the workers are there at zero
    assert (
        "jsonmode_requests_total",
        (("mode", "repair"), ("outcome", "failed"), ("tier", "native")),
    ) in samples
    assert server.interrupt() == 0


def test_metrics_serve_needs_the_multiprocess_dir():
    env = python_env()
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    done = subprocess.run(
        [*JSONMODE, "metrics", "serve", "--port", "0"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert "PROMETHEUS_MULTIPROC_DIR is not set" in done.stderr


def test_a_multiprocess_dir_set_too_late_is_reported(tmp_path):
    code = (
        "import os, prometheus_client, jsonmode.metrics;"
        f"os.environ['PROMETHEUS_MULTIPROC_DIR'] = {str(tmp_path)!r};"
        "jsonmode.metrics.enable()"
    )
    env = python_env()
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False
    )
    assert done.returncode != 0
    assert "set after prometheus_client was imported" in done.stderr


def test_metrics_assets_prints_the_folder():
    done = subprocess.run(
        [*JSONMODE, "metrics", "assets"],
        env=python_env(),
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout.strip() == str(jsonmode.metrics.ASSETS)


def test_demo_serves_its_metrics_while_traffic_flows(spawn):
    env = python_env()
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    demo = spawn([*JSONMODE, "demo", "--metrics-port", "0", "--duration", "6"], env)
    url = demo.wait_line("metrics: ").split()[1]
    assert "jsonmode dashboard --metrics-url " + url in demo.wait_line("watch:")
    demo.wait_line("== demo traffic", timeout=180)
    first = scrape(url)
    time.sleep(2.5)
    second = scrape(url)

    def requests(samples: dict, tier: str) -> float:
        return sum(
            value
            for (name, labels), value in samples.items()
            if name == "jsonmode_requests_total" and ("tier", tier) in labels
        )

    assert requests(first, "constrained") >= 3  # the demo's constrained scenarios
    assert requests(second, "prompted") + requests(second, "native") > requests(
        first, "prompted"
    ) + requests(first, "native"), "traffic flows between two scrapes"
    assert sample(second, "jsonmode_compile_duration_seconds_count") >= 1
    assert sample(second, "jsonmode_mask_duration_seconds_count") >= 1
    assert demo.process.wait(timeout=60) == 0


def test_dashboard_command_serves_the_page_for_an_exporter(spawn):
    registry = jsonmode.metrics.enable(CollectorRegistry())
    try:
        jsonmode.JsonMode(ScriptedBackend(['{"a": 1}'])).run("x", {"type": "object"})
        with jsonmode.metrics.serve(0, registry) as exporter:
            dashboard = spawn(
                [*JSONMODE, "dashboard", "--metrics-url", exporter.url, "--port", "0"], python_env()
            )
            url = dashboard.wait_line("dashboard on ").split()[2]
            with urllib.request.urlopen(url, timeout=10) as response:
                assert b"dashboard.js" in response.read()
            samples = scrape(url + "metrics")
            assert (
                sample(
                    samples,
                    "jsonmode_requests_total",
                    tier="prompted",
                    mode="strict",
                    outcome="first_try",
                )
                == 1
            )
            assert dashboard.interrupt() == 0
    finally:
        jsonmode.metrics.disable()


def test_demo_duration_needs_a_metrics_port(capsys):
    from jsonmode.cli import main

    assert main(["demo", "--duration", "3"]) == 2
    assert "--duration needs --metrics-port" in capsys.readouterr().err
