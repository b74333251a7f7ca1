"""Timed copies for the copy-bandwidth checks (pcie_bw, p2p): where they run (the device plan,
checks/device_plan.py, or the outcome that ends the check first) and the timing of the copies."""

from __future__ import annotations

import time

from airlock.checks.base import Outcome, skipped
from airlock.checks.device_plan import DevicePlan, unusable
from airlock.checks.device_plan import plan as device_plan
from airlock.checks.snapshot import snapshot_or_outcome

MIB = 1 << 20


def timed_copies(torch, dst, src, iters: int, sync: list[str], factor: float = 1.0) -> float:
    """GB/s of `iters` copies src -> dst (after one untimed). With a GPU among `sync`: wall
    clock between device synchronisations. Host copies (CPU devices, stand-ins; the check runs
    them on one torch thread, single_threaded()) are timed in the thread's CPU time, so other
    processes on a busy host do not make a device look slow. factor < 1 (a fault switch): the
    device loses the rest of the time (asleep on a GPU, spinning on the CPU, whose clock
    counts only the CPU it uses)."""
    on_gpu = any(d.startswith("cuda") for d in sync)
    clock = time.perf_counter if on_gpu else time.thread_time
    dst.copy_(src, non_blocking=True)
    _sync(torch, sync)
    t0 = clock()
    for _ in range(iters):
        dst.copy_(src, non_blocking=True)
    _sync(torch, sync)
    took = clock() - t0
    if factor < 1.0:
        lose = took * (1 / factor - 1)
        if on_gpu:
            time.sleep(lose)
        else:
            end = clock() + lose
            while clock() < end:
                pass
        took = clock() - t0
    return src.numel() * src.element_size() * iters / max(took, 1e-9) / 1e9


def _sync(torch, devices: list[str]) -> None:
    for d in devices:
        if d.startswith("cuda"):
            torch.cuda.synchronize(d)


def no_gpus(ctx, check: str) -> Outcome | None:
    """The outcome for a node with no GPU, none expected (the `cpu` profile): nothing on PCIe or
    NVLink to measure, so the check skips without starting torch; None otherwise (the device
    plan decides, and a GPU node whose NVML cannot be read fails there)."""
    snap = snapshot_or_outcome(ctx, check)
    if isinstance(snap, Outcome):
        return None
    override = ctx.cfg.profile.expected_gpus
    expected = override if override >= 0 else ctx.profile.gpus
    if snap.count == 0 and expected == 0:
        return skipped(check, "no GPUs: no PCIe link or GPU pair to measure")
    return None


def single_threaded(torch) -> None:
    """Host copies on this thread only: torch's worker threads would spin outside its clock.
    (The check has a process of its own: nothing else in it is slowed.)"""
    torch.set_num_threads(1)


def copy_devices(ctx, torch, check: str, cpu_devices: int) -> DevicePlan | Outcome:
    """Where a copy-bandwidth check (this one, p2p) runs: the device plan, or the outcome that
    ends the check first (no GPU and none expected: skip; GPUs CUDA cannot use: fail)."""
    none = no_gpus(ctx, check)
    if none is not None:
        return none
    where = device_plan(ctx, torch, cpu_devices)
    if where.problem:
        return unusable(check, where)
    if not where.on_gpu:
        single_threaded(torch)
    return where
