"""The controller's Prometheus metrics: <textfile_dir>/airlock-controller.prom, from `airlock
metrics --controller` (run it from cron or a systemd timer) and served by `airlock serve` at
/metrics: every node's state from one Slurm call, plus the recovery service's actions and
circuit breaker when its database exists. Written like the node's file
(airlock.records.node_metrics: atomically, through an unpredictable temporary name).

Metric names and labels are part of the operator interface (docs/metrics.md); keep them stable.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from airlock.records.node_metrics import textfile_dir, write_registry

CONTROLLER_FILE = "airlock-controller.prom"


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
    return write_registry(Path(folder or textfile_dir(cfg)) / CONTROLLER_FILE,
                  controller_registry(status, recovery))
