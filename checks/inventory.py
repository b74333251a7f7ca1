"""GPU inventory: the count NVML sees against the profile's expectation and the node's Slurm GRES,
and the model against the profile's models."""

from __future__ import annotations

import re

from airlock.checks.base import Outcome, failed, passed

_GRES_ITEM = re.compile(r"^gpu(?::[^:(]+)?:(\d+)")


def gres_gpus(gres: str) -> int | None:
    """GPUs in a Slurm GRES string ("gpu:8", "gpu:h100:8(S:0-1)", "gpu:a:4,gpu:b:4", "(null)");
    None when the node declares no GPU GRES."""
    total, seen = 0, False
    # Commas also separate socket lists inside "(S:0,1)": drop the parentheses first.
    for item in re.sub(r"\([^)]*\)", "", gres or "").split(","):
        m = _GRES_ITEM.match(item.strip())
        if m:
            total += int(m.group(1))
            seen = True
    return total if seen else None


def verdict_gpu_count(found: int, expected: int, profile: str, gres: int | None = None,
                      models: list[str] | None = None,
                      profile_models: tuple[str, ...] = ()) -> Outcome:
    figures = {"found": found, "expected": expected}
    if gres is not None:
        figures["gres"] = gres
    if found != expected:
        return failed("gpu_count", f"{found} GPUs, profile {profile} expects {expected}",
                      "reboot", **figures)
    if gres is not None and gres != found:
        # Slurm would hand out GPUs that are not there (or hide ones that are).
        return failed("gpu_count", f"{found} GPUs, Slurm GRES says {gres}", "reboot", **figures)
    if found and profile_models and models:
        strange = [m for m in models if not any(pm in m for pm in profile_models)]
        if strange:
            return failed("gpu_count", f"{strange[0]} is not a {profile} GPU", "", **figures)
    return passed("gpu_count", f"{found} GPUs", **figures)


def check_gpu_count(ctx) -> Outcome:
    from airlock import sku
    from airlock.checks.nvml_checks import snapshot_or_outcome

    snap = snapshot_or_outcome(ctx, "gpu_count")
    if isinstance(snap, Outcome):
        return snap
    override = ctx.cfg.profile.expected_gpus
    profile = ctx.profile
    expected = override if override >= 0 else profile.gpus
    gres = None
    if ctx.cfg.profile.gres:
        facts = sku.node_facts(ctx)
        gres = gres_gpus(facts.gres) if facts is not None else None
    return verdict_gpu_count(snap.count, expected, profile.name, gres, snap.models,
                             profile.models)
