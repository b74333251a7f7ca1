"""Prolog and Epilog hooks: pure verdicts, and a real Slurm cluster where a prolog failure
requeues the job with a reason naming the check, and the epilog finds a process a job left on
its GPU."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import pytest
from airlock.hooks import epilog
from conftest import _require_slurm

from airlock import config as config_mod
from airlock.dev.cluster import DevCluster, healthy_gpus

# --- pure verdicts ----------------------------------------------------------------------------


def _gpu(i, **kw):
    base = {"index": i, "lost": False, "ecc_volatile_uncorrected_dram": 0,
            "ecc_volatile_uncorrected_sram": 0, "ecc_volatile_corrected": 0,
            "remap_uncorrectable_rows": 0, "xids": [], "compute_pids": []}
    base.update(kw)
    return base


def test_job_gpus_from_env_or_whole_node():
    assert epilog.job_gpu_indices("0,2", range(8)) == {0, 2}
    assert epilog.job_gpu_indices(None, range(4)) == {0, 1, 2, 3}
    assert epilog.job_gpu_indices("garbage", range(2)) == {0, 1}


def test_released_only_counts_live_processes_on_the_jobs_gpus():
    gpus = [_gpu(0, compute_pids=[11]), _gpu(1, compute_pids=[22, 33])]
    alive = {22, 33}.__contains__
    assert epilog.verdict_released(gpus, {0}, alive, 1024).verdict.value == "pass"
    out = epilog.verdict_released(gpus, {0, 1}, alive, 1024)
    assert out.failed and out.detail == "gpu1 pid 22 still running (+1 more)"


def test_released_fails_on_memory_still_used_on_the_jobs_gpus():
    gpus = [_gpu(0, memory_used_mib=512), _gpu(1, memory_used_mib=1024),
            _gpu(2, memory_used_mib=12345), _gpu(3, memory_used_mib=2048)]
    never = set().__contains__
    # driver/context reservations up to the threshold (inclusive) are a free GPU
    assert epilog.verdict_released(gpus, {0, 1}, never, 1024).verdict.value == "pass"
    out = epilog.verdict_released(gpus, {0, 1, 2, 3}, never, 1024)
    assert out.failed and out.detail == "gpu2 12345 MiB still in use (+1 more)"
    assert out.figures["memory_used_mib"] == [[2, 12345], [3, 2048]]
    # another job's GPU holding memory is not this job's failure
    assert epilog.verdict_released(gpus, {0}, never, 1024).verdict.value == "pass"
    assert epilog.verdict_released(gpus, {0}, never, 256).detail == "gpu0 512 MiB still in use"
    # a live process is the more precise culprit and is named first
    held = [_gpu(2, memory_used_mib=12345, compute_pids=[77])]
    assert epilog.verdict_released(held, {2}, {77}.__contains__, 1024).detail == \
        "gpu2 pid 77 still running"


def test_xids_new_fatal_fails_old_or_benign_does_not():
    old = {"xid": 79, "gpu": 0, "time": 100.0}
    before = {"gathered_at": 200.0, "gpus": [_gpu(0, xids=[old])]}
    assert epilog.verdict_xids(before, [_gpu(0, xids=[old])], [79]).verdict.value == "pass"
    benign = {"xid": 13, "gpu": 0, "time": 250.0}
    out = epilog.verdict_xids(before, [_gpu(0, xids=[old, benign])], [79])
    assert out.verdict.value == "warn"
    fatal = {"xid": 48, "gpu": 3, "time": 260.0}
    out = epilog.verdict_xids(before, [_gpu(3, xids=[fatal])], [48, 79])
    assert out.failed and out.detail == "xid 48 on gpu3 during the job"
    assert epilog.verdict_xids(None, [], [48]).verdict.value == "skip"


def test_ecc_delta():
    before = {"gpus": [_gpu(0, ecc_volatile_uncorrected_dram=2, ecc_volatile_corrected=5)]}
    same = [_gpu(0, ecc_volatile_uncorrected_dram=2, ecc_volatile_corrected=5)]
    assert epilog.verdict_ecc(before, same).verdict.value == "pass"
    corr = [_gpu(0, ecc_volatile_uncorrected_dram=2, ecc_volatile_corrected=9)]
    assert epilog.verdict_ecc(before, corr).verdict.value == "warn"
    unc = [_gpu(0, ecc_volatile_uncorrected_dram=3, ecc_volatile_corrected=5)]
    out = epilog.verdict_ecc(before, unc)
    assert out.failed and "+1 uncorrectable DRAM ECC" in out.detail
    lost = [_gpu(0, lost=True)]
    assert epilog.verdict_ecc(before, lost).detail == "gpu0 fell off the bus during the job"


def test_sections_validate():
    with pytest.raises(config_mod.ConfigError, match=r"\[prolog\] budget"):
        config_mod.from_dict({"prolog": {"budget": 0}})
    with pytest.raises(config_mod.ConfigError, match=r"\[epilog\] process_grace"):
        config_mod.from_dict({"epilog": {"process_grace": -1}})
    with pytest.raises(config_mod.ConfigError, match=r"\[epilog\] memory_used_max_mib"):
        config_mod.from_dict({"epilog": {"memory_used_max_mib": -1}})
    assert config_mod.from_dict({}).epilog.memory_used_max_mib == 1024
    assert epilog.fatal_xids(config_mod.from_dict({"epilog": {"fatal_xids": [79]}})) == {79}
    default = epilog.fatal_xids(config_mod.from_dict({}))  # the XID policy's fatal set
    assert 79 in default and 13 not in default


def test_prolog_never_imports_torch(tmp_path):
    """The prolog runs before every job: its whole path (a passing quick level) stays torch-free."""
    sim = tmp_path / "gpus.json"
    sim.write_text(json.dumps({"nodes": {"n1": {"gpus": healthy_gpus(8)}}}))
    conf = tmp_path / "airlock.toml"
    conf.write_text(f'state_dir = "{tmp_path}/state"\nlog_dir = "{tmp_path}/log"\n'
                    f'[nvml]\nsimulate = "{sim}"\n')
    code = ("import sys; from airlock.hooks import prolog; rc = prolog.main(); "
            "print(rc, 'torch' in sys.modules)")
    env = {"AIRLOCK_CONFIG": str(conf), "SLURMD_NODENAME": "n1", "SLURM_JOB_ID": "7",
           "PATH": os.environ["PATH"]}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=60)
    assert out.stdout.split() == ["0", "False"], out.stderr
    assert (tmp_path / "state" / "jobs" / "7.json").exists()


# --- the real cluster ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cluster():
    """One cluster for the file (the machine's two cores are shared); stopped by PID after."""
    _require_slurm()
    root = tempfile.mkdtemp(prefix="alc-", dir="/tmp")
    c = DevCluster(root, nodes=["node1", "node2"], health_interval=3600,
                   airlock={"registration": {"level": "quick"}})
    try:
        c.start(wait=False)
        yield c
    finally:
        c.stop()
        left = c.leftovers()
        if not left:
            shutil.rmtree(root, ignore_errors=True)
        assert not left, f"processes left running after stop: {left}"


def _wait_idle(c, names, timeout=45):
    c.wait(lambda: all(n.state == "IDLE" and not n.flags and not n.reason
                       for n in c.slurm.nodes(names)), timeout, f"{names} idle, no reason")


@pytest.mark.cluster
def test_prolog_failure_requeues_job_and_names_the_check(cluster):
    _wait_idle(cluster, ["node1", "node2"])
    cluster.set_node_sim("node1", gpus=healthy_gpus(7))  # a GPU fell off after registration
    try:
        job = cluster.sbatch("hostname", "-w", "node1")
        node = cluster.wait(lambda: (lambda n: n if n.reason.startswith("airlock: FAIL") else None)
                            (cluster.node("node1")), 40, "node1 drained by the prolog")
        assert node.drained
        assert node.reason.startswith("airlock: FAIL gpu_count 7 GPUs")
        assert f"(prolog job {job})" in node.reason
        info = cluster.wait(lambda: (lambda j: j if int(j.get("Restarts", 0)) >= 1
                                     and j.get("JobState") == "PENDING" else None)
                            (cluster.job(job)), 30, "job requeued")
        assert "held" in info.get("Reason", "").lower()
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
        node = cluster.wait(lambda: (lambda n: n if n.reason.startswith("airlock: FAIL") else None)
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
        node = cluster.wait(lambda: (lambda n: n if n.reason.startswith("airlock: FAIL") else None)
                            (cluster.node("node2")), 40, "node2 drained by the epilog")
        assert node.reason == (f"airlock: FAIL gpu_released gpu2 12345 MiB still in use "
                               f"(epilog job {job})")
        assert node.drained
    finally:
        cluster.set_node_sim("node2", gpus=healthy_gpus(8))
        cluster.slurm.resume("node2")
