"""airlock.gate_machine, the boot's lifecycle as one pure function: each state of the proof,
who asks, and Slurm's view give one step. The whole-lifecycle check is the explorer
(test_explorer.py); this table pins the single decisions, and which of them need Slurm."""

from __future__ import annotations

import pytest

from airlock import gate_machine as M
from airlock.records import proof as nodestate
from airlock.slurm.client import Node

PENDING = "airlock: pending quick check boot"


def rec(**over):
    base = {"schema": 2, "node": "n1", "boot": {"node": "n1", "id": "b", "uptime": 0.0},
            "run_id": "r1", "status": "running", "verdict": None, "pid": 1, "pid_start": 1,
            "level": "quick", "trigger": "boot", "attempt": 1, "started_uptime": 100.0,
            "slurm_pending": ""}
    base.update(over)
    return base


def view(state="IDLE", drained=False, reason=""):
    return Node("n1", state, frozenset({"DRAIN"}) if drained else frozenset(), reason)


def proof(state, record=None, why=""):
    return nodestate.Proof(state, why, record)


DONE = rec(status="done", verdict="pass", finished_uptime=100.0)
OWN = "airlock: FAIL suite could not confirm isolation"
CASES = [
    # (who, proof, uptime, alive, view, saw_boot) -> step kind
    ("first sight asks Slurm", M.PERIODIC, proof("none", None, "no record"), 0, False, None,
     False, M.READ),
    ("busy in a boot Slurm saw: adopt", M.PERIODIC, proof("none", None, "no record"), 0, False,
     view("MIXED"), True, M.ADOPT),
    ("busy, but Slurm has not seen this boot", M.PERIODIC, proof("none", None, "no record"), 0,
     False, view("MIXED"), False, M.START),
    ("Slurm does not answer: isolate", M.PERIODIC, proof("none", None, "no record"), 0, False,
     M.UNKNOWN, False, M.START),
    ("the prolog never adopts nor asks", M.PROLOG, proof("none", None, "no record"), 0, False,
     None, False, M.START),
    ("a new boot of a known node is isolated at once", M.PERIODIC,
     proof("none", DONE, "boot id changed"), 0, False, None, False, M.START),
    ("a live suite in time: the periodic hook asks nothing", M.PERIODIC, proof("running", rec()),
     150, True, None, False, M.WATCH),
    ("a live suite in time: the prolog holds", M.PROLOG, proof("running", rec()), 150, True, None,
     False, M.HOLD),
    ("a live suite past its time", M.PERIODIC, proof("running", rec()), 100 + 1800 + 61, True,
     None, False, M.KILL_FAIL),
    ("a suite waiting for jobs is never late", M.PERIODIC,
     proof("running", rec(phase="waiting")), 99999, True, None, False, M.WATCH),
    ("attempt 1 died", M.PERIODIC, proof("running", rec()), 150, False, None, False, M.RETRY),
    ("attempt 2 died", M.PERIODIC, proof("running", rec(attempt=2)), 150, False, None, False,
     M.FAIL_DIED),
    ("attempt 2 recorded, never started", M.PERIODIC,
     proof("running", rec(attempt=2, phase=nodestate.STARTING)), 150, False, None, False,
     M.RESTART),
    ("a failure the suite could not set", M.PERIODIC,
     proof("failed", rec(status="done", verdict="fail", slurm_pending="fail")), 150, False, None,
     False, M.SET_FAIL),
    ("own error, idle, due", M.PERIODIC,
     proof("failed", rec(status="done", verdict="error", reason=OWN, finished_uptime=0.0)), 700,
     False, view(drained=True, reason=OWN), False, M.RETRY_OWN),
    ("own error, not due yet", M.PERIODIC,
     proof("failed", rec(status="done", verdict="error", reason=OWN, finished_uptime=600.0)),
     700, False, view(drained=True, reason=OWN), False, M.KEEP_FAILED),
    ("a failed boot resumed by hand", M.PERIODIC,
     proof("failed", rec(status="done", verdict="fail", reason="airlock: FAIL gpu_count 7")),
     700, False, view(), False, M.RECHECK),
    ("adopted, still busy", M.PERIODIC, proof("adopted", rec(status="adopted")), 700, False,
     view("ALLOCATED"), False, M.WAIT_IDLE),
    ("adopted, a job arrives", M.PROLOG, proof("adopted", rec(status="adopted")), 700, False,
     None, False, M.START),
    ("proven, the window open: no read", M.PERIODIC, proof("proven", DONE), 150, False, None,
     False, M.NOTHING),
    ("proven, the window closed: one read", M.PERIODIC, proof("proven", DONE), 200, False, None,
     False, M.READ),
    ("proven, a pending claim left", M.PERIODIC, proof("proven", DONE), 200, False,
     view(drained=True, reason=PENDING), False, M.RELEASE),
    ("proven, a foreign drain stays", M.PERIODIC, proof("proven", DONE), 200, False,
     view(drained=True, reason="admin: PSU"), False, M.SETTLED),
    ("proven and checked: no read", M.PERIODIC,
     proof("proven", {**DONE, "claim_checked_uptime": 200.0}), 5000, False, None, False,
     M.NOTHING),
    ("proven, the suite's resume left to the hooks", M.PERIODIC,
     proof("proven", {**DONE, "slurm_pending": "resume"}), 150, False, None, False,
     M.RESUME_PENDING),
    ("proven: the prolog's pass path asks nothing", M.PROLOG, proof("proven", DONE), 200, False,
     None, False, M.NOTHING),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_one_step_per_state(case):
    _, who, pr, uptime, alive, seen, saw, want = case
    f = M.Facts(who, pr, float(uptime), alive, seen, saw_boot=saw)
    assert M.plan(f).kind == want


def test_suite_failures_are_airlocks_own():
    for why in (f"{M.DIED} (2 attempts)", "suite timeout after 1900s"):
        reason = M.suite_failure(why)
        assert reason.own_error and reason.format().startswith("airlock: FAIL suite "), reason


@pytest.mark.parametrize("seen,step", [
    (view(), M.CLAIM), (view(drained=True), M.CLAIM),
    (view("MIXED", drained=True, reason=PENDING), M.WAIT),
    (view(drained=True, reason="admin: PSU"), M.GO), (view(drained=True, reason=PENDING), M.GO),
])
def test_the_suites_isolation(seen, step):
    assert M.isolation(seen) == step
