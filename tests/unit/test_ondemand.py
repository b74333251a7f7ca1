"""On-demand check pieces that need no cluster: the [ondemand] section's validation, the exit
codes of a report, and which of srun's lines explains a node's launch failure."""

from __future__ import annotations

import subprocess
import sys

import pytest

from airlock.config import loader as config
from airlock.errors import ConfigError
from airlock.ondemand.launch import srun_error
from airlock.ondemand.report import GroupReport, GroupTarget


@pytest.mark.parametrize("section, message", [
    ({"group_sizes_mb": []}, "group_sizes_mb: needs at least one message size"),
    ({"group_sizes_mb": [1.0, 0]}, "group_sizes_mb: every size must be"),
    ({"group_sizes_mb": [float("nan")]}, r"group_sizes_mb\[0\]: must be a finite number"),
    ({"group_timeout": float("inf")}, "group_timeout: must be a finite number"),
    ({"poll_interval": 0}, "poll_interval: must be a finite number > 0"),
    ({"max_group_tests": 0}, "max_group_tests: must be >= 1"),
    ({"port_range": [29500, 70000]}, "port_range"),
    ({"group_busbw_floor_gbps": -1}, "group_busbw_floor_gbps"),
])
def test_ondemand_section_refuses_bad_values(section, message):
    with pytest.raises(ConfigError, match=message):
        config.from_dict({"ondemand": section}).section("ondemand")


def test_report_exit_codes():
    def report(*statuses):
        return GroupReport("standard", 0.0, 1.0,
                           [GroupTarget(f"n{i}", "a", s) for i, s in enumerate(statuses)])

    assert report("pass", "pass").exit_code == 0
    assert report("pass", "inconclusive").exit_code == 3
    assert report("pass", "skipped").exit_code == 3
    assert report("inconclusive", "fail").exit_code == 1
    doc = report("pass", "inconclusive").to_dict()
    assert doc["exit_code"] == 3 and [n["status"] for n in doc["nodes"]] == ["pass",
                                                                            "inconclusive"]


def test_srun_error_names_the_nodes_own_line():
    err = ("srun: error: Task launch for StepId=12.0 failed on node node2: Socket timed out on "
           "send/recv operation\nsrun: error: Application launch failed: Socket timed out\n")
    assert srun_error(err, "", "node2", 1) == ("Task launch for StepId=12.0 failed on node "
                                                "node2: Socket timed out on send/recv operation")
    assert srun_error(err, "", "node1", 1) == "Application launch failed: Socket timed out"
    assert srun_error("", "", "node1", 255) == "exit 255"


