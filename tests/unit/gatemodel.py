"""A model of one node for the exhaustive explorer (tests/unit/test_explorer.py): Slurm's view
of it (state flags, reason, who wrote it, jobs), its proof record, and the processes that act
on it (a HealthCheckProgram or prolog run, the registration suite, the recovery service), each
a sequence of atomic steps between which anything else may happen.

What decides is the real code: airlock.gate_machine.plan/settle/isolation for every hook and
suite decision, airlock.records.proof.judge for what the record proves, airlock.slurm.drains' policy
(unclaimed, keeps, releasable), airlock.slurm.client.Node's view (claim, foreign_drain, busy,
drained),
airlock.slurm.reasons for every reason text, and airlock.recovery.machine.Obs for what the recovery
service may act on. What the model writes itself is only how the executors (hooks.gate,
hooks.healthcheck, airlock.registration) order their effects, and Slurm's answers: every write
is one atomic step of the model, as it is one scontrol call or one rename in the real code.

The node's hardware is always healthy here, so every FAIL of the node's hardware the model
reaches is a false blame: Airlock's own trouble that became the node's verdict.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

from airlock import gate_machine
from airlock.hw.boot import Boot
from airlock.records import proof as nodestate
from airlock.slurm import drains, reasons
from airlock.slurm.client import Node

M = gate_machine
NAME = "n1"
LEVEL = "quick"
TICK = 100.0  # seconds per tick of the boot clock: past the settle window in one
SUITE_TIMEOUT = 100.0  # a suite older than two ticks (plus the grace) is late
MAX_TICKS = 3
FOREIGN = "admin: swap the PSU"


class SlurmM(NamedTuple):
    drained: bool = False
    reason: str = ""
    jobs: int = 0
    up: bool = True  # slurmctld answers
    saw_boot: bool = True  # Slurm's BootTime is this boot's (slurmd registered since)


class Rec(NamedTuple):
    """node.json, in the fields the decisions read; to_dict() gives the real schema."""

    boot: int
    run: int
    status: str  # running | done | adopted
    verdict: str | None = None
    attempt: int = 1
    phase: str = ""
    pid: str = ""  # "hook:<who>" (the hook's own, until the suite is spawned) or "suite"
    pending: str = ""
    error: str = ""
    reason: str = ""
    trigger: str = "new"
    started: int = 0
    finished: int | None = None
    checked: int | None = None

    def to_dict(self) -> dict:
        d = {"schema": nodestate.SCHEMA, "node": NAME,
             "boot": {"node": NAME, "id": f"boot-{self.boot}", "uptime": 0.0},
             "run_id": f"r{self.run}", "status": self.status, "verdict": self.verdict,
             "pid": 1, "pid_start": 1, "level": LEVEL, "trigger": self.trigger,
             "attempt": self.attempt, "started_uptime": self.started * TICK,
             "slurm_pending": self.pending}
        if self.phase:
            d["phase"] = self.phase
        if self.error:
            d["error"] = self.error
        if self.reason:
            d["reason"] = self.reason
        if self.finished is not None:
            d["finished_uptime"] = self.finished * TICK
        if self.checked is not None:
            d["claim_checked_uptime"] = self.checked * TICK
        return d


class HookM(NamedTuple):
    who: str  # gate_machine.PERIODIC or PROLOG
    ops: tuple  # what is left to do, each op a tuple
    view: object = None  # Slurm's view as this run read it
    wrote: bool = False  # this run recorded the run in force (its pid is the record's)


class SuiteM(NamedTuple):
    run: int
    pc: str = "iso_read"
    view: object = None


class State(NamedTuple):
    boot: int
    uptime: int
    slurm: SlurmM
    rec: Rec | None
    hook: HookM | None = None  # a HealthCheckProgram run (the one being stepped, see step_prolog)
    suite: SuiteM | None = None
    runs: int = 0  # run ids handed out
    spawns: frozenset = frozenset()  # the attempts whose suite was started, in this chain
    budget: tuple = ()  # (name, uses left) of the bounded disturbances
    violation: str = ""
    prolog: HookM | None = None  # a prolog run, at the same time as a HealthCheckProgram's


@functools.cache
def node_view(s: SlurmM) -> Node:
    """Slurm's answer for the node (one per distinct Slurm state: the explorer asks often)."""
    return Node(NAME, "MIXED" if s.jobs else "IDLE",
                frozenset({"DRAIN"}) if s.drained else frozenset(), s.reason)


