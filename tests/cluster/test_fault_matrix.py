"""The gate fails closed: one test per fault, each injected for real against real daemons.

No job may start on a boot before its registration passed, whatever breaks: the controller
stops while a node boots, the config is broken or missing at reboot, the state or log directory
cannot be written, the node's record is damaged or copied from another node, the wall clock
steps, slurmctld is away when the suite resumes the node, a hook crashes, or Airlock is
installed on a cluster that is running jobs. And a proven node is never drained for Airlock's
own trouble. Registration runs the quick level here (seconds), except where a slow suite is the
point; tests/cluster/test_registration.py covers the standard level.

Variants: the faults that meet Slurm's version differences (a FUTURE node registering, resume
and the reason left behind, BootTime, the controller's absence at boot) run on all three
releases; the ones that are Airlock's own logic against the node's record, clock, config or
crashes run on 22.05 and 26.05, whose hooks have the most and the least time (60 s; 4 s with
the 5 s interval here: HealthCheckTimeout). The disk test runs on 22.05 only: a chrooted
cluster binds /tmp without its submounts, so the tmpfs it mounts is not in that cluster's
mount namespace (the logic it tests does not depend on the release).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import tomllib

import pytest

from airlock.config import loader as config
from airlock.hooks import gate
from airlock.hooks.common import Hook
from airlock.hooks.healthcheck import SETTLE_S
from airlock.hw import boot as boot_mod
from airlock.records.proof import RUNNING, NodeState, Proof
from airlock.registration import Suite
from airlock.slurm import drains
from tests.cluster.conftest import DEFAULT_VARIANTS, RELEASES

# The clusters of this file run their hooks and suites from a wheel installed in a clean venv
# (tests/cluster/conftest.py), as a site runs them: a module the wheel leaves out fails here.
HOOKS_FROM_WHEEL = True

QUICK = {"registration": {"level": "quick"}}
# A warning passes (a CPU "device" that straggled on these shared cores warns, never drains).
PASSED = ("pass", "warn")


# --- helpers -------------------------------------------------------------------------------------
def state_of(c, name) -> NodeState:
    return NodeState(config.load(c.airlock_conf), name)


def wait_proven(c, name, timeout=90):
    """This boot of name passed its registration and Slurm shows the node back in service."""
    def done():
        rec = state_of(c, name).load()
        n = c.node(name)
        return (rec is not None and rec["status"] == "done" and rec["verdict"] in PASSED
                and not n.drained and n.responding and rec)
    return c.wait(done, timeout, f"{name} proven and in service")


def wait_reason(c, name, prefix, timeout=60):
    return c.wait(lambda: (n := c.node(name)).drained and n.reason.startswith(prefix) and n,
                  timeout, f"{name} drained with {prefix!r}")


def log(c, name, hook="healthcheck") -> str:
    p = c.root / "airlock" / "log" / name / f"{hook}.log"
    return p.read_text() if p.exists() else ""


def epoch(slurm_time: str) -> float:
    return time.mktime(time.strptime(slurm_time, "%Y-%m-%dT%H:%M:%S"))


def wait_job(c, job, state="COMPLETED", timeout=120):
    return c.wait(lambda: (j := c.job(job)).get("JobState") == state and j, timeout,
                  f"job {job} {state}")


def started_after_pass(c, name, job) -> None:
    """Slurm's own record: the job started after this boot's registration passed."""
    rec = state_of(c, name).load()
    assert rec["verdict"] in PASSED, rec
    assert epoch(c.job(job)["StartTime"]) >= int(rec["finished_at"]) - 1, (c.job(job), rec)


def run_hook(c, name, hook="healthcheck", prefix=(), **env):
    """A hook run as slurmd runs it: almost no environment, the dev cluster's marker so that
    anything it starts is found and stopped with the cluster, and the cluster's runtime dir
    as its wrappers give it (the config essentials a hook keeps never go to the host's /run)."""
    e = {"SLURMD_NODENAME": name, "AIRLOCK_CONFIG": str(c.airlock_conf),
         "AIRLOCK_DEVCLUSTER": str(c.root),
         "AIRLOCK_RUNTIME_DIR": str(c.root / "run" / "airlock"), **env}
    return subprocess.run([*prefix, c.python, "-m", f"airlock.hooks.{hook}"], env=e, cwd="/",
                          capture_output=True, text=True, timeout=90)


# --- the controller ------------------------------------------------------------------------------
def slurmd_log(c, name) -> str:
    p = c.root / "log" / f"slurmd-{name}.log"
    return p.read_text(errors="replace") if p.exists() else ""


HOOK_KILLED = ("health_check poll timeout", "health_check killed")


@pytest.mark.slurm_variants(*RELEASES)
def test_controller_down_while_a_node_boots(cluster_factory):
    """slurmctld is down while a new node boots, and the boot-time HealthCheckProgram has only
    the time Slurm gives it: 60 s on 22.05 and 24.11, HealthCheckTimeout=4 on 26.05 (what
    `airlock render` sets below HealthCheckInterval=5). The hook records the boot's suite first
    and spends its Slurm calls within its time: it is never killed, the suite is under way
    before the controller is back, and the job pinned to the node starts only after the
    node's suite passed."""
    c = cluster_factory(nodes=["node1"], future=["node2"], health_interval=5, airlock=QUICK)
    wait_proven(c, "node1")
    job = c.sbatch("sleep 1", "-w", "node2")
    c.stop_controller()
    c.start_node("node2", wait=False)
    # the record of this boot's suite, written by the boot-time hook while no controller answers
    rec = c.wait(lambda: (r := state_of(c, "node2").load()) and r["status"] == "running" and r,
                 30, "node2's suite recorded by its boot hook")
    assert rec["trigger"] == "new" and rec["attempt"] == 1
    seen = time.monotonic()
    # 26.05: the hook ends within its 4 s, its drain left to the suite; 22.05/24.11: it is
    # still waiting for the controller to take the drain (its 60 s are not over)
    c.wait(lambda: "new:" in log(c, "node2") or any(k in slurmd_log(c, "node2")
                                                   for k in HOOK_KILLED) or
           time.monotonic() > seen + 10, 20, "node2's boot hook to end or to wait")
    c.start_controller()
    wait_job(c, job)
    started_after_pass(c, "node2", job)
    assert "new:" in log(c, "node2")
    assert not [k for k in HOOK_KILLED if k in slurmd_log(c, "node2")], slurmd_log(c, "node2")
    assert state_of(c, "node2").load()["run_id"] == rec["run_id"]


@pytest.mark.slurm_variants(*DEFAULT_VARIANTS)
def test_prolog_refuses_jobs_on_a_boot_without_proof(cluster_factory):
    """The second lock alone: no periodic run (interval 1 h), the node's proof is gone (a lost
    state disk), a job arrives: the prolog refuses it, drains the node, starts the suite, and
    the requeued job runs once the suite passed."""
    c = cluster_factory(nodes=["node1"], health_interval=3600, airlock=QUICK)
    wait_proven(c, "node1")
    state_of(c, "node1").path.unlink()
    job = c.sbatch("true", "-w", "node1")
    wait_job(c, job)
    info = c.job(job)
    assert int(info.get("Restarts", 0)) >= 1, info  # refused once, then requeued: not held
    assert "refused, this boot is not proven: none (no record)" in log(c, "node1", "prolog")
    started_after_pass(c, "node1", job)
    assert state_of(c, "node1").load()["trigger"] == "new"


# --- the config ----------------------------------------------------------------------------------
# "typo": a key misspelt in a section only a check reads (issue 25): validated at load, it is
# `FAIL config` like the others; before, it was link_flap's FAIL and drained proven nodes too.
@pytest.mark.parametrize("fault", ["broken", "missing", "typo"])
@pytest.mark.slurm_variants(*RELEASES)
def test_config_fault_at_reboot_fails_closed_and_proven_nodes_keep_working(cluster_factory,
                                                                         fault):
    c = cluster_factory(nodes=["node1", "node2"], airlock=QUICK)
    wait_proven(c, "node1")
    wait_proven(c, "node2")
    good = c.airlock_conf.read_text()
    if fault == "broken":
        c.set_airlock_config(good + "\n[slurm\n")
        problem = "invalid TOML"
    elif fault == "typo":
        c.set_airlock_config(good + "\n[flaps]\nmax_down = 3\n")
        problem = "[flaps] unknown key 'max_down'"
    else:
        c.airlock_conf.unlink()  # the wrapper still names it in $AIRLOCK_CONFIG
        problem = "file not found"
    try:
        c.restart_node("node1", fresh_boot=True)
        n = wait_reason(c, "node1", "airlock: FAIL config ")
        assert str(c.airlock_conf) in n.reason and problem in n.reason
        held = c.sbatch("true", "-w", "node1")
        fine = c.sbatch("true", "-w", "node2")
        wait_job(c, fine)  # node2's boot was proven: a config fault must not drain it
        assert not c.node("node2").drained
        errors = json.loads((c.root / "airlock" / "state" / "node2" / "errors.json").read_text())
        assert errors["prolog"]["message"].startswith("fail open: config ")
        time.sleep(3)
        assert c.job(held)["JobState"] == "PENDING" and c.node("node1").drained
    finally:
        c.set_airlock_config(good)
    wait_job(c, held)
    started_after_pass(c, "node1", held)
    assert state_of(c, "node1").load()["trigger"] == "boot"


# --- the disks -----------------------------------------------------------------------------------
@pytest.fixture
def tiny_fs(tmp_path):
    """A 512 KiB tmpfs: fill it, or make it read-only, for real."""
    mounted = []

    def make(path):
        path.mkdir(parents=True, exist_ok=True)
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=512k,mode=0755", "tmpfs",
                        str(path)], check=True)
        mounted.append(path)
        return path

    yield make
    for path in reversed(mounted):
        subprocess.run(["umount", "-l", str(path)], check=False)


