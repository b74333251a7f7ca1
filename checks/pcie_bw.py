"""PCIe bandwidth per GPU: host-to-device and device-to-host copies from pinned memory, against
the SKU profile's floors (h2d_floor_gbps, d2h_floor_gbps) and against the node's other GPUs,
beside the link NVML reports, so a link trained down (x8 where x16 is expected, or a lower
generation) is named: `airlock: FAIL pcie_bw gpu3 H2D 24.1 GB/s < 48 (link gen5 x8, expected
x16)`.

The devices are the device plan's (checks/device_plan.py): on a GPU node exactly the CUDA devices
matched to NVML's GPUs, one after another (so each copy has the host's root complex to itself,
as nvbandwidth's host_to_device_memcpy_ce measures it); a GPU node whose GPUs CUDA cannot all
use FAILs here too, never falls back. A node without GPUs (the `cpu` profile)
has no PCIe link to measure: the check skips. For the dev cluster's simulated GPUs (CPU
stand-ins) the copies are between two host buffers: a figure of the host's memory, labelled
with the plan's kind, judged by the `cpu` profile, at most a warning, never a PCIe figure.

The link is read from NVML after the copies: an idle GPU drops its link to a lower generation
to save power, a busy one runs it at full speed.

Fault switch pcie_slow = DEVICE[:FACTOR]: the copies of local device DEVICE (cuda:N, or the
stand-in cpuN) run at FACTOR (default 0.3) of their speed, the device really losing the time
inside the timed region.
"""

from __future__ import annotations

import statistics
from typing import Any, NamedTuple

from airlock.checks.base import Outcome, failed, passed, skipped, warned
from airlock.checks.copies import MIB, copy_devices, timed_copies
from airlock.hw.faults import device_arg

CHECK = "pcie_bw"
DIRECTIONS = ("h2d", "d2h")


class Link(NamedTuple):
    gen: int
    width: int
    want_gen: int
    want_width: int

    @property
    def degraded(self) -> bool:
        return bool((self.want_width and self.width and self.width < self.want_width)
                    or (self.want_gen and self.gen and self.gen < self.want_gen))

    def text(self) -> str:
        now = f"gen{self.gen} x{self.width}" if self.gen or self.width else "not reported"
        if not self.degraded:
            return f"link {now}"
        want = []
        if self.want_gen and self.gen < self.want_gen:
            want.append(f"gen{self.want_gen}")
        if self.want_width and self.width < self.want_width:
            want.append(f"x{self.want_width}")
        return f"link {now}, expected {' '.join(want)}"


class DeviceBw(NamedTuple):
    device: str  # "cuda:3" or "cpu0"
    gpu: int  # NVML index (-1 for a CPU device)
    h2d: float  # GB/s
    d2h: float


# --- verdict (pure) --------------------------------------------------------------------------
def verdict_pcie_bw(results: list[DeviceBw], floors: dict[str, float], links: dict[int, Link],
                    straggler_fraction: float, on_gpu: bool, kind: str) -> Outcome:
    if not results:
        return skipped(CHECK, "no devices")
    figures: dict[str, Any] = {
        "gbps": {_name(r): {"h2d": round(r.h2d, 2), "d2h": round(r.d2h, 2)} for r in results},
        "floors": {d: floors.get(d, 0.0) for d in DIRECTIONS},
        "links": {f"gpu{g}": lk.text().removeprefix("link ") for g, lk in sorted(links.items())}}
    low = []  # (share of its floor or of the others' median, text)
    for d in DIRECTIONS:
        floor = floors.get(d, 0.0)
        values = {_name(r): getattr(r, d) for r in results}
        for r in results:
            v = getattr(r, d)
            if floor and v < floor:
                low.append((v / floor, r, f"{d.upper()} {v:.1f} GB/s < {floor:g}"))
        if straggler_fraction and len(values) > 1:
            for r in results:
                others = statistics.median(x for k, x in values.items() if k != _name(r))
                v = getattr(r, d)
                if v < straggler_fraction * others and not (floor and v < floor):
                    low.append((v / others, r, f"{d.upper()} {v:.1f} GB/s < "
                                               f"{straggler_fraction:g} x the others' "
                                               f"{others:.1f}"))
    if low:
        _share, r, text = min(low, key=lambda x: x[0])
        link = links.get(r.gpu)
        detail = f"{_name(r)} {text}"
        if link and on_gpu:
            detail += f" ({link.text()})"
        more = len({id(x[1]) for x in low}) - 1
        detail += f" (+{more} more)" if more else ""
        figures["low"] = [f"{_name(x[1])} {x[2]}" for x in low]
        if on_gpu:
            return failed(CHECK, detail, "reboot", **figures)
        # a stand-in's copy is the host's memory: never a PCIe verdict, at most a warning
        if link:
            detail += f" (for gpu{r.gpu}, NVML: {link.text()})"
        return warned(CHECK, f"{detail} ({kind}: not a PCIe figure)", **figures)
    degraded = [(g, lk) for g, lk in sorted(links.items()) if lk.degraded]
    if degraded and on_gpu:
        g, lk = degraded[0]
        return warned(CHECK, f"gpu{g} {lk.text()}, bandwidth within its floor", **figures)
    lo = min(min(r.h2d, r.d2h) for r in results)
    if on_gpu:
        return passed(CHECK, f"{len(results)} GPUs, lowest {lo:.1f} GB/s", **figures)
    return passed(CHECK, f"{len(results)} {kind} devices, lowest {lo:.1f} GB/s host copy "
                         "(not a PCIe figure)", **figures)


