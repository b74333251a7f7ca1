"""Which boot of which node this is: the identity a registration's proof is bound to.

A boot is (node name, the kernel's boot_id, the boot clock). The kernel draws a new random boot_id
at every boot; CLOCK_BOOTTIME counts from that boot and only grows until the next one. None of it
reads the wall clock, so a clock step by chrony or an admin cannot look like a reboot, and a
record copied from another node (another name, another boot_id) is never this boot's proof.

The boot clock also covers what the boot_id cannot: a time namespace (the dev cluster's simulated
reboots) restarts the boot clock, so a clock that went backwards means a new boot as well.
"""

from __future__ import annotations

import math
import time
from typing import Any, NamedTuple

BOOT_ID = "/proc/sys/kernel/random/boot_id"


class Boot(NamedTuple):
    node: str
    boot_id: str
    uptime: float  # seconds on CLOCK_BOOTTIME when read (time-namespace aware)

    def to_dict(self) -> dict[str, Any]:
        # Rounded down: a recorded uptime must never be later than the clock it was read from.
        return {"node": self.node, "id": self.boot_id,
                "uptime": math.floor(self.uptime * 1000) / 1000}


def uptime() -> float:
    return time.clock_gettime(time.CLOCK_BOOTTIME)


def current(node: str, boot_id_path: str = BOOT_ID) -> Boot:
    """This boot; OSError if the kernel's boot_id cannot be read (a caller that needs a proof
    then treats the boot as unproven)."""
    with open(boot_id_path) as fh:
        boot_id = fh.read().strip()
    if not boot_id:
        raise OSError(f"{boot_id_path} is empty")
    return Boot(node, boot_id, uptime())


def same_boot(recorded: Any, now: Boot) -> tuple[bool, str]:
    """Whether a recorded boot (Boot.to_dict() form) is this boot, and if not, why."""
    if not isinstance(recorded, dict):
        return False, "no boot recorded"
    if recorded.get("node") != now.node:
        return False, f"record is for node {recorded.get('node')!r}"
    if recorded.get("id") != now.boot_id:
        return False, "boot id changed"
    seen = recorded.get("uptime")
    if not isinstance(seen, (int, float)) or isinstance(seen, bool):
        return False, "no boot clock recorded"
    if now.uptime < seen:
        return False, "boot clock restarted"
    return True, ""


def process_start(pid: int) -> int | None:
    """When a process started, in clock ticks after boot (/proc/PID/stat field 22); None when it
    is gone or a zombie. With the PID, it names one process even after the PID is reused."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    if not fields or fields[0] == "Z" or len(fields) < 20:
        return None
    try:
        return int(fields[19])
    except ValueError:
        return None


def alive(pid: Any, start: Any) -> bool:
    """The process recorded as (pid, start) still runs. A PID without its start time names no
    process: the PID may have been reused by anything since, so it is never trusted (nor
    killed) as the one recorded."""
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return False
    if not isinstance(start, int) or isinstance(start, bool):
        return False
    return process_start(pid) == start


def wall_start() -> float:
    """When this boot began by the wall clock as it reads now: for matching kernel-log
    timestamps to the boot, never for telling boots apart."""
    return time.time() - uptime()
