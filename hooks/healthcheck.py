"""HealthCheckProgram, the first lock: what slurmd runs at start (before it registers) and every
HealthCheckInterval.

Slurm gives it only SLURMD_NODENAME: no PATH, no SLURM_CONF, no arguments; the config path comes
from $AIRLOCK_CONFIG or /etc/airlock/airlock.toml; airlock.slurm.client finds the Slurm binaries.

* This boot has passed its registration: run the quick level (NVML, system; never torch) and
  drain with the failing check named. The pass path makes no Slurm call once the proof has
  settled: until then (and while the suite left its resume to this run), one read makes sure
  no claim of Airlock's (pending, checking) is left in force, and releases one that is.
* Anything else: hooks.gate brings the node to where it must be: isolate a new boot and start
  its registration suite detached (own session, own hard timeout, log file), watch a running
  one, keep a failed one drained, adopt a node first seen running jobs.
* Airlock's own errors follow the policy in hooks.common: closed on an unproven boot, open (and
  visible) on a proven one.

Slurm ignores the exit code (it only logs it); 0 when the node was handled, 1 otherwise.
"""

from __future__ import annotations

import os
import sys
import time

from airlock import finish, gate_machine
from airlock.hooks.common import Hook, guard
from airlock.records import proof as nodestate
from airlock.slurm import conf as slurmconf


def periodic(hook: Hook) -> tuple[str, finish.Finished]:
    """The quick level; a failure drains with the check named."""
    from airlock.runner import run_level  # imports the check registry: only this path needs it

    cfg, node = hook.cfg, hook.node
    started = time.time()
    deadline = time.monotonic() + cfg.healthcheck.budget
    slurm_deadline = hook.deadline()
    if slurm_deadline is not None:  # within the time Slurm gives the hook, a drain included
        deadline = min(deadline, slurm_deadline - slurmconf.DRAIN_RESERVE_S)
    records, ctx = run_level(cfg, node, "quick", deadline=deadline)
    run = finish.summarize(node, "quick", "periodic", records, started, ctx.profile_name)
    slurm = hook.slurm() if run["verdict"] == "fail" else None
    done = finish.finish_run(cfg, node, run, history=done_history(run), slurm=slurm)
    for problem in done.problems:
        hook.log(problem)
    if not done.failed:
        return f"quick {run['verdict']} in {run['duration_s']:.2f}s", done
    how = "drained" if done.drain.changed else done.drain.why
    return f"quick fail {run['failed_check']}: {how}", done


def done_history(run: dict) -> bool:
    """Periodic passes are not kept as history (one every interval); failures always are."""
    return run["verdict"] == "fail"


SETTLE_S = gate_machine.SETTLE_S  # (the settle window: airlock.gate_machine.settle)


def settle_claim(hook: Hook) -> str:
    """The invariant that keeps a proven node from being stuck out of service, decided by
    airlock.gate_machine.settle (its one home): the suite's resume left to the hooks is made;
    once the window in which a racing drain can still land has closed, one read, and Airlock's
    pending or checking claim in force is released. A foreign drain and a failure stay. Before
    the window closes, and once the read found nothing, the pass path makes no Slurm call."""
    M = gate_machine
    now = hook.now.uptime if hook.now is not None else 0.0
    f = M.Facts(M.PERIODIC, hook.proof, now)
    step = M.settle(f)
    if step.kind == M.NOTHING:
        return ""
    from airlock.slurm import drains  # the Slurm client: only this rare path needs it

    record = hook.proof.record
    slurm = hook.slurm()
    state = nodestate.NodeState(hook.cfg, hook.node)
    closed = now >= float(record.get("finished_uptime") or 0.0) + SETTLE_S
    if step.kind == M.RESUME_PENDING:
        # the suite's own resume, left to us: its drain may also have lost its reason
        res = drains.release(slurm, hook.node, record["level"], record["trigger"])
        state.settle(record["run_id"])
        if closed:
            state.claim_checked(record["run_id"], now)
        return f"; pending resume: {'resumed' if res.changed else res.why}"
    step = M.settle(f._replace(view=slurm.node(hook.node)))  # it asked to READ
    msg = ""
    if step.kind == M.RELEASE:
        res = drains.release(slurm, hook.node)
        msg = f"; {step.why}: {'resumed' if res.changed else res.why}"
    state.claim_checked(record["run_id"], now)
    return msg


def body(hook: Hook) -> tuple[int, str]:
    cfg = hook.load_config()
    if not cfg.registration.enabled:
        msg, done = periodic(hook)
        return _seen(hook, done, msg)
    proof = hook.read_proof()
    if hook.proven():
        msg, done = periodic(hook)
        return _seen(hook, done, msg + settle_claim(hook))
    from airlock.hooks import gate  # the Slurm client and subprocess: never on the pass path

    if proof.state == nodestate.NONE:
        msg = gate.first_sight(hook, allow_adopt=True)
        if hook.read_proof_again().state == nodestate.ADOPTED:
            quick, done = periodic(hook)
            return _seen(hook, done, f"{msg}; {quick}")
        return 0, msg
    if proof.state == nodestate.ADOPTED:
        quick, done = periodic(hook)
        return _seen(hook, done, f"{quick}; {gate.adopted(hook, job_waiting=False)}")
    return 0, gate.lock(hook)


def _seen(hook: Hook, done: finish.Finished, msg: str) -> tuple[int, str]:
    """The quick level saw everything, or its gap is raised as Airlock's own trouble."""
    if done.run["verdict"] == "error":
        hook.log(msg)  # what the run did see; the gap follows as an own error
    done.raise_unseen(hook.name)
    return 0, msg


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    node = os.environ.get("SLURMD_NODENAME") or (argv[0] if argv else "")
    return guard(Hook("healthcheck", node), body, open_rc=1, closed_rc=1)


if __name__ == "__main__":
    sys.exit(main())
