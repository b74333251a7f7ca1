"""NVLink / peer-to-peer bandwidth: a copy between every ordered pair of GPUs, against the SKU
profile's floor (p2p_floor_gbps) and against the other pairs, so the slow pair is named:
`airlock: FAIL p2p gpu2->gpu5 121.4 GB/s < 335`. A pair without peer access on a profile that
expects NVLink fails as such.

The devices are the device plan's (checks/device_plan.py): exactly the CUDA devices matched to
NVML's GPUs on a GPU node, which FAILs here when CUDA cannot use them all. A node without
GPUs (the `cpu` profile) skips. For the dev cluster's simulated GPUs the pairs are CPU
stand-ins: host-memory copies, labelled with the plan's kind, judged by the `cpu` profile, at
most a warning, never a GPU figure.

One pair at a time, each direction on its own (copies dst <- src, timed between device
synchronisations), as nvbandwidth's device_to_device_memcpy_*_ce measure a pair.

Fault switch p2p_slow = A-B[:FACTOR]: copies from local device A to local device B run at
FACTOR (default 0.3) of their speed, losing the time inside the timed region.
"""

from __future__ import annotations

import statistics
from typing import Any, NamedTuple

from airlock.checks.base import Outcome, failed, passed, skipped, warned
from airlock.checks.copies import MIB, copy_devices, timed_copies

CHECK = "p2p"


class PairBw(NamedTuple):
    src: str  # name: "gpu2" (NVML index) or "cpu0"
    dst: str
    gbps: float | None  # None: no peer access
    peer: bool = True

    @property
    def name(self) -> str:
        return f"{self.src}->{self.dst}"


def verdict_p2p(pairs: list[PairBw], floor: float, straggler_fraction: float, on_gpu: bool,
                nvlink_expected: bool, kind: str) -> Outcome:
    if not pairs:
        return skipped(CHECK, "fewer than two devices: no pair to measure")
    figures: dict[str, Any] = {"gbps": {p.name: (round(p.gbps, 2) if p.gbps is not None
                                                 else None) for p in pairs},
                               "floor": floor}
    no_peer = [p for p in pairs if not p.peer]
    if no_peer and on_gpu and nvlink_expected:
        more = f" (+{len(no_peer) - 1} more pairs)" if len(no_peer) > 1 else ""
        return failed(CHECK, f"{no_peer[0].name} no peer access{more}", "reboot",
                      no_peer=[p.name for p in no_peer], **figures)
    measured = {p.name: p.gbps for p in pairs if p.gbps is not None}
    low = []
    for p in pairs:
        if p.gbps is None:
            continue
        if floor and p.gbps < floor:
            low.append((p.gbps / floor, p, f"{p.gbps:.1f} GB/s < {floor:g}"))
        elif straggler_fraction and len(measured) > 1:
            others = statistics.median(v for k, v in measured.items() if k != p.name)
            if p.gbps < straggler_fraction * others:
                low.append((p.gbps / others, p, f"{p.gbps:.1f} GB/s < {straggler_fraction:g} x "
                                                f"the other pairs' {others:.1f}"))
    if low:
        _share, p, text = min(low, key=lambda x: x[0])
        more = f" (+{len(low) - 1} more pairs)" if len(low) > 1 else ""
        figures["low"] = [f"{x[1].name} {x[2]}" for x in low]
        if on_gpu:
            return failed(CHECK, f"{p.name} {text}{more}", "reboot", **figures)
        return warned(CHECK, f"{p.name} {text}{more} ({kind}: not a GPU figure)", **figures)
    lo = min(measured.values()) if measured else 0.0
    what = "GPU pairs" if on_gpu else f"{kind} pairs (host copies, not a GPU figure)"
    return passed(CHECK, f"{len(pairs)} {what}, lowest {lo:.1f} GB/s", **figures)


def pair_fault(value: str | None) -> tuple[int, int, float] | None:
    """'0-3' -> (0, 3, 0.3); '0-3:0.5' -> (0, 3, 0.5)."""
    if not value:
        return None
    pair, _, factor = value.partition(":")
    a, _, b = pair.partition("-")
    return int(a), int(b), float(factor) if factor else 0.3


def check_p2p(ctx) -> Outcome:
    import torch  # in the check's own process only

    s = ctx.cfg.p2p
    where = copy_devices(ctx, torch, CHECK, s.cpu_devices)
    if isinstance(where, Outcome):
        return where
    on_gpu = where.on_gpu
    devices = list(where.devices)
    size = (s.size_mib if on_gpu else s.cpu_size_mib) * MIB
    iters = s.deep_iters if ctx.level == "deep" else s.iters
    slow = pair_fault(ctx.fault("p2p_slow"))

    def name(i: int) -> str:
        d = devices[i]
        return f"gpu{d.gpu}" if on_gpu else d.torch

    buffers = []
    try:
        for d in devices:
            dev = d.torch if on_gpu else "cpu"
            buffers.append((torch.empty(size, dtype=torch.uint8, device=dev).fill_(0xA5),
                            torch.empty(size, dtype=torch.uint8, device=dev)))
        pairs = []
        for i, src in enumerate(devices):
            for j, dst in enumerate(devices):
                if i == j:
                    continue
                peer = True
                if on_gpu:
                    peer = bool(torch.cuda.can_device_access_peer(int(src.torch[5:]),
                                                                   int(dst.torch[5:])))
                factor = slow[2] if slow and (slow[0], slow[1]) == (i, j) else 1.0
                gbps = timed_copies(torch, buffers[j][1], buffers[i][0], iters,
                                    [src.torch, dst.torch], factor)
                pairs.append(PairBw(name(i), name(j), gbps, peer))
    except RuntimeError as exc:  # an allocation or a copy that fails
        return failed(CHECK, " ".join(str(exc).split())[:160], "reboot", **where.figures())
    prof = where.profile
    fraction = s.straggler_fraction if on_gpu else s.cpu_straggler_fraction
    out = verdict_p2p(pairs, float(prof.get("p2p_floor_gbps", 0.0)), fraction, on_gpu,
                      bool(prof.get("nvlink_links", 0)), where.kind)
    out.figures.update(where.figures(), size_mib=size // MIB, iters=iters)
    return out
