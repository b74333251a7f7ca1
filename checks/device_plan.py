"""Which devices the heavy checks run on: one inventory truth (the `cuda` check, checks/cuda.py,
judges the same match; every heavy check runs on the plan made from it).

NVML lists the node's GPUs; torch lists the CUDA devices it can use. A heavy check proves only
what it touched, so the two lists are matched one to one (by UUID, else by PCI bus id) and the
burn-in, the memory test and the all-reduce run on exactly the matched CUDA devices:

  cuda       GPUs are expected or present, and every NVML GPU has its CUDA device (and torch
             has none that NVML does not list): run on them, judged by the node's profile
  cpu        no GPU expected and none in NVML (the `cpu` profile): [section] cpu_devices CPU
             devices, judged by the `cpu` profile
  stand-in   the NVML simulation (dev cluster, tests) declares simulated CUDA for the node
             (`"cuda": {"stand_in": true}` in its entry): the simulated GPUs are matched like
             real ones, then the checks run on CPU stand-ins under the `cpu` profile, labelled
             "stand-in" in every figure. Nothing real is claimed for a GPU that is not there.
  unusable   anything else: a GPU node whose GPUs torch cannot all use (fabric manager down,
             CUDA error 802, a driver/runtime mismatch, a CPU-only torch wheel). The `cuda` check
             FAILs naming what is missing, and every heavy check FAILs with it: none of them
             ever falls back to the CPU on a GPU node.

The probe initialises CUDA. The all-reduce forks its ranks afterwards, and a process that
initialised CUDA must not fork, so it probes in a short-lived child of its own (fork=True).
"""

from __future__ import annotations

import json
import os
import select
import signal
import time
from typing import Any, NamedTuple

from airlock.checks.base import Outcome, failed
from airlock.hw import nvml, profiles

CUDA, CPU, STAND_IN = "cuda", "cpu", "stand-in"
PROBE_TIMEOUT_S = 60.0  # cuInit on 8 GPUs takes seconds; one that hangs is the node's trouble


class CudaDevice(NamedTuple):
    index: int  # torch's cuda:<index>
    name: str
    uuid: str  # normalised: lower case, no "GPU-" prefix
    pci: str  # normalised by nvml.pci_key


class CudaView(NamedTuple):
    """What torch can use on this node (or what the simulation says it could)."""

    devices: tuple[CudaDevice, ...] = ()
    error: str = ""  # CUDA's own words when it cannot be used
    simulated: bool = False


class Match(NamedTuple):
    pairs: tuple[tuple[nvml.Gpu, CudaDevice], ...]
    missing: tuple[nvml.Gpu, ...]  # NVML GPUs torch cannot use
    extra: tuple[CudaDevice, ...]  # CUDA devices NVML does not list


class Device(NamedTuple):
    torch: str  # "cuda:3" or "cpu0"
    model: str
    gpu: int = -1  # the NVML index, for a CUDA device


class DevicePlan(NamedTuple):
    kind: str  # CUDA | CPU | STAND_IN | "" (unusable: see problem)
    devices: tuple[Device, ...]
    profile: profiles.Profile  # whose floors judge the figures
    problem: str = ""  # why the GPUs cannot be used; a heavy check FAILs with it

    @property
    def on_gpu(self) -> bool:
        return self.kind == CUDA

    def figures(self) -> dict[str, Any]:
        return {"devices_kind": self.kind, "profile": self.profile.name}


def norm_uuid(uuid: str) -> str:
    text = str(uuid or "").strip().lower()
    return text[4:] if text.startswith("gpu-") else text


# --- gather -------------------------------------------------------------------------------------
def probe(torch) -> CudaView:
    """torch's CUDA devices with their UUID and PCI address, or CUDA's error."""
    try:
        torch.cuda.init()  # raises with CUDA's own text ("... error 802 ...", "not compiled")
        devices = []
        for i in range(torch.cuda.device_count()):
            p = torch.cuda.get_device_properties(i)
            pci = f"{p.pci_domain_id:08X}:{p.pci_bus_id:02X}:{p.pci_device_id:02X}.0"
            devices.append(CudaDevice(i, str(p.name), norm_uuid(str(p.uuid)), nvml.pci_key(pci)))
    except Exception as exc:  # every CUDA failure is the answer, not a crash
        return CudaView((), _one_line(f"{type(exc).__name__}: {exc}"))
    if not devices:
        return CudaView((), "torch.cuda.device_count() is 0")
    return CudaView(tuple(devices))


