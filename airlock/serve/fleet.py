"""GET /api/v1/fleet: each node's burn-in TFLOPS and all-reduce bus bandwidth per SKU profile,
against the profile's floor and the fleet's median, so that a straggler is seen.

The figures are each node's newest recorded burn-in and all-reduce (from the results store, the
controller's view: airlock.records.results.read_many), whatever their verdict: a node that failed
below
the fleet is exactly the one to see. The burn-in reference is the fleet comparison's own
(airlock.checks.fleet: the latest passing burn-in of each node with that profile, read from the
shared directory without following links, outliers dropped by the median absolute deviation,
none below [burnin] fleet_min_nodes nodes, only nodes Slurm lists), i.e. what a node's next
burn-in is compared with.
The all-reduce has no fleet comparison in the checks; its median is the plain median of the
nodes whose all-reduce passed, given at least fleet_min_nodes of them (as for the burn-in).
"""

from __future__ import annotations

import math
import statistics
import time
from typing import Any

from airlock.checks.fleet import fleet_reference, read_fleet
from airlock.errors import AirlockError
from airlock.hw import profiles as profiles_mod
from airlock.records.results import read_many

HISTORY = 10  # runs per node searched for the newest burn-in / all-reduce


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def newest_records(runs: list[dict[str, Any]], check: str) -> dict[str, Any] | None:
    """The newest record of `check` in runs (newest first), with its run's id and time."""
    for run in runs:
        for rec in run.get("checks", []):
            if isinstance(rec, dict) and rec.get("check") == check \
                    and isinstance(rec.get("figures"), dict):
                return {"run_id": run.get("run_id"), "finished_at": run.get("finished_at"),
                        "verdict": rec.get("verdict"), "figures": rec["figures"],
                        "profile": rec["figures"].get("profile") or run.get("profile") or ""}
    return None


def floors(name: str, dirs: list[str]) -> tuple[dict[str, float], float | None]:
    """The profile's burn-in floors per dtype and its all-reduce floor (({}, None) for a
    profile this host does not know, e.g. a node's auto-detected one)."""
    try:
        prof = profiles_mod.named(name, dirs)
    except AirlockError:
        return {}, None
    tflops = {str(k): v for k, v in (prof.get("tflops_floor") or {}).items()
              if _number(v) is not None}
    return tflops, _number(prof.get("busbw_floor_gbps")) or None


def fleet_view(cfg, nodes: list[str], timeout: float = 60.0) -> dict[str, Any]:
    results = read_many(cfg, nodes, HISTORY, timeout=timeout)
    members = set(nodes)
    profiles: dict[str, dict[str, Any]] = {}

    def profile(name: str) -> dict[str, Any]:
        return profiles.setdefault(name, {"profile": name, "burnin": {}, "allreduce": None})

    for node in nodes:
        res = results[node]
        runs = res.history or ([res.run] if res.run else [])
        burn = newest_records(runs, "burnin")
        if burn is not None and burn["profile"]:
            figs = burn["figures"]
            medians = figs.get("median_tflops") if isinstance(figs.get("median_tflops"),
                                                              dict) else {}
            for dtype, value in medians.items():
                v = _number(value)
                if v is None:
                    continue
                entry = profile(burn["profile"])["burnin"].setdefault(
                    str(dtype), {"dtype": str(dtype), "floor": None, "fleet_median": None,
                                 "fleet_nodes": 0, "nodes": []})
                entry["nodes"].append({"node": node, "tflops": v, "verdict": burn["verdict"],
                                       "run_id": burn["run_id"], "at": burn["finished_at"]})
        ar = newest_records(runs, "allreduce")
        if ar is not None and ar["profile"] and _number(ar["figures"].get("busbw_gbps")):
            entry = profile(ar["profile"])
            if entry["allreduce"] is None:
                entry["allreduce"] = {"floor": None, "median": None, "nodes": []}
            entry["allreduce"]["nodes"].append(
                {"node": node, "busbw_gbps": _number(ar["figures"]["busbw_gbps"]),
                 "verdict": ar["verdict"], "run_id": ar["run_id"], "at": ar["finished_at"]})
    min_nodes = cfg.burnin.fleet_min_nodes
    ignored: list[str] = []
    for name, entry in profiles.items():
        tflops_floor, busbw_floor = floors(name, cfg.profile.dirs)
        for dtype, d in entry["burnin"].items():
            d["floor"] = tflops_floor.get(dtype)
        if entry["allreduce"] is not None:
            entry["allreduce"]["floor"] = busbw_floor
        if entry["burnin"]:
            # What the fleet comparison would compare a node's next burn-in with.
            # Members are the nodes Slurm lists (`nodes`, from the status read's one Slurm
            # call), as for the check itself (checks.fleet.fleet_members): a retired node's
            # folder left in the shared directory is not the fleet.
            others = read_fleet(cfg.shared_dir, "", name, ignored=ignored, members=members)
            for dtype, d in entry["burnin"].items():
                d["fleet_median"] = fleet_reference(others, dtype, min_nodes)
                d["fleet_nodes"] = sum(1 for figs in others.values() if dtype in figs)
        ar = entry["allreduce"]
        if ar is not None:
            # the burn-in's rule: no reference from fewer than fleet_min_nodes nodes
            ok = [n["busbw_gbps"] for n in ar["nodes"] if n["verdict"] in ("pass", "warn")]
            ar["median"] = statistics.median(ok) if len(ok) >= max(min_nodes, 1) else None
            ar["fleet_nodes"] = len(ok)
    return {"schema": 1, "generated_at": time.time(),
            "fleet_min_nodes": min_nodes, "fleet_fraction": cfg.burnin.fleet_fraction,
            "profiles": [{**profiles[k], "burnin": list(profiles[k]["burnin"].values())}
                         for k in sorted(profiles)],
            "ignored": ignored[:20]}
