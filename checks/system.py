"""System quick checks: RDMA ports, disk space, required mounts, host memory.

Everything is read under [system] sys_root and proc_root (default /sys and /proc), so tests point
them at a tree in a temp directory. A check with nothing configured skips: an unconfigured check
that "passes" would claim a health it never looked at.
"""

from __future__ import annotations

import os
import tempfile
from typing import Any, NamedTuple

from airlock.checks.base import Outcome, failed, passed, skipped
from airlock.checks.rdma_ports import RdmaPort, read_rdma_ports
from airlock.config.sections.checks import SystemSection


# --- RDMA ---------------------------------------------------------------------------------------
def verdict_rdma(ports: list[RdmaPort], expected: int, min_rate_gbps: float) -> Outcome:
    if not expected and not min_rate_gbps:
        return skipped("rdma", "no RDMA ports configured")
    active = [p for p in ports if p.state == "ACTIVE"]
    figures: dict[str, Any] = {"active": len(active), "expected": expected,
                               "ports": {p.name: p.state for p in ports}}
    if expected and len(active) < expected:
        down = [p for p in ports if p.state != "ACTIVE"]
        why = f": {down[0].name} {down[0].state}" if down else ""
        if not ports:
            why = ": no RDMA devices"
        return failed("rdma", f"{len(active)}/{expected} ports active{why}", "reboot", **figures)
    if min_rate_gbps:
        slow = [p for p in active if p.rate_gbps < min_rate_gbps]
        if slow:
            p = min(slow, key=lambda x: x.rate_gbps)
            return failed("rdma", f"{p.name} {p.rate_gbps:g} Gb/s < {min_rate_gbps:g}",
                          "reboot", **figures)
    rate = f" at >= {min_rate_gbps:g} Gb/s" if min_rate_gbps else ""
    return passed("rdma", f"{len(active)} ports active{rate}", **figures)


def check_rdma(ctx) -> Outcome:
    s: SystemSection = ctx.cfg.system
    if not s.rdma_ports and not s.rdma_rate_gbps:
        return skipped("rdma", "no RDMA ports configured")
    return verdict_rdma(read_rdma_ports(s.sys_root, s.rdma_devices), s.rdma_ports,
                        s.rdma_rate_gbps)


# --- disk ---------------------------------------------------------------------------------------
class DiskStat(NamedTuple):
    path: str
    free_gib: float
    inodes_free_pct: float | None  # None when the filesystem has no inode count (e.g. btrfs)
    error: str = ""


def stat_disk(path: str) -> DiskStat:
    try:
        st = os.statvfs(path)
    except OSError as exc:
        return DiskStat(path, 0.0, None, exc.strerror or str(exc))
    free = st.f_bavail * st.f_frsize / (1 << 30)
    inodes = st.f_favail * 100.0 / st.f_files if st.f_files else None
    return DiskStat(path, free, inodes)


def verdict_disk(stats: list[DiskStat], min_free_gib: float, min_inodes_pct: float) -> Outcome:
    if not stats:
        return skipped("disk", "no disk paths configured")
    figures = {s.path: round(s.free_gib, 2) for s in stats}
    for s in stats:
        if s.error:
            return failed("disk", f"{s.path}: {s.error}", **figures)
        if s.free_gib < min_free_gib:
            return failed("disk", f"{s.path} {s.free_gib:.2f} GiB free < {min_free_gib:g}",
                          **figures)
        if s.inodes_free_pct is not None and s.inodes_free_pct < min_inodes_pct:
            return failed("disk", f"{s.path} {s.inodes_free_pct:.2f}% inodes free "
                          f"< {min_inodes_pct:g}%", **figures)
    least = min(stats, key=lambda s: s.free_gib)
    return passed("disk", f"min {least.free_gib:.1f} GiB free ({least.path})", **figures)


def check_disk(ctx) -> Outcome:
    s: SystemSection = ctx.cfg.system
    return verdict_disk([stat_disk(p) for p in s.disk_paths], s.disk_min_free_gib,
                        s.disk_min_free_inodes_pct)


# --- mounts -------------------------------------------------------------------------------------
class MountState(NamedTuple):
    path: str
    mounted: bool
    read_only: bool = False
    writable: bool | None = None  # None = not tried
    error: str = ""


