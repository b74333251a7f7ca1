"""GEMM burn-in with verified results.

Every device multiplies the same seeded matrices. Results must be bit-identical across devices of
the same model (same inputs, same kernels) and each device's checksum must match a float64
reference within the dtype's tolerance. TFLOPS per device is measured and compared with the
profile floor. On a machine without GPUs the same code runs on CPU "devices" (worker threads
share the CPU), with smaller sizes, so tests exercise it for real.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from airlock.checks.base import Outcome, failed, passed
from airlock.faults import device_arg

TOLERANCE = {"fp32": 1e-4, "tf32": 5e-3, "fp16": 2e-2, "bf16": 5e-2}


@dataclass(frozen=True)
class DeviceRun:
    device: str
    dtype: str
    tflops: float
    checksum: float
    mismatches: int  # elements differing from the first device's result
    ref_error: float  # relative error of the checksum vs the float64 reference


def verdict_burnin(runs: list[DeviceRun], floor_tflops: float) -> Outcome:
    figures = {
        f"{r.device}.{r.dtype}.tflops": round(r.tflops, 4) for r in runs
    }
    for r in runs:
        if r.mismatches:
            return failed("burnin", f"{r.device} {r.dtype} {r.mismatches} mismatches",
                          "replace", **figures)
    for r in runs:
        if r.ref_error > TOLERANCE[r.dtype]:
            return failed("burnin", f"{r.device} {r.dtype} checksum off by {r.ref_error:.2e}",
                          "replace", **figures)
    if floor_tflops:
        slow = [r for r in runs if r.tflops < floor_tflops]
        if slow:
            r = min(slow, key=lambda x: x.tflops)
            return failed("burnin", f"{r.device} {r.dtype} {r.tflops:.1f} TFLOPS "
                          f"< floor {floor_tflops:g}", "reboot", **figures)
    best = min(runs, key=lambda x: x.tflops) if runs else None
    detail = f"min {best.tflops:.2f} TFLOPS" if best else "no devices"
    return passed("burnin", detail, **figures)


def _dtype(torch, name: str):
    return {"fp32": torch.float32, "tf32": torch.float32, "fp16": torch.float16,
            "bf16": torch.bfloat16}[name]


def run_gemm(devices: list[str], dtype: str, size: int, iterations: int, faults: dict,
             seed: int = 1234) -> list[DeviceRun]:
    import torch

    torch.backends.cuda.matmul.allow_tf32 = dtype == "tf32"
    gen = torch.Generator().manual_seed(seed)
    a_host = torch.randn(size, size, generator=gen, dtype=torch.float32)
    b_host = torch.randn(size, size, generator=gen, dtype=torch.float32)
    ref = (a_host.double() @ b_host.double()).sum().item()
    corrupt = device_arg(faults.get("gemm_corrupt"), 0)
    slow = device_arg(faults.get("gemm_slow"), 0.3)
    results = []
    first = None
    for i, dev in enumerate(devices):
        tdev = "cpu" if dev.startswith("cpu") else dev
        a = a_host.to(tdev, _dtype(torch, dtype))
        b = b_host.to(tdev, _dtype(torch, dtype))
        c = a @ b  # warm-up, and the result we verify
        _sync(torch, tdev)
        start = time.perf_counter()
        for _ in range(iterations):
            c = a @ b
        _sync(torch, tdev)
        elapsed = time.perf_counter() - start
        if slow and slow[0] == i:
            time.sleep(elapsed * (1 / slow[1] - 1))
            elapsed /= slow[1]
        if corrupt and corrupt[0] == i:
            c = c.clone()
            c.view(-1)[size + 1] += 1.0
        out = c.float().cpu()
        if first is None:
            first = out
        mismatches = int((out != first).sum().item())
        checksum = out.double().sum().item()
        scale = abs(a_host).sum().item() * abs(b_host).sum().item() / size
        err = abs(checksum - ref) / max(scale, 1e-30)
        tflops = 2 * size**3 * iterations / elapsed / 1e12
        results.append(DeviceRun(dev, dtype, tflops, checksum, mismatches, err))
    return results


def _sync(torch, dev: str) -> None:
    if dev.startswith("cuda"):
        torch.cuda.synchronize(dev)


def local_devices(cpu_devices: int = 2) -> list[str]:
    import torch

    if torch.cuda.is_available():
        return [f"cuda:{i}" for i in range(torch.cuda.device_count())]
    return [f"cpu{i}" for i in range(cpu_devices)]


def check_burnin(ctx) -> Outcome:
    cfg = ctx.cfg.burnin
    devices = local_devices()
    on_gpu = devices[0].startswith("cuda")
    size = cfg.size or (8192 if on_gpu else cfg.cpu_size)
    iterations = 50 if on_gpu else cfg.cpu_iterations
    runs: list[DeviceRun] = []
    for dtype in cfg.dtypes:
        runs.extend(run_gemm(devices, dtype, size, iterations, ctx.faults))
    floor = 0.0
    profile = ctx.profile if on_gpu else None
    if profile is not None:
        floor = float(profile.get("tflops_floor", {}).get(cfg.dtypes[0], 0.0))
    return verdict_burnin(runs, floor)
