"""Reading node reports: one Sweep from every node's launcher report (slowest rank per size,
busbw by the nccl-tests convention, who sent wrong data, who received a wrong sum, who lagged)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from airlock.collective.pattern import bus_factor


@dataclass(frozen=True)
class SizeResult:
    bytes: int
    time_s: float  # per all-reduce, slowest rank
    algbw_gbps: float
    busbw_gbps: float


@dataclass
class Sweep:
    world_size: int
    nodes: dict[int, str] = field(default_factory=dict)  # rank -> node
    sizes: list[SizeResult] = field(default_factory=list)
    timed_out: bool = False
    timeout: float = 0.0
    progress: dict[int, tuple[int, str]] = field(default_factory=dict)
    errors: dict[int, str] = field(default_factory=dict)
    missing: list[int] = field(default_factory=list)  # ranks with no report at all
    sent_bad: list[dict[str, Any]] = field(default_factory=list)  # rank sent wrong data
    wrong_sum: list[dict[str, Any]] = field(default_factory=list)  # rank received a wrong sum
    own_fraction: dict[int, float] = field(default_factory=dict)  # at the largest size
    leftover: list[int] = field(default_factory=list)
    # Why the ranks never met (a failed rendezvous), from the launcher's typed field: nothing
    # was measured, so no verdict on anyone.
    unmeasured: str = ""

    @property
    def laggards(self) -> list[int]:
        """Ranks behind the others when a run hung (empty when all are at the same step)."""
        steps = {r: s for r, (s, _label) in self.progress.items()}
        if not steps or len(set(steps.values())) < 2:
            return []
        low = min(steps.values())
        return sorted(r for r, s in steps.items() if s == low)

    def where(self, rank: int) -> str:
        node = self.nodes.get(rank)
        return f"rank {rank}" + (f" ({node})" if node else "")

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["laggards"] = self.laggards
        return d



def combine(reports: list[dict[str, Any]]) -> Sweep:
    """One Sweep from every node's report: the collective's time per size is the slowest
    rank's; busbw = algbw * 2(n-1)/n (the nccl-tests convention)."""
    world = max((int(r.get("world_size", 0)) for r in reports), default=0)
    sw = Sweep(world_size=world)
    timings: dict[int, list[tuple[int, float]]] = {}
    own_last: dict[int, float] = {}
    loop_last: dict[int, tuple[int, float, int]] = {}
    seen: set[int] = set()
    for rep in reports:
        node = rep.get("node", "")
        offset, local = int(rep.get("rank_offset", 0)), int(rep.get("local_ranks", 0))
        for r in range(offset, offset + local):
            sw.nodes[r] = node
        sw.timed_out |= bool(rep.get("timed_out"))
        sw.timeout = max(sw.timeout, float(rep.get("timeout", 0)))
        sw.leftover += list(rep.get("leftover", []))
        if rep.get("unmeasured") and not sw.unmeasured:
            sw.unmeasured = str(rep["unmeasured"])[:200]
        for r, (step, label) in (rep.get("progress") or {}).items():
            if r.lstrip("-").isdigit():
                sw.progress[int(r)] = (int(step), str(label))
        for r, msg in (rep.get("errors") or {}).items():
            sw.errors[int(r)] = str(msg)
            seen.add(int(r))
        for rr in rep.get("ranks", []):
            rank = int(rr["rank"])
            seen.add(rank)
            for v in rr.get("verify", []):
                if v.get("sent_bad"):
                    sw.sent_bad.append({"rank": rank, "bytes": v["bytes"],
                                        "count": v["sent_bad"], "first": v.get("sent_first")})
                if v.get("bad"):
                    sw.wrong_sum.append({"rank": rank, "bytes": v["bytes"], "count": v["bad"],
                                         "first": v.get("first"), "expected": v.get("expected"),
                                         "got": v.get("got")})
            for s in rr.get("sizes", []):
                timings.setdefault(int(s["bytes"]), []).append(
                    (rank, float(s["loop_s"]) / max(int(s["iters"]), 1)))
                loop_last[rank] = (int(s["bytes"]), float(s["loop_s"]), int(s["iters"]))
                own_last[rank] = float(s["own_median_s"])
    sw.missing = sorted(set(range(world)) - seen) if not sw.timed_out else []
    factor = bus_factor(world)
    for nbytes in sorted(timings):
        t = max(v for _r, v in timings[nbytes])
        alg = nbytes / t / 1e9 if t > 0 else 0.0
        sw.sizes.append(SizeResult(nbytes, t, alg, alg * factor))
    if sw.sizes:
        largest = sw.sizes[-1]
        for rank, (nbytes, _loop, _iters) in loop_last.items():
            if nbytes == largest.bytes and largest.time_s > 0:
                sw.own_fraction[rank] = own_last[rank] / largest.time_s
    return sw


