"""The boot's lifecycle as one pure state machine: no Slurm, no clock, no files, no processes.

The hooks (hooks.gate, hooks.healthcheck, hooks.prolog) and the registration suite gather the
facts (the proof of this boot from airlock.records.proof, whether the recorded suite's process is
alive, the boot clock, and Slurm's view of the node once they have read it) and ask `plan` for
one step; they only carry steps out. The hooks read Slurm only when `plan` answers READ: a
decision that needs Slurm's view asks for it, one that does not (a suite alive and in time, a
proof whose settle window is still open or closed and checked) costs slurmctld nothing.

    none      --(busy, in a boot Slurm saw, not the prolog)--> ADOPT
              --otherwise--> START (isolate, record, spawn the suite)
    running   starting, its hook gone --> RESTART (same attempt: no suite ran)
              alive, in time --> WATCH (the periodic hook) / HOLD (the prolog: a job came, so
                                 make sure the drain is in force)
              alive, late --> KILL_FAIL;  dead --> RETRY (next attempt) or FAIL_DIED
    failed    died, next attempt never started --> RETRY
              Slurm update left pending --> SET_FAIL
              own error, node idle, due --> RETRY_OWN;  drained --> KEEP_FAILED
              resumed by someone --> RECHECK
    adopted   the prolog, or the node idle --> START (trigger adopt);  busy --> WAIT_IDLE
    proven    the one home of "no Airlock claim in force on a proven boot": the suite's resume
              left pending --> RESUME_PENDING; once the settle window has closed, one read:
              Airlock's pending/checking claim in force --> RELEASE, else SETTLED; NOTHING
              before the window closes and after the check

`isolation` is the suite's own decision before its first check (claim, wait, go).
tests/unit/test_explorer.py drives these functions through every interleaving of hooks, suites,
Slurm, admins, jobs, kills and reboots to a bounded depth, and checks the gate's promises.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

from airlock.records import proof as nodestate
from airlock.slurm import reasons

if TYPE_CHECKING:  # the HealthCheckProgram's pass path asks plan(): no Slurm client imported
    from airlock.slurm.client import Node

# Who asks.
PERIODIC, PROLOG = "healthcheck", "prolog"

# Steps.
NOTHING = "nothing"
READ = "read"  # Slurm's view is needed to decide: read the node, then ask again
START = "start"  # record the run, isolate the node, spawn the suite
RESTART = "restart"  # the recorded attempt's suite was never started: start it now
ADOPT = "adopt"
WATCH = "watch"  # a suite alive and in time: it keeps its own drain
HOLD = "hold"  # (the prolog) a suite alive and in time: make sure the node is drained
KILL_FAIL = "kill_fail"  # a suite past its time: kill it, fail the registration
RETRY = "retry"  # the suite died without a verdict: record that, start the next attempt
FAIL_DIED = "fail_died"  # the last attempt died too
SET_FAIL = "set_fail"  # the failure the suite could not set in Slurm
RETRY_OWN = "retry_own"  # failed for Airlock's own trouble: check again
KEEP_FAILED = "keep_failed"
RECHECK = "recheck"  # someone resumed a failed node: check it again before any job
WAIT_IDLE = "wait_idle"  # adopted, still running jobs
RESUME_PENDING = "resume_pending"  # the suite's own resume, left to the hooks
RELEASE = "release"  # Airlock's pending/checking claim in force on a proven boot
SETTLED = "settled"  # checked once the window closed: no claim in force; no more reads

# The suite's isolation steps.
CLAIM = "claim"  # no drain anyone owns: set Airlock's, then read again
WAIT = "wait"  # jobs still running
GO = "go"  # drained and idle: checks may start

GRACE_S = 60.0  # past suite_timeout, how long a suite may take to report before it is failed
MAX_ATTEMPTS = 2  # a suite that dies without a verdict is re-run once, then failed
# A suite that failed for Airlock's own trouble is retried: at once when the trouble was in
# starting it (a directory or the config: retrying costs nothing while it lasts), after this
# many seconds when the suite itself ran and failed (a crash, slurmctld away for its timeout).
RETRY_OWN_ERROR_S = 600.0
CHEAP_RETRY = ("config", "state_dir", "log_dir")
DIED = "suite died without a verdict"
# How long after a suite's verdict a drain from a hook that raced it can still land: the
# HealthCheckProgram is killed at 60 s, and one Slurm call takes at most [slurm] timeout.
SETTLE_S = 90.0


class Unknown(NamedTuple):
    """Slurm was asked and did not answer (the caller's read failed)."""

    why: str = ""


UNKNOWN = Unknown()


class Facts(NamedTuple):
    who: str  # PERIODIC or PROLOG
    proof: nodestate.Proof
    uptime: float  # the boot clock now
    alive: bool = False  # the recorded suite's process runs (a running record only)
    view: Node | Unknown | None = None  # Slurm's view of the node; None: not read yet
    saw_boot: bool = False  # Slurm's BootTime is this boot's (with view)
    suite_timeout: float = 1800.0


class Step(NamedTuple):
    kind: str
    why: str = ""
    trigger: str = ""
    attempt: int = 1


def plan(f: Facts) -> Step:
    """The one step that brings this boot to where it must be."""
    state = f.proof.state
    if state == nodestate.PROVEN:
        return settle(f)
    if state == nodestate.RUNNING:
        return _running(f)
    if state == nodestate.FAILED:
        return _failed(f)
    if state == nodestate.ADOPTED:
        return _adopted(f)
    return _first_sight(f)


def settle(f: Facts) -> Step:
    """A proven boot (or one adopted until its next reboot): no suite can be running, so
    Airlock's pending or checking claim in force is left over (a hook's drain that raced the
    suite's pass and landed after its resume, a resume the suite could not make) and is
    released. Only the periodic hook looks, and it reads Slurm once: when the window in which
    such a drain can still land has closed. A foreign drain and a failure stay."""
    record = f.proof.record
    if f.who != PERIODIC or record is None or record.get("status") != "done":
        return Step(NOTHING)  # the prolog's pass path makes no Slurm call; adopted: no claim
    if record.get("slurm_pending") == "resume":
        return Step(RESUME_PENDING, "the suite's resume, left to the hooks")
    closes = float(record.get("finished_uptime") or 0.0) + SETTLE_S
    if float(record.get("claim_checked_uptime") or 0.0) >= closes or f.uptime < closes:
        return Step(NOTHING)
    if f.view is None:
        return Step(READ, "the settle window closed")
    if isinstance(f.view, Unknown):
        return Step(NOTHING, "Slurm did not answer; the next run asks again")
    claim = f.view.claim
    if claim is not None and claim.state in ("pending", "checking"):
        return Step(RELEASE, f"Airlock's {claim.state} claim on a proven boot")
    return Step(SETTLED)


def _running(f: Facts) -> Step:
    record = f.proof.record
    assert record is not None
    attempt = int(record["attempt"])
    if not f.alive and record.get("phase") == nodestate.STARTING:
        # The hook that recorded this attempt was killed before it started the suite: no
        # suite ran, so the attempt is not spent (and never a verdict on the node).
        return Step(RESTART, f"attempt {attempt} was recorded but never started",
                    record["trigger"], attempt)
    age = f.uptime - float(record["started_uptime"])
    waiting = record.get("phase") == "waiting"  # for jobs to end or slurmctld: no timeout yet
    if f.alive and (age <= f.suite_timeout + GRACE_S or waiting):
        # The suite keeps its own drain (before each check, and while it waits): the periodic
        # hook need not ask Slurm. A job that came anyway is refused by the prolog, which
        # drains the node again at once.
        return Step(HOLD if f.who == PROLOG else WATCH, f"running {age:.0f}s")
    if f.alive:
        return Step(KILL_FAIL, f"suite timeout after {age:.0f}s")
    if attempt < MAX_ATTEMPTS:
        return Step(RETRY, DIED, record["trigger"], attempt + 1)
    return Step(FAIL_DIED, f"{DIED} ({attempt} attempts)")


def failure_of(record: Mapping[str, Any]) -> reasons.Reason:
    """The failure the suite wanted to set (record["reason"]), else a generic one."""
    wanted = reasons.parse(record.get("reason", ""))
    if wanted is not None and wanted.is_failure:
        return wanted
    return reasons.failure("registration", record.get("detail") or record.get("error")
                           or "failed")


def suite_failure(why: str) -> reasons.Reason:
    """The drain reason of a suite that died or outlived its time (KILL_FAIL, FAIL_DIED): it
    measured nothing on the node, so it is Airlock's own trouble (closed, retried while the
    node is idle), never the node's failure, which the recovery service would act on."""
    return reasons.failure("suite", why.removeprefix("suite "))


def _failed(f: Facts) -> Step:
    record = f.proof.record
    assert record is not None
    attempt = int(record["attempt"])
    if record.get("error") == DIED and attempt < MAX_ATTEMPTS:
        # A suite that died, whose next attempt was never started (the hook that saw it die
        # was killed): start it now, as that hook would have.
        return Step(RETRY, f"{DIED} (attempt {attempt})", record["trigger"], attempt + 1)
    if record.get("slurm_pending") == "fail":
        return Step(SET_FAIL, "the suite could not set its verdict")
    if f.view is None:
        return Step(READ, "a failed registration")
    if isinstance(f.view, Unknown):
        return Step(KEEP_FAILED, "Slurm did not answer")
    wanted = failure_of(record)
    if wanted.own_error and not f.view.busy:
        # Airlock's own trouble (Slurm unreachable, a crash), not the node's: try again, but
        # not at every hook run.
        since = f.uptime - float(record.get("finished_uptime") or 0)
        if wanted.subject in CHEAP_RETRY or since >= RETRY_OWN_ERROR_S:
            return Step(RETRY_OWN, "failed for Airlock's own reason", "retry")
    if f.view.drained:
        return Step(KEEP_FAILED)
    return Step(RECHECK, "resumed after a failed registration", "recheck")


def _adopted(f: Facts) -> Step:
    if f.who == PROLOG:
        return Step(START, "adopted boot, a job arrived", "adopt")
    if f.view is None:
        return Step(READ, "adopted: is it idle yet")
    if isinstance(f.view, Unknown):
        return Step(WAIT_IDLE, "Slurm did not answer")
    if f.view.busy:
        return Step(WAIT_IDLE, f"running jobs ({f.view.state_text})")
    return Step(START, "adopted boot now idle", "adopt")


def trigger_for(proof: nodestate.Proof) -> str:
    """Why this boot needs a registration: new (never seen), boot (a new boot of a node with a
    record), record (a record that is damaged, copied from elsewhere or of an old version)."""
    if proof.record is None:
        return "new" if proof.why == "no record" else "record"
    return "boot" if proof.why in ("boot id changed", "boot clock restarted") else "record"


def _first_sight(f: Facts) -> Step:
    """No proof for this boot. Adopt a node that is running jobs in a boot Slurm has seen (no
    drain), unless the boot is a new one of a known node or a job is waiting (the prolog never
    adopts: the job is refused either way); isolate and check anything else."""
    trigger = trigger_for(f.proof)
    if f.who != PROLOG and trigger != "boot":
        if f.view is None:
            return Step(READ, "first sight: is it running jobs")
        if not isinstance(f.view, Unknown) and f.view.busy and f.saw_boot:
            return Step(ADOPT, f"running jobs ({trigger})", trigger)
    return Step(START, "", trigger)


def isolation(view: Node) -> str:
    """The suite, before its first check: CLAIM when no drain anyone owns is in force (it sets
    Airlock's, and reads again: the read it acted on is older than its claim, and a resume and a
    job may have come in between), WAIT while jobs run, GO when drained and idle."""
    from airlock.slurm import drains  # the suite's path only

    if drains.unclaimed(view):
        return CLAIM
    if view.busy:
        return WAIT
    return GO