def _name(r: DeviceBw) -> str:
    return f"gpu{r.gpu}" if r.gpu >= 0 and r.device.startswith("cuda") else r.device


def link_of(gpu, want_gen: int, want_width: int) -> Link:
    """The link NVML reports against what is expected: the profile's, else the device's max."""
    wg = min(want_gen, gpu.pcie_gen_max) if want_gen and gpu.pcie_gen_max else \
        want_gen or gpu.pcie_gen_max
    ww = min(want_width, gpu.pcie_width_max) if want_width and gpu.pcie_width_max else \
        want_width or gpu.pcie_width_max
    return Link(gpu.pcie_gen, gpu.pcie_width, wg, ww)


# --- measuring -------------------------------------------------------------------------------
def measure_device(torch, device: str, size_mib: int, iters: int, factor: float) -> tuple[float,
                                                                                           float]:
    n = size_mib * MIB
    if device.startswith("cuda"):
        host = torch.empty(n, dtype=torch.uint8, pin_memory=True)
        dev = torch.empty(n, dtype=torch.uint8, device=device)
    else:  # a CPU device: two host buffers (module note)
        host = torch.empty(n, dtype=torch.uint8)
        dev = torch.empty(n, dtype=torch.uint8)
    host.fill_(0x5A)
    h2d = timed_copies(torch, dev, host, iters, [device], factor)
    d2h = timed_copies(torch, host, dev, iters, [device], factor)
    return h2d, d2h


def check_pcie_bw(ctx) -> Outcome:
    import torch  # in the check's own process only

    s = ctx.cfg.pcie_bw
    where = copy_devices(ctx, torch, CHECK, s.cpu_devices)
    if isinstance(where, Outcome):
        return where
    on_gpu = where.on_gpu
    size = s.size_mib if on_gpu else s.cpu_size_mib
    iters = s.deep_iters if ctx.level == "deep" else s.iters
    slow = device_arg(ctx.fault("pcie_slow"), 0.3)
    results = []
    for i, d in enumerate(where.devices):
        factor = slow[1] if slow and slow[0] == i else 1.0
        try:
            h2d, d2h = measure_device(torch, d.torch, size, iters, factor)
        except RuntimeError as exc:  # an allocation or a copy that fails is the device's
            return failed(CHECK, f"{d.torch}: {' '.join(str(exc).split())[:120]}", "reboot",
                          **where.figures())
        results.append(DeviceBw(d.torch, d.gpu, h2d, d2h))
    links: dict[int, Link] = {}
    if on_gpu or where.kind == "stand-in":
        ctx.forget_snapshot()  # read the links now, after the copies
        try:
            snap = ctx.snapshot
            p = ctx.profile
            by_index = {g.index: g for g in snap.gpus}
            for r in results:
                g = by_index.get(r.gpu)
                if g is not None and (g.pcie_width or g.pcie_gen):
                    links[r.gpu] = link_of(g, p.get("pcie_gen", 0), p.get("pcie_width", 0))
        except Exception:  # the links are context; the nvml check owns NVML's failures
            links = {}
    prof = where.profile
    floors = {"h2d": float(prof.get("h2d_floor_gbps", 0.0)),
              "d2h": float(prof.get("d2h_floor_gbps", 0.0))}
    fraction = s.straggler_fraction if on_gpu else s.cpu_straggler_fraction
    out = verdict_pcie_bw(results, floors, links, fraction, on_gpu, where.kind)
    out.figures.update(where.figures(), size_mib=size, iters=iters)
    return out
