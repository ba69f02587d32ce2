"""A real Prometheus server scrapes the exporter while requests flow; conformance is read
back with PromQL through its HTTP API, from raw counters, from the packaged recording
rules, and from every expression of the packaged Grafana dashboard."""

from __future__ import annotations

import json
import math
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry
from support.binaries import require
from support.traffic import one_cycle

import jsonmode.metrics

pytestmark = pytest.mark.integration


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Prometheus:
    def __init__(self, url: str, process: subprocess.Popen[str]) -> None:
        self.url = url
        self.process = process

    def get(self, path: str, **params: str) -> Any:
        query = urllib.parse.urlencode(params)
        with urllib.request.urlopen(f"{self.url}{path}?{query}", timeout=10) as response:
            body = json.load(response)
        assert body["status"] == "success", body
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        data = self.get("/api/v1/query", query=expr)
        assert data["resultType"] == "vector", data
        return data["result"]  # type: ignore[no-any-return]

    def scalar(self, expr: str) -> float | None:
        result = self.query(expr)
        assert len(result) <= 1, result
        return float(result[0]["value"][1]) if result else None

    def wait_for(
        self, expr: str, accept: Callable[[float | None], bool], timeout: float = 20
    ) -> float | None:
        deadline = time.monotonic() + timeout
        seen = None
        while time.monotonic() < deadline:
            seen = self.scalar(expr)
            if accept(seen):
                return seen
            time.sleep(0.2)
        pytest.fail(f"{expr} never became acceptable within {timeout} s; last value {seen}")


@pytest.fixture
def prometheus_for(tmp_path) -> Iterator[Callable[[int], Prometheus]]:
    binary = require("prometheus")
    started: list[subprocess.Popen[str]] = []

    def start(target_port: int) -> Prometheus:
        config = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(jsonmode.metrics.ASSETS / "prometheus-rules.yml")],
            "scrape_configs": [
                {
                    "job_name": "jsonmode",
                    "static_configs": [{"targets": [f"127.0.0.1:{target_port}"]}],
                }
            ],
        }
        config_file = tmp_path / "prometheus.yml"
        config_file.write_text(yaml.safe_dump(config))
        port = free_port()
        with (tmp_path / "prometheus.log").open("w") as log:
            process = subprocess.Popen(
                [
                    binary,
                    f"--config.file={config_file}",
                    f"--storage.tsdb.path={tmp_path / 'data'}",
                    f"--web.listen-address=127.0.0.1:{port}",
                    "--log.level=warn",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                text=True,
            )
        started.append(process)
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while True:
            if process.poll() is not None:
                pytest.fail("prometheus exited: " + (tmp_path / "prometheus.log").read_text())
            try:
                with urllib.request.urlopen(url + "/-/ready", timeout=1) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail("prometheus not ready: " + (tmp_path / "prometheus.log").read_text())
            time.sleep(0.2)
        return Prometheus(url, process)

    yield start
    for process in started:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def test_prometheus_scrapes_the_exporter_and_computes_conformance(prometheus_for):
    registry = jsonmode.metrics.enable(CollectorRegistry())
    try:
        with jsonmode.metrics.serve(0, registry) as exporter:
            prom = prometheus_for(exporter.port)
            # The first scrape sees every series at zero, before any request.
            prom.wait_for('up{job="jsonmode"}', lambda v: v == 1)
            prom.wait_for("count(jsonmode_requests_total)", lambda v: v is not None and v >= 24)
            assert prom.scalar("sum(jsonmode_requests_total)") == 0

            cycles = 16
            for done in range(1, cycles + 1):
                one_cycle()
                time.sleep(0.25)
                if done == cycles // 2:
                    # scraped while requests flow: a partial count arrives
                    prom.wait_for(
                        "sum(jsonmode_requests_total)", lambda v: v is not None and v >= 4
                    )
            total = 4 * cycles
            prom.wait_for("sum(jsonmode_requests_total)", lambda v: v == total)
            checks(prom, total)
    finally:
        jsonmode.metrics.disable()


def checks(prom: Prometheus, total: int) -> None:
    exact = prom.scalar(
        'sum(jsonmode_requests_total{outcome!="failed"}) / sum(jsonmode_requests_total)'
    )
    assert exact == 0.75
    by_outcome = {
        r["metric"]["outcome"]: float(r["value"][1])
        for r in prom.query('sum by (outcome) (jsonmode_requests_total{tier="prompted"})')
    }
    assert by_outcome == {"first_try": 16, "repaired": 16, "retried": 16, "failed": 16}
    assert prom.scalar('sum(jsonmode_attempts_total{result="valid"})') == 3 * total / 4
    assert prom.scalar('sum(jsonmode_failures_total{reason="schema_violation"})') == total / 4
    assert prom.scalar('jsonmode_schema_requests_total{schema="person",outcome="failed"}') == 0
    assert prom.scalar('jsonmode_schema_requests_total{schema="unnamed",outcome="failed"}') == 16

    # Rates over a window: every series was scraped at zero first, so the extrapolation
    # is the same for all of them and the ratios come out as the plain counts give.
    rate = prom.scalar(
        'sum(rate(jsonmode_requests_total{outcome!="failed"}[5m]))'
        " / sum(rate(jsonmode_requests_total[5m]))"
    )
    assert rate == pytest.approx(0.75, abs=1e-9)

    # The packaged recording rules (evaluated every second), once they see the last scrape.
    near = lambda want: lambda v: v is not None and math.isclose(v, want, abs_tol=1e-9)  # noqa: E731
    prom.wait_for('jsonmode:conformance_final:ratio_rate5m{tier="prompted"}', near(0.75))
    prom.wait_for('jsonmode:conformance_first_try:ratio_rate5m{tier="prompted"}', near(0.25))
    prom.wait_for('jsonmode:repaired:ratio_rate5m{tier="prompted"}', near(0.25))
    prom.wait_for('jsonmode:retried:ratio_rate5m{tier="prompted"}', near(0.25))
    prom.wait_for('jsonmode:attempts_per_request:mean_rate5m{tier="prompted"}', near(1.5))
    # Idle tiers give no ratio at all rather than NaN.
    assert prom.query('jsonmode:conformance_final:ratio_rate5m{tier="native"}') == []

    # The example alert: 75% is under the 95% threshold; it waits 10 minutes to fire.
    prom.wait_for(
        'count(ALERTS{alertname="JsonModeConformanceLow",alertstate="pending"})',
        lambda v: v == 1,
    )

    # Every Grafana panel's PromQL runs, and the headline stats read the same numbers.
    board = json.loads((jsonmode.metrics.ASSETS / "grafana-dashboard.json").read_text())
    by_title: dict[str, float | None] = {}
    for panel in board["panels"]:
        for target in panel.get("targets", []):
            expr = (
                target["expr"]
                .replace("$__rate_interval", "1m")
                .replace("$__range", "5m")
                .replace("$job", ".*")
                .replace("$tier", ".*")
            )
            result = prom.query(expr)  # raises unless Prometheus accepts it
            if panel["type"] == "stat" and result:
                by_title[panel["title"]] = float(result[0]["value"][1])
    assert by_title["Final conformance"] == pytest.approx(0.75, abs=1e-9)
    assert by_title["First-try conformance"] == pytest.approx(0.25, abs=1e-9)
    assert by_title["Attempts / request"] == pytest.approx(1.5, abs=1e-9)
