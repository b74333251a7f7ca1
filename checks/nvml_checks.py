"""The NVML quick checks: each a pure verdict over the snapshot's GPUs and the SKU profile, plus
a thin gather.

The snapshot is taken once per run (Context.snapshot) and shared. The `nvml` check runs first and
owns NVML's own failures: a hung gather is "nvml timeout" there, and every later NVML check skips
("no NVML data") instead of failing again or waiting again (airlock.hw.nvml remembers the stuck
call). A check run on its own (`--only ecc`) that meets the failure first reports it itself, so
an unreadable NVML never reads as a pass. On a confirmation re-run (attempt > 1) the snapshot is
gathered afresh, so the second opinion comes from the hardware, not from the first reading.

Fields the simulation leaves at their defaults (no NVLink list, PCIe 0, temperature 0) mean "not
reported": those checks skip rather than invent a verdict.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airlock.checks.base import Outcome, failed, passed, skipped, warned
from airlock.checks.snapshot import gather_failed, snapshot_or_outcome
from airlock.hw.nvml import Gpu, NvmlError, Snapshot
from airlock.hw.profiles import node_pci_gpus


# --- shared gather (the snapshot itself: checks/snapshot.py) ----------------------------------
def alive_gpus_or_outcome(ctx, check: str) -> list[Gpu] | Outcome:
    """The GPUs still on the bus, or the Outcome to return instead (no NVML data, no GPUs)."""
    snap = snapshot_or_outcome(ctx, check)
    if isinstance(snap, Outcome):
        return snap
    if not snap.gpus:
        return skipped(check, "no GPUs")
    return _alive(snap)


def _alive(snap: Snapshot) -> list[Gpu]:
    return [g for g in snap.gpus if not g.lost]


def _gpus_list(indices: Sequence[int]) -> str:
    return ",".join(f"gpu{i}" for i in indices)


# --- nvml: the gather itself -------------------------------------------------------------------
def verdict_nvml(snap: Snapshot | None, error: BaseException | None = None,
                 check: str = "nvml", pci_gpus: Sequence[str] = ()) -> Outcome:
    """`pci_gpus`: the NVIDIA GPUs on the PCI bus. With NVML absent they make this a GPU node
    whose driver or library is missing, not a CPU node."""
    if error is not None:
        return gather_failed(error, check)
    assert snap is not None
    if snap.source == "none":
        why = snap.note or "NVML not available"
        if pci_gpus:
            return failed(check, f"{len(pci_gpus)} NVIDIA GPUs on the PCI bus, but {why}",
                          "reboot", pci=list(pci_gpus))
        return skipped(check, f"no NVML on this node ({why})")
    return passed(check, f"{snap.count} GPUs via {snap.source} in {snap.duration_s * 1000:.0f}ms",
                  gpus=snap.count, gather_ms=round(snap.duration_s * 1000, 1))


def check_nvml(ctx) -> Outcome:
    if ctx.attempt > 1:
        ctx.forget_snapshot()
    try:
        snap = ctx.snapshot
    except NvmlError as exc:
        return verdict_nvml(None, exc)

    return verdict_nvml(snap, pci_gpus=node_pci_gpus(ctx) if snap.source == "none" else ())


# --- lost GPUs -----------------------------------------------------------------------------------
def verdict_gpu_lost(gpus: Sequence[Gpu]) -> Outcome:
    lost = [g.index for g in gpus if g.lost]
    if lost:
        return failed("gpu_lost", f"{_gpus_list(lost)} fell off the bus", "reboot", lost=lost)
    return passed("gpu_lost", f"{len(gpus)} GPUs answer")


def check_gpu_lost(ctx) -> Outcome:
    snap = snapshot_or_outcome(ctx, "gpu_lost")
    if isinstance(snap, Outcome):
        return snap
    if not snap.gpus:
        return skipped("gpu_lost", "no GPUs")
    return verdict_gpu_lost(snap.gpus)


# --- driver --------------------------------------------------------------------------------------
def verdict_driver(gpus: Sequence[Gpu], system_driver: str = "") -> Outcome:
    versions: dict[str, list[int]] = {}
    for g in gpus:
        if g.driver_version:
            versions.setdefault(g.driver_version, []).append(g.index)
    if system_driver and versions and system_driver not in versions:
        versions.setdefault(system_driver, [])
    if len(versions) > 1:
        detail = " vs ".join(f"{v} ({_gpus_list(ix) or 'system'})"
                             for v, ix in sorted(versions.items()))
        return failed("driver", f"versions differ: {detail}", "reboot",
                      versions=sorted(versions))
    if not versions:
        return skipped("driver", "driver version not reported")
    (version,) = versions
    return passed("driver", version, version=version)


def check_driver(ctx) -> Outcome:
    snap = snapshot_or_outcome(ctx, "driver")
    if isinstance(snap, Outcome):
        return snap
    return verdict_driver(_alive(snap), snap.driver_version)


# --- GPU memory size ---------------------------------------------------------------------------
def verdict_gpu_memory(gpus: Sequence[Gpu], expected_mib: int, tolerance_pct: float) -> Outcome:
    if not expected_mib:
        return skipped("gpu_memory", "profile sets no memory_mib")
    floor = expected_mib * (1 - tolerance_pct / 100)
    short = [g for g in gpus if g.memory_total_mib and g.memory_total_mib < floor]
    if short:
        g = min(short, key=lambda x: x.memory_total_mib)
        return failed("gpu_memory", f"gpu{g.index} {g.memory_total_mib} MiB < {expected_mib} MiB",
                      "replace", gpus=[x.index for x in short], expected_mib=expected_mib)
    return passed("gpu_memory", f"{expected_mib} MiB each", expected_mib=expected_mib)


def check_gpu_memory(ctx) -> Outcome:
    gpus = alive_gpus_or_outcome(ctx, "gpu_memory")
    if isinstance(gpus, Outcome):
        return gpus
    p = ctx.profile
    return verdict_gpu_memory(gpus, p.memory_mib, p.get("memory_tolerance_pct", 1.0))


# --- ECC -----------------------------------------------------------------------------------------
def verdict_ecc(gpus: Sequence[Gpu], dram_max: int = 0, sram_max: int = 0) -> Outcome:
    bad = []
    for g in gpus:
        if g.ecc_volatile_uncorrected_dram > dram_max:
            bad.append(f"gpu{g.index} {g.ecc_volatile_uncorrected_dram} DRAM")
        if g.ecc_volatile_uncorrected_sram > sram_max:
            bad.append(f"gpu{g.index} {g.ecc_volatile_uncorrected_sram} SRAM")
    figures = {
        "dram": sum(g.ecc_volatile_uncorrected_dram for g in gpus),
        "sram": sum(g.ecc_volatile_uncorrected_sram for g in gpus),
        "corrected": sum(g.ecc_volatile_corrected for g in gpus),
    }
    if bad:
        more = f" (+{len(bad) - 1} more)" if len(bad) > 1 else ""
        return failed("ecc", f"{bad[0]} uncorrectable{more}", "reboot", **figures)
    return passed("ecc", "no uncorrectable errors", **figures)


def check_ecc(ctx) -> Outcome:
    gpus = alive_gpus_or_outcome(ctx, "ecc")
    if isinstance(gpus, Outcome):
        return gpus
    p = ctx.profile
    return verdict_ecc(gpus, p.get("ecc_dram_max", 0), p.get("ecc_sram_max", 0))


# --- retired pages and row remapping -------------------------------------------------------------
def verdict_retired_pages(gpus: Sequence[Gpu]) -> Outcome:
    pending = [g.index for g in gpus if g.retired_pages_pending]
    if pending:
        # The page is retired at the next driver reload; until then it can still be handed out.
        return failed("retired_pages", f"{_gpus_list(pending)} page retirement pending",
                      "reboot", gpus=pending)
    return passed("retired_pages", "none pending")


def check_retired_pages(ctx) -> Outcome:
    gpus = alive_gpus_or_outcome(ctx, "retired_pages")
    if isinstance(gpus, Outcome):
        return gpus
    return verdict_retired_pages(gpus)


def verdict_row_remap(gpus: Sequence[Gpu]) -> Outcome:
    failures = [g.index for g in gpus if g.remap_failure]
    if failures:
        # No spare rows left: only a replacement fixes this GPU.
        return failed("row_remap", f"{_gpus_list(failures)} row remap failed", "replace",
                      gpus=failures)
    pending = [g.index for g in gpus if g.remap_pending]
    if pending:
        return failed("row_remap", f"{_gpus_list(pending)} row remap pending", "reboot",
                      gpus=pending)
    rows = sum(g.remap_uncorrectable_rows for g in gpus)
    return passed("row_remap", "no remap pending", uncorrectable_rows=rows)


def check_row_remap(ctx) -> Outcome:
    gpus = alive_gpus_or_outcome(ctx, "row_remap")
    if isinstance(gpus, Outcome):
        return gpus
    return verdict_row_remap(gpus)


# --- NVLink --------------------------------------------------------------------------------------
def verdict_nvlink(gpus: Sequence[Gpu], expected_links: int) -> Outcome:
    if expected_links <= 0:
        return skipped("nvlink", "profile expects no NVLink")
    reported = [g for g in gpus if g.nvlink_active]
    if not reported:
        return skipped("nvlink", "NVLink state not reported")
    bad = []
    for g in reported:
        active = sum(1 for a in g.nvlink_active if a)
        if active < expected_links:
            bad.append((g.index, active))
    if bad:
        i, active = bad[0]
        more = f" (+{len(bad) - 1} GPUs)" if len(bad) > 1 else ""
        return failed("nvlink", f"gpu{i} {active}/{expected_links} links active{more}",
                      "reboot", gpus=[b[0] for b in bad], expected=expected_links)
    return passed("nvlink", f"{expected_links} links active on {len(reported)} GPUs",
                  expected=expected_links)


def check_nvlink(ctx) -> Outcome:
    snap = snapshot_or_outcome(ctx, "nvlink")
    if isinstance(snap, Outcome):
        return snap
    return verdict_nvlink(_alive(snap), ctx.profile.get("nvlink_links", 0))


# --- PCIe ----------------------------------------------------------------------------------------
def verdict_pcie(gpus: Sequence[Gpu], expected_gen: int = 0, expected_width: int = 0,
                 gen_below: str = "warn") -> Outcome:
    """Width below the expected (or the device's max) fails: lanes do not come back by
    themselves. Generation below is `gen_below` (warn by default), and is not judged while the
    GPU reports gpu_idle: idle GPUs downshift their link to save power."""
    narrow, slow = [], []
    reported = 0
    for g in gpus:
        want_w = expected_width or g.pcie_width_max
        want_g = expected_gen or g.pcie_gen_max
        if g.pcie_width_max and expected_width:
            want_w = min(expected_width, g.pcie_width_max)
        if g.pcie_gen_max and expected_gen:
            want_g = min(expected_gen, g.pcie_gen_max)
        if g.pcie_width:
            reported += 1
            if want_w and g.pcie_width < want_w:
                narrow.append(f"gpu{g.index} x{g.pcie_width} < x{want_w}")
        if g.pcie_gen and want_g and g.pcie_gen < want_g and "gpu_idle" not in g.throttle_reasons:
            slow.append(f"gpu{g.index} gen{g.pcie_gen} < gen{want_g}")
    if not reported and not slow:
        return skipped("pcie", "PCIe link not reported")
    if narrow:
        more = f" (+{len(narrow) - 1} more)" if len(narrow) > 1 else ""
        return failed("pcie", f"{narrow[0]}{more}", "reboot", narrow=narrow, slow=slow)
    if slow and gen_below != "ignore":
        more = f" (+{len(slow) - 1} more)" if len(slow) > 1 else ""
        if gen_below == "fail":
            return failed("pcie", f"{slow[0]}{more}", "reboot", slow=slow)
        return warned("pcie", f"{slow[0]}{more}", slow=slow)
    return passed("pcie", f"{reported} links at full width")


def check_pcie(ctx) -> Outcome:
    snap = snapshot_or_outcome(ctx, "pcie")
    if isinstance(snap, Outcome):
        return snap
    p = ctx.profile
    return verdict_pcie(_alive(snap), p.get("pcie_gen", 0), p.get("pcie_width", 0),
                        p.get("pcie_gen_below", "warn"))


# --- clock event ("throttle") reasons ----------------------------------------------------------
def verdict_throttle(gpus: Sequence[Gpu], allowed: Sequence[str], warn: Sequence[str],
                     fail: Sequence[str]) -> Outcome:
    """A reason the profile lists in none of its three lists warns: a new driver's new reason
    should be looked at, not drain a fleet."""
    fails, warns = [], []
    for g in gpus:
        for r in g.throttle_reasons:
            if r in fail:
                fails.append(f"gpu{g.index} {r}")
            elif r not in allowed:
                warns.append(f"gpu{g.index} {r}")
    figures: dict[str, Any] = {"fail": fails, "warn": warns}
    if fails:
        more = f" (+{len(fails) - 1} more)" if len(fails) > 1 else ""
        return failed("throttle", f"{fails[0]}{more}", "reboot", **figures)
    if warns:
        more = f" (+{len(warns) - 1} more)" if len(warns) > 1 else ""
        return warned("throttle", f"{warns[0]}{more}", **figures)
    return passed("throttle", "no throttling of concern")


def check_throttle(ctx) -> Outcome:
    gpus = alive_gpus_or_outcome(ctx, "throttle")
    if isinstance(gpus, Outcome):
        return gpus
    p = ctx.profile
    return verdict_throttle(gpus, p.get("throttle_allowed", []),
                            p.get("throttle_warn", []), p.get("throttle_fail", []))


# --- temperature -------------------------------------------------------------------------------
def verdict_temperature(gpus: Sequence[Gpu], warn_c: int, fail_c: int) -> Outcome:
    if not (warn_c or fail_c):
        return skipped("temperature", "profile sets no temperature limits")
    temps = [(g.temperature_c, g.index) for g in gpus if g.temperature_c]
    if not temps:
        return skipped("temperature", "temperature not reported")
    hottest, idx = max(temps)
    figures = {"max_c": hottest, "gpu": idx}
    if fail_c and hottest >= fail_c:
        return failed("temperature", f"gpu{idx} {hottest}C >= {fail_c}C", "reboot", **figures)
    if warn_c and hottest >= warn_c:
        return warned("temperature", f"gpu{idx} {hottest}C >= {warn_c}C", **figures)
    return passed("temperature", f"max {hottest}C", **figures)


def check_temperature(ctx) -> Outcome:
    snap = snapshot_or_outcome(ctx, "temperature")
    if isinstance(snap, Outcome):
        return snap
    p = ctx.profile
    return verdict_temperature(_alive(snap), p.get("temp_warn_c", 0), p.get("temp_fail_c", 0))


# --- persistence mode --------------------------------------------------------------------------
def verdict_persistence(gpus: Sequence[Gpu], action: str = "warn") -> Outcome:
    off = [g.index for g in gpus if not g.persistence_mode]
    if not off or action == "ignore":
        return passed("persistence", "on" if not off else f"off on {len(off)} GPUs (ignored)")
    detail = f"persistence mode off on {_gpus_list(off)}"
    if action == "fail":
        return failed("persistence", detail, "reboot", gpus=off)
    return warned("persistence", detail, gpus=off)


def check_persistence(ctx) -> Outcome:
    gpus = alive_gpus_or_outcome(ctx, "persistence")
    if isinstance(gpus, Outcome):
        return gpus
    return verdict_persistence(gpus, ctx.profile.get("persistence_mode", "warn"))
