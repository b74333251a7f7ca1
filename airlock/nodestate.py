"""The hook's memory of a node, kept in <state_dir>/node.json.

It records the boot the node was last quarantined for and the registration suite's progress, so
the hook can tell a fresh boot (or a node it has never seen) from a periodic run, and notice a
registration suite that died or outlived its budget.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from airlock.paths import atomic_write, node_dir, read_json


def boot_time() -> float:
    """Epoch seconds of this boot, from /proc/uptime (which honours time namespaces)."""
    with open("/proc/uptime") as fh:
        uptime = float(fh.read().split()[0])
    return time.time() - uptime


def pid_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


class NodeState:
    def __init__(self, cfg, node: str):
        self.path: Path = node_dir(cfg.state_dir, node) / "node.json"

    def load(self) -> dict[str, Any] | None:
        data = read_json(self.path)
        return data if isinstance(data, dict) else None

    def save(self, data: dict[str, Any]) -> None:
        atomic_write(self.path, data)

    def start(self, run_id: str, boot: float, pid: int, level: str, trigger: str) -> None:
        self.save({"boot_time": boot, "run_id": run_id, "status": "running", "pid": pid,
                   "level": level, "trigger": trigger, "started_at": time.time()})

    def finish(self, run_id: str, verdict: str, error: str = "") -> None:
        data = self.load() or {}
        if data.get("run_id") not in (None, run_id):
            return  # a newer boot took over; its record wins
        data.update(run_id=run_id, status="done", verdict=verdict, finished_at=time.time(),
                    pid=os.getpid())
        if error:
            data["error"] = error
        self.save(data)