def fill(path) -> None:
    subprocess.run(["dd", "if=/dev/zero", f"of={path}/filler", "bs=4k"], capture_output=True)


@pytest.mark.slurm_variants("22.05")
def test_full_or_read_only_state_dir(cluster_factory, tiny_fs):
    c = cluster_factory(start=False, nodes=["node1"], airlock=QUICK)
    c.write_files()
    state = tiny_fs(c.root / "airlock" / "state" / "node1")
    c.start()
    wait_proven(c, "node1")
    good = c.airlock_conf.read_text()
    fill(state)
    # A proven node whose disk check fails is drained although no result can be stored.
    c.set_airlock_config(good + f'\n[system]\ndisk_paths = ["{state}"]\n')
    wait_reason(c, "node1", "airlock: FAIL disk ")
    assert "results not stored" in log(c, "node1")
    c.set_airlock_config(good)
    # A new boot on a full state_dir cannot be recorded, so it stays closed, naming the path...
    c.restart_node("node1", fresh_boot=True)
    n = wait_reason(c, "node1", f"airlock: FAIL state_dir {state}: No space left on device")
    job = c.sbatch("true", "-w", "node1")
    time.sleep(3)
    assert c.job(job)["JobState"] == "PENDING" and c.node("node1").reason == n.reason
    # ...until there is room again: the next hook run checks the node and resumes it.
    os.unlink(state / "filler")
    wait_job(c, job)
    started_after_pass(c, "node1", job)
    # Read-only: the same. (A remount is made before the reboot: each dev-cluster boot has a
    # mount namespace of its own, which does not see the host's later remounts.)
    subprocess.run(["mount", "-o", "remount,ro", str(state)], check=True)
    c.restart_node("node1", fresh_boot=True)
    wait_reason(c, "node1", f"airlock: FAIL state_dir {state}: Read-only file system")


