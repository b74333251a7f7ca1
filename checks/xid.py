"""XID events judged by a policy kept as data (airlock/hw/profiles/xid_policy.toml).

Two sources, merged: the NVML snapshot (events seen while it was taken, and the simulation's)
and the kernel log, where the driver writes every XID as
    NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus.

A fatal XID drains the node and leads to a reboot, so only the kernel may speak here ([xid]
kernel_log):
  "dmesg"    the kernel ring buffer: /dev/kmsg read directly (non-blocking, no process spawned)
             where it can be opened, else `dmesg --kernel`. Both keep only facility 0 (kern):
             a record a process writes into /dev/kmsg is forced to another facility by the
             kernel, so it cannot pass as the driver's.
  "journal"  `journalctl -k` (this boot): journald's kernel transport, which no process can
             write to.
  a path     a syslog file such as /var/log/kern.log, read from its tail only. Any local user can
             put any text into syslog (`logger`), so only lines whose program tag is `kernel:`
             right after the date and host count; a line like
             `Mar 1 10:00:00 gpu07 alice[4242]: NVRM: Xid (PCI:0000:3b:00): 79` is counted
             as "untagged" and ignored. (`logger -t kernel` can still forge that tag: prefer
             "dmesg" or "journal" where users can log in.)
Lines are dated by an ISO timestamp (dmesg --time-format iso, rsyslog, journalctl -o
short-iso), a classic syslog date, or the kernel's seconds since boot; an undated line cannot be
placed in the window and is only counted.
"""

from __future__ import annotations

import errno
import os
import re
import time
from typing import Any, NamedTuple

from airlock.checks.base import Outcome, failed, passed, warned
from airlock.hw.boot import wall_start as boot_time
from airlock.hw.nvml import NvmlError, XidEvent, pci_key
from airlock.hw.profiles.xid_policy import XidPolicy, policy


# --- the kernel log ----------------------------------------------------------------------------
class _Pattern:
    """A regular expression compiled on first use: the periodic hook almost always reads a
    kernel log without one XID line, and compiling every pattern would cost it more than that."""

    def __init__(self, text: str):
        self.text = text
        self.compiled: re.Pattern[str] | None = None

    def __getattr__(self, name: str):  # search, match, ...
        if self.compiled is None:
            self.compiled = re.compile(self.text)
        return getattr(self.compiled, name)


_XID_TEXT = (r"NVRM: Xid \((?:PCI:)?([0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2})"
             r"(?:\.\d)?\):\s*(\d+)")
_XID = _Pattern(_XID_TEXT)
# A syslog line whose program tag is exactly "kernel" (date, host, tag), optionally keeping the
# kernel's own "[seconds]" stamp, then the driver's text: nothing a user's message can precede.
_KERNEL_TAGGED_XID = _Pattern(
    r"^(?:\d{4}-\d\d-\d\d[T ]\S+|[A-Z][a-z]{2}\s+\d{1,2}\s+\d\d:\d\d:\d\d)\s+\S+\s+kernel:\s+"
    r"(?:\[\s*\d+\.\d+\]\s*)?" + _XID_TEXT)
_ISO = _Pattern(r"^(\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d)(?:[.,](\d+))?(Z|[+-]\d\d:?\d\d)?")
_SYSLOG = _Pattern(r"^([A-Z][a-z]{2}\s+\d{1,2}\s+\d\d:\d\d:\d\d)\s")
_MONO = _Pattern(r"^\s*(?:<\d+>)?\[\s*(\d+\.\d+)\]")
KMSG = "/dev/kmsg"
_KMSG_RECORD_MAX = 16384  # a read must hold a whole record (the kernel's limit is 8 KiB)


def line_time(line: str, now: float, boot: float) -> float | None:
    m = _ISO.match(line)
    if m:
        stamp = m.group(1).replace(" ", "T")
        frac = float("0." + m.group(2)) if m.group(2) else 0.0
        tz = m.group(3) or ""
        if tz and tz != "Z" and ":" not in tz:
            tz = tz[:3] + ":" + tz[3:]
        from datetime import datetime  # only a syslog file has ISO stamps; kmsg never

        try:
            dt = datetime.fromisoformat(stamp + (tz.replace("Z", "+00:00")))
        except ValueError:
            return None
        return dt.timestamp() + frac
    m = _SYSLOG.match(line)
    if m:
        year = time.localtime(now).tm_year
        try:
            t = time.mktime(time.strptime(f"{year} {m.group(1)}", "%Y %b %d %H:%M:%S"))
        except ValueError:
            return None
        if t > now + 86400:  # a December line read in January
            t = time.mktime(time.strptime(f"{year - 1} {m.group(1)}", "%Y %b %d %H:%M:%S"))
        return t
    m = _MONO.match(line)
    if m:
        return boot + float(m.group(1))
    return None


class KernelLog(NamedTuple):
    text: str
    source: str  # "kmsg", "dmesg", "journal" or the file's path
    kernel_only: bool  # every line is the kernel's; False (a file): only kernel-tagged lines count


