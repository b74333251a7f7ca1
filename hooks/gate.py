"""The two locks on an unproven boot, shared by the HealthCheckProgram (the first lock, at slurmd
start and every interval) and the prolog (the second lock, before every job).

What to do is decided by airlock.gate_machine.plan (pure: the proof, the boot clock, whether
the suite's process runs, and Slurm's view only when the decision needs it); these functions
gather those facts and carry the step out:

  none      a boot Airlock has no proof for: isolate it and start the registration suite; or,
            when Slurm says it is running jobs and has seen this boot (Airlock installed on a live
            cluster), adopt it (no drain; see [registration] adopt)
  running   a suite alive and in time keeps its own drain (the prolog, which a job reached,
            drains again); a suite that died is re-run once, then failed; a suite past
            suite_timeout plus a grace is killed and failed; both failures are Airlock's own
            (`FAIL suite ...`), never the node's; an attempt recorded but never started (its
            hook was killed) is started, not counted
  failed    keep the failure drain; if someone resumed the node, re-check it
  adopted   "when-idle": start the suite once Slurm shows the node idle (or a job arrives)

The suite itself waits until Slurm shows the node drained and idle before any heavy check, so
a heavy check never runs over a job, whichever path started it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from airlock import gate_machine, paths
from airlock.config import loader as config_mod
from airlock.errors import OwnError, SlurmError, SlurmUnreachable
from airlock.hooks.common import Hook
from airlock.hw import boot as boot_mod
from airlock.records import proof as nodestate
from airlock.records.results import new_run_id
from airlock.slurm import drains, reasons

# The lifecycle's numbers live with its decisions (airlock.gate_machine); named here too for
# the callers and tests that read them from the hooks.
GRACE_S = gate_machine.GRACE_S
MAX_ATTEMPTS = gate_machine.MAX_ATTEMPTS
RETRY_OWN_ERROR_S = gate_machine.RETRY_OWN_ERROR_S
CHEAP_RETRY = gate_machine.CHEAP_RETRY
DIED = gate_machine.DIED


def start_suite(hook: Hook, trigger: str, attempt: int = 1, current=None) -> str:
    """Record the suite for this boot, isolate the node, start the suite detached; return
    what happened. Fails closed (OwnError) when the state or log directory cannot be written.

    Record first: Slurm kills the hook when its time is up (HealthCheckTimeout on 26.05, 4 s
    with a 5 s interval), and a hook killed while scontrol waited for an absent controller used
    to leave neither a drain nor a record. The drain is spent within the hook's time, so the
    suite is started after it, and has the Slurm to itself from then on: it drains the node
    once Slurm answers if the hook could not. (Were the hook killed before the suite started,
    the record names the hook's own process: the next hook or prolog finds it dead and starts
    the next attempt.) current: the node as this hook read it a moment ago (one read fewer
    for slurmctld)."""
    cfg, node = hook.cfg, hook.node
    level = cfg.registration.level
    now = hook.now or boot_mod.current(node)
    run_id = new_run_id(node)
    state = nodestate.NodeState(cfg, node)
    try:
        state.start(run_id, now, os.getpid(), level, trigger, attempt)
        failed = None
    except OSError as exc:
        failed = OwnError("state_dir", f"{state.path.parent}: {exc.strerror or exc}")
    # This boot's drain replaces whatever a previous boot left (an earlier failure included),
    # so an own error that follows it is what the node shows.
    isolated = isolate_in_time(hook, level, trigger, current)
    if failed is not None:
        raise failed
    try:
        pid = _spawn(cfg, node, run_id, trigger)
    except OSError as exc:
        folder = paths.expand(cfg.log_dir, node)
        problem = OwnError("log_dir", f"{folder}: {exc.strerror or exc}")
        state.finish(run_id, "error", error=str(problem),
                     reason=reasons.failure(problem.subject, problem.detail).format())
        raise problem from None
    state.set_process(run_id, pid)
    again = f" (attempt {attempt})" if attempt > 1 else ""
    return f"{trigger}: {isolated}; registration suite {run_id} pid {pid}{again}"


RETRY_S = 0.5  # between drain attempts while slurmctld does not answer


def isolate_in_time(hook: Hook, level: str, trigger: str, current=None) -> str:
    """Drain the node pending, trying again while slurmctld cannot be reached and the hook's
    time lasts: at slurmd start the node registers only once the hook ends, so a drain that
    lands in that time is in force before the node can take a job. current: the node as the
    hook read it a moment ago, for the first try (a retry reads it again)."""
    while True:
        try:
            res = drains.isolate(hook.slurm(), hook.node, level, trigger, current=current)
            return "drained" if res.changed else res.why
        except SlurmError as exc:
            failure = exc
            # (no limit known, a prolog with PrologEpilogTimeout unset: one try, never a loop)
            if hook.deadline() is None or not _unreachable(exc) \
                    or hook.time_left() < RETRY_S + 1.0:
                break
        current = None
        time.sleep(RETRY_S)
    # No job can be scheduled without a controller; the suite drains the node once Slurm
    # answers, and the prolog refuses any job until the suite passes.
    return (f"drain failed ({failure}); left to the suite and the next run, the prolog "
            "refuses jobs until the suite passes")


def _unreachable(exc: SlurmError) -> bool:
    """slurmctld did not answer (down, restarting, too slow), rather than refused: by type,
    as the Slurm client read it."""
    return isinstance(exc, SlurmUnreachable)


def _spawn(cfg, node: str, run_id: str, trigger: str) -> int:
    """The registration suite in a session of its own, logging to log_dir; its PID."""
    folder = paths.expand(cfg.log_dir, node)
    os.makedirs(folder, exist_ok=True)
    env = dict(os.environ)
    env[config_mod.ENV_VAR] = cfg.path
    env.setdefault("PATH", "/usr/bin:/bin:/usr/sbin:/sbin")
    argv = [sys.executable, "-m", "airlock.registration", "--node", node,
            "--run-id", run_id, "--trigger", trigger]
    with open(os.path.join(folder, f"registration-{run_id}.log"), "ab") as log:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env,
                                start_new_session=True, close_fds=True)
    return proc.pid


def hold(hook: Hook, why: str) -> str:
    """Make sure the node is drained (by anyone); drain it pending when it is not, unless the
    suite finished meanwhile. The suite records its verdict before it resumes the node, so a
    node seen in service after the record was read is checked against the record read again:
    a pass there is the reason it is in service, and draining it would be a false drain."""
    current = hook.slurm().node(hook.node)
    if not drains.unclaimed(current):
        return "isolated"
    state = nodestate.NodeState(hook.cfg, hook.node)
    record = state.load() or {}
    if record.get("run_id") != hook.proof.record["run_id"] or record.get("status") != "running":
        return "left alone: " + ended_meanwhile(state)
    res = drains.isolate(hook.slurm(), hook.node, hook.cfg.registration.level, why)
    if not res.changed:
        return res.why
    # The suite may have recorded its pass and resumed the node between the read above and
    # this drain: then the drain landed after the resume. Undo it at once (the HealthCheckProgram
    # on the proven boot would also release it, but not with HealthCheckInterval=0).
    after = state.load() or {}
    if after.get("run_id") == record.get("run_id") and after.get("status") == "done" and \
            after.get("verdict") in nodestate.PASSED:
        undo = drains.release(hook.slurm(), hook.node)
        return f"drained, but the suite passed meanwhile: {'resumed' if undo.changed else undo.why}"
    return "drained again"


def ended_meanwhile(state: nodestate.NodeState) -> str:
    """The suite wrote its verdict (or a newer run took over) after this hook read the record:
    the next run acts on what it wrote."""
    record = state.load() or {}
    return f"the suite ended meanwhile ({record.get('verdict') or 'superseded'})"


def _kill_session(pid: int, start) -> None:
    """SIGKILL the suite's whole session (its checks run in process groups of its own, which
    the suite kills itself; the session leader's group is what is left)."""
    if not boot_mod.alive(pid, start):
        return
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def slurm_saw_boot(boot_time: str, now: boot_mod.Boot | None, tolerance: float = 120.0) -> bool:
    """Slurm's BootTime for the node matches this boot (its view of the node's jobs is then
    current, not left over from before a reboot). Compared on the wall clock, loosely: the
    answer only chooses between adopting a busy node and isolating it."""
    if not boot_time or now is None:
        return False
    try:
        slurm_boot = time.mktime(time.strptime(boot_time, "%Y-%m-%dT%H:%M:%S"))
    except ValueError:
        return False
    ours = time.time() - now.uptime
    return abs(slurm_boot - ours) <= tolerance


