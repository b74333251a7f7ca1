"""What the gate cost: hours in checks by stage and level, a boot's way into service, and the
hours failed nodes were held out.

Measured rows come from the kept runs. Periodic, prolog and epilog *passes* are not kept as
history (one every interval on every node), so their rows are estimates: how many ran (nodes x
window / HealthCheckInterval; prolog and epilog: one per job node from sacct) times the median
duration of the ones seen (each node's latest.json). Estimated rows say so and how.
"""

from __future__ import annotations

import statistics
from typing import Any

from airlock.ledger.caught import Episode, held_hours
from airlock.ledger.history import GROUP_CHECKS, History, stage_of


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) \
        else None


def split(run: dict[str, Any]) -> dict[str, float]:
    """A run's seconds: in its own checks, in group tests, and waiting (the rest of its
    duration: for a registration, the wait for isolation)."""
    checks = group = 0.0
    timed = False
    for rec in run.get("checks", []):
        d = _num(rec.get("duration_s"))
        if d is None:
            continue
        timed = True
        if rec.get("check") in GROUP_CHECKS:
            group += d
        else:
            checks += d
    total = _num(run.get("duration_s")) or 0.0
    if not timed:
        return {"checks": total, "group": 0.0, "wait": 0.0}
    return {"checks": checks, "group": group, "wait": max(0.0, total - checks - group)}


def gpus(h: History, node: str) -> int:
    view = h.nodes.get(node)
    return view.gpus if view is not None and view.gpus > 0 else h.gpus_per_node