class KernelXids(NamedTuple):
    events: list[XidEvent]
    undated: int  # XID lines with no usable date
    untagged: int  # XID lines in a file whose tag is not `kernel:` (ignored: anyone can log)


def parse_kernel_log(text: str, now: float, boot: float,
                     gpu_by_pci: dict[str, int] | None = None,
                     kernel_only: bool = True) -> KernelXids:
    """XID events in the log text. With kernel_only False (a syslog file), a line counts only
    when its program tag is `kernel:`."""
    gpu_by_pci = gpu_by_pci or {}
    events, undated, untagged = [], 0, 0
    for line in text.splitlines():
        m = _XID.search(line) if kernel_only else _KERNEL_TAGGED_XID.match(line)
        if not m:
            if not kernel_only and _XID.search(line):
                untagged += 1
            continue
        t = line_time(line, now, boot)
        if t is None:
            undated += 1
            continue
        events.append(XidEvent(xid=int(m.group(2)), time=t,
                               gpu=gpu_by_pci.get(pci_key(m.group(1)), -1),
                               source=f"kernel:{pci_key(m.group(1))}"))
    return KernelXids(events, undated, untagged)


def read_kmsg(path: str = KMSG, max_reads: int = 1 << 18) -> str:
    """The kernel's own XID records from the ring buffer, as "[seconds since boot] text" lines.

    Non-blocking: reading stops at the newest record instead of waiting for the next one. Only
    records that mention an XID are kept (the ring buffer holds megabytes of other text), and
    only those of facility 0: the kernel files anything a process writes into /dev/kmsg under
    another facility (LOG_USER unless it names one), so a user-space line cannot pass as the
    driver's. Records are "prio,seq,usec,flags;text" lines, each followed by " KEY=value"
    continuation lines; /dev/kmsg returns one per read, a saved copy many. Raises OSError when
    the device cannot be opened (no /dev/kmsg in a container, dmesg_restrict for non-root)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    lines: list[str] = []
    rest = b""
    try:
        for _ in range(max_reads):
            try:
                chunk = os.read(fd, _KMSG_RECORD_MAX)
            except BlockingIOError:
                break  # past the newest record
            except OSError as exc:
                if exc.errno == errno.EPIPE:
                    continue  # records were overwritten while we read: go on from the next
                raise
            if not chunk:
                break
            if not rest and chunk.endswith(b"\n") and b"NVRM: Xid" not in chunk:
                continue  # the usual record: nothing to parse
            *records, rest = (rest + chunk).split(b"\n")
            for record in records:
                line = _kmsg_line(record)
                if line:
                    lines.append(line)
    finally:
        os.close(fd)
    return "\n".join(lines)


def _kmsg_line(record: bytes) -> str:
    if b"NVRM: Xid" not in record or record.startswith(b" "):
        return ""
    head, sep, body = record.partition(b";")
    fields = head.split(b",")
    try:
        facility, usec = int(fields[0]) >> 3, int(fields[2])
    except (IndexError, ValueError):
        return ""
    if not sep or facility != 0:
        return ""
    return f"[{usec / 1e6:.6f}] {body.decode(errors='replace')}"


def _run_reader(argv: list[str], timeout: float) -> str:
    # Imported here: the usual source (/dev/kmsg) spawns nothing, and subprocess alone is a
    # visible share of the periodic hook's start-up.
    import shutil

    from airlock.proc import run

    name = argv[0]
    exe = shutil.which(name) or next(
        (p for p in (f"/usr/bin/{name}", f"/bin/{name}") if os.access(p, os.X_OK)), None)
    if exe is None:
        raise OSError(f"{name} not found")
    proc = run([exe, *argv[1:]], timeout)
    if proc.timed_out:
        raise OSError(f"{name} timed out after {timeout:g}s")
    if proc.returncode != 0:
        why = (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]
        raise OSError(f"{name}: {why}")
    return proc.stdout


def read_kernel_log(source: str, max_bytes: int, timeout: float) -> KernelLog:
    """The kernel log; raises OSError with a readable message when it cannot be read."""
    if source == "dmesg" or source == KMSG:
        try:
            return KernelLog(read_kmsg(), "kmsg", True)
        except OSError as exc:
            if source == KMSG:
                raise OSError(f"{KMSG}: {exc.strerror or exc}") from None
        # --kernel: facility kern only, for the same reason as in read_kmsg
        return KernelLog(_run_reader(["dmesg", "--kernel", "--time-format", "iso", "--nopager"],
                                     timeout), "dmesg", True)
    if source == "journal":
        # -k selects journald's kernel transport (and this boot): no process can log into it
        return KernelLog(_run_reader(["journalctl", "-k", "-o", "short-iso", "--no-pager", "-q"],
                                     timeout), "journal", True)
    with open(source, "rb") as fh:
        size = fh.seek(0, os.SEEK_END)
        fh.seek(max(0, size - max_bytes))
        data = fh.read()
    if size > max_bytes:
        data = data.split(b"\n", 1)[-1]  # drop the partial first line
    return KernelLog(data.decode(errors="replace"), source, False)


# --- the verdict -------------------------------------------------------------------------------
class XidGroup(NamedTuple):
    xid: int
    gpu: str  # "gpu3", or the PCI address when no GPU index is known
    first: float
    last: float
    count: int  # raw reports merged into this group
    occurrences: int  # distinct occurrences after de-duplication


def _gpu_label(e: XidEvent) -> str:
    if e.gpu >= 0:
        return f"gpu{e.gpu}"
    return e.source.split(":", 1)[1] if e.source.startswith("kernel:") else "gpu?"


def dedup(events: list[XidEvent], dedup_s: float) -> list[XidGroup]:
    """Merge repeats of one XID on one GPU: reports within dedup_s of the previous one are the
    same occurrence (NVML and the kernel log report one event twice; a fault often logs the
    same XID many times in a burst)."""
    by_key: dict[tuple[int, str], list[float]] = {}
    for e in events:
        by_key.setdefault((e.xid, _gpu_label(e)), []).append(e.time)
    groups = []
    for (xid, gpu), times in by_key.items():
        times.sort()
        occurrences, last_kept = 0, None
        for t in times:
            if last_kept is None or t - last_kept > dedup_s:
                occurrences += 1
                last_kept = t
        groups.append(XidGroup(xid, gpu, times[0], times[-1], len(times), occurrences))
    groups.sort(key=lambda g: (-g.last, g.xid, g.gpu))
    return groups


def verdict_xid(events: list[XidEvent], pol: XidPolicy, now: float, boot: float,
                undated: int = 0, source_error: str = "") -> Outcome:
    since = now - pol.window_s
    if pol.since_boot:
        since = max(since, boot)
    recent = [e for e in events if e.time >= since]
    groups = dedup(recent, pol.dedup_s)
    by_action: dict[str, list[XidGroup]] = {"fail": [], "warn": [], "ignore": []}
    for g in groups:
        by_action[pol.action(g.xid)].append(g)
    window = f"{pol.window_s / 3600:g}h"
    figures: dict[str, Any] = {
        "policy": pol.name,
        "window_s": pol.window_s,
        "events": len(recent),
        "fatal": [f"{g.xid}@{g.gpu}" for g in by_action["fail"]],
        "warn": [f"{g.xid}@{g.gpu}" for g in by_action["warn"]],
        "ignored": [f"{g.xid}@{g.gpu}" for g in by_action["ignore"]],
    }
    if undated:
        figures["undated"] = undated
    if source_error:
        figures["kernel_log_error"] = source_error

    def describe(gs: list[XidGroup]) -> str:
        g = gs[0]
        more = f" x{g.occurrences}" if g.occurrences > 1 else ""
        others = f" (+{len(gs) - 1} more)" if len(gs) > 1 else ""
        return f"{g.xid} {g.gpu}{more}{others}"  # the reason reads "FAIL xid 79 gpu3 ..."

    if by_action["fail"]:
        return failed("xid", f"{describe(by_action['fail'])} within {window}", pol.remediation,
                      **figures)
    if by_action["warn"]:
        return warned("xid", f"{describe(by_action['warn'])} within {window}", **figures)
    if source_error:
        return warned("xid", f"kernel log unreadable: {source_error}", **figures)
    ignored = f", {len(by_action['ignore'])} ignored" if by_action["ignore"] else ""
    return passed("xid", f"no XIDs of concern within {window}{ignored}", **figures)


# --- gather ------------------------------------------------------------------------------------
def check_xid(ctx) -> Outcome:

    section = ctx.cfg.xid
    events: list[XidEvent] = []
    gpu_by_pci: dict[str, int] = {}
    pname = "default"
    try:
        snap = ctx.snapshot
        for g in snap.gpus:
            events.extend(g.xids)
            if g.pci_bus_id:
                gpu_by_pci[pci_key(g.pci_bus_id)] = g.index
        pname = ctx.profile.get("xid_policy", "default")
    except NvmlError:
        pass  # NVML is down (its own check says so); the kernel log still tells what happened
    pol = policy(pname, section.policy_file)
    now, boot = time.time(), boot_time()
    undated, untagged, error, source = 0, 0, "", ""
    if section.kernel_log:
        try:
            log = read_kernel_log(section.kernel_log, section.kernel_log_max_bytes,
                                  section.dmesg_timeout)
            found = parse_kernel_log(log.text, now, boot, gpu_by_pci, log.kernel_only)
            events.extend(found.events)
            undated, untagged, source = found.undated, found.untagged, log.source
        except OSError as exc:
            error = str(exc) if not getattr(exc, "strerror", None) else \
                f"{section.kernel_log}: {exc.strerror}"
    out = verdict_xid(events, pol, now, boot, undated, error)
    if source:
        out.figures["kernel_log"] = source
    if untagged:
        out.figures["not_kernel"] = untagged  # XID text logged by something other than the kernel
    return out
