"""The live dashboard: its server, and the page itself in headless Chromium.

The browser test makes every poll of the page deterministic: the dashboard's source
runs one cycle of scripted requests (first_try, repaired, retried, failed) and one
constrained generation (first_try) before it fetches the exporter, so whatever the
timing, each window the page computes holds whole cycles and the tiles must read 80%
final and 40% first-try conformance and 1.4 attempts per request. A screenshot is kept in
``test-artifacts/dashboard.png``.
"""

from __future__ import annotations

import re
import struct
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest
import torch
from prometheus_client import CollectorRegistry
from support.binaries import ARTIFACTS, require
from support.traffic import one_cycle

import jsonmode.metrics
from jsonmode import JsonMode, UsageError
from jsonmode.demo import CONSTRAINED_SCHEMA, random_local_model
from jsonmode.metrics.dashboard import metrics_url, serve_dashboard

pytestmark = pytest.mark.integration


def get(url: str) -> tuple[int, str, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.headers["Content-Type"], response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.headers["Content-Type"], error.read().decode()


@pytest.fixture
def registry() -> Iterator[CollectorRegistry]:
    fresh = jsonmode.metrics.enable(CollectorRegistry())
    yield fresh
    jsonmode.metrics.disable()


# -- the server -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("127.0.0.1:9464", "http://127.0.0.1:9464/metrics"),
        ("http://host:9000", "http://host:9000/metrics"),
        ("http://host:9000/", "http://host:9000/metrics"),
        ("https://host/custom/path", "https://host/custom/path"),
    ],
)
def test_metrics_url_is_normalised(given, expected):
    assert metrics_url(given) == expected


@pytest.mark.parametrize("bad", ["ftp://host/metrics", "http://", ""])
def test_bad_metrics_urls_are_usage_errors(bad):
    with pytest.raises(UsageError):
        metrics_url(bad)


def test_dashboard_serves_the_page_and_proxies_the_exporter(registry):
    one_cycle()
    with (
        jsonmode.metrics.serve(0, registry) as exporter,
        serve_dashboard(exporter.url, port=0, interval=0.5) as dashboard,
    ):
        status, kind, page = get(dashboard.url)
        assert status == 200
        assert kind.startswith("text/html")
        assert '<script src="dashboard.js">' in page
        for asset, mime in (("dashboard.js", "text/javascript"), ("dashboard.css", "text/css")):
            status, kind, _ = get(dashboard.url + asset)
            assert status == 200
            assert kind.startswith(mime)
        status, kind, text = get(dashboard.url + "metrics")
        assert status == 200
        assert kind.startswith("text/plain")
        assert 'jsonmode_requests_total{mode="strict",outcome="failed",tier="prompted"} 1.0' in text
        status, _, config = get(dashboard.url + "config.json")
        assert status == 200
        assert f'"metricsUrl": "{exporter.url}"' in config
        assert '"interval": 0.5' in config
        assert get(dashboard.url + "nope")[0] == 404
        exporter.close()
        status, _, text = get(dashboard.url + "metrics")
        assert status == 502
        assert f"exporter unreachable at {exporter.url}" in text


# -- the page in a real browser ----------------------------------------------------------------


