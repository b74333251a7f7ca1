"""The all-reduce's verdict over a dist.Sweep, one node's (the `allreduce` check,
checks/allreduce.py) or a group's across nodes (checks/groupcheck.py).

In order: a hung collective (`timeout`, naming the ranks that fell behind), a rank that died, a
rank that sent wrong data, a wrong sum (ranks, size, element, expected, got), a rank that
straggles (it spends most of each all-reduce outside it, while the others wait inside), and busbw
at the largest message size below the profile's busbw_floor_gbps.
"""

from __future__ import annotations

import statistics
from typing import Any

from airlock import collective as dist
from airlock.checks.base import Outcome, Verdict, failed, inconclusive, passed

CHECK = "allreduce"


def _size(nbytes: int) -> str:
    return dist.human_bytes(nbytes)


def allreduce_figures(sw, floor: float) -> dict[str, Any]:
    figs: dict[str, Any] = {
        "world_size": sw.world_size,
        "sweep": [{"bytes": s.bytes, "time_us": round(s.time_s * 1e6, 1),
                   "algbw_gbps": round(s.algbw_gbps, 4), "busbw_gbps": round(s.busbw_gbps, 4)}
                  for s in sw.sizes],
        "floor": floor or "",
    }
    if sw.sizes:
        figs["busbw_gbps"] = round(sw.sizes[-1].busbw_gbps, 4)
        figs["algbw_gbps"] = round(sw.sizes[-1].algbw_gbps, 4)
    if sw.own_fraction:
        figs["outside_fraction"] = {str(r): round(f, 4) for r, f in sw.own_fraction.items()}
    if sw.progress:
        figs["progress"] = {str(r): f"{s}|{label}" for r, (s, label) in sw.progress.items()}
    if sw.nodes and len(set(sw.nodes.values())) > 1:
        figs["nodes"] = {str(r): n for r, n in sw.nodes.items()}
    return figs


def stragglers(own_fraction: dict[int, float], fraction: float) -> list[int]:
    """Ranks outside the collective for more than `fraction` of it, while the other ranks'
    median is well below (if everyone is, the node is just slow and busbw says so)."""
    out = []
    for r, f in own_fraction.items():
        others = [v for k, v in own_fraction.items() if k != r]
        if others and f > fraction and statistics.median(others) < fraction / 2:
            out.append(r)
    return sorted(out, key=lambda r: -own_fraction[r])


def verdict_allreduce(sw, floor_gbps: float = 0.0, straggler_fraction: float = 0.5) -> Outcome:
    """Judge a dist.Sweep (one node or many)."""
    figs = allreduce_figures(sw, floor_gbps)
    if sw.unmeasured and not (sw.sent_bad or sw.wrong_sum or sw.leftover):
        return inconclusive(CHECK, f"not measured: {sw.unmeasured}"[:160], **figs)
    if sw.timed_out:
        lag = sw.laggards
        if lag:
            step_label = sw.progress[lag[0]][1]
            who = f" ({', '.join(sw.where(r) for r in lag)} stuck at {step_label})"
        elif sw.progress:
            labels = sorted({label for _s, label in sw.progress.values()})
            who = f" (all ranks stuck at {', '.join(labels)})"
        else:
            who = ""
        extra = f"; left running: {sw.leftover}" if sw.leftover else ""
        return Outcome(CHECK, Verdict.FAIL, f"timeout after {sw.timeout:g}s{who}{extra}", figs,
                       "reboot", timed_out=True)
    if sw.leftover:
        return failed(CHECK, f"processes left running after the run: {sw.leftover}", "reboot",
                      **figs)
    if sw.errors:
        rank = min(sw.errors)
        return failed(CHECK, f"{sw.where(rank)} error: {sw.errors[rank]}"[:160], "reboot",
                      **figs)
    if sw.missing:
        return failed(CHECK, f"no report from {', '.join(sw.where(r) for r in sw.missing)}",
                      "reboot", **figs)
    if sw.sent_bad:
        e = sw.sent_bad[0]
        return failed(CHECK, f"{sw.where(e['rank'])} sent wrong data at {_size(e['bytes'])} "
                      f"({e['count']} elements, first {e['first']})", "replace", **figs)
    if sw.wrong_sum:
        e = sw.wrong_sum[0]
        ranks = sorted({w["rank"] for w in sw.wrong_sum if w["bytes"] == e["bytes"]})
        return failed(CHECK, f"wrong sum on ranks {','.join(map(str, ranks))} at "
                      f"{_size(e['bytes'])}: element {e['first']} expected {e['expected']:g} "
                      f"got {e['got']:g}", "replace", **figs)
    if sw.world_size < 2 or not sw.sizes:
        return failed(CHECK, "no measurement", **figs)
    slow = stragglers(sw.own_fraction, straggler_fraction)
    if slow:
        r = slow[0]
        return failed(CHECK, f"{sw.where(r)} straggling: {sw.own_fraction[r]:.0%} of each "
                      f"all-reduce spent outside it", "reboot", **figs)
    last = sw.sizes[-1]
    if floor_gbps and last.busbw_gbps < floor_gbps:
        return failed(CHECK, f"busbw {last.busbw_gbps:.3g} GB/s < floor {floor_gbps:g} at "
                      f"{_size(last.bytes)}", "reboot", **figs)
    return passed(CHECK, f"busbw {last.busbw_gbps:.3g} GB/s at {_size(last.bytes)}, "
                  f"{sw.world_size} ranks", **figs)
