"""Prolog and Epilog hooks: pure verdicts, and a real Slurm cluster where a prolog failure
requeues the job with a reason naming the check, and the epilog finds a process a job left on
its GPU."""

from __future__ import annotations

import os
import signal
import time

import pytest

from airlock.dev.cluster import healthy_gpus
from tests.cluster.conftest import running_cluster

# --- pure verdicts ----------------------------------------------------------------------------


# --- the real cluster ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cluster(slurm_variant):
    """One cluster for the file (the machine's two cores are shared); stopped by PID after."""
    with running_cluster(slurm_variant, nodes=["node1", "node2"], health_interval=3600,
                         airlock={"registration": {"level": "quick"}}) as c:
        yield c


def _wait_idle(c, names, timeout=45):
    c.wait(lambda: all(n.state == "IDLE" and not n.flags and not n.reason_in_force
                       for n in c.slurm.nodes(names)), timeout, f"{names} idle, no reason")


@pytest.mark.cluster
def test_prolog_failure_requeues_job_and_names_the_check(cluster):
    _wait_idle(cluster, ["node1", "node2"])
    cluster.set_node_sim("node1", gpus=healthy_gpus(7))  # a GPU fell off after registration
    try:
        job = cluster.sbatch("hostname", "-w", "node1")
        node = cluster.wait(lambda: (lambda n: n if n.reason_in_force.startswith("airlock: FAIL")
                                               else None)
                            (cluster.node("node1")), 40, "node1 drained by the prolog")
        assert node.drained
        assert node.reason.startswith("airlock: FAIL gpu_count 7 GPUs")
        assert f"(prolog job {job})" in node.reason
        info = cluster.wait(lambda: (lambda j: j if int(j.get("Restarts", 0)) >= 1
                                     and j.get("JobState") == "PENDING" else None)
                            (cluster.job(job)), 30, "job requeued")
        # requeued, not held (SchedulerParameters=nohold_on_prolog_fail): it runs once a
        # node can take it, without anyone releasing it
        assert "held" not in info.get("Reason", "").lower() and info.get("Priority") != "0"
        # the reason stays ours: Slurm's "Prolog error" did not overwrite it
        time.sleep(1)
        assert cluster.node("node1").reason == node.reason
    finally:
        cluster.set_node_sim("node1", gpus=healthy_gpus(8))
        cluster.run(["scancel", str(job)], check=False)
        cluster.slurm.resume("node1")


@pytest.mark.cluster
def test_epilog_finds_leftover_process(cluster):
    _wait_idle(cluster, ["node2"])
    pidfile = cluster.root / "jobs" / "leak.pid"
    # The job starts a process in its own session (it escapes the job's process group) and
    # ends; NVML would list that process on GPU 0.
    job = cluster.sbatch(f"setsid sleep 300 </dev/null >/dev/null 2>&1 & echo $! > {pidfile}; "
                         "sleep 4", "-w", "node2")
    pid = int(cluster.wait(lambda: pidfile.exists() and pidfile.read_text().strip(), 30,
                           "job wrote its leaked pid"))
    try:
        gpus = healthy_gpus(8)
        gpus[0]["compute_pids"] = [pid]
        cluster.set_node_sim("node2", gpus=gpus)
        node = cluster.wait(lambda: (lambda n: n if n.reason_in_force.startswith("airlock: FAIL")
                                               else None)
                            (cluster.node("node2")), 40, "node2 drained by the epilog")
        assert node.reason.startswith(f"airlock: FAIL gpu_released gpu0 pid {pid} still running")
        assert f"(epilog job {job})" in node.reason
        assert node.drained
    finally:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        cluster.set_node_sim("node2", gpus=healthy_gpus(8))
        cluster.slurm.resume("node2")


@pytest.mark.cluster
def test_epilog_finds_memory_not_freed(cluster):
    _wait_idle(cluster, ["node2"])
    # GPU 2 keeps 12345 MiB in use with no process left on it (an orphaned allocation). The
    # quick level does not read memory use, so the prolog passes and only the epilog sees it.
    gpus = healthy_gpus(8)
    gpus[2]["memory_used_mib"] = 12345
    cluster.set_node_sim("node2", gpus=gpus)
    try:
        job = cluster.sbatch("sleep 1", "-w", "node2")
        node = cluster.wait(lambda: (lambda n: n if n.reason_in_force.startswith("airlock: FAIL")
                                               else None)
                            (cluster.node("node2")), 40, "node2 drained by the epilog")
        assert node.reason == (f"airlock: FAIL gpu_released gpu2 12345 MiB still in use "
                               f"(epilog job {job})")
        assert node.drained
    finally:
        cluster.set_node_sim("node2", gpus=healthy_gpus(8))
        cluster.slurm.resume("node2")


@pytest.mark.parametrize("fault, reason", [
    ({"xids": [{"xid": 79}]}, "airlock: FAIL xid_during_job xid 79 on gpu3 during the job"),
    ({"ecc_volatile_uncorrected_dram": 2},
     "airlock: FAIL ecc_during_job gpu3 +2 uncorrectable DRAM ECC during the job"),
])
def test_epilog_compares_against_the_prolog_snapshot(cluster, fault, reason):
    """The path from the prolog's snapshot to the epilog: a fault that appears while the job
    runs is caught after it, by comparison with the counters the prolog saved."""
    _wait_idle(cluster, ["node2"])
    job = cluster.sbatch("sleep 8", "-w", "node2")
    snap = cluster.root / "airlock" / "state" / "node2" / "jobs" / f"{job}.json"
    cluster.wait(snap.exists, 30, "the prolog's GPU snapshot")
    gpus = healthy_gpus(8)
    if "xids" in fault:
        gpus[3]["xids"] = [{"xid": 79, "time": time.time(), "gpu": 3}]
    else:
        gpus[3].update(fault)
    cluster.set_node_sim("node2", gpus=gpus)
    try:
        node = cluster.wait(lambda: (lambda n: n if n.reason.startswith("airlock: FAIL") else None)
                            (cluster.node("node2")), 40, "node2 drained by the epilog")
        assert node.reason == f"{reason} (epilog job {job})"
        assert not snap.exists()  # the epilog consumed it
    finally:
        cluster.set_node_sim("node2", gpus=healthy_gpus(8))
        cluster.slurm.resume("node2")
