"""Which registration level to run, from what each level measured here: its median time per
join, how often it caught a real fault (confirmed or recurred) and how often it was overturned.

Per join, a level costs its median check time x the node's GPUs, and is worth its catch rate x
utilization x one interruption's loss (airlock.ledger.value). The advice is the level with the
best worst case (low value minus cost); it names the catch rate at which the next heavier level
would pay for its extra time, which is what would change it.
"""

from __future__ import annotations

import statistics
from typing import Any

from airlock.ledger.caught import CONFIRMED, RECURRED, Episode
from airlock.ledger.cost import gpus, split
from airlock.ledger.history import History, stage_of
from airlock.ledger.value import loss

ORDER = ("quick", "standard", "deep")


def levels(h: History, eps: list[Episode]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for run in h.runs:
        if stage_of(run) != "registration" or run.get("verdict") == "error":
            continue
        level = str(run.get("level", ""))
        row = out.setdefault(level, {"joins": 0, "seconds": [], "gpus": [], "caught": 0,
                                     "overturned": 0})
        s = split(run)
        row["joins"] += 1
        row["seconds"].append(s["checks"] + s["group"])
        row["gpus"].append(gpus(h, run["node"]))
    for e in eps:
        if e.stage == "registration" and e.level in out:
            if e.outcome in (CONFIRMED, RECURRED):
                out[e.level]["caught"] += 1
            elif e.outcome == "overturned":
                out[e.level]["overturned"] += 1
    return out


def advise(h: History, eps: list[Episode], ins: dict[str, Any]) -> dict[str, Any]:
    measured = levels(h, eps)
    util = ins["utilization"]
    table = {}
    for level, row in measured.items():
        med = statistics.median(row["seconds"])
        g = statistics.median(row["gpus"])
        rate = row["caught"] / row["joins"]
        cost = med / 3600 * g
        table[level] = {"joins": row["joins"], "median_seconds": round(med, 2),
                        "catch_rate": round(rate, 4),
                        "overturned_rate": round(row["overturned"] / row["joins"], 4),
                        "cost_gpu_hours_per_join": round(cost, 4),
                        "value_gpu_hours_per_join": [
                            round(rate * util["low"] * loss(ins, "low"), 4),
                            round(rate * util["high"] * loss(ins, "high"), 4)]}
    if not table:
        return {"levels": {}, "advice": None,
                "why": "no registration runs in the window: nothing measured to advise on",
                "would_change": "registrations (a node joining or rebooting) in the window"}
    best = max(table, key=lambda lv: (table[lv]["value_gpu_hours_per_join"][0]
                                      - table[lv]["cost_gpu_hours_per_join"], -_rank(lv)))
    row = table[best]
    heavier = [lv for lv in ORDER if _rank(lv) > _rank(best)]
    worth = util["low"] * loss(ins, "low")
    if heavier:
        nxt = heavier[0]
        if nxt in table:
            extra = max(0.0, table[nxt]["cost_gpu_hours_per_join"] - row["cost_gpu_hours_per_join"])
            change = (f"{nxt} would pay if it caught {extra / worth * 1000:.2f} more real faults "
                      f"per 1000 joins than {best} (measured: {table[nxt]['catch_rate'] * 1000:.2f}"
                      f" vs {row['catch_rate'] * 1000:.2f})")
        else:
            per_minute = median_gpus(h) / 60 / worth * 1000
            change = (f"{nxt} is not measured here: each extra minute per join pays if it "
                      f"catches {per_minute:.3f} more real faults per 1000 joins; measure it "
                      f"with `airlock check --level {nxt}` on a few nodes")
    else:
        change = (f"a lighter level pays if {best}'s extra checks catch fewer faults than "
                  "their time costs; measure one with `airlock check --level standard`")
    why = (f"{best}: {row['median_seconds']:.0f} s and {row['cost_gpu_hours_per_join']:.3f} "
           f"GPU-hours per join, catching {row['catch_rate'] * 100:.1f}% of joins "
           f"({row['joins']} joins measured)")
    return {"levels": table, "advice": best, "why": why, "would_change": change}


def median_gpus(h: History) -> float:
    """GPUs of the median node (one extra minute per join costs that many GPU-minutes)."""
    counts = [gpus(h, n) for n in h.nodes] or [h.gpus_per_node]
    return float(statistics.median(counts))


def _rank(level: str) -> int:
    return ORDER.index(level) if level in ORDER else len(ORDER)
