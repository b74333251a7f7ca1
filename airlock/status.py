"""`airlock status`: every node's Slurm state and Airlock verdict, from one Slurm call plus the
results store (and the recovery service's database when there is one).

Slurm is the source of truth for the node's state and reason; the results store adds the last
run's verdict, timings and history. A node whose results cannot be read is still shown, from
Slurm, with the problem named. The JSON document is described in docs/status-schema.md and
docs/status-schema.json; tests validate real output against it, so keep them in step.
"""

from __future__ import annotations

import time
from typing import Any

from airlock import incidents, reasons
from airlock.errors import ConfigError
from airlock.recovery.machine import CLOSED, IN_FLIGHT, Obs, stuck_nodes
from airlock.recovery.store import RecoveryStore
from airlock.report import table
from airlock.results import NodeResults, local_readable, read_many
from airlock.slurm import Node, Slurm

SCHEMA = 1
STUCK_GRACE_S = 300.0  # [recovery] stuck_grace's default
# Every value `airlock` (the node's Airlock state) can take; summary always carries all of them.
STATES = ("healthy", "quarantined", "failed", "own-error", "recovering", "drained-other", "down",
          "future", "unknown")


def classify(node: Node) -> str:
    # Only the reason in force counts: a node in service that kept an old reason (23.11+
    # without an accounting plugin keeps it after a resume) is healthy, not failed.
    parsed = reasons.parse(node.reason_in_force)
    if parsed is None:
        if node.state == "FUTURE":
            return "future"
        if node.state in ("DOWN", "UNKNOWN") or "NOT_RESPONDING" in node.flags:
            return "down"
        if node.drained:
            return "drained-other"  # an admin's, Slurm's or another tool's drain: not ours
        return "healthy"
    if parsed.state in ("pending", "checking"):
        return "quarantined"
    if parsed.state == "recover":
        return "recovering"
    if parsed.own_error:
        return "own-error"  # Airlock's own trouble: an operator fixes it, recovery never acts
    if parsed.state == "FAIL":
        return "failed"
    return "unknown"


def _recovery_store(cfg):
    """The recovery service's database, read-only, or None when there is none (yet)."""
    import os

    try:
        path = cfg.section("recovery").db
    except Exception:  # no recovery section registered: no recovery shown
        return None
    if not path or not os.path.exists(path):
        return None
    try:

        return RecoveryStore(path, readonly=True)
    except Exception:  # a broken recovery DB must not break status
        return None


def recovery_states(cfg) -> dict[str, str]:
    """Each node's open recovery case state ({} when no recovery database exists).

    Closed cases (done, released) are history, not a state: `airlock recover --history` has them.
    """
    store = _recovery_store(cfg)
    if store is None:
        return {}
    try:

        return {node: case.state for node, case in store.cases().items()
                if case.state not in CLOSED}
    except Exception:  # gracefully empty, like a missing database
        return {}
    finally:
        store.close()


def recovery_metrics(cfg) -> dict[str, Any]:
    """{"actions": {(action, status): count}, "breaker_open": bool, "in_flight": int}, or {}."""
    store = _recovery_store(cfg)
    if store is None:
        return {}
    try:

        actions: dict[tuple[str, str], int] = {}
        for a in store.actions():
            key = (str(a["kind"]), str(a["status"]))
            actions[key] = actions.get(key, 0) + 1
        cases = store.cases().values()
        return {"actions": actions, "breaker_open": bool(store.breaker()["open"]),
                "in_flight": sum(c.state in IN_FLIGHT for c in cases)}
    except Exception:  # gracefully empty, like a missing database
        return {}
    finally:
        store.close()


def _run_summary(run: dict[str, Any]) -> dict[str, Any]:
    return {
        "run_id": run.get("run_id", ""),
        "level": run.get("level", ""),
        "trigger": run.get("trigger", ""),
        "verdict": run.get("verdict", ""),
        "failed_check": run.get("failed_check"),
        "detail": run.get("detail", ""),
        "finished_at": run.get("finished_at"),
        "duration_s": run.get("duration_s"),
    }


def stuck(node: Node, limit_s: float, now: float | None = None) -> str:
    """Why a node held for its registration looks stuck ("" when it does not), by the recovery
    service's rule (airlock.recovery.machine.stuck_nodes): Airlock's pending or checking claim in
    force for longer than limit_s, on a node that is up and runs no job. The node's own hook
    re-runs or fails such a suite; this shows it on the controller even when that hook cannot
    run."""
    at = now if now is not None else time.time()
    found = stuck_nodes([Obs.from_node(node)], at, limit_s)
    if node.name not in found:
        return ""
    claim = node.claim
    age = at - found[node.name][1]
    return f"{claim.state} for {age / 60:.0f} min (limit {limit_s / 60:.0f} min)"


