"""The node's Prometheus metrics: <textfile_dir>/airlock.prom for node_exporter's textfile
collector, refreshed by airlock.finish after every run (HealthCheckProgram, prolog, epilog,
registration suite, `airlock check`) when [metrics] textfile_dir is set, or by `airlock metrics
--node N`: the last run of each level. Written atomically through a temporary file with an
unpredictable name in textfile_dir (which node_exporter's operators often make writable by more
than root), then renamed into place, so the collector never reads half a file and nobody can
plant the temporary name in advance. The controller's file is airlock.status.metrics.

Metric names and labels are part of the operator interface (docs/metrics.md); keep them stable.
prometheus_client is imported only when a file is written, never on the hook's plain path.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from airlock import paths

VERDICTS = ("pass", "warn", "fail", "error", "skip")
NODE_FILE = "airlock.prom"


def textfile_dir(cfg, node: str = "") -> str:
    """The configured folder with {node} replaced: by the node, or for the controller's file by
    this host's name (never a directory literally named {node})."""
    folder = cfg.section("metrics").textfile_dir
    return paths.expand(folder, node or paths.local_node_name())


def write_registry(target: Path, registry) -> Path:
    from prometheus_client import generate_latest

    paths.atomic_write_text(target, generate_latest(registry).decode("utf-8"))
    return target


def number(value: Any) -> float | None:
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
        if number(run.get("duration_s")) is not None:
            run_duration.labels(node, level).set(run["duration_s"])
        if number(run.get("finished_at")) is not None:
            run_time.labels(node, level).set(run["finished_at"])
        for rec in run.get("checks", []):
            check = str(rec.get("check", "?"))
            for v in VERDICTS:
                check_verdict.labels(node, level, check, v).set(
                    1 if rec.get("verdict") == v else 0)
            if number(rec.get("duration_s")) is not None:
                check_duration.labels(node, level, check).set(rec["duration_s"])
            if number(rec.get("attempts")) is not None:
                check_attempts.labels(node, level, check).set(rec["attempts"])
            observe.labels(node, level, check).set(1 if rec.get("observe") is True else 0)
            for key, value in sorted((rec.get("figures") or {}).items()):
                num = number(value)
                if num is not None:
                    figure.labels(node, level, check, str(key)).set(num)
    return reg


def write_node_textfile(cfg, node: str, runs: Mapping[str, Mapping[str, Any]],
                        folder: str | None = None) -> Path:
    target = Path(folder or textfile_dir(cfg, node)) / NODE_FILE
    return write_registry(target, node_registry(node, runs))