def proof(st: State) -> nodestate.Proof:
    return _judge(st.rec, st.boot, st.uptime)


@functools.cache
def _judge(rec: Rec | None, boot: int, uptime: int) -> nodestate.Proof:
    now = Boot(NAME, f"boot-{boot}", uptime * TICK)
    return nodestate.judge(rec.to_dict() if rec is not None else None, now)


def alive(st: State) -> bool:
    """The process the record names runs: the suite it was spawned as, or the hook that
    recorded it (this model runs one hook at a time: a hook in flight is that one)."""
    rec = st.rec
    if rec is None or rec.status != "running":
        return False
    if rec.pid == "suite":
        return st.suite is not None and st.suite.run == rec.run
    return any(h is not None and h.wrote and rec.pid == f"hook:{h.who}"
               for h in (st.hook, st.prolog))


# --- Slurm, as scontrol answers (airlock.slurm.client.Slurm.drain/resume and airlock.slurm.drains)
# --------
def _set(st: State, **kw) -> State:
    return st._replace(slurm=st.slurm._replace(**kw))


def _foreign_touched(st: State, what: str) -> State:
    if node_view(st.slurm).foreign_drain:
        return st._replace(violation=f"a foreign drain {what}: {st.slurm.reason!r}")
    return st


def slurm_drain(st: State, text: str, current: Node | None = None) -> State:
    """Slurm.drain: decided on `current` (the caller's read) when given, else a fresh read."""
    node = current if current is not None else node_view(st.slurm)
    if node.foreign_drain or (node.drained and node.reason == text):
        return st
    st = _foreign_touched(st, "rewritten")
    return _set(st, drained=True, reason=text)


def slurm_resume(st: State, only_if=None) -> State:
    node = node_view(st.slurm)
    if not node.drained or not node.owned:
        return st
    if only_if is not None and not only_if(node.claim):
        return st
    return _set(st, drained=False, reason="")


def drains_fail(st: State, reason: reasons.Reason) -> State:
    if drains.keeps(node_view(st.slurm).claim):
        return st
    return slurm_drain(st, reason.format())


def drains_release(st: State, trigger: str = "", registration: bool = False) -> State:
    node = node_view(st.slurm)
    if registration and node.drained and not node.reason:
        st = slurm_drain(st, reasons.pending(LEVEL, trigger).format(), current=node)
    return slurm_resume(st, only_if=drains.releasable)


# --- the record (airlock.records.proof.NodeState) -------------------------------------------------
def rec_finish(st: State, run: int, verdict: str, **kw) -> tuple[State, bool]:
    rec = st.rec
    if rec is None or rec.run != run or rec.status != "running":
        return st, False
    phase = "" if rec.phase == nodestate.STARTING else rec.phase
    return st._replace(rec=rec._replace(status="done", verdict=verdict, finished=st.uptime,
                                        phase=phase, **kw)), True


def _upd(st: State, run: int, status: str | None = None, **kw) -> State:
    rec = st.rec
    if rec is None or rec.run != run or (status is not None and rec.status != status):
        return st
    return st._replace(rec=rec._replace(**kw))


# --- the hooks: gather the facts, ask the machine, carry out its step -------------------------
def facts(st: State, who: str, view=None) -> M.Facts:
    return M.Facts(who, proof(st), st.uptime * TICK, alive(st), view,
                   saw_boot=st.slurm.saw_boot, suite_timeout=SUITE_TIMEOUT)


def start_ops(trigger: str, attempt: int, current=None) -> tuple:
    """hooks.gate.start_suite: record (pid = the hook's), isolate, spawn."""
    return (("record", trigger, attempt), ("isolate", trigger, current), ("spawn",))