# --- asking the machine, and carrying out its step -------------------------------------------
def facts(hook: Hook) -> gate_machine.Facts:
    proof = hook.proof
    record = proof.record or {}
    alive = proof.state == nodestate.RUNNING and \
        boot_mod.alive(record.get("pid"), record.get("pid_start"))
    return gate_machine.Facts(
        who=gate_machine.PROLOG if hook.name == "prolog" else gate_machine.PERIODIC,
        proof=proof, uptime=hook.now.uptime if hook.now is not None else 0.0, alive=alive,
        suite_timeout=hook.cfg.registration.suite_timeout)


def read_view(hook: Hook):
    """Slurm's view of the node, as plan() asked for it. On first sight, within half of the
    hook's time (the record and the drain must follow it), and a Slurm that does not answer is
    UNKNOWN (the boot is isolated: the suite waits for Slurm before heavy work); elsewhere its
    SlurmError is the hook's own error (hooks.common)."""
    if hook.proof.state == nodestate.NONE:
        try:
            with hook.slurm().sooner(0.5) as slurm:
                return slurm.node(hook.node)
        except SlurmError as exc:
            return gate_machine.Unknown(str(exc))
    return hook.slurm().node(hook.node)


def decide(hook: Hook, who: str | None = None) -> tuple[gate_machine.Step, object]:
    """plan()'s step for this hook, with Slurm read only when the step needs it."""
    f = facts(hook)
    if who is not None:
        f = f._replace(who=who)
    step = gate_machine.plan(f)
    if step.kind != gate_machine.READ:
        return step, None
    view = read_view(hook)
    saw = not isinstance(view, gate_machine.Unknown) and slurm_saw_boot(view.boot_time, hook.now)
    return gate_machine.plan(f._replace(view=view, saw_boot=saw)), view


