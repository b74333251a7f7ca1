"""Prometheus metrics in the text exposition format, for node_exporter's textfile collector.

Two files, both written atomically through a temporary file with an unpredictable name (mkstemp
style, in textfile_dir, which node_exporter's operators often make writable by more than root),
then renamed into place, so the collector never reads half a file and nobody can plant the
temporary name in advance (prometheus-client's write_to_textfile uses <file>.<pid>.<thread>):

* the node's file, <textfile_dir>/airlock.prom, refreshed by airlock.finish after every run
  (HealthCheckProgram, prolog, epilog, registration suite, `airlock check`) when [metrics]
  textfile_dir is set, or by `airlock metrics --node N`: the last run of each level.
* the controller's file, <textfile_dir>/airlock-controller.prom, from `airlock metrics
  --controller` (run it from cron or a systemd timer): every node's state from one Slurm call,
  plus the recovery service's actions and circuit breaker when its database exists.

Metric names and labels are part of the operator interface (docs/metrics.md); keep them stable.
prometheus_client is imported only when a file is written, never on the hook's plain path.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from airlock import paths

VERDICTS = ("pass", "warn", "fail", "error", "skip")
NODE_FILE = "airlock.prom"
CONTROLLER_FILE = "airlock-controller.prom"


def _textfile_dir(cfg, node: str = "") -> str:
    """The configured folder with {node} replaced: by the node, or for the controller's file by
    this host's name (never a directory literally named {node})."""
    folder = cfg.section("metrics").textfile_dir
    return paths.expand(folder, node or paths.local_node_name())


def _write(target: Path, registry) -> Path:
    from prometheus_client import generate_latest

    paths.atomic_write_text(target, generate_latest(registry).decode("utf-8"))
    return target


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return 1.0 if value else 0.0
    if isinstance(value, (int, float)):
        return float(value)
    return None


def node_registry(node: str, runs: Mapping[str, Mapping[str, Any]]):
    """A registry with the node's metrics from the last run of each level."""
    from prometheus_client import CollectorRegistry, Gauge

    reg = CollectorRegistry()
    run_verdict = Gauge("airlock_run_verdict", "Last run's verdict for the level (state set: 1 "
                        "on the current verdict)", ["node", "level", "verdict"], registry=reg)
    run_failed = Gauge("airlock_run_failed", "1 when the level's last run failed",
                       ["node", "level"], registry=reg)
    run_duration = Gauge("airlock_run_duration_seconds", "Duration of the level's last run",
                         ["node", "level"], registry=reg)
    run_time = Gauge("airlock_run_timestamp_seconds", "When the level's last run finished",
                     ["node", "level"], registry=reg)
    check_verdict = Gauge("airlock_check_verdict", "Last verdict of each check (state set)",
                          ["node", "level", "check", "verdict"], registry=reg)
    check_duration = Gauge("airlock_check_duration_seconds", "Duration of each check",
                           ["node", "level", "check"], registry=reg)
    check_attempts = Gauge("airlock_check_attempts", "Runs of the check (confirmation re-runs)",
                           ["node", "level", "check"], registry=reg)
    observe = Gauge("airlock_check_observed", "1 when the check ran in observe mode (its verdict "
                    "is recorded, it never drains), else 0", ["node", "level", "check"],
                    registry=reg)
    figure = Gauge("airlock_check_figure", "Numeric figures a check measured (bandwidth, "
                   "TFLOPS, counts), as the check reports them",
                   ["node", "level", "check", "figure"], registry=reg)
    for level, run in sorted(runs.items()):
        verdict = run.get("verdict", "")
        for v in VERDICTS[:4]:
            run_verdict.labels(node, level, v).set(1 if verdict == v else 0)
        run_failed.labels(node, level).set(1 if verdict == "fail" else 0)
        if _number(run.get("duration_s")) is not None:
            run_duration.labels(node, level).set(run["duration_s"])
        if _number(run.get("finished_at")) is not None:
            run_time.labels(node, level).set(run["finished_at"])
        for rec in run.get("checks", []):
            check = str(rec.get("check", "?"))
            for v in VERDICTS:
                check_verdict.labels(node, level, check, v).set(
                    1 if rec.get("verdict") == v else 0)
            if _number(rec.get("duration_s")) is not None:
                check_duration.labels(node, level, check).set(rec["duration_s"])
            if _number(rec.get("attempts")) is not None:
                check_attempts.labels(node, level, check).set(rec["attempts"])
            observe.labels(node, level, check).set(1 if rec.get("observe") is True else 0)
            for key, value in sorted((rec.get("figures") or {}).items()):
                num = _number(value)
                if num is not None:
                    figure.labels(node, level, check, str(key)).set(num)
    return reg


def write_node_textfile(cfg, node: str, runs: Mapping[str, Mapping[str, Any]],
                        folder: str | None = None) -> Path:
    return _write(Path(folder or _textfile_dir(cfg, node)) / NODE_FILE, node_registry(node, runs))


