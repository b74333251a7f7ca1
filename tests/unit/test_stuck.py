"""A proven node is never left drained "pending" (issue 17, section 2). Each interleaving that
left one stuck on cb0b8e2 is forced here, against the fake controller (tests/unit/fakeslurm.py):

* hold() re-read the record (suite still running), then drained; the suite recorded its pass
  and resumed the node in between, so the drain landed after the resume, and later hooks took
  the proven pass path, which makes no Slurm call;
* a hook SIGKILLed between recording "suite died" and starting the next attempt left a record
  that read as a failed registration, which no hook retried;
* with HealthCheckInterval=0 a resume the suite could not make was left to a hook that never
  runs.

And the invariant that heals all of them: a HealthCheckProgram on a proven boot that finds
Airlock's pending or checking claim in force (no suite can be running: the record is done)
releases the node.
"""

from __future__ import annotations

import os

import pytest

from airlock.config import loader as config_mod
from airlock.hooks import gate
from airlock.hooks.common import Hook
from airlock.hw import boot as boot_mod
from airlock.records import proof as nodestate
from airlock.slurm import drains
from tests.unit.fakenode import FakeNode, wait_for

PENDING = "airlock: pending quick check boot"


@pytest.fixture
def node(tmp_path):
    n = FakeNode(tmp_path, level="quick")
    yield n
    n.stop()


def drained(node: FakeNode) -> bool:
    return "DRAIN" in node.slurm.node(node.name)["flags"]


def age_proof(node: FakeNode, seconds: float = 3600.0) -> None:
    """The proof as an older one: its suite finished `seconds` ago."""
    state = node.state
    rec = state.load()
    rec["finished_uptime"] = round(max(0.0, boot_mod.uptime() - seconds), 3)
    state.save(rec)


def test_a_pending_claim_on_a_proven_boot_is_released(node):
    """The drain of a hook that raced the suite's pass landed after the resume: the first
    periodic run after the settle window closed (the last moment such a drain can land)
    releases it."""
    node.prove()
    age_proof(node)
    node.slurm.set(node.name, flags=["DRAIN"], reason=PENDING)
    out = node.run("healthcheck")
    assert not drained(node), (out.stderr, node.slurm.node(node.name))
    assert "pending claim on a proven boot" in out.stderr, out.stderr


def test_a_foreign_drain_or_a_failure_on_a_proven_boot_is_left_alone(node):
    node.prove()
    for reason in ("admin: swap the PSU", "airlock: FAIL gpu_count 7 GPUs"):
        node.slurm.set(node.name, flags=["DRAIN"], reason=reason)
        node.run("healthcheck")
        assert node.slurm.node(node.name)["reason"] == reason and drained(node)


def test_the_claim_check_costs_nothing_once_the_proof_has_settled(node):
    """The pass path stays free of Slurm calls: once a check past the settling window found no
    claim, later runs do not ask again."""
    node.prove()
    age_proof(node)
    node.run("healthcheck")  # one read: nothing in force; the proof is settled
    assert node.state.load().get("claim_checked_uptime")
    node.slurm.clear_log()
    for _ in range(2):
        node.run("healthcheck")
    assert node.slurm.calls() == []


def test_hold_never_leaves_a_drain_after_the_suites_pass(node, monkeypatch):
    """Force the race inside one hook run: between hold()'s read of the record (running) and
    its drain, the suite records its pass and resumes the node."""
    cfg = config_mod.load(node.conf)
    state = nodestate.NodeState(cfg, node.name)
    now = boot_mod.current(node.name)
    state.start("r1", now, os.getpid(), "quick", "boot")
    hook = Hook("healthcheck", node.name)
    hook.cfg = cfg
    hook.read_proof()
    assert hook.proof.state == nodestate.RUNNING
    real_isolate = drains.isolate

    def suite_finishes_first(slurm, name, level, why):
        state.finish("r1", "pass")  # the suite's verdict ...
        assert not drained(node)  # ... and its resume (the node was in service already)
        return real_isolate(slurm, name, level, why)  # then the hook's drain lands

    monkeypatch.setattr(drains, "isolate", suite_finishes_first)
    gate.hold(hook, "boot")
    assert not drained(node), node.slurm.node(node.name)


def test_a_hook_killed_between_two_attempts_leaves_a_suite_that_is_retried(node):
    """The watch recorded "died without a verdict" for attempt 1 and was killed before it
    started attempt 2. The next hook starts attempt 2 at once."""
    cfg = config_mod.load(node.conf)
    state = nodestate.NodeState(cfg, node.name)
    state.start("r1", boot_mod.current(node.name), 999_999, "quick", "boot")
    node.slurm.set(node.name, flags=["DRAIN"], reason=PENDING)
    rec = state.load()
    rec["pid_start"] = None  # the dead suite
    state.save(rec)
    # what watch() wrote on cb0b8e2 before it started the next attempt
    assert state.finish("r1", "error", error="suite died without a verdict")
    out = node.run("healthcheck")
    rec = state.load()
    assert rec["status"] == "running" and rec["attempt"] == 2, (rec, out.stderr)
    assert drained(node)


def test_a_resume_left_pending_is_made_without_any_later_hook(node):
    """HealthCheckInterval=0: no hook runs after the suite. The suite keeps retrying its
    resume (slurmctld refused the first ones) until it lands."""
    node.write_config('[registration]\nlevel = "quick"\nslurm_retry = 1\n')
    node.slurm.set(node.name, flags=["DRAIN"], reason=PENDING)
    node.slurm.fail("update", times=3)
    out = node.run("healthcheck")  # drain already in force: it starts the suite
    wait_for(lambda: node.record()["status"] == "done", 60, "the suite's verdict")
    assert node.record()["verdict"] == "pass", out.stderr
    wait_for(lambda: not drained(node), 60, "the suite's own resume, retried")
    wait_for(lambda: not node.record()["slurm_pending"], 10, "the record settled")


class Killed(BaseException):
    """slurmd's SIGKILL of the hook, at the point where it is raised."""


def test_a_hook_killed_before_it_spawned_attempt_two_never_fails_the_node(node, monkeypatch):
    """Issue 25 item 9: attempt 1 died; the hook recorded attempt 2 and was killed before it
    started that suite. Only one suite ever ran, so the next hook starts attempt 2 (again),
    and the node is never failed for it. main: "FAIL registration suite died without a
    verdict (2 attempts)", which recovery reboots and replaces."""
    cfg = config_mod.load(node.conf)
    state = nodestate.NodeState(cfg, node.name)
    state.start("r1", boot_mod.current(node.name), 999_999, "quick", "boot")
    state.set_process("r1", 999_999)  # attempt 1's suite ran, and died
    node.slurm.set(node.name, flags=["DRAIN"], reason=PENDING)
    hook = Hook("healthcheck", node.name)
    hook.cfg = cfg
    hook.read_proof()

    def killed(*_a, **_kw):
        raise Killed()

    monkeypatch.setattr(gate, "_spawn", killed)
    with pytest.raises(Killed):
        gate.watch(hook)  # attempt 1 is dead: records attempt 2, killed before its spawn
    rec = state.load()
    assert rec["status"] == "running" and rec["attempt"] == 2, rec
    rec["pid_start"] = None  # the killed hook's process is gone
    state.save(rec)
    out = node.run("healthcheck")
    rec = state.load()
    assert rec["status"] == "running" and rec["attempt"] == 2, (rec, out.stderr)
    assert boot_mod.alive(rec["pid"], rec["pid_start"]), rec  # a suite runs now
    assert node.slurm.node(node.name)["reason"] == PENDING, out.stderr
