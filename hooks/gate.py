"""The two locks on an unproven boot, shared by the HealthCheckProgram (the first lock, at slurmd
start and every interval) and the prolog (the second lock, before every job).

Whatever the node's record says about this boot (airlock.nodestate), these functions bring the
node to where it must be:

  none      a boot Airlock has no proof for: isolate it and start the registration suite; or,
            when Slurm says it is running jobs and has seen this boot (Airlock installed on a live
            cluster), adopt it (no drain; see [registration] adopt)
  running   keep the node isolated; a suite that died is re-run once, then failed; a suite past
            suite_timeout plus a grace is killed and failed
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

from airlock import boot as boot_mod
from airlock import config as config_mod
from airlock import drains, nodestate, paths, reasons
from airlock.errors import OwnError, SlurmError, SlurmUnreachable
from airlock.hooks.common import Hook
from airlock.results import new_run_id

GRACE_S = 60.0  # past suite_timeout, how long a suite may take to report before it is failed
MAX_ATTEMPTS = 2  # a suite that dies without a verdict is re-run once, then failed
# A suite that failed for Airlock's own trouble is retried: at once when the trouble was in
# starting it (a directory or the config: retrying costs nothing while it lasts), after this
# many seconds when the suite itself ran and failed (a crash, slurmctld away for its timeout).
RETRY_OWN_ERROR_S = 600.0
CHEAP_RETRY = ("config", "state_dir", "log_dir")
DIED = "suite died without a verdict"


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


def watch(hook: Hook) -> str:
    """This boot's suite is running (per the record): keep it honest."""
    cfg, record = hook.cfg, hook.proof.record
    now = hook.now
    age = now.uptime - float(record["started_uptime"])
    limit = cfg.registration.suite_timeout + GRACE_S
    alive = boot_mod.alive(record["pid"], record.get("pid_start"))
    waiting = record.get("phase") == "waiting"  # for jobs to end or slurmctld: no timeout yet
    if alive and (age <= limit or waiting):
        try:
            held = hold(hook, record["trigger"])
        except SlurmError as exc:
            held = f"cannot confirm isolation ({exc})"
        return f"registration suite {record['run_id']} running {age:.0f}s; {held}"
    state = nodestate.NodeState(cfg, hook.node)
    if alive:
        _kill_session(record["pid"], record.get("pid_start"))
        why = f"suite timeout after {age:.0f}s"
    elif record["attempt"] < MAX_ATTEMPTS:
        # Recorded before the next attempt starts; a hook killed in between (slurmd's 60 s
        # kill) leaves this record, and the next hook starts the next attempt (settle_failed).
        if not state.finish(record["run_id"], "error", error=DIED,
                            reason=reasons.failure("suite", DIED).format()):
            return ended_meanwhile(state)
        return f"{DIED}; " + retry_died(hook, record)
    else:
        why = f"{DIED} ({record['attempt']} attempts)"
    if not state.finish(record["run_id"], "fail", error=why, detail=why):
        return ended_meanwhile(state)
    res = drains.fail(hook.slurm(), hook.node, reasons.failure("registration", why))
    return f"registration {why}: {'drained' if res.changed else res.why}"


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


def retry_died(hook: Hook, record: dict) -> str:
    return start_suite(hook, record["trigger"], record["attempt"] + 1)


