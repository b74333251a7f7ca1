"""Prolog, the second lock: before every job, within a few seconds.

slurmd runs it as root with SLURMD_NODENAME, SLURM_JOB_ID, SLURM_JOB_USER, SLURM_CONF and no PATH.

* This boot has no passing registration (whatever the reason: the boot-time drain failed
  because slurmctld was down, the config was broken at boot, the record is damaged, the suite is
  still running or failed): refuse the job. The node is drained with an Airlock reason, the
  registration suite is started or re-attached to (hooks.gate), and the prolog exits 1, so Slurm
  requeues the job (not held, with SchedulerParameters=nohold_on_prolog_fail) for a proven node.
* This boot has passed: the quick level, locally. On success it records the run and a snapshot
  of the GPUs' error counters (for the epilog to compare against) and exits 0: no Slurm call, no
  torch, nothing slow. On failure it drains with a precise reason ("airlock: FAIL <check>
  <detail> (prolog job N)") and exits 1; Slurm requeues the job and keeps the node drained.
* Airlock's own errors (hooks.common): an unproven boot refuses the job (fail closed); a proven
  boot lets it run (a typo in airlock.toml must not drain the whole cluster through every prolog
  at once), and the error shows in the log, `airlock status`, the metrics and `airlock doctor`.
"""

from __future__ import annotations

import os
import sys
import time

from airlock import finish
from airlock.hooks.common import Hook, guard
from airlock.preflight import entry as preflight
from airlock.records import job_snapshot


def run_prolog(hook: Hook) -> tuple[int, str]:
    """The quick level on a proven boot."""
    from airlock.runner import run_level  # imports the check registry: only this path needs it

    cfg, node, job = hook.cfg, hook.node, hook.job
    started = time.time()
    deadline = time.monotonic() + cfg.prolog.budget
    records, ctx = run_level(cfg, node, "quick", deadline=deadline)
    run = finish.summarize(node, "quick", "prolog", records, started, ctx.profile_name)
    run["job_id"] = job
    try:
        job_snapshot.save(cfg, node, job, ctx.snapshot)
    except Exception as exc:  # the epilog then skips the counter comparison
        hook.log(f"no GPU snapshot for the epilog: {exc}")
    failing = run["verdict"] == "fail"
    try:
        done = finish.finish_run(cfg, node, run, history=failing,
                                 slurm=hook.slurm() if failing else None,
                                 reason_suffix=f"(prolog job {job})")
    except BaseException as exc:
        if not failing:
            raise
        # The node just failed a check and the drain did not happen (slurmctld slow or away).
        # Airlock's own trouble must not let the job run here: exit 1, so Slurm's own
        # prolog-failure drain ("Prolog error") holds the node and requeues the job.
        return 1, (f"FAIL {run['failed_check']} {run['detail']}: drain failed "
                   f"({type(exc).__name__}: {exc}); exit 1, Slurm drains the node")
    for problem in done.problems:
        hook.log(problem)
    if not done.failed:
        done.raise_unseen(hook.name)
        return 0, f"quick {run['verdict']} in {run['duration_s']:.2f}s"
    how = "drained" if done.drain.changed else done.drain.why
    return 1, f"FAIL {run['failed_check']}: {how}"


def body(hook: Hook) -> tuple[int, str]:
    cfg = hook.load_config()
    if not hook.proven():
        from airlock.hooks import gate  # the Slurm client and subprocess: never on the pass path

        proof = hook.read_proof()
        why = f" ({proof.why})" if proof.why else ""
        return 1, f"refused, this boot is not proven: {proof.state}{why}; {gate.lock(hook)}"
    if not cfg.prolog.enabled:
        return 0, "proven boot; quick checks off ([prolog] enabled = false)"
    rc, msg = run_prolog(hook)
    if rc == 0:  # a qualifying multi-node job's nodes prove their collective together
        rc, msg = preflight.in_prolog(hook, msg)
    return rc, msg


def main(argv: list[str] | None = None) -> int:
    hook = Hook("prolog", os.environ.get("SLURMD_NODENAME", ""),
                job=os.environ.get("SLURM_JOB_ID", "?"))
    return guard(hook, body, open_rc=0, closed_rc=1)


if __name__ == "__main__":
    sys.exit(main())
