"""The two locks, without a cluster: the real HealthCheckProgram and prolog, run as slurmd runs
them (a process of their own, SLURMD_NODENAME, no PATH), on a node whose `[slurm] bin_dir` is a
fake 22.05 scontrol that records every call (tests/unit/fakeslurm.py, fakenode.py).

A boot without a proof of its own is never let through, whatever node.json says: missing, a
record of another node (even a passing one), a record of the previous boot (even a passing
one), a damaged file. The prolog refuses the job (exit 1) after draining the node pending its
registration; the HealthCheckProgram drains the node and starts the registration suite. A node
adopted while it ran jobs refuses new jobs until its registration under "when-idle", and lets
them run under "next-reboot".

Each of these fails when a lock is taken out: `if not hook.proven()` -> `if False` in
hooks/prolog.py, or `if hook.proven()` -> `if True` in hooks/healthcheck.py.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from airlock.dev.cluster import healthy_gpus
from airlock.hooks import gate
from airlock.hw import boot as boot_mod
from airlock.records import proof as nodestate
from tests.unit.fakenode import FakeNode, cmdline, wait_for

# The suite stays in its first check, so that the test sees it run (and ends it).
HANG = {"hang_check": "nvml"}


def passing_record(node: str, boot: dict) -> dict:
    return {"schema": nodestate.SCHEMA, "node": node, "boot": boot, "run_id": "r-elsewhere",
            "status": "done", "verdict": "pass", "pid": 1, "pid_start": 1, "level": "quick",
            "trigger": "boot", "attempt": 1, "started_uptime": 1.0, "slurm_pending": ""}


def plant(node: FakeNode, case: str) -> tuple[str, str]:
    """node.json as the case has it; (the trigger the lock must name, why it has no proof)."""
    path = node.state.path
    path.parent.mkdir(parents=True, exist_ok=True)
    now = boot_mod.current(node.name)
    if case == "missing":
        return "new", "no record"
    if case == "other node":
        other = {**now.to_dict(), "node": "n2"}
        path.write_text(json.dumps(passing_record("n2", other)))
        return "record", "record is for node 'n2'"
    if case == "other boot":
        before = {"node": node.name, "id": "0" * 32, "uptime": 12.5}
        path.write_text(json.dumps(passing_record(node.name, before)))
        return "boot", "boot id changed"
    if case == "damaged":
        path.write_text('{"schema": 2, "node": "n1", "boot": ')  # cut off mid-write
        return "record", "unreadable"
    raise ValueError(case)


CASES = ["missing", "other node", "other boot", "damaged"]


def suite_started(node: FakeNode, out) -> dict:
    """The record names a running suite of this boot; its process is the registration suite."""
    rec = node.record()
    assert rec is not None and rec["status"] == "running", (rec, out.stderr)
    assert nodestate.judge(rec, boot_mod.current(node.name)).state == nodestate.RUNNING
    assert boot_mod.alive(rec["pid"], rec["pid_start"]), rec
    argv = cmdline(rec["pid"])
    assert argv[1:5] == ["-m", "airlock.registration", "--node", node.name], argv
    assert argv[argv.index("--run-id") + 1] == rec["run_id"]
    assert f"registration suite {rec['run_id']} pid {rec['pid']}" in out.stderr
    return rec


def drained_pending(node: FakeNode, out, trigger: str) -> None:
    """The hook itself drained the node, pending its registration."""
    reason = f"airlock: pending quick check {trigger}"
    assert [f"nodename={node.name}", "state=drain", f"reason={reason}"] in \
        [c["argv"][2:] for c in node.calls_by(out, "update")], node.slurm.calls()
    n = node.slurm.node(node.name)
    assert "DRAIN" in n["flags"] and n["reason"] == reason, n


@pytest.mark.parametrize("case", CASES)
def test_the_prolog_refuses_a_job_on_a_boot_without_its_own_proof(fake_node, case):
    node = fake_node(faults=HANG)
    trigger, why = plant(node, case)
    out = node.run("prolog")
    assert out.returncode == 1, out.stderr
    assert "refused, this boot is not proven: none (" in out.stderr and why in out.stderr
    drained_pending(node, out, trigger)
    rec = suite_started(node, out)
    assert rec["trigger"] == trigger
    assert node.stop() and not boot_mod.alive(rec["pid"], rec["pid_start"])


@pytest.mark.parametrize("case", CASES)
def test_the_healthcheck_drains_and_starts_the_suite(fake_node, case):
    node = fake_node(faults=HANG)
    trigger, why = plant(node, case)
    out = node.run("healthcheck")
    assert out.returncode == 0, out.stderr
    drained_pending(node, out, trigger)
    rec = suite_started(node, out)
    assert rec["trigger"] == trigger
    if trigger == "record":
        assert why in out.stderr  # the hook says why the record was not this boot's proof
    assert node.stop() and not boot_mod.alive(rec["pid"], rec["pid_start"])


def test_a_job_arriving_on_a_node_adopted_when_idle_is_refused(fake_node):
    node = fake_node(state="ALLOCATED", cpu_alloc=4)  # running jobs, in the boot Slurm saw
    first = node.run("healthcheck")
    assert first.returncode == 0, first.stderr
    assert "adopted: first seen running jobs (ALLOCATED)" in first.stderr
    assert node.record()["status"] == "adopted" and node.slurm.updates() == []  # no drain
    out = node.run("prolog")
    assert out.returncode == 1, out.stderr
    assert "refused, this boot is not proven: adopted" in out.stderr
    drained_pending(node, out, "adopt")
    assert node.slurm.node("n1")["flags"] == ["DRAIN"]  # draining: the running job ends first
    rec = suite_started(node, out)
    assert rec["trigger"] == "adopt"
    # the suite waits for the job to end before any check
    assert node.state.load().get("phase") in (None, "waiting")


def test_a_node_adopted_until_its_next_reboot_runs_jobs(fake_node):
    node = fake_node(state="MIXED", cpu_alloc=2,
                     extra='[registration]\nlevel = "quick"\nadopt = "next-reboot"\n')
    first = node.run("healthcheck")
    assert first.returncode == 0 and "adopted: first seen" in first.stderr, first.stderr
    out = node.run("prolog")
    assert out.returncode == 0, out.stderr
    assert "quick pass" in out.stderr
    assert node.calls_by(out) == []  # the proven pass path asks Slurm nothing
    assert node.slurm.updates() == [] and node.processes() == []
    # and the HealthCheckProgram treats the adopted boot as proven too: no drain, no suite
    again = node.run("healthcheck")
    assert again.returncode == 0 and "quick pass" in again.stderr, again.stderr
    assert node.slurm.updates() == [] and node.processes() == []


def test_the_proven_pass_paths_ask_slurm_nothing(fake_node):
    """The other side of the locks: a boot with its own passing registration."""
    node = fake_node()
    node.prove(settled=True)
    for hook in ("healthcheck", "prolog"):
        out = node.run(hook)
        assert out.returncode == 0 and "quick pass" in out.stderr, out.stderr
    assert node.slurm.calls() == [] and node.processes() == []


# --- issue 17 items the fake makes cheap to hold ----------------------------------------------
def test_a_failing_prolog_whose_drain_fails_still_refuses_the_job(fake_node):
    node = fake_node()
    node.prove()
    gpus = healthy_gpus(8)
    gpus[3]["lost"] = True
    node.set_faults({}, gpus)
    node.slurm.fail("update")  # slurmctld refuses (or never answers) the drain
    out = node.run("prolog")
    (tried,) = node.calls_by(out, "update")
    assert tried["argv"][4].startswith("reason=airlock: FAIL gpu_lost gpu3"), tried
    assert out.returncode != 0, out.stderr  # Slurm's own prolog-failure drain then holds it


def test_a_suite_recorded_without_its_start_time_is_never_killed_by_pid_alone(fake_node):
    node = fake_node()
    # Someone else's process now holds the PID the record names (the suite is long gone).
    stranger = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"],
                                start_new_session=True,
                                env={**node.env("healthcheck"), "PATH": "/usr/bin:/bin"})
    try:
        start = wait_for(lambda: boot_mod.process_start(stranger.pid), 10, "the stranger")
        node.state.start("r-old", boot_mod.current("n1"), stranger.pid, "quick", "boot")
        with node.state._locked():
            data = node.record()
            data.update(pid_start=None, phase="checking",
                        started_uptime=round(boot_mod.uptime() - 1800 - gate.GRACE_S - 60, 3))
            node.state.save(data)
        out = node.run("healthcheck")
        assert out.returncode == 0, out.stderr
        assert boot_mod.alive(stranger.pid, start), "the stranger's process group was killed"
    finally:
        stranger.kill()
        stranger.wait()