def test_ondemand_does_not_load_click():
    """Orchestration stays below the CLI: the workers srun starts must not need click."""
    code = ("import sys, airlock.ondemand.run, airlock.ondemand.worker; "
            "print('click' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, check=True).stdout
    assert out.strip() == "False"


def test_the_worker_command_line_srun_names_still_runs():
    """`python -m airlock.ondemand node-worker|group-worker` is in srun's command line
    (airlock.ondemand.launch): during a rolling upgrade an old controller sruns it on a new
    node, so the module path must stay runnable whatever the package's layout."""
    from airlock.ondemand.launch import WORKER_MODULE

    assert WORKER_MODULE == "airlock.ondemand"
    out = subprocess.run([sys.executable, "-m", WORKER_MODULE, "group-worker", "--help"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "--secret-file" in out.stdout and "--master" in out.stdout


def test_nodes_drained_by_others_in_registration_failed_or_down_are_skipped(tmp_path):
    """docs/guide.md, on demand: a node drained by someone else, in registration, already
    failed or not responding is skipped (and named why), never isolated: with only such
    targets no reservation is made, and exit 3 says nothing failed but some were skipped."""
    from airlock.ondemand.run import run_group
    from tests.unit.fakeslurm import FakeSlurm

    fake = FakeSlurm(tmp_path / "slurm", nodes=())
    fake.add("admin", flags=["DRAIN"], reason="disk swap")
    fake.add("slurm", flags=["DRAIN"], reason="Prolog error")
    fake.add("pending", flags=["DRAIN"], reason="airlock: pending standard check boot")
    fake.add("failed", flags=["DRAIN"], reason="airlock: FAIL gpu_count 7 GPUs")
    fake.add("down", state="DOWN", flags=["NOT_RESPONDING"], reason="Not responding")
    cfg = config.from_dict({"state_dir": str(tmp_path / "state"),
                            "slurm": {"bin_dir": fake.bin_dir}})
    report = run_group(cfg, nodes_expr="admin,slurm,pending,failed,down", echo=lambda _m: None)
    why = {t.name: (t.status, t.why) for t in report.targets}
    assert why == {
        "admin": ("skipped", "drained by someone else: 'disk swap'"),
        "slurm": ("skipped", "drained by someone else: 'Prolog error'"),
        "pending": ("skipped", "registration check in progress"),
        "failed": ("skipped", "already drained by airlock: 'airlock: FAIL gpu_count 7 GPUs' "
                              "(recovery handles it)"),
        "down": ("skipped", "not responding (DOWN+NOT_RESPONDING)"),
    }, why
    assert report.exit_code == 3
    assert [c["verb"] for c in fake.calls()] == ["show"]  # no reservation, no update


def test_only_a_node_s_own_failure_drains_a_run_that_saw_less_is_inconclusive(tmp_path):
    """docs/guide.md: a check proves only what it touched. A node whose level ended "error"
    (a check without a verdict) is inconclusive, never drained and never counted as passed
    for the group test; one with no answer at all is inconclusive too; only a node's own FAIL
    drains. The workers' answers are srun's output as the node workers print it."""
    import io

    from airlock import finish, protocol
    from airlock.ondemand.run import _apply, _local_level
    from airlock.slurm.client import Slurm
    from tests.unit.fakeslurm import FakeSlurm

    def run(node, verdict, check=None):
        rec = {"check": check or "gpu_count", "verdict": verdict, "detail": f"{verdict} here"}
        if verdict == "error":
            rec["detail"] = "no verdict: cut to 0.4s by the budget and ran out of it"
        return finish.summarize(node, "standard", "ondemand", [rec], 0.0)

    out = io.StringIO()
    for doc in (run("n1", "pass"), run("n2", "error", "burnin"), run("n3", "fail")):
        protocol.emit(protocol.NODE, doc, stream=out)

    class Launcher:  # srun's answer: n4 was launched but printed nothing
        def srun(self, nodes, args, timeout, name):
            return 1, out.getvalue(), "srun: error: n4: task 0: Killed\n"

    fake = FakeSlurm(tmp_path / "slurm", nodes=["n1", "n2", "n3", "n4"])
    cfg = config.from_dict({"state_dir": str(tmp_path / "state"),
                            "slurm": {"bin_dir": fake.bin_dir}})
    targets = {n: GroupTarget(n, "127.0.0.1") for n in ("n1", "n2", "n3", "n4")}
    passed = _local_level(cfg, Launcher(), targets, list(targets), "standard", None,
                          lambda _m: None)
    assert passed == ["n1"]
    status = {n: t.status for n, t in targets.items()}
    assert status == {"n1": "pass", "n2": "inconclusive", "n3": "fail", "n4": "inconclusive"}
    assert targets["n2"].why.startswith("not seen: burnin (no verdict")
    _apply(Slurm(bin_dir=fake.bin_dir), targets, lambda _m: None)
    assert fake.updates() == [["nodename=n3", "state=drain",
                               "reason=airlock: FAIL gpu_count fail here"]]


# --- the on-demand culprit path (issue 25 item 11: no unit test reached it) --------------------
class _Collective:
    """What GroupTester answers for a group: the all-reduce passes unless a bad node takes
    part (the multi-node runs themselves are the cluster tests' job)."""

    def __init__(self, bad: set[str]):
        self.bad, self.runs = bad, []

    def _one(self, nodes: list[str]) -> bool:
        ok = not (set(nodes) & self.bad)
        self.runs.append({"nodes": list(nodes), "ok": ok, "figures": {},
                          "detail": "" if ok else "wrong sum", "own": {}})
        return ok

    def __call__(self, group: list[str]) -> bool:
        return self._one(group)

    def round(self, groups: list[list[str]]) -> list[bool]:
        return [self._one(g) for g in groups]


def _search(max_group_tests: int) -> tuple[dict[str, GroupTarget], _Collective]:
    from airlock.ondemand.group import one_group

    cfg = config.from_dict({"ondemand": {"max_group_tests": max_group_tests}})
    names = ["a", "b", "c", "d", "e", "f", "g", "h"]
    targets = {n: GroupTarget(n, "127.0.0.1") for n in names}
    tester = _Collective({"c"})
    one_group(cfg, tester, targets, names, lambda msg: None)
    return targets, tester


def test_the_on_demand_group_failure_finds_its_culprit_alone():
    targets, tester = _search(32)
    assert {n: t.group for n, t in targets.items()} == {
        **{n: "pass" for n in "abdefgh"}, "c": "fail"}, tester.runs
    c = targets["c"]
    assert (c.status, c.failed_check) == ("fail", "group_allreduce")
    assert c.detail.startswith("wrong sum (isolated in ")


def test_ondemand_max_group_tests_bounds_the_search_and_blames_nobody_it_cut_short():
    targets, tester = _search(3)
    assert len(tester.runs) <= 3, tester.runs
    assert targets["c"].group != "fail"  # not decided within the budget: never blamed
    assert any(t.group == "inconclusive" for t in targets.values())


# --- the lock: a second run is Busy, decided from Slurm's reservation table (issue 24) --------
def _two_nodes(tmp_path):
    from tests.unit.fakeslurm import FakeSlurm

    fake = FakeSlurm(tmp_path / "slurm", nodes=["n1", "n2"])
    cfg = config.from_dict({"state_dir": str(tmp_path / "state"),
                            "slurm": {"bin_dir": fake.bin_dir}})
    return fake, cfg


def test_a_run_whose_reservation_exists_is_busy_and_changes_nothing(tmp_path):
    """docs/guide.md: the reservation is the lock. Another run's reservation of the same name:
    exit 4 (Busy), and neither that reservation nor any node is touched."""
    from airlock.ondemand.reservation import Busy
    from airlock.ondemand.run import run_group

    fake, cfg = _two_nodes(tmp_path)
    fake.add_reservation("airlock_ondemand", "n1")
    before = fake.reservations()
    with pytest.raises(Busy, match="another on-demand check is running") as err:
        run_group(cfg, nodes_expr="n1,n2", echo=lambda _m: None)
    assert err.value.exit_code == 4
    assert fake.reservations() == before
    assert fake.calls("update") == [] and fake.calls("delete") == []


def test_busy_is_slurm_s_state_not_the_words_of_its_refusal(tmp_path):
    """Whether another run holds the lock is decided where Slurm is called, from what slurmctld
    has (a reservation of that name, airlock.slurm.client raises ReservationExists), never from
    the words of scontrol's refusal: refused in other words while the reservation is there is
    Busy; refused with the duplicate's words while no such reservation exists (it ended in
    between) is Slurm's trouble, a SlurmError, not Busy."""
    from airlock.errors import SlurmError
    from airlock.ondemand.reservation import Busy
    from airlock.ondemand.run import run_group

    fake, cfg = _two_nodes(tmp_path)
    fake.add_reservation("airlock_ondemand", "n1")
    fake.fail("create", text="Error creating the reservation: Requested nodes are busy", times=1)
    with pytest.raises(Busy):
        run_group(cfg, nodes_expr="n1,n2", echo=lambda _m: None)

    fake, cfg = _two_nodes(tmp_path / "again")
    fake.fail("create", text="Error creating the reservation: Duplicate reservation name",
              times=1)
    with pytest.raises(SlurmError, match="Duplicate reservation name"):
        run_group(cfg, nodes_expr="n1,n2", echo=lambda _m: None)


def test_a_reservation_slurmctld_could_not_be_asked_about_is_not_busy(tmp_path):
    """slurmctld away while creating: SlurmUnreachable as it came, and no second question."""
    from airlock.errors import SlurmUnreachable
    from airlock.slurm.client import Slurm

    fake, _cfg = _two_nodes(tmp_path)
    fake.fail("create")  # 22.05's words for an unreachable controller
    with pytest.raises(SlurmUnreachable):
        Slurm(bin_dir=fake.bin_dir).create_reservation("airlock_ondemand", "Nodes=n1")
    assert [c["verb"] for c in fake.calls()] == ["create"]


@pytest.mark.parametrize("oneliner", [True, False])
def test_the_reservation_table_is_read_by_name(tmp_path, oneliner):
    from airlock.slurm.client import parse_reservation_names
    from tests.unit.fakeslurm import FakeSlurm

    fake = FakeSlurm(tmp_path / "slurm", nodes=["n1", "n2"])
    flag = ["-o"] if oneliner else []
    show = [f"{fake.bin_dir}/scontrol", *flag, "show", "reservation"]
    assert parse_reservation_names(subprocess.run(show, capture_output=True, text=True,
                                                  check=True).stdout) == set()
    fake.add_reservation("maint_window", "n1")
    fake.add_reservation("airlock_ondemand", "n2")
    text = subprocess.run(show, capture_output=True, text=True, check=True).stdout
    assert parse_reservation_names(text) == {"maint_window", "airlock_ondemand"}


def test_an_on_demand_failure_drains_by_the_drain_policy_an_earlier_failure_stays(tmp_path):
    """The drain goes through airlock.slurm.drains.fail, the one drain policy: a failure of the
    node's hardware drained while the on-demand run was going (its HealthCheckProgram saw 7
    GPUs) stays the node's story; the run's own failure does not replace it, and says so.
    A node without a claim in force is drained with the run's failure."""
    from airlock.ondemand.run import _apply
    from airlock.slurm.client import Slurm
    from tests.unit.fakeslurm import FakeSlurm

    fake = FakeSlurm(tmp_path / "slurm", nodes=["n1", "n2"])
    earlier = "airlock: FAIL gpu_count 7 GPUs"
    fake.set("n1", flags=["DRAIN"], reason=earlier)
    targets = {n: GroupTarget(n, "127.0.0.1", status="fail", failed_check="burnin",
                              detail="slow") for n in ("n1", "n2")}
    _apply(Slurm(bin_dir=fake.bin_dir), targets, lambda _m: None)
    assert fake.node("n1")["reason"] == earlier
    assert targets["n1"].why == f"kept earlier failure {earlier!r}"
    assert fake.updates() == [["nodename=n2", "state=drain", "reason=airlock: FAIL burnin slow"]]
