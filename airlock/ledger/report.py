"""The ledger's document (`airlock ledger --json`, GET /api/v1/ledger), its text for people and
its Prometheus metrics. docs/ledger.md explains every field."""

from __future__ import annotations

import time
from typing import Any

from airlock.ledger import advice, caught, cost, value
from airlock.ledger.history import History

SCHEMA = 1


def compute(h: History, settings) -> dict[str, Any]:
    """The whole ledger of a history ([ledger] settings: the model's inputs)."""
    eps = caught.episodes(h, settings.recur_window_hours * 3600)
    found = caught.summary(eps, h)
    rows = cost.in_checks(h)
    held = cost.held_out(eps, h)
    measured = sum(r["gpu_hours"] for r in rows if not r["estimated"])
    estimated = sum(r["gpu_hours"] for r in rows if r["estimated"])
    worth = value.balance(h, settings, found, (measured, measured + estimated),
                          held["overturned_gpu_hours"])
    return {
        "schema": SCHEMA,
        "generated_at": time.time(),
        "window": {"start": h.start, "end": h.end, "days": round((h.end - h.start) / 86400, 3)},
        "nodes": len(h.nodes),
        "gpus": sum(v.gpus for v in h.nodes.values()),
        "runs": len(h.runs),
        "sources": {"jobs": h.jobs_note, "recovery": h.recovery_note or "recovery database",
                    "unread": dict(sorted(h.unread.items()))},
        "cost": {"in_checks": rows,
                 "in_checks_gpu_hours": {"measured": round(measured, 4),
                                         "estimated": round(estimated, 4)},
                 "boot_to_service": cost.boot_to_service(h),
                 "held_out": held},
        "caught": found,
        "value": worth,
        "advice": advice.advise(h, eps, worth["inputs"]),
    }


def _range(pair: list[float], unit: str = "") -> str:
    return f"{pair[0]:,.1f} to {pair[1]:,.1f}{unit}"


def _secs(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f}s"


def summary_lines(doc: dict[str, Any]) -> list[str]:
    """The two numbers: what the gate cost, what it caught (airlock demo ends with these)."""
    c, f, v = doc["cost"], doc["caught"], doc["value"]
    spent = c["in_checks_gpu_hours"]
    o = f["outcomes"]
    held = c["held_out"]["by_failed_checks_node_hours"] + c["held_out"]["by_recovery_node_hours"]
    return [
        f"cost: {spent['measured']:.3f} GPU-hours in checks measured (+{spent['estimated']:.3f} "
        f"estimated for unkept passes) over {doc['window']['days']:g} days on {doc['nodes']} "
        f"nodes; {held:.3f} node-hours held out by failures and recovery",
        f"caught: {f['failures']} failures: {o['confirmed']} confirmed, {o['recurred']} "
        f"recurred, {o['overturned']} overturned, {o['open']} open; balance "
        f"{_range(v['balance_gpu_hours_per_month'])} GPU-hours per month (model range, scaled "
        f"from {doc['window']['days']:g} days)",
    ]


def render(doc: dict[str, Any]) -> str:
    c, f, v, a = doc["cost"], doc["caught"], doc["value"], doc["advice"]
    w = doc["window"]
    out = [f"Ledger: {w['days']:g} days, {doc['nodes']} nodes, {doc['gpus']} GPUs, "
           f"{doc['runs']} kept runs",
           f"  jobs: {doc['sources']['jobs']}; recovery: {doc['sources']['recovery']}"]
    if doc["sources"]["unread"]:
        names = sorted(doc["sources"]["unread"])
        out.append(f"  WARNING: results of {len(names)} nodes not read "
                   f"({names[0]}: {doc['sources']['unread'][names[0]]})")
    out += ["", "COST  hours in checks (stage, level)"]
    for r in c["in_checks"]:
        runs = "?" if r["runs"] is None else r["runs"]
        tag = "  estimated: " + r["basis"] if r["estimated"] else ""
        out.append(f"  {r['stage']:<13} {r['level']:<9} runs {runs!s:>6}  node-h "
                   f"{r['node_hours']:9.3f}  GPU-h {r['gpu_hours']:9.3f}{tag}")
    b = c["boot_to_service"]
    out.append(f"  boot to service ({b['runs']} passing registrations): median / p95")
    for part in ("before_suite", "isolation_wait", "checks", "group_tests", "total_recorded"):
        out.append(f"    {part:<15} {_secs(b[part]['median']):>9} / {_secs(b[part]['p95']):>9}"
                   f"  (n={b[part]['n']})")
    out.append(f"    slurm_latency   {b['slurm_latency_note']}")
    held = c["held_out"]
    out.append(f"  held out: {held['by_failed_checks_node_hours']:.3f} node-h by failed checks, "
               f"{held['by_recovery_node_hours']:.3f} node-h by recovery")
    out += ["", f"CAUGHT  {f['failures']} failures"]
    for check, row in f["by_check"].items():
        fp = f["false_positive"][check]
        est = "-" if fp["estimate"] is None else f"{fp['estimate'] * 100:.0f}%"
        out.append(f"  {check:<18} " + "  ".join(f"{k} {row[k]}" for k in caught.OUTCOMES)
                   + f"  false positives {est} (95%: {fp['low'] * 100:.0f}-"
                     f"{fp['high'] * 100:.0f}%)")
    if f["by_stage"]:
        out.append("  by stage: " + ", ".join(f"{s} {sum(r.values())}"
                                              for s, r in f["by_stage"].items()))
    if f["own_errors"]:
        out.append("  Airlock's own errors (not the nodes'): " + ", ".join(
            f"{s} {n}" for s, n in f["own_errors"].items()))
    out += ["", "VALUE  per month, GPU-hours (model: docs/ledger.md)"]
    for name, i in v["inputs"].items():
        out.append(f"  input {name:<19} {i['low']:g} to {i['high']:g}  ({i['source']})")
    out.append(f"  loss per interruption {_range(v['loss_per_interruption_gpu_hours'])}")
    out.append(f"  caught per month      {_range(v['caught_per_month'])}")
    out.append(f"  saved                 {_range(v['saved_gpu_hours_per_month'])}")
    out.append(f"  spent                 {_range(v['spent_gpu_hours_per_month'])}")
    out.append(f"  balance               {_range(v['balance_gpu_hours_per_month'])}")
    e = v["expected"]
    out.append(f"  public rates predict {e['catchable_per_month']:.2f} catchable "
               f"({e['all_per_month']:.2f} in all) interruptions per month on "
               f"{e['fleet_gpus']} GPUs ({e['source']})")
    out += ["", f"ADVICE  {a['advice'] or 'none'}: {a['why']}", f"  would change: "
            f"{a['would_change']}"]
    return "\n".join(out) + "\n"


