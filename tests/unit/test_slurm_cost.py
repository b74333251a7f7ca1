"""What a joining node asks of slurmctld, counted by the fake Slurm (issue 20: every RPC shows up
in sdiag, and sites turn off tools that fill it). The real hook and the real registration
suite run against tests/unit/fakeslurm.py; each `scontrol show node` there is two RPCs for a
real controller (the node table and the partition table), each update one.

bench/bench_scale.py measures the same on a real slurmctld, per message type."""

from __future__ import annotations

import os
import time

from airlock import registration
from airlock.config import loader as config
from airlock.hw import boot
from airlock.registration import Suite
from airlock.slurm import drains
from tests.unit.fakenode import wait_for


def join(node):
    """slurmd starts: the HealthCheckProgram, then the suite it starts, to its verdict."""
    out = node.run("healthcheck")
    assert out.returncode == 0, out.stderr
    return wait_for(lambda: (node.record() or {}).get("status") == "done"
                    and not node.record().get("slurm_pending") and node.record(), 60,
                    "the registration's verdict")


def reads_and_updates(node) -> tuple[int, int]:
    return len(node.slurm.calls("show")), len(node.slurm.calls("update"))


def test_a_new_node_joins_with_three_reads_and_two_updates(fake_node):
    """The hook reads the node once (adopt or isolate) and drains it with that read; the suite
    reads it once to confirm isolation, and once more to resume it. main: five reads (the
    drain and the resume each read the node again, right after their caller had)."""
    node = fake_node(level="quick")
    record = join(node)
    assert record["verdict"] == "pass", record
    assert reads_and_updates(node) == (3, 2), node.slurm.calls()
    assert not node.slurm.node("n1")["flags"]  # resumed


def test_a_drain_that_lost_its_reason_is_read_again_before_checks_start(fake_node, monkeypatch):
    """A FUTURE node registering on 22.05 keeps DRAIN and loses the reason the hook set: the
    suite puts the claim back, then reads the node again before it counts it isolated and
    idle (issue 25 item 8). The read it acted on is older than the claim it set: an admin's
    resume and a job may have come in between, and the drain does not stop a running job.
    main counted the node isolated from the first read and started its checks over the job."""
    node = fake_node(level="quick", flags=["DRAIN"])
    suite = Suite(config.load(node.conf), "n1", "20260101T000000-1-n1", "new")
    real_isolate = drains.isolate

    def job_slips_in(slurm, name, level, why, current=None):
        node.slurm.set("n1", state="MIXED", flags=[], cpu_alloc=1)  # resumed; a job started
        return real_isolate(slurm, name, level, why, current=None)

    monkeypatch.setattr(drains, "isolate", job_slips_in)
    assert suite.isolated_and_idle() != ""
    assert suite.isolated_and_idle() == "jobs still running (MIXED+DRAIN)"
    monkeypatch.setattr(drains, "isolate", real_isolate)
    # Without a job in between: the claim put back, one more read, and the checks start.
    node.slurm.set("n1", state="IDLE", flags=["DRAIN"], cpu_alloc=0, reason="")
    node.slurm.clear_log()
    assert suite.isolated_and_idle() == "drain just set"
    assert node.slurm.node("n1")["reason"] == "airlock: pending quick check new"
    assert suite.isolated_and_idle() == ""
    assert reads_and_updates(node) == (2, 1), node.slurm.calls()
    # Not drained at all (a reboot with nextstate=resume): drained, then looked at again,
    # since a job may have started in between.
    node.slurm.set("n1", flags=[], reason="")
    node.slurm.clear_log()
    assert suite.isolated_and_idle() == "drain just set"
    assert reads_and_updates(node) == (1, 1), node.slurm.calls()


def test_waiting_for_jobs_asks_less_and_less_often(fake_node, monkeypatch):
    """While the node's jobs run the suite asks again after 2 s, then twice as long each time
    the answer is the same, up to 30 s: about two reads a minute for as long as jobs run.
    main asked every 2 s: 30 reads (60 RPCs) a minute per waiting node."""
    node = fake_node(level="quick", state="ALLOCATED", flags=["DRAIN"], cpu_alloc=1,
                     reason="airlock: pending quick check new")
    suite = Suite(config.load(node.conf), "n1", "20260101T000000-1-n1", "new")
    suite.state.start(suite.run_id, boot.current("n1"), os.getpid(), "quick", "new")
    pauses: list[float] = []
    real_sleep = time.sleep

    def sleep(seconds: float) -> None:
        if seconds < 1:  # the subprocess module's own short waits
            return real_sleep(seconds)
        pauses.append(seconds)
        if len(pauses) == 8:  # the last job ends
            node.slurm.set("n1", state="IDLE", cpu_alloc=0)

    monkeypatch.setattr(registration.time, "sleep", sleep)
    suite.wait_for_isolation()
    assert pauses == [2.0, 4.0, 8.0, 16.0, 30.0, 30.0, 30.0, 30.0]
    assert len(node.slurm.calls("show")) == len(pauses) + 1


def test_a_proven_boot_reads_slurm_once_when_the_settle_window_closes(fake_node):
    """Issue 25 item 12: the HealthCheckProgram on a proven boot reads the node once, when the
    window in which a racing drain can still land has closed, not at every run within it
    (main: every run for 90 s after the pass, 2 RPCs each: 41 RPCs per joining node at
    HealthCheckInterval=5)."""
    node = fake_node(level="quick")
    node.prove()  # just passed: the window is open
    for _ in range(3):
        out = node.run("healthcheck")
        assert out.returncode == 0, out.stderr
    assert node.slurm.calls() == [], node.slurm.calls()
    rec = node.record()
    rec["finished_uptime"] = round(max(0.0, boot.uptime() - 3600), 3)  # the window closed
    node.state.save(rec)
    node.run("healthcheck")
    assert reads_and_updates(node) == (1, 0), node.slurm.calls()
    node.slurm.clear_log()
    node.run("healthcheck")
    assert node.slurm.calls() == []


def test_the_periodic_hook_asks_slurm_nothing_while_the_suite_runs(fake_node):
    """Issue 25 item 12: the suite keeps its own drain (before each check, while it waits), so
    a periodic run that finds it alive and in time reads nothing (main read the node at every
    run: 147 RPCs per joining node in a 70-node group join at HealthCheckInterval=5). A job
    that comes anyway is refused by the prolog, which makes sure of the drain."""
    node = fake_node(level="quick", flags=["DRAIN"], reason="airlock: pending quick check new")
    state = node.state
    state.start("r1", boot.current("n1"), os.getpid(), "quick", "new")
    state.set_process("r1", os.getpid())  # this test's process plays the live suite
    state.phase("r1", "checking")
    for _ in range(3):
        out = node.run("healthcheck")
        assert out.returncode == 0 and "running" in out.stderr, out.stderr
    assert node.slurm.calls() == [], node.slurm.calls()
    node.slurm.set("n1", flags=[], reason="")  # an admin's resume; a job arrives
    out = node.run("prolog")
    assert out.returncode == 1, out.stderr
    assert node.slurm.node("n1")["reason"] == "airlock: pending quick check new", out.stderr
