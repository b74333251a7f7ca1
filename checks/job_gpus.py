"""What the epilog's three checks share (checks/gpu_released.py, xid_during_job.py,
ecc_during_job.py): the job's GPUs, its processes, and one reading of the GPUs at the job's end.
No torch and no Slurm call: the epilog runs after every job."""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable
from typing import Any

from airlock.checks.base import Outcome, skipped
from airlock.errors import AirlockError
from airlock.hw import boot as boot_mod
from airlock.hw import nvml
from airlock.records.job_snapshot import gpu_snapshot


def job_gpu_indices(env_value: str | None, all_indices: Iterable[int]) -> set[int]:
    """SLURM_JOB_GPUS ("0,2") names the job's GPUs; without it the job had the whole node."""
    if env_value:
        try:
            return {int(x) for x in env_value.split(",") if x.strip()}
        except ValueError:
            pass
    return set(all_indices)


def alive(pid: int) -> bool:
    return boot_mod.process_start(pid) is not None


_JOB_CGROUP = re.compile(r"/job_(\d+)(?:/|$)")


def job_owns(job: str, uid: int | None, proc_root: str = "/proc") -> Callable[[int], bool]:
    """Whether a process belongs to this job: by its cgroup (proctrack/cgroup and the cgroup
    task plugin put every step under .../job_<id>/), else, outside any job's cgroup, by the
    job owner's uid. Unknown: not the job's (this check accuses, so it needs to be sure)."""

    def owns(pid: int) -> bool:
        base = os.path.join(proc_root, str(pid))
        try:
            with open(os.path.join(base, "cgroup")) as fh:
                found = _JOB_CGROUP.search(fh.read())
            if found:
                return found.group(1) == job
            return uid is not None and os.stat(base).st_uid == uid
        except OSError:
            return False

    return owns


def read_gpus(cfg, node: str) -> list[dict[str, Any]]:
    """The GPUs now: the snapshot's counters plus their compute processes and memory in use."""
    snap = nvml.gather(nvml.backend_for(cfg, node), cfg.nvml.timeout)
    out = gpu_snapshot(snap)["gpus"]
    for g, gpu in zip(out, snap.gpus, strict=True):
        g["compute_pids"] = list(gpu.compute_pids)
        g["memory_used_mib"] = gpu.memory_used_mib
    return out


def job_or_skip(ctx, check: str) -> Outcome | None:
    """A skip when ctx is not an epilog's (the check has no job to look at), else None."""
    if ctx.job is None:
        return skipped(check, "runs only in the epilog, after a job")
    return None


def gpus_at_end(ctx) -> list[dict[str, Any]]:
    """The reading the checks share, taken once; AirlockError (NVML unreadable) is remembered
    in ctx.job.unreadable and raised again to every check that asks."""
    job = ctx.job
    if job.unreadable:
        raise AirlockError(job.unreadable)
    if job.gpus is None:
        try:
            job.gpus = read_gpus(ctx.cfg, ctx.node)
        except AirlockError as exc:
            job.unreadable = str(exc)
            raise
    return job.gpus
