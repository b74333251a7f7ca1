"""GPU inventory: the count NVML sees against the profile's expectation, the NVIDIA GPUs on the PCI
bus and, at registration, the node's Slurm GRES; and the model against the profile's models.

The PCI bus is read when NVML sees fewer GPUs than expected, or when the profile came from what
NVML sees (an auto-detected or the `cpu` profile): a GPU whose driver failed is invisible to NVML
but still on the bus, and must fail the node rather than shrink its expectation.

The GRES is compared at levels standard and deep only. There it must be readable: a registration
that cannot tell whether Slurm would hand out GPUs that are not there fails closed ("Slurm GRES
unreadable"). The quick level (periodic hook, prolog) makes no Slurm call for it: the GRES does
not change within a boot, and the prolog's pass path stays local.
"""

from __future__ import annotations

import re

from airlock.checks.base import Outcome, failed, inconclusive, passed
from airlock.checks.registry import HEAVY
from airlock.checks.snapshot import snapshot_or_outcome
from airlock.hw import profiles

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
                      profile_models: tuple[str, ...] = (), pci: int | None = None) -> Outcome:
    figures = {"found": found, "expected": expected}
    if gres is not None:
        figures["gres"] = gres
    if pci is not None:
        figures["pci"] = pci
    if pci is not None and pci > found:
        return failed("gpu_count", f"NVML sees {found} of {pci} NVIDIA GPUs on the PCI bus",
                      "reboot", **figures)
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

    snap = snapshot_or_outcome(ctx, "gpu_count")
    if isinstance(snap, Outcome):
        return snap
    override = ctx.cfg.profile.expected_gpus
    profile = ctx.profile
    expected = override if override >= 0 else profile.gpus
    pci = None
    if snap.count < expected or expected == 0 or profile.name.startswith("auto:"):
        pci = len(profiles.node_pci_gpus(ctx))
    gres = None
    if ctx.cfg.profile.gres and ctx.level in HEAVY:
        if ctx.attempt > 1 and ctx.slurm_facts_read and ctx.slurm_facts is None:
            ctx.forget_slurm_facts()  # the confirmation asks Slurm again
        facts = profiles.node_facts(ctx)
        if facts is None:
            why = ctx.slurm_facts_error or "no answer"
            # Slurm could not say: nothing of the node was measured (closed, as Airlock's own)
            return inconclusive("gpu_count", f"Slurm GRES unreadable: {why}"[:160],
                                found=snap.count, expected=expected)
        gres = gres_gpus(facts.gres)
    return verdict_gpu_count(snap.count, expected, profile.name, gres, snap.models,
                             profile.models, pci)
