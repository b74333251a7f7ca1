"""deploy/: the Prometheus rules pass `promtool check rules` and fire in `promtool test rules`
exactly when they should; the Grafana dashboard loads and asks only for metrics Airlock writes."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "deploy" / "prometheus" / "airlock-alerts.yml"
RULE_TESTS = ROOT / "deploy" / "prometheus" / "airlock-alerts.test.yml"
DASHBOARD = ROOT / "deploy" / "grafana" / "airlock-dashboard.json"
ALERTS = {"AirlockNodeStuckPending", "AirlockRecoveryBreakerOpen", "AirlockFailRateHigh",
          "AirlockOwnError", "AirlockSameCheckAfterRecovery", "AirlockMetricsStale",
          "AirlockServiceDown", "AirlockMetricsAbsent", "AirlockRecoveryHeartbeatStale",
          "AirlockNodesNotSeen"}
# Alerts that must fire on silence: while the service is gone, its series vanish and a rule
# comparing them with time() has nothing to compare (issue 26).
SILENCE = {"AirlockServiceDown", "AirlockMetricsAbsent"}


def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        pytest.fail("promtool is needed (scripts/setup.sh installs Debian's prometheus)")
    return found


def documented_metrics() -> set[str]:
    text = (ROOT / "docs" / "metrics.md").read_text()
    names = set(re.findall(r"^\| `(airlock_\w+)` \|", text, re.M))
    # a counter family is exposed with _total
    return names | {f"{n}_total" for n in names}


def metric_names(expr: str) -> set[str]:
    return set(re.findall(r"\b(airlock_[a-z_]+)\b", expr))


def test_rules_pass_promtool_check_and_their_tests(tmp_path):
    check = subprocess.run([promtool(), "check", "rules", str(RULES)], capture_output=True,
                           text=True, timeout=60)
    assert check.returncode == 0, check.stdout + check.stderr
    assert f"SUCCESS: {len(ALERTS)} rules found" in check.stdout
    test = subprocess.run([promtool(), "test", "rules", str(RULE_TESTS)], capture_output=True,
                          text=True, timeout=60, cwd=RULE_TESTS.parent)
    assert test.returncode == 0 and "SUCCESS" in test.stdout, test.stdout + test.stderr
    # ... and the tests are real: a rule that never fires fails them
    broken = tmp_path / "airlock-alerts.yml"
    broken.write_text(RULES.read_text().replace("airlock_node_stuck) == 1",
                                                "airlock_node_stuck) == 2"))
    shutil.copy(RULE_TESTS, tmp_path / RULE_TESTS.name)
    bad = subprocess.run([promtool(), "test", "rules", RULE_TESTS.name], capture_output=True,
                         text=True, timeout=60, cwd=tmp_path)
    assert bad.returncode != 0 and "AirlockNodeStuckPending" in bad.stdout + bad.stderr


def test_every_rule_is_tested_and_uses_real_metrics():
    import yaml

    rules = [r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]]
    assert {r["alert"] for r in rules} == ALERTS
    tests = yaml.safe_load(RULE_TESTS.read_text())["tests"]
    tested = {a["alertname"] for t in tests for a in t["alert_rule_test"] if a["exp_alerts"]}
    assert tested == ALERTS  # each rule is seen firing
    known = documented_metrics()
    for r in rules:
        assert metric_names(r["expr"]) <= known, (r["alert"], metric_names(r["expr"]) - known)
        assert r["labels"]["severity"] in ("warning", "critical")


def test_dashboard_loads_and_queries_only_airlock_metrics():
    dash = json.loads(DASHBOARD.read_text())
    assert dash["uid"] == "airlock-overview" and dash["title"] == "Airlock"
    assert [v["name"] for v in dash["templating"]["list"]] == ["datasource"]
    panels = dash["panels"]
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids))
    known = documented_metrics()
    exprs = [t["expr"] for p in panels for t in p.get("targets", [])]
    assert len(exprs) >= 10
    for expr in exprs:
        names = metric_names(expr)
        assert names and names <= known, (expr, names - known)
    for p in panels:
        g = p["gridPos"]
        assert g["x"] >= 0 and g["x"] + g["w"] <= 24 and g["h"] > 0, p["title"]
        for t in p.get("targets", []):
            assert t["datasource"]["uid"] == "${datasource}"
    conditions = {"healthy", "failed", "error"}
    shown = {m for e in exprs for m in re.findall(r'condition="(\w+)"', e)}
    assert conditions <= shown


def test_the_service_gone_for_an_hour_fires_alerts(tmp_path):
    """A test group of the committed tests stops every series of the service after 10 minutes
    and keeps up{job="airlock"} at 0 for an hour: the silence alerts fire then, and the rules
    without absent() and up would have said nothing (the group fails without them)."""
    import yaml

    tests = yaml.safe_load(RULE_TESTS.read_text())["tests"]
    gone = [t for t in tests
            if any(s["series"].startswith('up{job="airlock"') and "0x60" in s["values"]
                   for s in t["input_series"])]
    assert len(gone) == 1, "no 'service gone for an hour' group in the rule tests"
    firing = {a["alertname"] for a in gone[0]["alert_rule_test"]
              if a["exp_alerts"] and a["eval_time"] == "70m"}
    assert firing >= SILENCE
    rules = yaml.safe_load(RULES.read_text())
    kept = [r for r in rules["groups"][0]["rules"] if r["alert"] not in SILENCE]
    rules["groups"][0]["rules"] = kept
    (tmp_path / RULES.name).write_text(yaml.safe_dump(rules))
    shutil.copy(RULE_TESTS, tmp_path / RULE_TESTS.name)
    blind = subprocess.run([promtool(), "test", "rules", RULE_TESTS.name], capture_output=True,
                           text=True, timeout=60, cwd=tmp_path)
    assert blind.returncode != 0 and "AirlockServiceDown" in blind.stdout + blind.stderr
