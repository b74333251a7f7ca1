"""Unproven boots beyond the plain locks, against the fake controller (tests/unit/fakeslurm.py):

* a boot whose registration failed stays drained; resumed by someone, it is checked again before
  any job (docs/guide.md, Troubleshooting: "no boot runs jobs unproven"); failed for Airlock's
  own trouble (a suite that could not confirm isolation), it is retried while the node is idle,
  but not at every hook run (docs/guide.md, "When Airlock itself fails");
* the prolog never adopts: a job arriving on a busy node Airlock has no record of is refused
  and the node checked, so with HealthCheckInterval=0 nothing is adopted (docs/guide.md,
  "Rolling out onto a live cluster")."""

from __future__ import annotations

import pytest

from airlock.hw import boot as boot_mod
from airlock.slurm import reasons
from tests.unit.fakenode import FakeNode, wait_for

GPU_FAIL = reasons.failure("gpu_count", "7 GPUs, profile h100-sxm-8x expects 8").format()
OWN_FAIL = reasons.failure("suite", "could not confirm isolation for 1800s: Slurm "
                           "unreachable").format()


@pytest.fixture
def node(tmp_path):
    n = FakeNode(tmp_path, level="quick")
    yield n
    n.stop()


def failed_before(node: FakeNode, reason: str, verdict: str, ago: float) -> dict:
    """This boot's registration, ended `ago` seconds ago with `reason` (already set in Slurm)."""
    state = node.state
    state.start("r-failed", boot_mod.current(node.name), 999_999, "quick", "boot")
    assert state.finish("r-failed", verdict, detail=reason.split(" ", 3)[3], reason=reason)
    rec = state.load()
    # (below zero on a machine up for less than `ago`: only the difference is read)
    rec["finished_uptime"] = round(boot_mod.uptime() - ago, 3)
    state.save(rec)
    node.slurm.set(node.name, flags=["DRAIN"], reason=reason)
    return rec


def drained(node: FakeNode) -> bool:
    return "DRAIN" in node.slurm.node(node.name)["flags"]


def test_a_failed_registration_stays_drained(node):
    failed_before(node, GPU_FAIL, "fail", ago=3600)
    out = node.run("healthcheck")
    assert "node stays drained" in out.stderr, out.stderr
    assert drained(node) and node.slurm.node(node.name)["reason"] == GPU_FAIL
    assert node.record()["run_id"] == "r-failed" and node.slurm.updates() == []
    assert node.run("prolog").returncode == 1  # no job either


@pytest.mark.parametrize("hook", ["healthcheck", "prolog"])
def test_a_failed_registration_resumed_by_hand_is_checked_again(node, hook):
    failed_before(node, GPU_FAIL, "fail", ago=3600)
    node.slurm.set(node.name, flags=[], reason="")  # scontrol update state=resume
    out = node.run(hook)
    assert "resumed after a failed registration; re-check" in out.stderr, out.stderr
    assert node.slurm.updates()[0] == ["nodename=n1", "state=drain",
                                       "reason=airlock: pending quick check recheck"]
    assert out.returncode == (1 if hook == "prolog" else 0)  # the job waits for the re-check
    wait_for(lambda: (node.record() or {}).get("status") == "done", 60, "the re-check")
    assert node.record()["trigger"] == "recheck" and node.record()["verdict"] == "pass"
    wait_for(lambda: not drained(node), 60, "the resume after the re-check")


def test_an_own_error_is_retried_while_idle_but_not_at_every_hook_run(node):
    failed_before(node, OWN_FAIL, "error", ago=60)
    out = node.run("healthcheck")
    assert "node stays drained" in out.stderr, out.stderr
    assert node.record()["run_id"] == "r-failed" and node.slurm.updates() == []
    failed_before(node, OWN_FAIL, "error", ago=601)  # the guide's "every 10 min"
    out = node.run("healthcheck")
    assert "registration failed for Airlock's own reason" in out.stderr, out.stderr
    wait_for(lambda: (node.record() or {}).get("status") == "done", 60, "the retry")
    assert node.record()["trigger"] == "retry" and node.record()["verdict"] == "pass"
    wait_for(lambda: not drained(node), 60, "the resume after the retry")


def test_the_prolog_never_adopts_a_busy_node_and_its_suite_waits_for_the_job(node):
    """What the prolog sees is a job starting: Slurm shows the node allocated, as the
    HealthCheckProgram sees a node it may adopt. The prolog refuses and isolates instead."""
    node.slurm.set(node.name, state="ALLOCATED", cpu_alloc=4)
    out = node.run("prolog")
    assert out.returncode == 1 and "refused, this boot is not proven: none" in out.stderr
    rec = node.record()
    assert rec["status"] == "running" and rec["trigger"] == "new", rec
    assert node.slurm.node(node.name)["reason"] == "airlock: pending quick check new"
    # The suite it started runs no check while the job runs (README: "The suite waits until
    # Slurm shows the node isolated and idle").
    wait_for(lambda: node.record().get("phase") == "waiting", 30, "the suite waiting")
    suite_log = node.root / "log" / f"registration-{rec['run_id']}.log"
    wait_for(lambda: "waiting before any check: jobs still running" in suite_log.read_text(),
             30, "the suite's reason to wait")
    assert node.record()["status"] == "running"
    assert not (node.root / "state" / "latest.json").exists()  # no check has run
