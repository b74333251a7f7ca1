"""A wall clock stepped backwards by an hour (chrony, an admin, a wrong NTP server) is not a
reboot: the hooks run with their wall clock an hour off and the kernel's boot clock untouched,
as slurmd runs them, against a fake Slurm. A boot is its kernel boot_id and its boot clock, so a
proven boot stays proven and a running suite is neither late nor dead.

The proven pass paths run under faketime (the wall clock moved in libc); paths that wait on a
subprocess run with Python's wall clock shifted instead (tests/unit/fakenode.py STEPPED says
why: under libfaketime 0.9.10 every time.sleep fails)."""

from __future__ import annotations

import shutil

import pytest

from airlock.dev.cluster import healthy_gpus
from airlock.hw import boot as boot_mod

FAKETIME = shutil.which("faketime")


def stepped(hours: int) -> tuple[str, ...]:
    if FAKETIME is None:
        pytest.fail("faketime is needed (scripts/setup.sh installs it)")
    return (FAKETIME, "-f", f"{hours:+d}h")


# Only the wall clock moves: the boot clock and CLOCK_MONOTONIC are the kernel's.
REAL_BOOT_CLOCK = {"FAKETIME_DONT_FAKE_MONOTONIC": "1"}


@pytest.mark.parametrize("hours", [-1, +1])
def test_a_proven_boot_stays_proven_when_the_clock_steps(fake_node, hours):
    node = fake_node()
    proof = node.prove(settled=True)
    for hook in ("healthcheck", "prolog"):
        out = node.run(hook, prefix=stepped(hours), **REAL_BOOT_CLOCK)
        assert out.returncode == 0, out.stderr
        assert f"{hook} job 9: quick" in out.stderr or f"{hook}: quick" in out.stderr, out.stderr
        assert "quick fail" not in out.stderr and "refused" not in out.stderr, out.stderr
    assert node.record() == proof  # no new run, no suite
    assert node.slurm.calls() == [] and node.processes() == []


def test_a_running_suite_is_neither_late_nor_dead_after_the_clock_steps_back(fake_node):
    node = fake_node(faults={"hang_check": "nvml"},
                     extra='[registration]\nlevel = "quick"\nsuite_timeout = 60\n')
    assert node.run("healthcheck").returncode == 0
    rec = node.record()
    assert rec["status"] == "running" and boot_mod.alive(rec["pid"], rec["pid_start"])
    node.slurm.clear_log()
    out = node.run("healthcheck", wall_shift=-3600)
    assert out.returncode == 0, out.stderr
    assert f"registration suite {rec['run_id']} running" in out.stderr, out.stderr
    # alive and in time: the suite keeps its own drain, the hook asks Slurm nothing (issue 25)
    assert "the suite keeps its drain" in out.stderr and not node.calls_by(out), out.stderr
    assert node.record()["run_id"] == rec["run_id"] and node.record()["status"] == "running"
    assert boot_mod.alive(rec["pid"], rec["pid_start"])
    assert node.slurm.updates() == []  # the drain in force was left as it is
    assert node.slurm.node("n1")["reason"] == "airlock: pending quick check new"


def test_a_fatal_xid_during_a_job_is_caught_after_the_clock_stepped_back(fake_node):
    node = fake_node()
    node.prove()
    assert node.run("prolog", job="42").returncode == 0  # the snapshot, by the real clock
    gpus = healthy_gpus(8)
    gpus[2]["xids"] = [{"xid": 79}]  # fell off the bus during the job; NVML dates it when read
    node.set_faults({}, gpus)
    out = node.run("epilog", job="42", wall_shift=-3600)
    assert out.returncode == 0, out.stderr
    reason = node.slurm.node("n1")["reason"]
    assert reason.startswith("airlock: FAIL xid_during_job xid 79 on gpu2"), (reason, out.stderr)


def test_the_epilog_catches_that_xid_without_a_clock_step(fake_node):
    """The control for the test above: the same job and XID, the clock left alone."""
    node = fake_node()
    node.prove()
    assert node.run("prolog", job="42").returncode == 0
    gpus = healthy_gpus(8)
    gpus[2]["xids"] = [{"xid": 79}]
    node.set_faults({}, gpus)
    out = node.run("epilog", job="42")
    assert out.returncode == 0, out.stderr
    assert node.slurm.node("n1")["reason"].startswith("airlock: FAIL xid_during_job xid 79 on "
                                                      "gpu2"), out.stderr
