"""Job preflight on a real Slurm cluster (PrologFlags=Alloc): a multi-node job's prologs meet,
all-reduce together (gloo, one rank per simulated node) and fail only a culprit's prolog; the job
is requeued and runs on healthy nodes. A job below the threshold is untouched; a late member or
an unreadable secret leaves the preflight inconclusive and drains no one."""

from __future__ import annotations

import json
import time

import pytest

from tests.cluster.conftest import running_cluster

NODES = ["node1", "node2", "node3", "node4"]
AIRLOCK = {
    "registration": {"level": "quick"},
    "ondemand": {"group_sizes_mb": [0.25, 1.0], "group_busbw_floor_gbps": 0.02},
    "preflight": {"enabled": True, "min_nodes": 2, "budget": 200.0,
                  "rendezvous_timeout": 20.0, "round_timeout": 30.0},
}
# The prologs of all of a job's nodes run at allocation, and have the time a preflight needs.
SLURM = {"PrologFlags": "Alloc", "PrologEpilogTimeout": "300"}


# Every release: what slurmd gives the prolog (its environment, PrologFlags=Alloc, the requeue
# of a job whose prolog failed) is what differs between them.
pytestmark = pytest.mark.slurm_variants("22.05", "24.11", "26.05")


@pytest.fixture(scope="module")
def cluster(slurm_variant):
    with running_cluster(slurm_variant, nodes=NODES, health_interval=3600, airlock=AIRLOCK,
                         slurm_settings=SLURM) as c:
        c.wait(lambda: all(not n.drained and n.responding and not n.reason_in_force
                           for n in c.slurm.nodes(NODES)), 120, "nodes registered")
        yield c


def _wait_logged(c, node, text, timeout=120):
    """Wait for a line of node's prolog log. A member that blames another logs its line only
    once slurmctld shows the job requeued (preflight/entry.py _requeue), after its run document
    is stored and after the culprit is drained: a loaded host shows that gap."""
    log = c.root / "airlock" / "log" / node / "prolog.log"
    try:
        c.wait(lambda: log.exists() and text in log.read_text(), timeout,
               f"{node}'s prolog log: {text!r}")
    except TimeoutError:
        raise AssertionError((log.read_text() if log.exists() else "no log")[-2000:]) from None


def _preflight(c, node):
    path = c.root / "airlock" / "state" / node / "latest-preflight.json"
    return json.loads(path.read_text()) if path.exists() else None


def _done(c, job, timeout):
    return c.wait(lambda: (lambda j: j if j.get("JobState") == "COMPLETED" else None)
                  (c.job(job)), timeout, f"job {job} completed")


def _nobody_drained(c):
    nodes = {n.name: n for n in c.slurm.nodes(NODES)}
    assert not any(n.drained or n.reason_in_force for n in nodes.values()), nodes


def test_a_job_below_the_threshold_is_untouched(cluster):
    job = cluster.sbatch("true", "-N1", "-w", "node4")
    _done(cluster, job, 60)
    assert _preflight(cluster, "node4") is None
    assert "preflight" not in (cluster.root / "airlock" / "log" / "node4" / "prolog.log") \
        .read_text()


def test_a_healthy_multi_node_job_runs_with_the_added_seconds_recorded(cluster):
    job = cluster.sbatch("true", "-N2", "-w", "node[1-2]")
    _done(cluster, job, 200)
    for node in ("node1", "node2"):
        run = _preflight(cluster, node)
        assert run["verdict"] == "pass" and run["job_id"] == str(job), run
        figs = run["checks"][0]["figures"]
        assert figs["added_s"] > 0 and figs["members"] == 2 and figs["runs_total"] >= 1
    _nobody_drained(cluster)


def test_one_member_s_prolog_late_past_the_rendezvous_drains_no_one(cluster):
    cluster.set_node_sim("node2", faults={"preflight_delay": "25"})
    try:
        job = cluster.sbatch("true", "-N2", "-w", "node[1-2]")
        _done(cluster, job, 200)  # on_inconclusive = "run"
        run = _preflight(cluster, "node1")
        assert run["verdict"] == "error" and run["unseen"] == ["preflight"], run
        assert "never arrived: node2" in run["detail"]
        _nobody_drained(cluster)
    finally:
        cluster.set_node_sim("node2", faults={})


