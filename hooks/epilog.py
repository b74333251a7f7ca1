"""Epilog: after every job, check that the job left its GPUs healthy and free.

slurmd runs it as root with SLURMD_NODENAME, SLURM_JOB_ID, SLURM_JOB_USER, SLURM_CONF (and
SLURM_JOB_GPUS when the job had GPUs through gres) and no PATH. The checks of the registry's
"epilog" level (checks/gpu_released.py, xid_during_job.py, ecc_during_job.py), run like any
level's (timeouts, confirmation, [checks] observe), each a pure verdict over one fresh NVML
reading and the prolog's snapshot of the same job (airlock.records.job_snapshot):

  gpu_released    no compute process still alive on the job's GPUs and no more than
                  memory_used_max_mib of device memory in use on each of them (after
                  process_grace seconds for exiting processes to let go); without
                  SLURM_JOB_GPUS (a job without GPU gres, maybe on a shared node) only
                  the job's own processes count (its cgroup, else its uid), and memory
                  only on GPUs no other live process is using
  xid_during_job  no fatal XID (the XID policy's, or [epilog] fatal_xids) reported by NVML
                  on any GPU since the prolog; other new XIDs are warnings
  ecc_during_job  no new uncorrectable ECC errors or remapped rows since the prolog; new
                  correctable errors are a warning

A failure drains the node with "airlock: FAIL <check> <detail> (epilog job N)" and exits 0, so
Slurm does not add its own "Epilog error"; when the drain cannot be set the epilog exits 1 and
Slurm's drain protects the next job instead. No torch, no Slurm call on success.
"""

from __future__ import annotations

import os
import sys
import time

from airlock import finish
from airlock.checks.context import Context, JobEnd
from airlock.checks.registry import EPILOG
from airlock.errors import AirlockError
from airlock.hooks.common import Hook, guard
from airlock.hw import faults as faults_mod
from airlock.records import job_snapshot


def run_epilog(hook: Hook, job_gpus_env: str | None) -> tuple[int, str]:
    from airlock.runner import run_level  # the registry: only a job's end needs it here

    cfg, node, job = hook.cfg, hook.node, hook.job
    started = time.time()
    job_end = JobEnd(job, job_gpus_env, _job_uid(), job_snapshot.load(cfg, node, job))
    ctx = Context(cfg, node, EPILOG, faults=faults_mod.active(cfg, node), job=job_end)
    records, _ = run_level(cfg, node, EPILOG, ctx=ctx)
    run = finish.summarize(node, "epilog", "epilog", records, started)
    run["job_id"] = job
    job_snapshot.remove(cfg, node, job)
    failing = run["verdict"] == "fail"
    try:
        done = finish.finish_run(cfg, node, run, history=failing,
                                 slurm=hook.slurm() if failing else None,
                                 reason_suffix=f"(epilog job {job})")
    except AirlockError as exc:
        # Exit 1: Slurm's own "Epilog error" drain then protects the next job.
        return 1, f"FAIL {run['failed_check']}; could not set the reason: {exc}"
    for problem in done.problems:
        hook.log(problem)
    if not failing:
        return 0, f"epilog {run['verdict']} in {run['duration_s']:.2f}s"
    # Exit 0 after our own drain, so Slurm does not add its "Epilog error" on top.
    return 0, f"FAIL {run['failed_check']}: {'drained' if done.drain.changed else done.drain.why}"


def _job_uid() -> int | None:
    try:
        return int(os.environ["SLURM_JOB_UID"])
    except (KeyError, ValueError):
        return None


def body(hook: Hook) -> tuple[int, str]:
    cfg = hook.load_config()
    if not cfg.epilog.enabled:
        return 0, "epilog checks off ([epilog] enabled = false)"
    return run_epilog(hook, os.environ.get("SLURM_JOB_GPUS"))


def main(argv: list[str] | None = None) -> int:
    hook = Hook("epilog", os.environ.get("SLURMD_NODENAME", ""),
                job=os.environ.get("SLURM_JOB_ID", "?"))
    return guard(hook, body, open_rc=0, closed_rc=0)




if __name__ == "__main__":
    sys.exit(main())