def chromium(binary: str, profile: str, url: str, *action: str) -> str:
    done = subprocess.run(
        [
            binary,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-dev-shm-usage",
            "--hide-scrollbars",
            f"--user-data-dir={profile}",
            "--window-size=1440,1700",
            "--virtual-time-budget=8000",
            *action,
            url,
        ],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def tag(dom: str, element_id: str) -> str:
    found = re.search(rf'<[a-z0-9]+ [^>]*id="{element_id}"[^>]*>', dom)
    assert found, f"#{element_id} not in the page"
    return found.group(0)


def attribute(dom: str, element_id: str, name: str) -> str:
    found = re.search(rf'{name}="([^"]*)"', tag(dom, element_id))
    assert found, f"#{element_id} has no {name}"
    return found.group(1)


def tile_text(dom: str, element_id: str) -> str:
    found = re.search(rf'id="{element_id}".*?<div class="value">([^<]*)</div>', dom, re.S)
    assert found
    return found.group(1)


def panel(dom: str, element_id: str) -> str:
    start = dom.index(f'id="{element_id}"')
    end = dom.find("<article", start)
    return dom[start : end if end != -1 else len(dom)]


def test_the_page_draws_live_conformance_in_headless_chromium(registry, tmp_path):
    binary = require("chromium")
    model, tokenizer = random_local_model(seed=2)
    local = JsonMode(model, tokenizer=tokenizer, max_new_tokens=256, schema_name="profile")
    polls = 0

    def source() -> bytes:
        nonlocal polls
        polls += 1
        one_cycle()
        torch.manual_seed(polls)
        local.run("Extract the person.", CONSTRAINED_SCHEMA)
        with urllib.request.urlopen(exporter.url, timeout=10) as response:
            return response.read()  # type: ignore[no-any-return]

    with (
        jsonmode.metrics.serve(0, registry) as exporter,
        serve_dashboard(source, port=0) as dashboard,
    ):
        url = dashboard.url + "?interval=1000"
        dom = chromium(binary, str(tmp_path / "profile-dom"), url, "--dump-dom")
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        shot = ARTIFACTS / "dashboard.png"
        shot.unlink(missing_ok=True)
        chromium(binary, str(tmp_path / "profile-shot"), url, f"--screenshot={shot}")
        # one tier, counters since the exporter started (whole cycles again)
        prompted = chromium(
            binary, str(tmp_path / "profile-tier"), url + "&tier=prompted&window=all", "--dump-dom"
        )

    assert polls >= 6, "the page kept polling"
    assert attribute(dom, "status", "data-state") == "live"
    # headline tiles: exact, whatever the timing (every window holds whole cycles)
    assert float(attribute(dom, "tile-final", "data-value")) == pytest.approx(0.8)
    assert tile_text(dom, "tile-final") == "80.0%"
    assert attribute(dom, "tile-final", "data-tone") == "bad"  # under the 95% threshold
    assert float(attribute(dom, "tile-first", "data-value")) == pytest.approx(0.4)
    assert tile_text(dom, "tile-first") == "40.0%"
    # 4 scripted requests (6 attempts) and 1 constrained (1 attempt) per cycle
    assert float(attribute(dom, "tile-attempts", "data-value")) == pytest.approx(7 / 5)
    assert float(attribute(dom, "tile-rps", "data-value")) > 0
    assert float(attribute(dom, "tile-p95", "data-value")) > 0
    assert 0 <= float(attribute(dom, "tile-cache", "data-value")) <= 1

    every_panel = re.findall(r'<article class="panel[^"]*" id="(panel-[a-z-]+)"', dom)
    assert len(every_panel) == 12
    for name in every_panel:
        assert attribute(dom, name, "data-state") == "ok", f"{name} shows no data"

    conformance = panel(dom, "panel-conformance")
    points = int(re.search(r'data-points="(\d+)"', conformance).group(1))  # type: ignore[union-attr]
    assert points >= 2 * 4, "two lines over several polls"
    for name in ("panel-outcomes", "panel-latency", "panel-mask", "panel-cache", "panel-tokens"):
        assert 'data-points="' in panel(dom, name)
        assert 'data-points="0"' not in panel(dom, name)

    def named(panel_id: str) -> dict[str, float]:
        rows = re.findall(r'data-name="([^"]+)" data-value="([^"]+)"', panel(dom, panel_id))
        return {name: float(v) for name, v in rows}

    failures = named("panel-failures")
    assert failures["schema violation"] > 0
    assert failures["invalid json"] == failures["truncated"] == failures["backend error"] == 0
    attempts = named("panel-attempts")
    assert attempts["valid"] == 2 * attempts["schema violation"] > 0
    assert attempts["invalid json"] == attempts["schema violation"] / 2
    assert named("panel-repairs")["extract"] > 0
    assert named("panel-keywords")["required"] > 0
    assert named("panel-schemas") == {"person": 1.0, "profile": 1.0, "unnamed": 0.0}

    assert attribute(prompted, "tier", "data-selected") == "prompted"
    assert float(attribute(prompted, "tile-final", "data-value")) == pytest.approx(0.75)
    assert float(attribute(prompted, "tile-first", "data-value")) == pytest.approx(0.25)
    assert float(attribute(prompted, "tile-attempts", "data-value")) == pytest.approx(1.5)

    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert struct.unpack(">II", data[16:24]) == (1440, 1700)
    assert len(data) > 50_000, "a real rendering, not a blank page"


def test_the_first_poll_fills_the_panels_at_once(registry, tmp_path):
    """The page polls on load: with a 10-minute interval, and an exporter that answers
    only the first poll, every panel that needs no rate shows that poll's totals."""
    binary = require("chromium")
    model, tokenizer = random_local_model(seed=2)
    local = JsonMode(model, tokenizer=tokenizer, max_new_tokens=256, schema_name="profile")
    polls = 0

    def source() -> bytes:
        nonlocal polls
        polls += 1
        if polls > 1:
            raise OSError("gone after the first poll")
        one_cycle()
        torch.manual_seed(1)
        local.run("Extract the person.", CONSTRAINED_SCHEMA)
        with urllib.request.urlopen(exporter.url, timeout=10) as response:
            return response.read()  # type: ignore[no-any-return]

    with (
        jsonmode.metrics.serve(0, registry) as exporter,
        serve_dashboard(source, port=0, interval=600) as dashboard,
    ):
        dom = chromium(binary, str(tmp_path / "profile"), dashboard.url, "--dump-dom")

    # the poll on load, and the early second one for rates; none at the interval
    assert polls == 2
    assert attribute(dom, "status", "data-state") == "down"  # the second poll failed
    assert float(attribute(dom, "tile-final", "data-value")) == pytest.approx(0.8)
    assert float(attribute(dom, "tile-first", "data-value")) == pytest.approx(0.4)
    assert float(attribute(dom, "tile-attempts", "data-value")) == pytest.approx(7 / 5)
    assert attribute(dom, "tile-rps", "data-value") == ""  # a rate needs two samples
    assert "counts since the exporter started" in dom
    rates = {"panel-outcomes", "panel-tokens"}
    every_panel = re.findall(r'<article class="panel[^"]*" id="(panel-[a-z-]+)"', dom)
    assert len(every_panel) == 12
    for name in every_panel:
        expected = "empty" if name in rates else "ok"
        assert attribute(dom, name, "data-state") == expected, name