def settle_failed(hook: Hook) -> str:
    """This boot failed its registration: the node stays out until something acts."""
    record = hook.proof.record
    if record.get("error") == DIED and record["attempt"] < MAX_ATTEMPTS:
        # A suite that died, whose next attempt was never started (the hook that saw it die
        # was killed): start it now, as that hook would have.
        return f"{DIED} (attempt {record['attempt']}); " + retry_died(hook, record)
    slurm = hook.slurm()
    current = slurm.node(hook.node)
    detail = record.get("detail") or record.get("error") or "failed"
    if record.get("slurm_pending") == "fail":
        # The suite could not set its verdict (no controller then): set it now.
        res = drains.fail(slurm, hook.node, _failure_of(record))
        nodestate.NodeState(hook.cfg, hook.node).settle(record["run_id"])
        return f"registration failed ({detail}): {'drained' if res.changed else res.why}"
    wanted = _failure_of(record)
    if wanted.own_error and not current.busy:
        # Airlock's own trouble (Slurm unreachable, a crash), not the node's: try again, but
        # not at every hook run.
        since = hook.now.uptime - float(record.get("finished_uptime") or 0)
        if wanted.subject in CHEAP_RETRY or since >= RETRY_OWN_ERROR_S:
            return f"registration failed for Airlock's own reason ({detail}); retry: " + \
                start_suite(hook, "retry")
    if current.drained:
        return f"registration failed ({detail}); node stays drained"
    # Someone resumed the node after the failure: re-run the registration before any job.
    return f"resumed after a failed registration; re-check: {start_suite(hook, 'recheck')}"


def _failure_of(record: dict) -> reasons.Reason:
    """The failure the suite wanted to set (record["reason"]), else a generic one."""
    wanted = reasons.parse(record.get("reason", ""))
    if wanted is not None and wanted.is_failure:
        return wanted
    return reasons.failure("registration", record.get("detail") or record.get("error")
                           or "failed")


def trigger_for(proof: nodestate.Proof) -> str:
    """Why this boot needs a registration: new (never seen), boot (a new boot of a node with a
    record), record (a record that is damaged, copied from elsewhere or of an old version)."""
    if proof.record is None:
        return "new" if proof.why == "no record" else "record"
    return "boot" if proof.why in ("boot id changed", "boot clock restarted") else "record"


def first_sight(hook: Hook, allow_adopt: bool) -> str:
    """No proof for this boot. Adopt a node that is running jobs in a boot Slurm has seen (no
    drain; the caller runs the quick level), when allowed; isolate and check anything else.
    The prolog never adopts: a job is waiting, and it is refused either way."""
    proof = hook.proof
    trigger = trigger_for(proof)
    current = None
    if allow_adopt and trigger != "boot":
        try:
            # half of the hook's time at most: the record and the drain must follow it
            with hook.slurm().sooner(0.5) as slurm:
                current = slurm.node(hook.node)
        except SlurmError:
            current = None  # cannot tell: isolate (the suite waits for Slurm before heavy work)
        if current is not None and current.busy and slurm_saw_boot(current.boot_time, hook.now):
            state = nodestate.NodeState(hook.cfg, hook.node)
            try:
                state.adopt(hook.now, new_run_id(hook.node), f"running jobs ({trigger})")
            except OSError as exc:
                raise OwnError("state_dir", f"{state.path.parent}: {exc.strerror or exc}") \
                    from None
            return f"adopted: first seen running jobs ({current.state_text})"
    why = "" if trigger != "record" else f" ({proof.why})"
    return start_suite(hook, trigger, current=current) + why


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


def lock(hook: Hook) -> str:
    """Bring an unproven boot to where it must be (see the module docstring)."""
    proof = hook.proof
    if proof.state == nodestate.RUNNING:
        return watch(hook)
    if proof.state == nodestate.FAILED:
        return settle_failed(hook)
    if proof.state == nodestate.ADOPTED:
        return adopted(hook, job_waiting=hook.name == "prolog")
    return first_sight(hook, allow_adopt=hook.name != "prolog")


def adopted(hook: Hook, job_waiting: bool) -> str:
    """An adopted boot under "when-idle": check it once no job runs, or when a job arrives
    (the suite then waits for the node to drain)."""
    if job_waiting:
        return "adopted boot, a job arrived: " + start_suite(hook, "adopt")
    current = hook.slurm().node(hook.node)
    if current.busy:
        return f"adopted, running jobs ({current.state_text}); registration when idle"
    return "adopted boot now idle: " + start_suite(hook, "adopt")