def controller_registry(status: dict[str, Any], recovery: dict[str, Any]):
    """A registry with every node's Airlock state and the recovery service's figures.

    status is airlock.status.collect()'s document; recovery is
    airlock.status.collect.recovery_metrics()
    (empty when no recovery database exists, in which case no recovery metric is emitted).
    """
    from prometheus_client import CollectorRegistry, Gauge

    from airlock.status.collect import (
        STATES,  # the controller's file only: nodes never import status
    )

    reg = CollectorRegistry()
    node_state = Gauge("airlock_node_state", "Airlock's view of each node (state set)",
                       ["node", "state"], registry=reg)
    nodes = Gauge("airlock_nodes", "Nodes per Airlock state", ["state"], registry=reg)
    last = Gauge("airlock_node_last_check_timestamp_seconds", "When the node's last run finished",
                 ["node"], registry=reg)
    took = Gauge("airlock_node_last_check_duration_seconds", "Duration of the node's last run",
                 ["node"], registry=reg)
    readable = Gauge("airlock_node_results_readable", "1 when the controller could read the "
                     "node's results (0: only the Slurm reason is known)", ["node"], registry=reg)
    stuck = Gauge("airlock_node_stuck", "1 when the node looks stuck in its registration (its "
                  "pending/checking claim older than suite_timeout + stuck_grace, no job)",
                  ["node"], registry=reg)
    errors = Gauge("airlock_node_errors", "Airlock's own errors recorded on the node (a hook "
                   "that failed open on a proven boot, or closed on an unproven one)",
                   ["node", "hook"], registry=reg)
    own_error = Gauge("airlock_node_own_error", "1 when the node's condition is Airlock's own "
                      "error (an own-error drain, a hook that failed, a last run that did not "
                      "see the node): an operator's matter, never the node's failure",
                      ["node"], registry=reg)
    conditions = Gauge("airlock_condition_nodes", "Nodes per condition (the console's finer "
                       "state: pending, checking, error, adopted, ...)", ["condition"],
                       registry=reg)
    scraped = Gauge("airlock_controller_timestamp_seconds", "When this file was written",
                    registry=reg)
    states = list(STATES) + sorted({r["airlock"] for r in status["nodes"]} - set(STATES))
    for r in status["nodes"]:
        for s in states:
            node_state.labels(r["node"], s).set(1 if r["airlock"] == s else 0)
        if r.get("last_check_at") is not None:
            last.labels(r["node"]).set(r["last_check_at"])
        if r.get("duration_s") is not None:
            took.labels(r["node"]).set(r["duration_s"])
        readable.labels(r["node"]).set(0 if r.get("results_source") == "slurm" else 1)
        stuck.labels(r["node"]).set(1 if r.get("stuck") else 0)
        for hook in sorted(r.get("errors") or {}):
            errors.labels(r["node"], hook).set(1)
        own_error.labels(r["node"]).set(1 if r.get("condition") == "error" else 0)
    for s in states:
        nodes.labels(s).set(status["summary"].get(s, 0))
    for c, count in sorted((status.get("conditions") or {}).items()):
        conditions.labels(c).set(count)
    scraped.set(status.get("generated_at", time.time()))
    if recovery:
        reg.register(_ActionsCollector(recovery.get("actions", {})))
        if "breaker_open" in recovery:
            Gauge("airlock_recovery_breaker_open", "1 while the circuit breaker stops all "
                  "recovery actions", registry=reg).set(1 if recovery["breaker_open"] else 0)
        if "in_flight" in recovery:
            Gauge("airlock_recovery_in_flight", "Nodes with a recovery action under way",
                  registry=reg).set(recovery["in_flight"])
        if recovery.get("heartbeat") is not None:
            # Its age (time() - this) tells a recovery service that stopped from a quiet one.
            Gauge("airlock_recovery_heartbeat_timestamp_seconds", "When the recovery service "
                  "last polled (its heartbeat in the recovery database)",
                  registry=reg).set(recovery["heartbeat"])
        if "refailed" in recovery:
            again = Gauge("airlock_recovery_refailed", "1 while a node whose recovery rebooted "
                          "or replaced it fails the same check again (the action did not help)",
                          ["node", "check", "action"], registry=reg)
            for node, check, action in recovery["refailed"]:
                again.labels(node, check, action).set(1)
    return reg


class _ActionsCollector:
    """Action counts kept by the recovery database: a counter, though this process only reads
    it (so it is exposed as a CounterMetricFamily, not a Counter it would increment)."""

    def __init__(self, actions: dict[tuple[str, str], int]):
        self.actions = actions

    def collect(self):
        from prometheus_client.core import CounterMetricFamily

        fam = CounterMetricFamily("airlock_recovery_actions", "Recovery actions recorded, by "
                                  "action and status", labels=["action", "status"])
        for (action, status), count in sorted(self.actions.items()):
            fam.add_metric([action, status], count)
        yield fam


def write_controller_textfile(cfg, status: dict[str, Any], recovery: dict[str, Any],
                              folder: str | None = None) -> Path:
    return _write(Path(folder or _textfile_dir(cfg)) / CONTROLLER_FILE,
                  controller_registry(status, recovery))