def probe_forked(torch, timeout: float = PROBE_TIMEOUT_S) -> CudaView:
    """probe() in a child process, so this process never initialises CUDA (it forks later)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: probe, answer, leave without running any of the parent's code
        code = 1
        try:
            os.close(r)
            view = probe(torch)
            os.write(w, json.dumps({"devices": [d._asdict() for d in view.devices],
                                    "error": view.error}).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(w)
    chunks, deadline = [], time.monotonic() + timeout
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([r], [], [], left)[0]:
                os.kill(pid, signal.SIGKILL)
                return CudaView((), f"CUDA probe hung for {timeout:g}s")
            chunk = os.read(r, 1 << 16)
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(r)
        os.waitpid(pid, 0)
    try:
        data = json.loads(b"".join(chunks))
        return CudaView(tuple(CudaDevice(**d) for d in data["devices"]), data["error"])
    except (ValueError, KeyError, TypeError):
        return CudaView((), "CUDA probe died without an answer")


def simulated_view(cfg, node: str) -> CudaView | None:
    """The simulation's CUDA for this node, when it declares one (its "cuda" entry):
    {"stand_in": true} matches every simulated GPU; "hide": [index, ...] hides some from torch;
    "error": "..." is CUDA's error text (with nothing visible unless stand_in). None when the
    node has no simulation or its entry has no "cuda": torch is asked for real."""
    if not cfg.nvml.simulate:
        return None
    entry = nvml.read_simulation(cfg.nvml.simulate, node)
    spec = entry.get("cuda")
    if not isinstance(spec, dict):
        return None
    error = str(spec.get("error") or "")
    if not spec.get("stand_in"):
        return CudaView((), error or "simulated: no CUDA", simulated=True)
    hidden = {int(i) for i in spec.get("hide") or ()}
    gpus = [nvml.gpu_from_dict(g, i) for i, g in enumerate(entry.get("gpus") or [])]
    devices, n = [], 0
    for g in gpus:
        if g.index in hidden or g.lost:
            continue
        devices.append(CudaDevice(n, g.name, norm_uuid(g.uuid), nvml.pci_key(g.pci_bus_id)))
        n += 1
    return CudaView(tuple(devices), error, simulated=True)


def cuda_view(ctx, torch, fork: bool = False) -> CudaView:
    sim = simulated_view(ctx.cfg, ctx.node)
    if sim is not None:
        return sim
    return probe_forked(torch) if fork else probe(torch)


# --- pure ---------------------------------------------------------------------------------------
def match(gpus: list[nvml.Gpu] | tuple[nvml.Gpu, ...], view: CudaView) -> Match:
    """Pair NVML's GPUs with torch's devices: by UUID, else by PCI bus id."""
    left = list(view.devices)
    pairs, missing = [], []
    for g in gpus:
        uuid, pci = norm_uuid(g.uuid), nvml.pci_key(g.pci_bus_id) if g.pci_bus_id else ""
        hit = next((d for d in left if uuid and d.uuid == uuid), None) or \
            next((d for d in left if pci and d.pci == pci), None)
        if hit is None:
            missing.append(g)
        else:
            left.remove(hit)
            pairs.append((g, hit))
    return Match(tuple(pairs), tuple(missing), tuple(left))


def _gpu_name(g: nvml.Gpu) -> str:
    ids = ", ".join(x for x in (g.uuid, g.pci_bus_id) if x)
    return f"gpu{g.index}" + (f" ({ids})" if ids else "")


def inventory_problem(nvml_count: int, expected: int, m: Match, view: CudaView) -> str:
    """Why the GPUs cannot all be used by CUDA; "" when every one can."""
    seen = len(view.devices)
    if m.missing or (expected > nvml_count and not m.extra):
        if view.error and not m.pairs:
            why = view.error
        elif m.missing:
            why = "missing " + ", ".join(_gpu_name(g) for g in m.missing[:4])
            if len(m.missing) > 4:
                why += f" and {len(m.missing) - 4} more"
        else:
            why = f"profile expects {expected}"
        return f"{nvml_count} GPUs in NVML, torch sees {seen}: {why}"
    if m.extra:
        d = m.extra[0]
        return (f"torch sees cuda:{d.index} ({d.uuid or d.pci or d.name}) that NVML does not "
                f"list ({nvml_count} GPUs in NVML, torch sees {seen})")
    return ""


# --- the plan -----------------------------------------------------------------------------------
def expected_gpus(ctx) -> int:
    override = ctx.cfg.profile.expected_gpus
    return override if override >= 0 else ctx.profile.gpus


def plan(ctx, torch, cpu_devices: int, fork: bool = False) -> DevicePlan:
    """The devices a heavy check runs on, and the profile that judges it (module docstring)."""
    snap = ctx.snapshot
    expected = expected_gpus(ctx)
    cpu_profile = profiles.named("cpu", ctx.cfg.profile.dirs)
    if snap.count == 0 and expected == 0:
        cpus = tuple(Device(f"cpu{i}", "cpu") for i in range(cpu_devices))
        return DevicePlan(CPU, cpus, cpu_profile)
    view = cuda_view(ctx, torch, fork)
    m = match(snap.gpus, view)
    problem = inventory_problem(snap.count, expected, m, view)
    if problem:
        return DevicePlan("", (), ctx.profile, problem)
    if view.simulated:
        n = max(1, min(cpu_devices, len(m.pairs)))
        return DevicePlan(STAND_IN, tuple(Device(f"cpu{i}", "cpu stand-in", m.pairs[i][0].index)
                                          for i in range(n)), cpu_profile)
    cuda = tuple(Device(f"cuda:{d.index}", d.name, g.index) for g, d in m.pairs)
    return DevicePlan(CUDA, tuple(sorted(cuda, key=lambda d: int(d.torch[5:]))), ctx.profile)


def unusable(check: str, p: DevicePlan) -> Outcome:
    """A heavy check on a GPU node whose GPUs CUDA cannot all use: FAIL, never the CPU."""
    return failed(check, f"GPUs not usable by CUDA: {p.problem}", "reboot", **p.figures())


def bench_devices(torch, cpu_devices: int) -> list[tuple[str, str]]:
    """For benches only (a measurement of whatever is here, never a verdict): every CUDA
    device torch has, else cpu_devices CPU devices. The benches print which they used."""
    if torch.cuda.is_available() and torch.cuda.device_count() > 0:
        return [(f"cuda:{i}", torch.cuda.get_device_name(i))
                for i in range(torch.cuda.device_count())]
    return [(f"cpu{i}", "cpu") for i in range(cpu_devices)]


def _one_line(text: str) -> str:
    return " ".join(text.split())[:200]