def node_status(node: Node, res: NodeResults, recovery: str = "", stuck_why: str = "",
                errors: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
    run = res.run or {}
    parsed = reasons.parse(node.reason_in_force)
    state = classify(node)
    # The reason in force is what drained the node; the last run may be a later periodic pass.
    if parsed is not None and parsed.is_failure:
        failed_check, detail = parsed.subject, parsed.detail
    elif run.get("verdict") == "fail":
        failed_check, detail = run.get("failed_check"), run.get("detail", "")
    else:
        failed_check, detail = None, ""
    return {
        "node": node.name,
        "slurm_state": node.state_text,
        "reason": node.reason,
        "reason_owner": "airlock" if reasons.is_owned(node.reason) else (
            "other" if node.reason else ""),
        "airlock": state,
        "verdict": run.get("verdict"),
        "failed_check": failed_check,
        "detail": detail,
        "last_check_at": run.get("finished_at"),
        "last_level": run.get("level"),
        "last_trigger": run.get("trigger"),
        "duration_s": run.get("duration_s"),
        "results_source": res.source,
        "results_problem": res.problem,
        "recovery": recovery,
        "stuck": stuck_why,
        "errors": {hook: str(e.get("message", "")) for hook, e in (errors or {}).items()},
        "history": [_run_summary(r) for r in res.history],
    }


def collect(cfg, names: str | None = None, history: int = 0) -> dict[str, Any]:
    slurm = Slurm.from_config(cfg)
    nodes = slurm.nodes(names) if names else slurm.nodes()
    results = read_many(cfg, [n.name for n in nodes], history)
    recovery = recovery_states(cfg)
    limit = cfg.registration.suite_timeout + _stuck_grace(cfg)
    rows = [node_status(n, results[n.name], recovery.get(n.name, ""), stuck(n, limit),
                        _errors(cfg, n.name)) for n in nodes]
    summary = dict.fromkeys(STATES, 0)
    for r in rows:
        summary[r["airlock"]] = summary.get(r["airlock"], 0) + 1
    return {"schema": SCHEMA, "generated_at": time.time(), "nodes": rows, "summary": summary,
            "stuck": sum(bool(r["stuck"]) for r in rows),
            "errors": sum(bool(r["errors"]) for r in rows)}


def _stuck_grace(cfg) -> float:
    try:
        return cfg.recovery.stuck_grace
    except ConfigError:  # a broken [recovery] must not break status: its default
        return STUCK_GRACE_S


def _errors(cfg, node: str) -> dict[str, dict[str, Any]]:
    """A node's recorded own errors (airlock.incidents) as the controller sees them: the shared
    copy when there is a shared directory, else the node-local file when this host can see it
    (the same rule as for the node's results)."""
    try:
        local = cfg.state_dir if local_readable(cfg, node) else ""
        return incidents.read_node(local, cfg.shared_dir, node)
    except Exception:  # a broken errors file must not break status
        return {}


def _when(ts: float | None) -> str:
    return time.strftime("%m-%d %H:%M:%S", time.localtime(ts)) if ts else ""


def _took(s: float | None) -> str:
    return f"{s:.1f}s" if s is not None else ""


def summary_line(data: dict[str, Any]) -> str:
    s = data["summary"]
    main = ["healthy", "quarantined", "failed", "own-error", "recovering"]
    parts = [f"{s.get(k, 0)} {k}" for k in main]
    parts += [f"{v} {k}" for k, v in s.items() if k not in main and v]
    parts += [f"{data[k]} {k}" for k in ("stuck", "errors") if data.get(k)]
    return f"{len(data['nodes'])} nodes: " + ", ".join(parts)


def render(data: dict[str, Any]) -> str:
    rows = []
    for r in data["nodes"]:
        check = r["failed_check"] or ""
        # a foreign reason explains the state only while the node is out of service
        foreign = r["reason_owner"] == "other" and r["airlock"] != "healthy"
        detail = r["detail"] or (r["reason"] if foreign else "")
        rows.append((r["node"], r["slurm_state"], r["airlock"], check, detail[:60],
                     _when(r["last_check_at"]), _took(r["duration_s"]), r["recovery"]))
    out = [table(("node", "slurm", "airlock", "check", "detail", "last check", "took",
                  "recovery"), rows)]
    notes = [f"  {r['node']}: {r['results_problem']}" for r in data["nodes"]
             if r["results_problem"]]
    if notes:
        out.append("results not read (shown from Slurm only):\n" + "\n".join(notes))
    stuck_rows = [f"  {r['node']}: {r['stuck']}" for r in data["nodes"] if r["stuck"]]
    if stuck_rows:
        out.append("stuck in registration:\n" + "\n".join(stuck_rows))
    errors = [f"  {r['node']} {hook}: {msg}" for r in data["nodes"]
              for hook, msg in sorted(r["errors"].items())]
    if errors:
        out.append("Airlock's own errors (the node kept running jobs):\n" + "\n".join(errors))
    for r in data["nodes"]:
        if r["history"]:
            hist = [(_when(h["finished_at"]), h["level"], h["trigger"], h["verdict"].upper(),
                     h["failed_check"] or "", (h["detail"] or "")[:60], _took(h["duration_s"]))
                    for h in r["history"]]
            out.append(f"{r['node']} history:\n" + table(
                ("finished", "level", "trigger", "verdict", "check", "detail", "took"), hist))
    out.append(summary_line(data))
    return "\n\n".join(out)