def compile_step(st: State, step: M.Step, view) -> tuple:
    """The executors' effects of one step, in their order (hooks.gate.carry_out,
    hooks.healthcheck.settle_claim). view: the SlurmM this run read, if it read one."""
    k, rec = step.kind, st.rec
    current = view if isinstance(view, SlurmM) else None
    run = rec.run if rec is not None else -1
    if k == M.START:
        if st.rec is not None and proof(st).state == nodestate.ADOPTED:
            current = None
        return start_ops(step.trigger, 1, current)
    if k in (M.RESTART, M.RETRY) and proof(st).state == nodestate.RUNNING and k == M.RETRY:
        return (("finish_died", run), *start_ops(step.trigger, step.attempt))
    if k in (M.RESTART, M.RETRY):
        return start_ops(step.trigger, step.attempt)
    if k in (M.RETRY_OWN, M.RECHECK):
        return start_ops(step.trigger, 1)
    if k == M.ADOPT:
        return (("adopt",),)
    if k == M.HOLD:
        return (("hold", run),)
    if k == M.KILL_FAIL:
        return (("kill",), ("finish_fail", run, step.why), ("fail_suite", step.why))
    if k == M.FAIL_DIED:
        return (("finish_fail", run, step.why), ("fail_suite", step.why))
    if k == M.SET_FAIL:
        return (("set_fail", run), ("settle", run))
    if k == M.RESUME_PENDING:
        return (("release_registration", run), ("settle", run), ("checked_if_closed", run))
    if k == M.RELEASE:
        return (("release", run), ("checked", run))
    if k == M.SETTLED:
        return (("checked", run),)
    return ()  # nothing, watch, wait_idle, keep_failed


# The hooks' Slurm updates whose SlurmError ends the run (isolate and hold catch theirs).
SLURM_OPS = ("fail_suite", "set_fail", "release_registration", "release")


def hook_op(st: State, op: tuple) -> State:
    """One atomic step of the hook in flight."""
    hook = st.hook
    rest = hook.ops[1:]
    st = st._replace(hook=hook._replace(ops=rest))
    kind = op[0]
    up = st.slurm.up
    if kind in ("decide", "decided"):
        view = hook.view if kind == "decided" else None
        proven = proof(st).state == nodestate.PROVEN
        if hook.who == M.PROLOG and proven:
            return st._replace(hook=st.hook._replace(ops=(("job_runs",),)))
        seen = node_view(view) if isinstance(view, SlurmM) else view
        step = (M.settle if proven else M.plan)(facts(st, hook.who, seen))
        if step.kind == M.READ:
            return st._replace(hook=st.hook._replace(ops=(("read",), ("decided",))))
        return st._replace(hook=st.hook._replace(ops=compile_step(st, step, view)))
    if kind == "read":
        if up:
            return st._replace(hook=st.hook._replace(view=st.slurm))
        if proof(st).state == nodestate.NONE:  # first sight: UNKNOWN, the boot is isolated
            return st._replace(hook=st.hook._replace(view=M.UNKNOWN))
        # hooks.common: an unproven boot fails closed (the drain needs Slurm too: it fails),
        # a proven one fails open; either way this run ends here
        return st._replace(hook=st.hook._replace(ops=()))
    if kind == "job_runs":
        if proof(st).state != nodestate.PROVEN:
            return st._replace(violation="a job ran on an unproven boot")
        return _set(st, jobs=st.slurm.jobs + 1)
    if kind == "record":
        _, trigger, attempt = op
        runs = st.runs + 1
        rec = Rec(st.boot, runs, "running", attempt=attempt, phase=nodestate.STARTING,
                  pid=f"hook:{hook.who}", trigger=trigger, started=st.uptime)
        return st._replace(rec=rec, runs=runs, spawns=frozenset() if attempt == 1 else st.spawns,
                           hook=st.hook._replace(wrote=True))
    if kind == "isolate":
        if not up:
            return st  # left to the suite and the next run; the prolog refuses jobs
        current = node_view(op[2]) if op[2] is not None else None
        return slurm_drain(st, reasons.pending(LEVEL, op[1]).format(), current=current)
    if kind == "spawn":
        rec = st.rec
        st = st._replace(suite=SuiteM(rec.run), spawns=st.spawns | {rec.attempt})
        phase = "" if rec.phase == nodestate.STARTING else rec.phase
        return _upd(st, rec.run, "running", pid="suite", phase=phase)
    if kind == "adopt":
        runs = st.runs + 1
        return st._replace(rec=Rec(st.boot, runs, "adopted", verdict=None, attempt=0,
                                   trigger="adopt", started=st.uptime), runs=runs)
    if kind == "hold":
        if not up:
            return st
        node = node_view(st.slurm)
        if not drains.unclaimed(node):
            return st
        if st.rec is None or st.rec.run != op[1] or st.rec.status != "running":
            return st
        st = slurm_drain(st, reasons.pending(LEVEL, st.rec.trigger).format())
        rec = st.rec
        if rec.status == "done" and rec.verdict in nodestate.PASSED:
            st = drains_release(st)
        return st
    if kind == "finish_died":
        st, ok = rec_finish(st, op[1], "error", error=M.DIED,
                            reason=reasons.failure("suite", M.DIED).format())
        return st if ok else st._replace(hook=st.hook._replace(ops=()))
    if kind == "kill":
        return st._replace(suite=None)
    if kind == "finish_fail":
        failure = M.suite_failure(op[2])
        st, ok = rec_finish(st, op[1], "error", error=op[2], reason=failure.format())
        return st if ok else st._replace(hook=st.hook._replace(ops=()))
    if kind in SLURM_OPS and not up:
        # scontrol fails: the SlurmError ends the hook's run (hooks.common.guard; its own
        # fail-closed drain needs Slurm too), and what it had left to do stays undone
        return st._replace(hook=st.hook._replace(ops=()))
    if kind == "fail_suite":
        return drains_fail(st, M.suite_failure(op[1]))
    if kind == "set_fail":
        return drains_fail(st, M.failure_of(st.rec.to_dict()))
    if kind == "settle":
        return _upd(st, op[1], pending="")
    if kind == "release_registration":
        return drains_release(st, st.rec.trigger, registration=True)
    if kind == "release":
        return drains_release(st)
    if kind == "checked":
        return _upd(st, op[1], "done", checked=st.uptime)
    if kind == "checked_if_closed":
        rec = st.rec
        if rec is not None and rec.finished is not None and \
                st.uptime * TICK >= rec.finished * TICK + M.SETTLE_S:
            return _upd(st, op[1], "done", checked=st.uptime)
        return st
    raise AssertionError(op)