def test_a_site_that_holds_unseen_jobs_gets_the_job_held_and_no_node_drained(cluster):
    marker = cluster.root / "jobs" / "held-ran"
    marker.parent.mkdir(exist_ok=True)
    cluster.airlock_extra = {**AIRLOCK, "preflight": {**AIRLOCK["preflight"],
                                                      "on_inconclusive": "hold"}}
    cluster.write_airlock_config()
    cluster.set_node_sim("node2", faults={"preflight_delay": "25"})
    job = None
    try:
        job = cluster.sbatch(f"touch {marker}", "-N2", "-w", "node[1-2]")
        info = cluster.wait(lambda: (lambda j: j if j.get("JobState") == "PENDING"
                                     and int(j.get("Restarts", 0)) >= 1 else None)
                            (cluster.job(job)), 200, "job requeued")
        assert info.get("Priority") == "0" or "held" in info.get("Reason", "").lower(), info
        assert not marker.exists()  # user code never ran on the unseen set
        _nobody_drained(cluster)
    finally:
        cluster.set_node_sim("node2", faults={})
        cluster.airlock_extra = AIRLOCK
        cluster.write_airlock_config()
        if job is not None:
            cluster.run(["scancel", str(job)], check=False)


def test_a_secret_unreadable_on_one_node_drains_no_one(cluster):
    cluster.set_node_sim("node2", faults={"preflight_secret": "unreadable"})
    try:
        job = cluster.sbatch("true", "-N2", "-w", "node[1-2]")
        _done(cluster, job, 250)
        for node in ("node1", "node2"):
            assert _preflight(cluster, node)["verdict"] == "error", node
        assert "secret file" in _preflight(cluster, "node2")["detail"]
        _nobody_drained(cluster)
    finally:
        cluster.set_node_sim("node2", faults={})


def _preflight_runs(c, node, job):
    """Every preflight run document this node keeps for the job (its history)."""
    out = []
    for path in (c.root / "airlock" / "state" / node / "results").glob("*.json"):
        doc = json.loads(path.read_text())
        if doc.get("level") == "preflight" and doc.get("job_id") == str(job):
            out.append(doc)
    return out


def test_slurmctld_restarted_during_a_preflight_runs_no_user_code_untested_drains_no_one(cluster):
    """slurmctld goes away while node1 waits in the meeting, before node2 (late by its fault
    switch) has asked Slurm for its address, and comes back once node2's preflight is over.

    "No user code on an untested set" under the default policy (on_inconclusive = "run"): every
    node the job's user code ran on kept, for that job, a preflight run document finished before
    the user code started, whose verdict is a pass or inconclusive ("error", unseen preflight:
    the node is still proven by registration and the periodic checks). A FAIL document, a drain
    or a reason in force anywhere is the false drain this test refuses."""
    ran = cluster.root / "jobs" / "restart-ran.txt"
    ran.parent.mkdir(exist_ok=True)
    meetings = cluster.root / "airlock" / "shared" / ".batches"
    cluster.set_node_sim("node2", faults={"preflight_delay": "6"})
    job = None
    try:
        job = cluster.sbatch(f'echo "$(date +%s.%N) $SLURM_JOB_NODELIST" >> {ran}', "-N2",
                             "-w", "node[1-2]")
        # The synchronisation point: node1 announced itself, so it asked Slurm for its address
        # and now waits for node2, which sleeps before it asks.
        cluster.wait(lambda: list(meetings.glob(f"batch-{job}-preflight.r0.*/here-node1.json")),
                     60, "node1 in the meeting")
        assert not list(meetings.glob(f"batch-{job}-preflight.r0.*/here-node2.json"))
        cluster.stop_controller()
        stopped = time.time()
        cluster.wait(lambda: _preflight_runs(cluster, "node2", job), 90,
                     "node2's preflight over while slurmctld is away")
        cluster.start_controller()
        _done(cluster, job, 200)
        runs = {n: _preflight_runs(cluster, n, job) for n in ("node1", "node2")}
        assert runs["node2"][0]["started_at"] < stopped < runs["node1"][0]["finished_at"], runs
        for docs in runs.values():
            for doc in docs:
                assert doc["verdict"] in ("pass", "error") and not doc["failed_check"], doc
        lines = ran.read_text().split("\n")
        assert lines[-1] == "" and len(lines) >= 2, lines
        for line in lines[:-1]:
            at, nodelist = line.split()
            assert nodelist == "node[1-2]", line
            for node, docs in runs.items():
                assert any(d["finished_at"] <= float(at) for d in docs), (node, line, docs)
        _nobody_drained(cluster)
    finally:
        cluster.set_node_sim("node2", faults={})
        if cluster.controller_pid() is None:
            cluster.start_controller()


