"""The `cuda` check: CUDA must see exactly the GPUs NVML lists before any heavy check claims to
have run on them. The match, and the plan the heavy checks run on, are checks/device_plan.py's.
"""

from __future__ import annotations

from airlock.checks.base import Outcome, failed, passed, skipped
from airlock.checks.device_plan import (
    CUDA,
    STAND_IN,
    CudaView,
    Match,
    cuda_view,
    expected_gpus,
    inventory_problem,
    match,
)
from airlock.checks.snapshot import snapshot_or_outcome

CHECK = "cuda"


def verdict_cuda(nvml_count: int, expected: int, m: Match, view: CudaView) -> Outcome:
    figures = {"nvml": nvml_count, "torch": len(view.devices), "matched": len(m.pairs),
               "expected": expected}
    if nvml_count == 0 and expected == 0 and not view.devices:
        return skipped(CHECK, "no GPUs expected or present: heavy checks run on CPU devices")
    problem = inventory_problem(nvml_count, expected, m, view)
    if problem:
        return failed(CHECK, problem, "reboot", **figures)
    how = " (simulated: CPU stand-ins)" if view.simulated else ""
    return passed(CHECK, f"{len(m.pairs)} GPUs in NVML matched to CUDA devices{how}",
                  **figures, devices_kind=STAND_IN if view.simulated else CUDA)


def check_cuda(ctx) -> Outcome:
    import torch  # in the check's own process only

    snap = snapshot_or_outcome(ctx, CHECK)
    if isinstance(snap, Outcome):
        return snap
    view = cuda_view(ctx, torch)
    return verdict_cuda(snap.count, expected_gpus(ctx), match(snap.gpus, view), view)
