"""gpu_released (epilog): no compute process still alive on the job's GPUs and no more than
[epilog] memory_used_max_mib of device memory in use on each of them, after
[epilog] process_grace seconds for exiting processes to let go. Without SLURM_JOB_GPUS (a job
without GPU gres, maybe on a shared node) only the job's own processes count (its cgroup, else
its uid), and memory only on GPUs no other live process is using. GPUs NVML cannot read after a
job cannot be vouched for: that fails here (the next job would land on them)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from airlock.checks.base import Outcome, failed, passed
from airlock.checks.job_gpus import (
    alive,
    gpus_at_end,
    job_gpu_indices,
    job_or_skip,
    job_owns,
    read_gpus,
)
from airlock.errors import AirlockError

CHECK = "gpu_released"


def verdict_released(gpus: list[dict[str, Any]], job_gpus: set[int],
                     alive: Callable[[int], bool], memory_max_mib: int,
                     belongs: Callable[[int], bool] | None = None) -> Outcome:
    """A live process names the culprit, so it is reported first; memory still held with no
    live process (an orphaned context, a driver that did not free) is the next failure.

    belongs: when the job's GPUs are not known (no SLURM_JOB_GPUS: a job without GPU gres, on
    a node other jobs may share), only the job's own processes count, and memory only on GPUs
    that no one else's live process is using."""
    mine = [g for g in gpus if g["index"] in job_gpus]
    if belongs is not None:
        mine = [g for g in mine
                if not any(alive(p) and not belongs(p) for p in g.get("compute_pids", ()))
                or any(alive(p) and belongs(p) for p in g.get("compute_pids", ()))]
    leftovers = [(g["index"], pid) for g in mine
                 for pid in g.get("compute_pids", ()) if alive(pid)
                 and (belongs is None or belongs(pid))]
    if leftovers:
        gpu, pid = leftovers[0]
        more = f" (+{len(leftovers) - 1} more)" if len(leftovers) > 1 else ""
        return failed("gpu_released", f"gpu{gpu} pid {pid} still running{more}", "reboot",
                      leftovers=[list(x) for x in leftovers])
    held = [(g["index"], int(g.get("memory_used_mib", 0))) for g in mine
            if int(g.get("memory_used_mib", 0)) > memory_max_mib
            and not (belongs is not None and any(alive(p) for p in g.get("compute_pids", ())))]
    if held:
        gpu, mib = held[0]
        more = f" (+{len(held) - 1} more)" if len(held) > 1 else ""
        return failed("gpu_released", f"gpu{gpu} {mib} MiB still in use{more}", "reboot",
                      memory_used_mib=[list(x) for x in held])
    return passed("gpu_released", f"{len(job_gpus)} GPUs free")


def check_gpu_released(ctx) -> Outcome:
    skip = job_or_skip(ctx, CHECK)
    if skip is not None:
        return skip
    job, cfg = ctx.job, ctx.cfg
    try:
        gpus = gpus_at_end(ctx)
    except AirlockError as exc:  # nvml timeout or error: the GPUs cannot be vouched for
        return failed(CHECK, str(exc))
    mine = job_gpu_indices(job.gpus_env, (g["index"] for g in gpus))
    # No SLURM_JOB_GPUS: the job had no GPU gres, and other jobs may share the node.
    belongs = None if job.gpus_env else job_owns(job.job_id, job.uid)
    deadline = time.monotonic() + cfg.epilog.process_grace
    limit = cfg.epilog.memory_used_max_mib
    released = verdict_released(gpus, mine, alive, limit, belongs)
    while released.failed and time.monotonic() < deadline:
        time.sleep(0.5)
        try:
            gpus = job.gpus = read_gpus(cfg, ctx.node)
        except AirlockError as exc:
            job.unreadable = str(exc)
            return failed(CHECK, str(exc))
        released = verdict_released(gpus, mine, alive, limit, belongs)
    return released