def lock(hook: Hook) -> str:
    """Bring an unproven boot to where it must be (see the module docstring)."""
    step, view = decide(hook)
    return carry_out(hook, step, view)


def first_sight(hook: Hook, allow_adopt: bool) -> str:
    """No proof for this boot: adopt it or isolate it (the prolog never adopts)."""
    step, view = decide(hook, None if allow_adopt else gate_machine.PROLOG)
    return carry_out(hook, step, view)


def adopted(hook: Hook, job_waiting: bool) -> str:
    """An adopted boot under "when-idle": check it once no job runs, or when a job arrives
    (the suite then waits for the node to drain)."""
    step, view = decide(hook, gate_machine.PROLOG if job_waiting else gate_machine.PERIODIC)
    return carry_out(hook, step, view)


def carry_out(hook: Hook, step: gate_machine.Step, view) -> str:
    """Do what plan() decided; what happened, for the hook's log line."""
    M = gate_machine
    kind, record = step.kind, hook.proof.record or {}
    current = None if view is None or isinstance(view, M.Unknown) else view
    state = nodestate.NodeState(hook.cfg, hook.node)
    if kind == M.ADOPT:
        try:
            state.adopt(hook.now, new_run_id(hook.node), step.why)
        except OSError as exc:
            raise OwnError("state_dir", f"{state.path.parent}: {exc.strerror or exc}") \
                from None
        return f"adopted: first seen running jobs ({current.state_text})"
    if kind == M.START:
        if hook.proof.state == nodestate.ADOPTED:
            return f"{step.why}: " + start_suite(hook, step.trigger)
        why = "" if step.trigger != "record" else f" ({hook.proof.why})"
        return start_suite(hook, step.trigger, current=current) + why
    if kind == M.WAIT_IDLE:
        return f"adopted, {step.why}; registration when idle"
    if kind in (M.WATCH, M.HOLD):
        head = f"registration suite {record['run_id']} {step.why}"
        if kind == M.WATCH:
            return f"{head}; the suite keeps its drain"
        try:
            held = hold(hook, record["trigger"])
        except SlurmError as exc:
            held = f"cannot confirm isolation ({exc})"
        return f"{head}; {held}"
    if kind == M.RESTART:
        return f"{step.why}; " + start_suite(hook, step.trigger, step.attempt)
    if kind == M.RETRY:
        if hook.proof.state == nodestate.RUNNING:
            # Recorded before the next attempt starts; a hook killed in between (slurmd's 60 s
            # kill) leaves this record, and the next hook starts the next attempt.
            if not state.finish(record["run_id"], "error", error=DIED,
                                reason=reasons.failure("suite", DIED).format()):
                return ended_meanwhile(state)
            return f"{DIED}; " + start_suite(hook, step.trigger, step.attempt)
        return f"{step.why}; " + start_suite(hook, step.trigger, step.attempt)
    if kind in (M.KILL_FAIL, M.FAIL_DIED):
        if kind == M.KILL_FAIL:
            _kill_session(record["pid"], record.get("pid_start"))
        why = step.why
        failure = M.suite_failure(why)  # Airlock's own trouble, never the node's failure
        if not state.finish(record["run_id"], "error", error=why, detail=why,
                            reason=failure.format()):
            return ended_meanwhile(state)
        res = drains.fail(hook.slurm(), hook.node, failure)
        return f"registration {why}: {'drained' if res.changed else res.why}"
    detail = record.get("detail") or record.get("error") or "failed"
    if kind == M.SET_FAIL:
        # The suite could not set its verdict (no controller then): set it now.
        res = drains.fail(hook.slurm(), hook.node, M.failure_of(record))
        state.settle(record["run_id"])
        return f"registration failed ({detail}): {'drained' if res.changed else res.why}"
    if kind == M.RETRY_OWN:
        return f"registration failed for Airlock's own reason ({detail}); retry: " + \
            start_suite(hook, step.trigger)
    if kind == M.KEEP_FAILED:
        return f"registration failed ({detail}); node stays drained"
    if kind == M.RECHECK:
        return f"resumed after a failed registration; re-check: {start_suite(hook, step.trigger)}"
    return step.why or kind


def watch(hook: Hook) -> str:
    """This boot's suite is running (per the record): keep it honest."""
    return lock(hook)
