"""The gate's pure parts: boot identity, the proof record, the drain policy, the failure policy
of the hooks, and the stuck view. What crosses Slurm is in tests/cluster/test_fault_matrix.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from airlock.config import loader as config
from airlock.errors import ConfigError, OwnError, where
from airlock.hooks import common
from airlock.hw import boot
from airlock.records import proof as nodestate
from airlock.slurm import drains, reasons
from airlock.slurm.client import Node
from airlock.status import collect as status

NOW = boot.Boot("n1", "id-1", 500.0)


def record(**over):
    base = {"schema": 2, "node": "n1", "boot": {"node": "n1", "id": "id-1", "uptime": 100.0},
            "run_id": "r1", "status": "done", "verdict": "pass", "pid": 10, "pid_start": 5,
            "level": "standard", "trigger": "boot", "attempt": 1, "started_uptime": 100.0}
    base.update(over)
    return base


# --- boot identity --------------------------------------------------------------------------------
def test_this_boot_is_read_from_the_kernel():
    b = boot.current("n1")
    assert len(b.boot_id) >= 32 and b.uptime > 0 and b.node == "n1"
    assert boot.same_boot(b.to_dict(), boot.current("n1")) == (True, "")


@pytest.mark.parametrize("recorded, why", [
    ({"node": "n2", "id": "id-1", "uptime": 1.0}, "record is for node 'n2'"),
    ({"node": "n1", "id": "id-0", "uptime": 1.0}, "boot id changed"),
    ({"node": "n1", "id": "id-1", "uptime": 900.0}, "boot clock restarted"),
    ({"node": "n1", "id": "id-1", "uptime": None}, "no boot clock recorded"),
    (None, "no boot recorded"),
])
def test_another_boot_is_never_this_one(recorded, why):
    assert boot.same_boot(recorded, NOW) == (False, why)


@pytest.mark.parametrize("step", [45.0, -45.0, -3600.0])
def test_a_wall_clock_step_does_not_change_the_boot(monkeypatch, step):
    b = boot.current("n1")
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() + step)  # chrony steps the clock
    assert boot.same_boot(b.to_dict(), boot.current("n1")) == (True, "")


def test_process_identity_survives_pid_reuse():
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        start = boot.process_start(proc.pid)
        assert boot.alive(proc.pid, start)
        assert not boot.alive(proc.pid, start + 1)  # another process with the same PID
    finally:
        proc.kill()
        proc.wait()
    assert not boot.alive(proc.pid, start)
    assert not boot.alive(True, None) and not boot.alive(-1, None)


# --- the proof record -------------------------------------------------------------------------
@pytest.mark.parametrize("rec, state", [
    (record(), nodestate.PROVEN),
    (record(verdict="warn"), nodestate.PROVEN),
    (record(verdict="fail"), nodestate.FAILED),
    (record(verdict="error"), nodestate.FAILED),
    (record(status="running", verdict=None), nodestate.RUNNING),
    (record(status="adopted", verdict=None), nodestate.ADOPTED),
    (record(boot={"node": "n1", "id": "id-0", "uptime": 1.0}), nodestate.NONE),
    (record(node="n2", boot={"node": "n2", "id": "id-1", "uptime": 1.0}), nodestate.NONE),
])
def test_judge(rec, state):
    assert nodestate.validate(rec) == ""
    assert nodestate.judge(rec, NOW).state == state


@pytest.mark.parametrize("damage, problem", [
    ({"boot_time": None}, "schema None"),
    ({"schema": 2, "boot": None}, "boot: None"),
    ({"verdict": "maybe"}, "verdict 'maybe'"),
    ({"status": "done?"}, "status 'done?'"),
    ({"pid": "10"}, "pid: '10'"),
    ({"attempt": True}, "attempt: True"),
    ({"slurm_pending": "reboot"}, "slurm_pending 'reboot'"),
])
def test_a_damaged_record_is_never_a_proof(tmp_path, damage, problem):
    cfg = config.from_dict({"state_dir": str(tmp_path)})
    state = nodestate.NodeState(cfg, "n1")
    rec = {"boot_time": None} if "boot_time" in damage else {**record(), **damage}
    state.path.parent.mkdir(parents=True, exist_ok=True)
    state.path.write_text(json.dumps(rec))
    got, why = state.load_checked()
    assert got is None and problem in why
    proof = state.proof(NOW)
    assert proof.state == nodestate.NONE and problem in proof.why
    state.path.write_text("{not json")
    assert state.proof(NOW).why.endswith("unreadable (Expecting property name enclosed in "
                                         "double quotes: line 1 column 2 (char 1))")


def test_finish_never_overwrites_a_newer_run(tmp_path):
    cfg = config.from_dict({"state_dir": str(tmp_path)})
    state = nodestate.NodeState(cfg, "n1")
    state.start("new", boot.current("n1"), os.getpid(), "standard", "boot")
    assert not state.finish("old", "pass")
    assert state.load()["status"] == "running"
    assert state.finish("new", "fail", slurm_pending="fail", reason="airlock: FAIL x y")
    rec = state.load()
    assert rec["verdict"] == "fail" and rec["slurm_pending"] == "fail"
    state.settle("new")
    assert state.load()["slurm_pending"] == ""


def test_a_verdict_is_written_once(tmp_path):
    """A hook that thought the suite dead or late never overwrites the verdict it wrote."""
    state = nodestate.NodeState(config.from_dict({"state_dir": str(tmp_path)}), "n1")
    state.start("r", boot.current("n1"), os.getpid(), "standard", "boot")
    assert state.finish("r", "pass", slurm_pending="resume")
    before = state.load()
    assert not state.finish("r", "error", error="suite died without a verdict")
    assert not state.finish("r", "fail", error="suite timeout after 400s")
    state.phase("r", "checking")
    state.set_process("r", 1)
    assert state.load() == before


def _phases(state_dir: str, n: int) -> None:
    state = nodestate.NodeState(config.from_dict({"state_dir": state_dir}), "n1")
    for i in range(n):
        state.phase("r", "checking" if i % 2 else "waiting")


def test_writers_of_one_record_never_lose_each_others_changes(tmp_path):
    """Other processes rewrite the record (the suite's phase, a hook's pid) while the verdict
    is written: each read-change-write holds the record's lock, so the verdict survives. Without
    the lock one of the rewrites that read "running" before the verdict lands after it."""
    import multiprocessing

    state = nodestate.NodeState(config.from_dict({"state_dir": str(tmp_path)}), "n1")
    lost = 0
    for _ in range(5):
        state.start("r", boot.current("n1"), os.getpid(), "standard", "boot")
        ctx = multiprocessing.get_context("fork")
        procs = [ctx.Process(target=_phases, args=(str(tmp_path), 150)) for _ in range(3)]
        for p in procs:
            p.start()
        time.sleep(0.05)
        assert state.finish("r", "pass")
        for p in procs:
            p.join(30)
        rec = state.load()
        lost += rec["status"] != "done" or rec["verdict"] != "pass"
    assert lost == 0


# --- the drain policy -------------------------------------------------------------------------
def node(state="IDLE", flags=(), reason=""):
    return Node("n1", state, frozenset(flags), reason)


@pytest.mark.parametrize("n, kept", [
    (node(flags={"DRAIN"}, reason="airlock: FAIL gpu_count 7 GPUs"), "earlier failure"),
    (node(flags={"DRAIN"}, reason="airlock: recover reboot r1"), "recovery in progress"),
    (node(flags={"DRAIN"}, reason="airlock: FAIL config /x: invalid TOML"), ""),
    (node(flags={"DRAIN"}, reason="airlock: pending standard check boot"), ""),
    # Slurm 24.11 without accounting keeps the reason after a resume: history, not a claim
    (node(reason="airlock: FAIL row_remap gpu0 row remap failed"), ""),
    (node(), ""),
])
def test_which_claims_a_new_failure_keeps(n, kept):
    assert drains.keeps(n.claim) == kept


@pytest.mark.parametrize("n, ok", [
    (node(flags={"DRAIN"}, reason="airlock: pending standard check new"), True),
    (node(flags={"DRAIN"}, reason="airlock: checking standard boot"), True),
    (node(flags={"DRAIN"}, reason="airlock: FAIL suite could not confirm isolation"), True),
    (node(flags={"DRAIN"}, reason="airlock: FAIL burnin cuda:3 12 mismatches"), False),
    (node(flags={"DRAIN"}, reason="disk swap"), False),
    (node(reason="airlock: pending standard check new"), False),  # not drained: nothing to do
])
def test_what_a_pass_may_resume(n, ok):
    assert drains.releasable(n.claim) is ok


def test_unclaimed_drains_are_taken_back():
    assert drains.unclaimed(node())
    assert drains.unclaimed(node(flags={"DRAIN"}))  # a FUTURE node lost its reason on 22.05
    assert not drains.unclaimed(node(flags={"DRAIN"}, reason="ops: hold"))


# --- the hooks' failure policy ----------------------------------------------------------------
def test_errors_are_named_for_a_one_line_reason():
    hook = common.Hook("healthcheck", "n1")
    assert common.describe(hook, ConfigError("config /etc/a.toml: invalid TOML: x")) == (
        "config", "/etc/a.toml: invalid TOML: x")
    assert common.describe(hook, OwnError("state_dir", "/var/lib/a: Read-only file system")) \
        == ("state_dir", "/var/lib/a: Read-only file system")
    try:
        {}["missing"]
    except KeyError as exc:
        subject, detail = common.describe(hook, exc)
        assert subject == "healthcheck" and detail.startswith("KeyError unit/test_gate.py:")
        assert where(exc).startswith("unit/test_gate.py:")
    text = reasons.failure(*common.describe(hook, ValueError("x\ny"))).format()
    assert "\n" not in text and text.startswith("airlock: FAIL healthcheck ValueError")


def _hook(fake_node, conf_text, *, prove, hook="prolog", faults=""):
    """The hook as slurmd runs it, on a node whose config (valid when proven, if proven) then
    gets conf_text appended, against a fake Slurm."""
    node = fake_node(faults={"hook_crash": faults} if faults else {})
    if prove:
        node.prove()
    node.write_config(conf_text)
    out = node.run(hook)
    errors = node.root / "state" / "errors.json"
    return out, (json.loads(errors.read_text()) if errors.exists() else {}), node


@pytest.mark.parametrize("broken", ["[slurm\n", "[nvml]\ntimeout = 'soon'\n"])
def test_broken_config_refuses_the_job_on_an_unproven_boot(fake_node, broken):
    out, errors, node = _hook(fake_node, broken, prove=False)
    assert out.returncode == 1, out.stderr
    assert "Traceback" not in out.stderr
    assert "failing closed: config" in out.stderr and "; drained" in out.stderr, out.stderr
    assert errors["prolog"]["message"].startswith("fail closed: config ")
    # the config's own [slurm] bin_dir is salvaged from the broken file: the drain lands there
    assert node.slurm.node("n1")["reason"].startswith("airlock: FAIL config "), node.slurm.calls()
    assert node.processes() == []  # no suite: its config does not load either


@pytest.mark.parametrize("broken", ["[slurm\n", "[prolog]\nbudget = 'soon'\n"])
def test_broken_config_lets_the_job_run_on_a_proven_boot_and_says_so(fake_node, broken):
    out, errors, node = _hook(fake_node, broken, prove=True)
    assert out.returncode == 0, out.stderr
    assert "failing open" in out.stderr and "Traceback" not in out.stderr
    assert errors["prolog"]["message"].startswith("fail open: config ")
    assert node.slurm.calls() == []  # fail open: no drain, not even a look


def test_a_section_the_node_does_not_use_is_validated_too(fake_node):
    """The config is validated whole at load (issue 25): a typo in [recovery] is a config error
    on a compute node too, failing open on a proven boot."""
    out, errors, node = _hook(fake_node, "[recovery]\npoll_intervall = 3\n", prove=True)
    assert out.returncode == 0 and "failing open" in out.stderr, out.stderr
    assert "poll_intervall" in errors["prolog"]["message"]
    assert node.slurm.calls() == []


@pytest.mark.parametrize("hook, proven, rc, verdict", [
    ("prolog", True, 0, "fail open"), ("prolog", False, 1, "fail closed"),
    ("epilog", True, 0, "fail open"), ("healthcheck", True, 1, "fail open"),
])
def test_an_exception_in_a_hook_follows_the_policy(fake_node, hook, proven, rc, verdict):
    out, errors, node = _hook(fake_node, "", prove=proven, hook=hook, faults=hook)
    assert out.returncode == rc, out.stderr
    assert "Traceback" not in out.stderr and "RuntimeError" in out.stderr
    assert errors[hook]["message"].startswith(f"{verdict}: {hook} RuntimeError hooks/common.py:")
    drained = node.slurm.node("n1")["reason"]
    if proven:
        assert drained == "" and node.slurm.updates() == []
    else:
        assert drained.startswith(f"airlock: FAIL {hook} RuntimeError hooks/common.py:")


def test_a_working_run_clears_the_recorded_error(fake_node):
    _out, _errors, node = _hook(fake_node, "[slurm\n", prove=True)
    node.write_config("")  # fixed; the proof from before stays
    out = node.run("prolog")
    errors = json.loads((node.root / "state" / "errors.json").read_text())
    assert out.returncode == 0 and errors == {}


# --- stuck, as the controller sees it ----------------------------------------------------------
def test_stuck_needs_an_old_claim_and_no_job_left():
    old = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(time.time() - 3600))
    fresh = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime())
    held = Node("n1", "IDLE", frozenset({"DRAIN"}), "airlock: pending standard check boot",
                reason_time=old)
    assert status.stuck(held, 1800).startswith("pending for 60 min")
    assert status.stuck(Node("n1", "IDLE", frozenset({"DRAIN"}), held.reason,
                             reason_time=fresh), 1800) == ""
    busy = Node("n1", "MIXED", frozenset({"DRAIN"}), held.reason, reason_time=old)
    assert status.stuck(busy, 1800) == ""  # waiting for its jobs to end is not stuck
    failed = Node("n1", "IDLE", frozenset({"DRAIN"}), "airlock: FAIL gpu_count 7",
                  reason_time=old)
    assert status.stuck(failed, 1800) == ""


# --- the lifecycle's numbers (issue 25 item 11: mutations no test caught) -----------------------
def test_a_verdict_is_timed_on_the_boot_clock(tmp_path):
    """finished_uptime is what the settle window and the own-error retry count from, against
    the boot clock: a wall-clock stamp (about 1.8e9) would keep the window open for ever."""
    state = nodestate.NodeState(config.from_dict({"state_dir": str(tmp_path)}), "n1")
    state.start("r", boot.current("n1"), os.getpid(), "standard", "boot")
    before = boot.uptime()
    assert state.finish("r", "pass")
    finished = state.load()["finished_uptime"]
    assert before - 0.01 <= finished <= boot.uptime(), finished


def test_adoption_needs_slurms_boot_time_of_this_boot():
    """A BootTime from the previous boot means Slurm's view of the node's jobs is from before
    the reboot: no adoption. Within two minutes of this boot's start is this boot (slurmd
    computes BootTime from the wall clock and the uptime: a second or so of play)."""
    from airlock.hooks import gate

    now = boot.Boot("n1", "id-1", 4000.0)
    ours = time.time() - now.uptime

    def stamp(epoch: float) -> str:
        return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(epoch))

    assert gate.slurm_saw_boot(stamp(ours + 1), now)
    assert gate.slurm_saw_boot(stamp(ours - 60), now)
    for earlier in (600.0, 3600.0, 86400.0, 20 * 86400.0):  # a previous boot
        assert not gate.slurm_saw_boot(stamp(ours - earlier), now), earlier
    assert not gate.slurm_saw_boot("", now) and not gate.slurm_saw_boot("Unknown", now)


def test_a_busy_node_whose_boot_slurm_has_not_seen_is_isolated_not_adopted(fake_node):
    """The same, through the HealthCheckProgram: Slurm's BootTime is an hour before this boot
    (it has not seen the node register since the reboot), so its jobs are stale news."""
    from tests.unit.fakeslurm import this_boot_time

    previous = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(
        time.mktime(time.strptime(this_boot_time(), "%Y-%m-%dT%H:%M:%S")) - 3600))
    node = fake_node(state="ALLOCATED", cpu_alloc=4, boot_time=previous)
    out = node.run("healthcheck")
    assert "adopted" not in out.stderr, out.stderr
    rec = node.record()
    assert rec["status"] == "running" and rec["trigger"] == "new", rec
    assert node.slurm.node("n1")["reason"] == "airlock: pending quick check new"


def test_a_suite_that_died_twice_fails_the_registration(fake_node):
    """Two attempts, not three: attempt 2's suite died too, so the boot fails, closed, for
    Airlock's own trouble (a suite that died measured nothing on the node: never the node's
    failure, which recovery would reboot and replace; the explorer, test_explorer.py)."""
    node = fake_node()
    state = node.state
    state.start("r2", boot.current("n1"), 999_999, "quick", "boot", attempt=2)
    state.set_process("r2", 999_999)  # it ran, and is gone
    node.slurm.set("n1", flags=["DRAIN"], reason="airlock: pending quick check boot")
    out = node.run("healthcheck")
    rec = node.record()
    assert rec["run_id"] == "r2" and rec["verdict"] == "error", (rec, out.stderr)
    reason = node.slurm.node("n1")["reason"]
    assert reason == "airlock: FAIL suite died without a verdict (2 attempts)", reason
    assert reasons.parse(reason).own_error