def quantile(values: list[float], q: float) -> float | None:
    """Nearest-rank quantile (None for no values): with few samples, an observed value."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, min(len(ordered), -(-int(q * 1000) * len(ordered) // 1000)))
    return ordered[rank - 1]


def in_checks(h: History) -> list[dict[str, Any]]:
    """Node- and GPU-hours in checks per (stage, level); measured rows then estimated ones."""
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    seen_triggers: dict[str, int] = {}
    for run in h.runs:
        stage, level = stage_of(run), str(run.get("level", ""))
        seconds = split(run)
        spent = seconds["checks"] + seconds["group"]
        row = rows.setdefault((stage, level), {"stage": stage, "level": level, "runs": 0,
                                               "node_hours": 0.0, "gpu_hours": 0.0,
                                               "estimated": False, "basis": "kept runs"})
        row["runs"] += 1
        row["node_hours"] += spent / 3600
        row["gpu_hours"] += spent / 3600 * gpus(h, run["node"])
        seen_triggers[stage] = seen_triggers.get(stage, 0) + 1
    out = sorted(rows.values(), key=lambda r: (r["stage"], r["level"]))
    out += _unkept(h, seen_triggers)
    for row in out:
        row["node_hours"] = round(row["node_hours"], 4)
        row["gpu_hours"] = round(row["gpu_hours"], 4)
    return out


def _samples(h: History, stage: str) -> list[float]:
    return [split(r)["checks"] for r in h.latest.values()
            if stage_of(r) == stage and r.get("verdict") in ("pass", "warn")]


def _unkept(h: History, kept: dict[str, int]) -> list[dict[str, Any]]:
    """Estimated rows for the passes the history does not keep."""
    hours = (h.end - h.start) / 3600
    out = []
    fleet_gpus = sum(gpus(h, n) for n in h.nodes) or 0
    nodes = len(h.nodes)
    if h.health_check_interval > 0 and nodes:
        sample = _samples(h, "periodic")
        if sample:
            count = max(0.0, nodes * (h.end - h.start) / h.health_check_interval
                        - kept.get("periodic", 0))
            med = statistics.median(sample)
            out.append({"stage": "periodic", "level": "quick", "runs": round(count),
                        "node_hours": count * med / 3600,
                        "gpu_hours": count * med / 3600 * fleet_gpus / nodes,
                        "estimated": True,
                        "basis": f"{nodes} nodes x {hours:.1f} h / HealthCheckInterval "
                                 f"{h.health_check_interval:g} s x median {med:.2f} s "
                                 f"({len(sample)} latest passes)"})
    for stage in ("prolog", "epilog"):
        sample = _samples(h, stage)
        if not sample:
            continue
        if h.jobs is None:
            out.append({"stage": stage, "level": "quick", "runs": None, "node_hours": 0.0,
                        "gpu_hours": 0.0, "estimated": True,
                        "basis": f"passes not kept and no job count ({h.jobs_note}): "
                                 "not estimated"})
            continue
        count = max(0, sum(j.nodes for j in h.jobs) - kept.get(stage, 0))
        med = statistics.median(sample)
        # a prolog holds every GPU of the job's nodes while it runs
        per_node = fleet_gpus / nodes if nodes else h.gpus_per_node
        out.append({"stage": stage, "level": "quick", "runs": count,
                    "node_hours": count * med / 3600,
                    "gpu_hours": count * med / 3600 * per_node, "estimated": True,
                    "basis": f"{count} job nodes from sacct x median {med:.2f} s "
                             f"({len(sample)} latest passes)"})
    return out


def boot_to_service(h: History) -> dict[str, Any]:
    """From a boot to in service, over the registration runs that passed: median and p95 of
    each part. Slurm's own latency (the resume reaching slurmctld, the node taking jobs) is not
    recorded by Airlock, and the part before the suite started is known only for each node's
    current boot (Slurm's BootTime)."""
    parts: dict[str, list[float]] = {"before_suite": [], "isolation_wait": [], "checks": [],
                                     "group_tests": [], "total_recorded": []}
    latest_reg: dict[str, dict[str, Any]] = {}
    passed = [r for r in h.runs if stage_of(r) == "registration"
              and r.get("verdict") in ("pass", "warn")]
    for run in passed:
        cur = latest_reg.get(run["node"])
        if cur is None or (run.get("finished_at") or 0) > (cur.get("finished_at") or 0):
            latest_reg[run["node"]] = run
    for run in passed:
        s = split(run)
        parts["isolation_wait"].append(s["wait"])
        parts["checks"].append(s["checks"])
        parts["group_tests"].append(s["group"])
        total = s["wait"] + s["checks"] + s["group"]
        view = h.nodes.get(run["node"])
        started = _num(run.get("started_at"))
        if latest_reg.get(run["node"]) is run and view is not None and view.boot is not None \
                and started is not None and 0 <= started - view.boot <= 86400:
            parts["before_suite"].append(started - view.boot)
            total += started - view.boot
        parts["total_recorded"].append(total)
    out: dict[str, Any] = {"runs": len(passed), "slurm_latency": None,
                           "slurm_latency_note": "not recorded by Airlock (the resume's way "
                                                 "through slurmctld is Slurm's)"}
    for name, values in parts.items():
        out[name] = {"n": len(values), "median": _round(quantile(values, 0.5)),
                     "p95": _round(quantile(values, 0.95))}
    return out


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


def held_out(eps: list[Episode], h: History) -> dict[str, Any]:
    """Node- and GPU-hours failed nodes spent out of service: by the failed check (until the
    first action), by recovery (from it to the end of the episode), and by overturned failures
    (the false drains' whole cost)."""
    out = {"by_failed_checks_node_hours": 0.0, "by_recovery_node_hours": 0.0,
           "by_failed_checks_gpu_hours": 0.0, "by_recovery_gpu_hours": 0.0,
           "overturned_gpu_hours": 0.0}
    for e in eps:
        checks, recovery = held_hours(e, h.end)
        g = gpus(h, e.node)
        out["by_failed_checks_node_hours"] += checks
        out["by_recovery_node_hours"] += recovery
        out["by_failed_checks_gpu_hours"] += checks * g
        out["by_recovery_gpu_hours"] += recovery * g
        if e.outcome == "overturned":
            out["overturned_gpu_hours"] += (checks + recovery) * g
    return {k: round(v, 4) for k, v in out.items()}