@pytest.mark.slurm_variants(*DEFAULT_VARIANTS)
def test_unwritable_log_dir_fails_closed(cluster_factory):
    c = cluster_factory(start=False, nodes=["node1"], airlock=QUICK)
    c.write_files()
    logs = c.root / "airlock" / "log" / "node1"
    logs.parent.mkdir(parents=True, exist_ok=True)
    logs.write_text("a file where the node's log directory should be\n")
    c.start()
    n = wait_reason(c, "node1", f"airlock: FAIL log_dir {logs}: ")
    job = c.sbatch("true", "-w", "node1")
    time.sleep(3)
    assert c.job(job)["JobState"] == "PENDING"
    logs.unlink()
    wait_job(c, job)
    started_after_pass(c, "node1", job)
    assert n.reason.endswith(("File exists", "Not a directory"))


# --- the record ----------------------------------------------------------------------------------
@pytest.mark.slurm_variants(*DEFAULT_VARIANTS)
def test_damaged_or_copied_record_is_no_proof(cluster_factory):
    c = cluster_factory(nodes=["node1", "node2"], airlock=QUICK)
    first1 = wait_proven(c, "node1")
    first2 = wait_proven(c, "node2")
    s1, s2 = state_of(c, "node1"), state_of(c, "node2")
    shutil.copy(s1.path, s2.path)  # node1's record, copied onto node2 (same kernel here)
    s1.path.write_text('{"boot_time": null}')  # node1's record, damaged
    again1 = c.wait(lambda: (r := s1.load()) and r["run_id"] != first1["run_id"] and r, 60,
                    "node1 checked again")
    again2 = c.wait(lambda: (r := s2.load()) and r["run_id"] != first2["run_id"] and
                    r["node"] == "node2" and r, 60, "node2 checked again")
    assert again1["trigger"] == "record" and again2["trigger"] == "record"
    # (A hook writes its log line when it ends, after it started the suite.)
    c.wait(lambda: "schema None" in log(c, "node1"), 30, "node1's hook saying why")
    c.wait(lambda: "record is for node 'node1'" in log(c, "node2"), 30, "node2's hook saying why")
    wait_proven(c, "node1")
    wait_proven(c, "node2")