def test_a_culprit_is_drained_and_the_job_runs_later_on_healthy_nodes(cluster):
    ran = cluster.root / "jobs" / "ran.txt"
    ran.parent.mkdir(exist_ok=True)
    cluster.set_node_sim("node3", faults={"group_corrupt": "1"})
    try:
        # node[1-3] first (the lowest idle nodes): one of them corrupts every all-reduce.
        job = cluster.sbatch(f'echo "$SLURM_JOB_NODELIST" >> {ran}', "-N3")
        node = cluster.wait(lambda: (lambda n: n if n.drained else None)(cluster.node("node3")),
                            250, "node3 drained by its preflight")
        assert node.reason.startswith("airlock: FAIL preflight "), node.reason
        assert "(node3) sent wrong data" in node.reason and f"(job {job})" in node.reason
        # The members that passed requeued the job themselves before their prologs ended.
        _wait_logged(cluster, "node1", "node3 failed; the job is requeued")
        _done(cluster, job, 250)
        lines = ran.read_text().split()
        assert lines == ["node[1-2,4]"], lines  # user code never ran on a set with node3
        for name in ("node1", "node2", "node4"):
            n = cluster.node(name)
            assert not n.drained and not n.reason_in_force, n
        assert _preflight(cluster, "node4")["verdict"] == "pass"
    finally:
        cluster.set_node_sim("node3", faults={})
        cluster.slurm.resume("node3")


@pytest.mark.slurm_variants("22.05")
def test_a_node_whose_own_gemm_is_wrong_fails_alone_and_no_user_code_runs_with_it(cluster):
    """[preflight] level = "collective+gemm": node2's GEMM (the burn-in's, on its CPU
    stand-ins) returns a wrong element. node2 is drained with the preflight's gemm reason; node1
    stops waiting for it and requeues the job; user code never runs on node[1-2]."""
    ran = cluster.root / "jobs" / "gemm-ran.txt"
    ran.parent.mkdir(exist_ok=True)
    cluster.airlock_extra = {**AIRLOCK, "preflight": {**AIRLOCK["preflight"],
                                                      "level": "collective+gemm"}}
    cluster.write_airlock_config()
    cluster.set_node_sim("node2", faults={"gemm_corrupt": "0"})
    job = None
    try:
        job = cluster.sbatch(f'echo "$SLURM_JOB_NODELIST" >> {ran}', "-N2", "-w", "node[1-2]")
        node = cluster.wait(lambda: (lambda n: n if n.drained else None)(cluster.node("node2")),
                            200, "node2 drained by its preflight")
        assert node.reason.startswith("airlock: FAIL preflight gemm "), node.reason
        assert "checksum off" in node.reason or "mismatches" in node.reason, node.reason
        cluster.wait(lambda: _preflight(cluster, "node1") and
                     _preflight(cluster, "node1")["job_id"] == str(job), 120,
                     "node1's preflight over")
        _wait_logged(cluster, "node1", "node2 failed; the job is requeued")
        assert not ran.exists() or "node[1-2]" not in ran.read_text().split()
        assert not cluster.node("node1").drained
    finally:
        cluster.set_node_sim("node2", faults={})
        cluster.airlock_extra = AIRLOCK
        cluster.write_airlock_config()
        if job is not None:
            cluster.run(["scancel", str(job)], check=False)
        cluster.slurm.resume("node2")
