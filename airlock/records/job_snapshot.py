"""The job snapshot: what the prolog records of a job's GPUs (error counters, the XIDs already
seen, with the wall and boot clocks of the moment), and what the epilog's checks compare the
job's end against. One JSON file per job in <state_dir>/jobs/, removed by the epilog; files of
jobs whose epilog never ran (a crashed node) age out."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from airlock.hw import boot as boot_mod
from airlock.paths import atomic_write, node_dir, read_json


def jobs_dir(cfg, node: str) -> Path:
    return node_dir(cfg.state_dir, node) / "jobs"


def gpu_snapshot(snap) -> dict[str, Any]:
    """What the epilog compares against: per GPU error counters and the XIDs already seen."""
    gpus = []
    for g in snap.gpus:
        gpus.append({
            "index": g.index, "uuid": g.uuid, "lost": g.lost,
            "ecc_volatile_uncorrected_dram": g.ecc_volatile_uncorrected_dram,
            "ecc_volatile_uncorrected_sram": g.ecc_volatile_uncorrected_sram,
            "ecc_volatile_corrected": g.ecc_volatile_corrected,
            "remap_uncorrectable_rows": g.remap_uncorrectable_rows,
            "xids": [x._asdict() for x in g.xids],
        })
    return {"source": snap.source, "gathered_at": snap.gathered_at, "gpus": gpus}


def save(cfg, node: str, job: str, snap) -> None:
    """The prolog's snapshot of job's GPUs (snap: an airlock.hw.nvml snapshot)."""
    folder = jobs_dir(cfg, node)
    # The boot clock beside the wall clock: the epilog places the snapshot's moment in its own
    # wall-clock frame (a clock stepped during the job must not hide what happened in it).
    atomic_write(folder / f"{job}.json", {"job_id": job, "started_at": time.time(),
                                          "uptime": round(boot_mod.uptime(), 3),
                                          **gpu_snapshot(snap)})
    _prune(folder)


def load(cfg, node: str, job: str) -> dict[str, Any] | None:
    """The prolog's snapshot of job, when there is a well-formed one."""
    before = read_json(jobs_dir(cfg, node) / f"{job}.json")
    return before if isinstance(before, dict) and isinstance(before.get("gpus"), list) else None


def remove(cfg, node: str, job: str) -> None:
    try:
        os.unlink(jobs_dir(cfg, node) / f"{job}.json")
    except OSError:
        pass


def since(before: dict[str, Any], now_wall: float, now_uptime: float) -> float:
    """The prolog snapshot's moment on the wall clock as it reads now: XIDs are dated by the
    wall clock when read, and a clock stepped during the job (NTP, an operator) would otherwise
    put them before the snapshot. The boot clock between the two hooks is the true interval."""
    up = before.get("uptime")
    if isinstance(up, (int, float)) and not isinstance(up, bool) and 0 <= up <= now_uptime:
        return now_wall - (now_uptime - float(up))
    return float(before.get("gathered_at", 0))  # a snapshot of an older version


def _prune(folder: Path, keep_s: float = 7 * 86400) -> None:
    """Jobs whose epilog never ran (a crashed node) leave their snapshot behind: age them out."""
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return
    if len(entries) < 64:
        return
    cutoff = time.time() - keep_s
    for e in entries:
        try:
            if e.stat().st_mtime < cutoff:
                os.unlink(e.path)
        except OSError:
            pass