def registry(doc: dict[str, Any]):
    """The ledger's figures as a Prometheus registry (docs/metrics.md)."""
    from prometheus_client import CollectorRegistry, Gauge

    reg = CollectorRegistry()
    hours = Gauge("airlock_ledger_check_gpu_hours", "GPU-hours spent in checks in the ledger's "
                  "window, by stage and level (estimated=1: unkept passes, modelled)",
                  ["stage", "level", "estimated"], registry=reg)
    node_hours = Gauge("airlock_ledger_check_node_hours", "Node-hours spent in checks in the "
                       "ledger's window, by stage and level", ["stage", "level", "estimated"],
                       registry=reg)
    for r in doc["cost"]["in_checks"]:
        labels = (r["stage"], r["level"], "1" if r["estimated"] else "0")
        hours.labels(*labels).inc(r["gpu_hours"])
        node_hours.labels(*labels).inc(r["node_hours"])
    b2s = Gauge("airlock_ledger_boot_to_service_seconds", "A boot's way into service over the "
                "window's passing registrations, by part and quantile", ["part", "quantile"],
                registry=reg)
    for part in ("before_suite", "isolation_wait", "checks", "group_tests", "total_recorded"):
        for q, key in (("0.5", "median"), ("0.95", "p95")):
            figure = doc["cost"]["boot_to_service"][part][key]
            if figure is not None:
                b2s.labels(part, q).set(figure)
    held = Gauge("airlock_ledger_held_out_node_hours", "Node-hours failed nodes were out of "
                 "service in the window, by cause", ["cause"], registry=reg)
    held.labels("failed_check").set(doc["cost"]["held_out"]["by_failed_checks_node_hours"])
    held.labels("recovery").set(doc["cost"]["held_out"]["by_recovery_node_hours"])
    fails = Gauge("airlock_ledger_failures", "Failures in the window by check and outcome",
                  ["check", "outcome"], registry=reg)
    for check, row in doc["caught"]["by_check"].items():
        for outcome, n in row.items():
            fails.labels(check, outcome).set(n)
    fp = Gauge("airlock_ledger_false_positive_ratio", "Overturned share of each check's "
               "resolved failures, with its 95% interval", ["check", "bound"], registry=reg)
    for check, row in doc["caught"]["false_positive"].items():
        if row["estimate"] is not None:
            fp.labels(check, "estimate").set(row["estimate"])
            fp.labels(check, "low").set(row["low"])
            fp.labels(check, "high").set(row["high"])
    bal = Gauge("airlock_ledger_gpu_hours_per_month", "The value model per month: saved, spent "
                "and balance, at the low and high ends of its inputs", ["figure", "bound"],
                registry=reg)
    for figure, key in (("saved", "saved_gpu_hours_per_month"),
                        ("spent", "spent_gpu_hours_per_month"),
                        ("balance", "balance_gpu_hours_per_month")):
        low, high = doc["value"][key]
        bal.labels(figure, "low").set(low)
        bal.labels(figure, "high").set(high)
    return reg


def metrics_text(doc: dict[str, Any]) -> bytes:
    from prometheus_client import generate_latest

    return generate_latest(registry(doc))