# One release: the step is read by Airlock alone (boot identity is boot_id and CLOCK_BOOTTIME,
# the proof's age its uptime) and the stepped runs make no Slurm call, so no release differs;
# the test is 90 s of waiting for the settle window, which CI's 30 minutes pay once.
@pytest.mark.slurm_variants("22.05")
def test_wall_clock_step_is_not_a_reboot(cluster_factory):
    """chrony steps the clock 45 s on a busy, proven node: no drain, no suite over the job."""
    if shutil.which("faketime") is None:
        pytest.fail("faketime is needed (scripts/setup.sh installs it)")
    c = cluster_factory(nodes=["node1"], health_interval=3600, airlock=QUICK)
    proof = wait_proven(c, "node1")
    # Until SETTLE_S after the pass a hook still reads Slurm once (settle_claim); settled here,
    # on the real clock, so the stepped runs below are the pass path alone. (Under faketime
    # with a real monotonic clock, libfaketime 0.9.10 makes every Python time.sleep fail with
    # EINVAL, which a Slurm call's wait for its child can hit.)
    settled_at = float(proof["finished_uptime"]) + SETTLE_S + 1
    c.wait(lambda: time.clock_gettime(time.CLOCK_BOOTTIME) >= settled_at, SETTLE_S + 30,
           "the proof old enough to settle")
    settle = run_hook(c, "node1")
    assert settle.returncode == 0, settle.stderr
    job = c.sbatch("sleep 30", "-w", "node1")
    wait_job(c, job, "RUNNING", 30)
    for step in ("+45s", "-45s"):
        out = run_hook(c, "node1", prefix=("faketime", "-f", step),
                       FAKETIME_DONT_FAKE_MONOTONIC="1")
        assert out.returncode == 0, out.stderr
        # (a warn is dmesg under faketime's preload, not the node)
        assert "healthcheck: quick pass" in out.stderr or "healthcheck: quick warn" in \
            out.stderr, out.stderr
    assert state_of(c, "node1").load()["run_id"] == proof["run_id"]
    n = c.node("node1")
    assert not n.drained and n.state in ("ALLOCATED", "MIXED")
    assert c.job(job)["JobState"] == "RUNNING"


