"""Prolog: the quick level before every job, within a few seconds.

slurmd runs it as root with SLURMD_NODENAME, SLURM_JOB_ID, SLURM_JOB_USER, SLURM_CONF and no PATH.
On success it only records the run and a snapshot of the GPUs' error counters (for the epilog to
compare against) and exits 0: no Slurm call, no torch, nothing slow.

On failure it drains the node with a precise reason ("airlock: FAIL <check> <detail> (prolog
job N)") and exits 1; Slurm then requeues the job (held) and keeps the node drained. Airlock's
own trouble (a broken config, an unreachable slurmctld) is logged and lets the job run: a typo
in airlock.toml must not drain the whole cluster through every prolog at once.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from airlock.hooks.common import log

from airlock import config as config_mod
from airlock import finish
from airlock.errors import AirlockError


@dataclass
class PrologSection:
    enabled: bool = True
    # The whole quick level's time budget before the job starts; keep it well below slurm.conf's
    # PrologEpilogTimeout, or Slurm kills the prolog and drains with its own "Prolog error".
    budget: float = 10.0

    def validate(self) -> None:
        if not self.budget > 0:
            raise ValueError(f"budget: must be > 0, got {self.budget}")


def jobs_dir(cfg, node: str) -> Path:
    from airlock.paths import node_dir

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
            "xids": [asdict(x) for x in g.xids],
        })
    return {"source": snap.source, "gathered_at": snap.gathered_at, "gpus": gpus}


def save_job_snapshot(cfg, node: str, job: str, snap) -> None:
    from airlock.paths import atomic_write

    folder = jobs_dir(cfg, node)
    atomic_write(folder / f"{job}.json", {"job_id": job, "started_at": time.time(),
                                          **gpu_snapshot(snap)})
    _prune(folder)


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


def run_prolog(cfg, node: str, job: str) -> tuple[int, str]:
    from airlock import reasons
    from airlock.runner import run_level, summarize

    started = time.time()
    deadline = time.monotonic() + cfg.prolog.budget
    records, ctx = run_level(cfg, node, "quick", deadline=deadline)
    run = summarize(node, "quick", "prolog", records, started, ctx)
    run["job_id"] = job
    try:
        save_job_snapshot(cfg, node, job, ctx.snapshot)
    except Exception as exc:  # noqa: BLE001 - the epilog then skips the counter comparison
        log(cfg, node, "prolog", f"job {job}: no GPU snapshot for the epilog: {exc}")
    for problem in finish.record_run(cfg, node, run, history=run["verdict"] == "fail"):
        log(cfg, node, "prolog", problem)
    if run["verdict"] != "fail":
        return 0, f"job {job}: quick {run['verdict']} in {run['duration_s']:.2f}s"
    try:
        msg = drain_failure(cfg, node, run["failed_check"] or "prolog",
                            f"{run['detail']} (prolog job {job})", reasons)
    except AirlockError as exc:
        # Still exit 1: Slurm's own "Prolog error" drain then protects the next job.
        msg = f"FAIL {run['failed_check']}; could not set the reason: {exc}"
    return 1, f"job {job}: {msg}"


def drain_failure(cfg, node: str, check: str, detail: str, reasons) -> str:
    """Drain with the failing check named, keeping an earlier Airlock failure or a foreign drain."""
    from airlock.slurm import Slurm

    slurm = Slurm.from_config(cfg)
    current = slurm.node(node)
    parsed = reasons.parse(current.reason)
    if parsed is not None and parsed.is_failure:
        return f"FAIL {check}; kept earlier {current.reason!r}"
    res = slurm.drain(node, reasons.failure(check, detail))
    return f"FAIL {check}: {'drained' if res.changed else res.why}"


def main(argv: list[str] | None = None) -> int:
    node = os.environ.get("SLURMD_NODENAME", "")
    job = os.environ.get("SLURM_JOB_ID", "?")
    cfg = None
    started = time.monotonic()
    try:
        if not node:
            raise AirlockError("SLURMD_NODENAME is not set")
        cfg = config_mod.load()
        if not cfg.prolog.enabled:
            return 0
        rc, msg = run_prolog(cfg, node, job)
        log(cfg, node, "prolog", f"{msg} ({time.monotonic() - started:.2f}s)")
        return rc
    except AirlockError as exc:
        # Fail open on Airlock's own errors; see the module docstring.
        log(cfg, node or "?", "prolog", f"job {job}: error, job allowed: {exc}")
        return 0


if __name__ == "__main__":
    sys.exit(main())
