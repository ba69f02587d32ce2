"""The Grafana dashboard and the Prometheus rules: they parse, they import, they refer only
to metrics that exist, and the rules compute what they claim (promtool's rule tests)."""

from __future__ import annotations

import json
import re
import subprocess
import textwrap

import pytest
import yaml
from prometheus_client import CollectorRegistry
from support.binaries import require

import jsonmode.metrics

ASSETS = jsonmode.metrics.ASSETS
DASHBOARD = ASSETS / "grafana-dashboard.json"
RULES = ASSETS / "prometheus-rules.yml"
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
METRIC = re.compile(r"\b(jsonmode_[a-z_]+)\b")


def dashboard() -> dict:
    return json.loads(DASHBOARD.read_text(encoding="utf-8"))


def panels() -> list[dict]:
    return [p for p in dashboard()["panels"] if p["type"] != "row"]


def rules() -> list[dict]:
    return [
        rule for group in yaml.safe_load(RULES.read_text())["groups"] for rule in group["rules"]
    ]


def exported_sample_names() -> set[str]:
    registry = CollectorRegistry()
    try:
        jsonmode.metrics.enable(registry)
    finally:
        jsonmode.metrics.disable()
    return {sample.name for family in registry.collect() for sample in family.samples}


def test_dashboard_takes_the_datasource_as_a_variable():
    board = dashboard()
    assert "__inputs" not in board
    assert "__requires" not in board
    assert "DS_PROMETHEUS" not in DASHBOARD.read_text()
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    for panel in panels():
        assert panel["datasource"] == DATASOURCE, panel["title"]
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert target["datasource"] == DATASOURCE, panel["title"]
    for name in ("job", "tier"):
        assert variables[name]["datasource"] == DATASOURCE


def test_dashboard_layout_is_importable():
    board = dashboard()
    assert board["uid"]
    assert board["title"]
    assert board["schemaVersion"] >= 36
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    for panel in board["panels"]:
        grid = panel["gridPos"]
        assert 0 <= grid["x"] < grid["x"] + grid["w"] <= 24, panel["title"]
        for target in panel.get("targets", []):
            assert target["refId"]
            assert target["expr"].strip()
    # no two panels overlap
    cells: set[tuple[int, int]] = set()
    for panel in board["panels"]:
        g = panel["gridPos"]
        area = {
            (x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])
        }
        assert not cells & area, f"{panel['title']} overlaps another panel"
        cells |= area


def test_dashboard_has_the_panels_operators_need():
    titles = " | ".join(p["title"].lower() for p in panels())
    for needed in (
        "final conformance",
        "first-try conformance",
        "conformance rate",
        "repair, retry and failure rates",
        "failures by reason",
        "latency percentiles",
        "attempts per request",
        "mask time",
        "mask cache hit rate",
    ):
        assert needed in titles, needed


def test_every_metric_the_dashboard_and_rules_use_exists():
    exported = exported_sample_names()
    expressions = [t["expr"] for p in panels() for t in p["targets"]]
    expressions += [v["definition"] for v in dashboard()["templating"]["list"] if "definition" in v]
    expressions += [rule["expr"] for rule in rules()]
    used = {name for expr in expressions for name in METRIC.findall(expr)}
    assert len(used) >= 12
    missing = sorted(used - exported)
    assert not missing, f"not exported: {missing}"


def test_rules_parse_and_name_what_they_record():
    recorded = [rule for rule in rules() if "record" in rule]
    alerts = [rule for rule in rules() if "alert" in rule]
    assert {r["record"] for r in recorded} >= {
        "jsonmode:conformance_final:ratio_rate5m",
        "jsonmode:conformance_first_try:ratio_rate5m",
        "jsonmode:repaired:ratio_rate5m",
        "jsonmode:retried:ratio_rate5m",
        "jsonmode:request_duration_seconds:p95_rate5m",
        "jsonmode:mask_cache_hit:ratio_rate5m",
    }
    assert all(r["record"].startswith("jsonmode:") for r in recorded)
    assert [a["alert"] for a in alerts] == ["JsonModeConformanceLow"]


def test_promtool_accepts_the_rules_and_the_example_config():
    promtool = require("promtool")
    for args in (
        ["check", "rules", str(RULES)],
        ["check", "config", str(ASSETS / "prometheus.yml")],
    ):
        done = subprocess.run([promtool, *args], capture_output=True, text=True, check=False)
        assert done.returncode == 0, done.stdout + done.stderr


DESCRIPTION = (
    "Only 80% of requests returned schema-conforming JSON over the last 10 minutes."
    " See jsonmode_failures_total by reason and jsonmode_validation_errors_total by keyword."
)
SERIES = 'jsonmode_requests_total{{job="app",tier="prompted",mode="strict",outcome="{}"}}'


def test_rules_compute_conformance_and_the_alert_fires(tmp_path):
    """promtool's rule unit tests: synthetic counters in, recorded ratios and alerts out.

    Per minute: 6 first_try, 1 repaired, 1 retried, 2 failed -> final 80%, first try 60%.
    A second job conforms fully and must not alert.
    """
    promtool = require("promtool")
    good = 'jsonmode_requests_total{job="good",tier="native",mode="strict",outcome="first_try"}'
    spec = textwrap.dedent(
        f"""\
        rule_files: [{json.dumps(str(RULES))}]
        evaluation_interval: 1m
        tests:
          - interval: 1m
            input_series:
              - series: '{SERIES.format("first_try")}'
                values: '0+6x40'
              - series: '{SERIES.format("repaired")}'
                values: '0+1x40'
              - series: '{SERIES.format("retried")}'
                values: '0+1x40'
              - series: '{SERIES.format("failed")}'
                values: '0+2x40'
              - series: '{good}'
                values: '0+5x40'
            promql_expr_test:
              - expr: round(jsonmode:conformance_final:ratio_rate5m, 0.001)
                eval_time: 10m
                exp_samples:
                  - labels: '{{job="app",tier="prompted"}}'
                    value: 0.8
                  - labels: '{{job="good",tier="native"}}'
                    value: 1
              - expr: round(jsonmode:conformance_first_try:ratio_rate5m{{job="app"}}, 0.001)
                eval_time: 10m
                exp_samples:
                  - labels: '{{job="app",tier="prompted"}}'
                    value: 0.6
              - expr: round(jsonmode:retried:ratio_rate5m{{job="app"}}, 0.001)
                eval_time: 10m
                exp_samples:
                  - labels: '{{job="app",tier="prompted"}}'
                    value: 0.1
            alert_rule_test:
              - eval_time: 8m  # pending: conformance has been low for less than 10 minutes
                alertname: JsonModeConformanceLow
                exp_alerts: []
              - eval_time: 25m
                alertname: JsonModeConformanceLow
                exp_alerts:
                  - exp_labels:
                      severity: warning
                      job: app
                    exp_annotations:
                      summary: "jsonmode conformance below 95% (app)"
                      description: {json.dumps(DESCRIPTION)}
        """
    )
    test_file = tmp_path / "rules_test.yml"
    test_file.write_text(spec)
    done = subprocess.run(
        [promtool, "test", "rules", str(test_file)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


@pytest.mark.parametrize("name", ["dashboard.html", "dashboard.css", "dashboard.js"])
def test_the_live_page_loads_nothing_from_elsewhere(name):
    text = (ASSETS / name).read_text(encoding="utf-8")
    assert not re.search(r"(src|href)\s*=\s*[\"']?(https?:)?//", text), "no CDN, no remote asset"
    assert "@import" not in text
    assert not re.search(r"fetch\(\s*[\"']https?:", text)
