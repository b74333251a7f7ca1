"""A preflight's run document (airlock.records.results schema, level "preflight", trigger "prolog")
and
the node's running totals, which the run carries as figures so the node's metrics textfile
exports them (airlock_check_figure{level="preflight",check="preflight",figure=...})."""

from __future__ import annotations

import time
from typing import Any

from airlock.paths import atomic_write, node_dir, read_json
from airlock.preflight.judge import CHECK, CULPRIT, INCONCLUSIVE, Decision
from airlock.preflight.plan import Plan

TOTALS = "preflight-totals.json"
KEYS = ("runs", "culprits", "inconclusive", "seconds_added")


def add_totals(old: Any, decision: Decision, seconds: float) -> dict[str, float]:
    """The running totals after this run (a damaged file starts again from zero)."""
    base = {k: 0.0 for k in KEYS}
    if isinstance(old, dict):
        for k in KEYS:
            v = old.get(k)
            if isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0:
                base[k] = float(v)
    base["runs"] += 1
    base["culprits"] += decision.kind == CULPRIT
    base["inconclusive"] += decision.kind == INCONCLUSIVE
    base["seconds_added"] = round(base["seconds_added"] + seconds, 3)
    return base


def bump_totals(cfg, node: str, decision: Decision, seconds: float) -> dict[str, float]:
    path = node_dir(cfg.state_dir, node) / TOTALS
    totals = add_totals(read_json(path), decision, seconds)
    atomic_write(path, totals)
    return totals


def run_document(node: str, plan: Plan | None, job_id: str, decision: Decision,
                 timings: dict[str, float], started: float, totals: dict[str, float],
                 run_id: str, profile: str = "") -> dict[str, Any]:
    figures: dict[str, Any] = {f"{k}_s": round(v, 3) for k, v in timings.items()}
    figures.update({f"{k}_total": v for k, v in totals.items()})
    if plan is not None:
        figures.update(members=len(plan.members), leader=plan.leader, batch=plan.batch_id)
    record = {"check": CHECK, "verdict": decision.verdict, "detail": decision.detail,
              "figures": figures, "remediation": "reboot" if decision.kind == CULPRIT else "",
              "duration_s": round(timings.get("added", 0.0), 3), "attempts": 1}
    now = time.time()
    failing = decision.kind == CULPRIT
    return {"node": node, "run_id": run_id, "level": "preflight", "trigger": "prolog",
            "job_id": job_id, "started_at": started, "finished_at": now,
            "duration_s": round(now - started, 3), "verdict": decision.verdict,
            "failed_check": CHECK if failing else None,
            "detail": decision.detail if decision.kind != "pass" else "",
            "unseen": [CHECK] if decision.kind == INCONCLUSIVE else [], "observed": [],
            "profile": profile, "checks": [record]}