def _unescape(field_: str) -> str:
    # /proc/mounts escapes space, tab, newline and backslash as octal (\040 ...).
    out, i = [], 0
    while i < len(field_):
        if field_[i] == "\\" and field_[i + 1:i + 4].isdigit():
            out.append(chr(int(field_[i + 1:i + 4], 8)))
            i += 4
        else:
            out.append(field_[i])
            i += 1
    return "".join(out)


def parse_mounts(text: str) -> dict[str, set[str]]:
    """mount point -> options; a later mount over the same point wins."""
    out: dict[str, set[str]] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 4:
            out[_unescape(parts[1])] = set(parts[3].split(","))
    return out


def try_write(path: str) -> str:
    """'' when a file can be created and removed in path, else why not.

    The probe's name is random (mkstemp: O_CREAT|O_EXCL, retried on a collision), so a user who
    pre-creates names on a shared mount cannot make every node fail this check (a predictable
    `.airlock-write-test-<pid>` could be planted for every pid)."""
    try:
        fd, probe = tempfile.mkstemp(dir=path, prefix=".airlock-write-test-")
    except OSError as exc:
        return exc.strerror or str(exc)
    try:
        try:
            os.write(fd, b"airlock\n")
        finally:
            os.close(fd)
    except OSError as exc:
        return exc.strerror or str(exc)
    finally:
        try:
            os.unlink(probe)
        except OSError:
            pass
    return ""


def verdict_mounts(states: list[MountState]) -> Outcome:
    if not states:
        return skipped("mounts", "no mounts configured")
    for st in states:
        if not st.mounted:
            return failed("mounts", f"{st.path} not mounted", "reboot")
        if st.writable is False:
            why = "read-only" if st.read_only else st.error or "not writable"
            return failed("mounts", f"{st.path} {why}", "reboot")
    return passed("mounts", f"{len(states)} mounted" + (
        ", writable" if all(s.writable for s in states) else ""))


def check_mounts(ctx) -> Outcome:
    s: SystemSection = ctx.cfg.system
    if not s.mounts:
        return skipped("mounts", "no mounts configured")
    try:
        table = parse_mounts(_read(os.path.join(s.proc_root, "mounts"), strict=True))
    except OSError as exc:
        return failed("mounts", f"cannot read mounts: {exc.strerror or exc}")
    states = []
    for path in s.mounts:
        opts = table.get(path.rstrip("/") or "/")
        if opts is None:
            states.append(MountState(path, False))
            continue
        ro = "ro" in opts
        if s.mounts_writable:
            error = "read-only" if ro else try_write(path)
            states.append(MountState(path, True, ro, not error, error))
        else:
            states.append(MountState(path, True, ro))
    return verdict_mounts(states)


# --- host memory --------------------------------------------------------------------------------
def parse_meminfo_total_kib(text: str) -> int:
    for line in text.splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1])
    raise ValueError("no MemTotal line")


def verdict_memory(total_kib: int, min_gib: float) -> Outcome:
    if not min_gib:
        return skipped("memory", "no memory floor configured")
    gib = total_kib / (1 << 20)
    if gib < min_gib:
        # A DIMM that dropped out at boot shows up exactly like this.
        return failed("memory", f"{gib:.1f} GiB < {min_gib:g} GiB", "reboot", total_gib=gib)
    return passed("memory", f"{gib:.1f} GiB", total_gib=round(gib, 2))


def check_memory(ctx) -> Outcome:
    s: SystemSection = ctx.cfg.system
    if not s.min_memory_gib:
        return skipped("memory", "no memory floor configured")
    path = os.path.join(s.proc_root, "meminfo")
    try:
        total = parse_meminfo_total_kib(_read(path, strict=True))
    except (OSError, ValueError) as exc:
        return failed("memory", f"{path}: {getattr(exc, 'strerror', None) or exc}")
    return verdict_memory(total, s.min_memory_gib)


def _read(path: str, strict: bool = False) -> str:
    try:
        with open(path) as fh:
            return fh.read()
    except OSError:
        if strict:
            raise
        return ""