# --- slurmctld away at the end of the suite ------------------------------------------------------
@pytest.mark.slurm_variants(*RELEASES)
def test_resume_that_fails_once_is_retried_by_the_next_hook(cluster_factory):
    # (A registered node, rebooted: slurmctld forgets that a FUTURE node registered when it
    # restarts, and would not ask it for health checks until it registers again.)
    c = cluster_factory(nodes=["node1", "node2"],
                        airlock={"registration": {"level": "standard", "slurm_retry": 2}})
    first = wait_proven(c, "node2", timeout=180)
    c.restart_node("node2", fresh_boot=True, wait=False)
    state = state_of(c, "node2")
    c.wait(lambda: (r := state.load()) and r["run_id"] != first["run_id"] and
           r.get("phase") == "checking", 60, "node2's new suite past its isolation check")
    c.stop_controller()
    # The suite records its verdict first, the resume pending, then tries Slurm for
    # slurm_retry seconds, and says when it gives up. (Its process is not watched from here:
    # in the node's time namespace its start time reads differently.)
    rec = c.wait(lambda: (r := state.load()) and r["status"] == "done" and r, 240,
                 "node2's suite done while slurmctld is away")
    suite_log = c.root / "airlock" / "log" / "node2" / f"registration-{rec['run_id']}.log"
    c.wait(lambda: "left to the next hook run" in suite_log.read_text(), 120,
           "node2's suite given up on Slurm")
    rec = state.load()
    assert rec["verdict"] in PASSED and rec["slurm_pending"] == "resume", rec
    c.start_controller()
    wait_proven(c, "node2", timeout=90)
    c.wait(lambda: state.load()["slurm_pending"] == "", 30, "the record settled")
    # Made by whichever comes first: the next hook run, or the finished suite, which keeps
    # trying in the background (with HealthCheckInterval=0 no hook would run again). A
    # registered FUTURE node that re-registers with the restarted slurmctld may come back
    # without its drain (seen on 22.05: UNKNOWN+DRAIN, then IDLE): the hook then finds nothing
    # to resume, which is as right, since the boot is proven.
    hook, suite = log(c, "node2"), suite_log.read_text()
    assert re.search(r"pending resume: (resumed|not drained)", hook) or \
        "the Slurm update left pending is made" in suite, (hook, suite)


@pytest.mark.slurm_variants(*DEFAULT_VARIANTS)
def test_controller_gone_during_the_checks_is_not_the_node_s_failure(cluster_factory):
    """slurmctld goes away after the suite confirmed isolation: gpu_count still compares the
    GRES, as Slurm showed it then, and passes (a CI run had drained a healthy node
    "FAIL gpu_count Slurm GRES unreadable", a failure recovery would act on)."""
    c = cluster_factory(nodes=["node1"], health_interval=3600, airlock=QUICK)
    wait_proven(c, "node1")
    raw = tomllib.loads(c.airlock_conf.read_text())
    cfg = config.from_dict({**raw, "registration": {"level": "standard"}})
    suite = Suite(cfg, "node1", "test-run", "test")
    suite.state.start("test-run", boot_mod.current("node1"), os.getpid(), "standard", "test")
    drains.isolate(suite.slurm, "node1", "standard", "test")
    suite.wait_for_isolation()
    assert suite.seen is not None and suite.seen.drained
    c.stop_controller()
    records, _ = suite.check(only=["gpu_count"])
    assert records[0]["verdict"] == "pass", records
    assert "gres" in records[0]["figures"] or not suite.seen.gres, records


# --- a hook and the suite at the same moment -----------------------------------------------------
@pytest.mark.slurm_variants(*RELEASES)
def test_a_hook_that_saw_the_suite_running_never_undoes_its_pass(cluster_factory):
    """The race a CI run caught: a hook read node.json while the suite ran; the suite then
    recorded its pass, resumed the node and exited; the hook, acting on what it had read, drained
    the node again ("pending ... new" on a proven boot, for good) or called the suite dead and
    overwrote its pass. Here the hook's view is made stale on purpose, both ways: the suite
    still alive (a hold) and gone (a dead suite)."""
    c = cluster_factory(nodes=["node1"], health_interval=3600, airlock=QUICK)
    state = state_of(c, "node1")
    wait_proven(c, "node1")
    done = c.wait(lambda: (r := state.load()) and r["slurm_pending"] == "" and r, 30,
                  "node1's suite settled")
    # The record as a hook read it while the suite ran (a quick suite can run and pass within
    # one poll of this test, so the view is rebuilt from the final record, not caught).
    running = {k: v for k, v in done.items()
               if k not in ("finished_at", "finished_uptime", "detail", "reason", "error")}
    running.update(status="running", verdict=None, phase="checking")
    c.wait(lambda: not boot_mod.alive(done["pid"], done["pid_start"]), 30, "node1's suite exited")

    def stale_hook(record, name="healthcheck"):
        hook = Hook(name, "node1")
        hook.cfg = config.load(c.airlock_conf)
        hook.now = boot_mod.current("node1")
        hook.proof = Proof(RUNNING, "", record)
        return hook

    dead = gate.watch(stale_hook(running))
    live = {**running, "pid": os.getpid(), "pid_start": boot_mod.process_start(os.getpid())}
    # A live suite in time: the periodic hook leaves its drain to it and asks Slurm nothing;
    # the prolog (a job reached the node) holds, reading the record again before it drains.
    watched = gate.watch(stale_hook(live))
    alive = gate.watch(stale_hook(live, "prolog"))
    assert "the suite ended meanwhile (pass)" in dead, dead
    assert "the suite keeps its drain" in watched, watched
    assert "left alone: the suite ended meanwhile (pass)" in alive, alive
    n = c.node("node1")
    assert not n.drained, n
    assert state.load() == done  # the pass stands, unchanged


