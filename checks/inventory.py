"""GPU inventory: the count NVML sees against the profile's expectation."""

from __future__ import annotations

from airlock.checks.base import Outcome, failed, passed


def verdict_gpu_count(found: int, expected: int, profile: str, lost: list[int]) -> Outcome:
    if lost:
        return failed("gpu_count", f"gpu{lost[0]} fell off the bus", "reboot",
                      found=found, expected=expected, lost=lost)
    if found != expected:
        return failed("gpu_count", f"{found} GPUs, profile {profile} expects {expected}",
                      "reboot", found=found, expected=expected)
    return passed("gpu_count", f"{found} GPUs", found=found, expected=expected)


def check_gpu_count(ctx) -> Outcome:
    snap = ctx.snapshot
    override = ctx.cfg.profile.expected_gpus
    expected = override if override >= 0 else ctx.profile.gpus
    lost = [g.index for g in snap.gpus if g.lost]
    return verdict_gpu_count(snap.count, expected, ctx.profile.name, lost)