def step_prolog(st: State, op: tuple) -> State:
    """One step of the prolog in flight: the hooks' code is the same, so the prolog is swapped
    into the stepped slot for it."""
    swapped = st._replace(hook=st.prolog, prolog=st.hook)
    nxt = hook_op(swapped, op)
    return nxt._replace(hook=nxt.prolog, prolog=nxt.hook)


# --- the registration suite (airlock.registration.Suite) ---------------------------------------
def suite_op(st: State) -> State:
    su = st.suite
    rec = st.rec
    if rec is None or rec.run != su.run:  # superseded: a newer run owns the record
        return st._replace(suite=None)
    up = st.slurm.up
    pc = su.pc
    if pc == "iso_read":
        if not up:
            return st  # it waits (and gives up after suite_timeout: "giveup")
        step = M.isolation(node_view(st.slurm))
        if step == M.CLAIM:
            return st._replace(suite=su._replace(pc="iso_claim", view=st.slurm))
        if step == M.WAIT:
            return _upd(st, su.run, "running", phase="waiting")
        return _upd(st._replace(suite=su._replace(pc="keep")), su.run, "running",
                    phase="checking", started=st.uptime)
    if pc == "iso_claim":
        st = st._replace(suite=su._replace(pc="iso_read", view=None))
        if not up:
            return st
        return slurm_drain(st, reasons.pending(LEVEL, rec.trigger).format(),
                           current=node_view(su.view))
    if pc == "keep":  # keep_isolated before the check
        st = st._replace(suite=su._replace(pc="check"))
        if up and drains.unclaimed(node_view(st.slurm)):
            st = slurm_drain(st, reasons.pending(LEVEL, rec.trigger).format())
        return st
    if pc == "check":
        if st.slurm.jobs:
            return st._replace(violation="a check ran over a job")
        return st._replace(suite=su._replace(pc="conclude"))
    if pc == "conclude":
        st, ok = rec_finish(st, su.run, "pass", pending="resume")
        return st._replace(suite=su._replace(pc="release") if ok else None)
    if pc == "release":  # update_slurm, then keep_trying while slurmctld is away
        if not up:
            return st
        if not st.rec.pending:
            return st._replace(suite=None)  # a hook made it
        st = drains_release(st, rec.trigger, registration=True)
        return st._replace(suite=su._replace(pc="settle"))
    if pc == "settle":
        return _upd(st._replace(suite=None), su.run, pending="")
    raise AssertionError(pc)


def suite_gives_up(st: State) -> State:
    """registration.crashed: could not confirm isolation for suite_timeout (Slurm away)."""
    su = st.suite
    detail = "could not confirm isolation: Slurm unreachable"
    reason = reasons.failure("suite", detail)
    st, ok = rec_finish(st, su.run, "error", error=detail, reason=reason.format(),
                        pending="fail")
    st = st._replace(suite=None)
    if ok and st.slurm.up:
        st = _upd(drains_fail(st, reason), su.run, pending="")
    return st
