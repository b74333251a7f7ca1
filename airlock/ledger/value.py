"""What the caught faults would have cost, as a range, and the balance against what the gate
spent.

A fault caught before a job lands on the node saves, when a job would have landed there (the
cluster's utilization), that job's loss: its GPUs times the work since its last checkpoint
(half an interval on average) plus its restart, bounded by the job's length:

    loss (GPU-hours) = job_gpus x min(job_hours, checkpoint/2 + restart)
    saved per month  = caught per month x utilization x loss

Every input is a [low, high] pair; the low end of the balance pairs every low saving with the
high cost, the high end the other way. Caught faults are the confirmed and recurred episodes
(low), plus the open ones (high); overturned ones saved nothing and cost their hours.
"""

from __future__ import annotations

from typing import Any

from airlock.ledger.cost import quantile
from airlock.ledger.history import History
from airlock.ledger.sources import LLAMA3, LLAMA3_SOURCE, default_rates
from airlock.ledger.window import MONTH_S


def _pair(low: float, high: float, source: str) -> dict[str, Any]:
    return {"low": round(low, 4), "high": round(high, 4), "source": source}


def inputs(h: History, settings) -> dict[str, dict[str, Any]]:
    """The model's inputs, each with where it came from (sacct's jobs override the config's
    sizes, durations and utilization)."""
    out = {
        "job_gpus": _pair(*settings.job_gpus, "[ledger] job_gpus"),
        "job_hours": _pair(*settings.job_hours, "[ledger] job_hours"),
        "checkpoint_minutes": _pair(*settings.checkpoint_minutes,
                                    "[ledger] checkpoint_minutes"),
        "restart_minutes": _pair(*settings.restart_minutes, "[ledger] restart_minutes"),
        "utilization": _pair(*settings.utilization, "[ledger] utilization"),
    }
    if h.jobs:
        sizes = [float(j.gpus) for j in h.jobs if j.gpus > 0]
        hours = [j.hours for j in h.jobs]
        if sizes:
            out["job_gpus"] = _pair(quantile(sizes, 0.25), quantile(sizes, 0.75),
                                    f"sacct: quartiles of {len(sizes)} jobs")
        out["job_hours"] = _pair(quantile(hours, 0.25), quantile(hours, 0.75),
                                 f"sacct: quartiles of {len(hours)} jobs")
        capacity = sum(v.gpus for v in h.nodes.values()) * (h.end - h.start) / 3600
        if capacity > 0:
            used = min(1.0, sum(j.gpus * j.hours for j in h.jobs) / capacity)
            out["utilization"] = _pair(used, used, f"sacct: GPU-hours of jobs / capacity "
                                                   f"over {len(h.jobs)} jobs")
    return out


def loss(ins: dict[str, dict[str, Any]], end: str) -> float:
    """GPU-hours one interruption costs at the low or high end of every input."""
    ckpt = ins["checkpoint_minutes"][end] / 60
    restart = ins["restart_minutes"][end] / 60
    return ins["job_gpus"][end] * min(ins["job_hours"][end], ckpt / 2 + restart)


def expected(h: History, rates: dict[str, float]) -> dict[str, Any]:
    """What the public rates predict for a fleet of this size per month, by class: a reference
    beside what the gate measured, never part of the balance."""
    fleet_gpu_hours = sum(v.gpus for v in h.nodes.values()) * MONTH_S / 3600
    classes = {}
    for name, rate in sorted(rates.items()):
        known = LLAMA3.get(name)
        classes[name] = {"per_million_gpu_hours": round(rate, 4),
                         "per_month": round(rate * fleet_gpu_hours / 1e6, 4),
                         "gate_can_catch": bool(known and known[2]),
                         "category": known[1] if known else name}
    catchable = sum(c["per_month"] for c in classes.values() if c["gate_can_catch"])
    return {"fleet_gpus": sum(v.gpus for v in h.nodes.values()), "classes": classes,
            "catchable_per_month": round(catchable, 4),
            "all_per_month": round(sum(c["per_month"] for c in classes.values()), 4)}


def rates(settings) -> tuple[dict[str, float], str]:
    out = default_rates()
    out.update(settings.failure_rates)
    source = LLAMA3_SOURCE
    if settings.failure_rates:
        source += "; overridden by [ledger] failure_rates: " + ", ".join(
            sorted(settings.failure_rates))
    return out, source


def balance(h: History, settings, caught: dict[str, Any], spent_gpu_hours: tuple[float, float],
            overturned_gpu_hours: float) -> dict[str, Any]:
    """Saved, spent and their difference per month, each as [low, high]."""
    ins = inputs(h, settings)
    per_month = MONTH_S / max(1.0, h.end - h.start)
    real = caught["outcomes"]["confirmed"] + caught["outcomes"]["recurred"]
    caught_low = real * per_month
    caught_high = (real + caught["outcomes"]["open"]) * per_month
    saved_low = caught_low * ins["utilization"]["low"] * loss(ins, "low")
    saved_high = caught_high * ins["utilization"]["high"] * loss(ins, "high")
    spent_low = spent_gpu_hours[0] * per_month
    spent_high = (spent_gpu_hours[1] + overturned_gpu_hours) * per_month
    rate_table, rate_source = rates(settings)
    return {
        "inputs": ins,
        "loss_per_interruption_gpu_hours": [round(loss(ins, "low"), 3),
                                            round(loss(ins, "high"), 3)],
        "caught_per_month": [round(caught_low, 3), round(caught_high, 3)],
        "saved_gpu_hours_per_month": [round(saved_low, 2), round(saved_high, 2)],
        "spent_gpu_hours_per_month": [round(spent_low, 2), round(spent_high, 2)],
        "balance_gpu_hours_per_month": [round(saved_low - spent_high, 2),
                                        round(saved_high - spent_low, 2)],
        "expected": {**expected(h, rate_table), "source": rate_source},
    }