# --- hooks that crash ----------------------------------------------------------------------------
@pytest.mark.slurm_variants(*DEFAULT_VARIANTS)
def test_hook_exceptions_close_unproven_boots_and_stay_visible_on_proven_ones(cluster_factory):
    c = cluster_factory(nodes=["node1"], future=["node2"], airlock=QUICK)
    wait_proven(c, "node1")
    # Unproven: the boot-time hook crashes: drained, the job waits.
    c.set_node_sim("node2", faults={"hook_crash": "healthcheck"})
    c.start_node("node2", wait=False)
    n = wait_reason(c, "node2", "airlock: FAIL healthcheck RuntimeError hooks/common.py:")
    assert "injected failure (hook_crash=healthcheck)" in n.reason
    job2 = c.sbatch("true", "-w", "node2")
    # Proven: a crashing prolog lets the job run; a crashing epilog does not drain.
    for hook in ("prolog", "epilog"):
        c.set_node_sim("node1", faults={"hook_crash": hook})
        job = c.sbatch("true", "-w", "node1")
        wait_job(c, job)
        assert not c.node("node1").drained
        errors = json.loads((c.root / "airlock" / "state" / "node1" / "errors.json")
                            .read_text())
        assert errors[hook]["message"].startswith(f"fail open: {hook} RuntimeError")
    out = subprocess.run([sys.executable, "-m", "airlock.cli", "status", "--json"],
                         env=c.env(), capture_output=True, text=True, timeout=60)
    row = next(r for r in json.loads(out.stdout)["nodes"] if r["node"] == "node1")
    # the epilog's error shows; the prolog's was cleared by the later prolog run that worked
    assert set(row["errors"]) == {"epilog"}, row
    assert c.job(job2)["JobState"] == "PENDING"
    c.set_node_sim("node2", faults={})  # fixed: the next hook run checks it and resumes it
    wait_job(c, job2)
    started_after_pass(c, "node2", job2)


# --- installing Airlock on a running cluster -----------------------------------------------------
@pytest.mark.slurm_variants(*RELEASES)
def test_install_on_a_running_cluster_adopts_busy_nodes(cluster_factory):
    c = cluster_factory(nodes=["node1", "node2"],
                        airlock={"registration": {"enabled": False, "level": "standard"}})
    c.wait(lambda: all(not n.drained and n.responding for n in c.slurm.nodes(["node1", "node2"])),
           60, "nodes up without the gate")
    long_job = c.sbatch("sleep 25", "-w", "node1")
    c.wait(lambda: f"job {long_job}: quick pass" in log(c, "node1", "prolog"), 30,
           "the job's prolog done (the job is RUNNING while its prolog runs)")
    # "Install": the gate is switched on in airlock.toml; no node has a record yet.
    c.set_airlock_config(c.airlock_conf.read_text().replace("enabled = false",
                                                                  "enabled = true"))
    s1 = state_of(c, "node1")
    rec = c.wait(lambda: s1.load(), 30, "node1 seen by the gate")
    assert rec["status"] == "adopted" and rec["trigger"] == "adopt", rec
    c.wait(lambda: "adopted: first seen running jobs" in log(c, "node1"), 15, "the hook's line")
    wait_proven(c, "node2", timeout=180)  # idle: isolated and checked at once
    # node1 runs its job undisturbed: never drained, and no suite while the job runs.
    while c.job(long_job)["JobState"] == "RUNNING":
        assert not c.node("node1").drained
        assert s1.load()["status"] == "adopted"
        time.sleep(0.5)
    wait_job(c, long_job)
    ended = epoch(c.job(long_job)["EndTime"])
    rec = wait_proven(c, "node1", timeout=240)  # then checked once idle
    assert rec["trigger"] == "adopt"
    run = json.loads((s1.path.parent / "latest-standard.json").read_text())
    assert run["started_at"] >= ended - 1, (run["started_at"], ended)
