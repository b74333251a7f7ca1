"""Prolog and Epilog hooks: pure verdicts, and a real Slurm cluster where a prolog failure
requeues the job with a reason naming the check, and the epilog finds a process a job left on
its GPU."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from airlock.checks import ecc_during_job, gpu_released, job_gpus, xid_during_job
from airlock.config import loader as config_mod

# --- pure verdicts ----------------------------------------------------------------------------


def _gpu(i, **kw):
    base = {"index": i, "lost": False, "ecc_volatile_uncorrected_dram": 0,
            "ecc_volatile_uncorrected_sram": 0, "ecc_volatile_corrected": 0,
            "remap_uncorrectable_rows": 0, "xids": [], "compute_pids": []}
    base.update(kw)
    return base


def test_job_gpus_from_env_or_whole_node():
    assert job_gpus.job_gpu_indices("0,2", range(8)) == {0, 2}
    assert job_gpus.job_gpu_indices(None, range(4)) == {0, 1, 2, 3}
    assert job_gpus.job_gpu_indices("garbage", range(2)) == {0, 1}


def test_released_only_counts_live_processes_on_the_jobs_gpus():
    gpus = [_gpu(0, compute_pids=[11]), _gpu(1, compute_pids=[22, 33])]
    alive = {22, 33}.__contains__
    assert gpu_released.verdict_released(gpus, {0}, alive, 1024).verdict.value == "pass"
    out = gpu_released.verdict_released(gpus, {0, 1}, alive, 1024)
    assert out.failed and out.detail == "gpu1 pid 22 still running (+1 more)"


def test_a_cpu_only_job_on_a_shared_node_is_judged_by_its_own_processes():
    """Issue 17: without SLURM_JOB_GPUS every GPU counted as the job's, so another job's live
    process was reported as left behind (`FAIL gpu_released gpu1 pid ... still running` on a
    MIXED node). Without SLURM_JOB_GPUS only the job's own processes count (its cgroup, else
    its uid), and memory counts only on GPUs no one else is using."""
    gpus = [_gpu(0, compute_pids=[11], memory_used_mib=30000),
            _gpu(1, compute_pids=[22], memory_used_mib=2048)]
    alive = {11, 22}.__contains__
    ours = {22}.__contains__  # pid 22 is this job's; 11 is another job's
    everything = job_gpus.job_gpu_indices(None, range(2))
    assert gpu_released.verdict_released(gpus, everything, alive, 1024, belongs=lambda p: False) \
        .verdict.value == "pass"
    out = gpu_released.verdict_released(gpus, everything, alive, 1024, belongs=ours)
    assert out.failed and out.detail == "gpu1 pid 22 still running"
    idle = [_gpu(0, compute_pids=[11], memory_used_mib=30000), _gpu(1, memory_used_mib=4096)]
    out = gpu_released.verdict_released(idle, everything, alive, 1024, belongs=lambda p: False)
    assert out.failed and out.detail == "gpu1 4096 MiB still in use"  # gpu0 is someone else's


def test_the_epilog_of_a_job_without_gpus_never_blames_another_job_s_process(fake_node):
    """docs/guide.md, Epilog: a job without GPU gres (no SLURM_JOB_GPUS, a CPU job on a node
    others share) is judged by its own processes only. The hook as slurmd runs it, a live
    process on gpu0 that is not the job's (another uid), then the same process as the job's."""
    import json

    node = fake_node()
    node.prove()
    node.write_config("[epilog]\nprocess_grace = 0\n")
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        entry = json.loads(node.sim.read_text())
        gpu0 = entry["nodes"][node.name]["gpus"][0]
        gpu0.update(compute_pids=[other.pid], memory_used_mib=30000)
        node.sim.write_text(json.dumps(entry))
        shared = node.run("epilog", job="41", SLURM_JOB_UID="65534")
        assert shared.returncode == 0 and "epilog pass" in shared.stderr, shared.stderr
        assert node.slurm.updates() == []
        own = node.run("epilog", job="42", SLURM_JOB_UID=str(os.getuid()))
        assert "FAIL gpu_released" in own.stderr, own.stderr
        assert node.slurm.node(node.name)["reason"] == (
            f"airlock: FAIL gpu_released gpu0 pid {other.pid} still running (epilog job 42)")
    finally:
        other.kill()
        other.wait()


def test_job_processes_are_told_by_cgroup_then_uid(tmp_path):
    proc = tmp_path / "proc"
    for pid, cgroup, uid in ((1, "0::/system.slice/slurmstepd.scope/job_42/step_0/user/task_0",
                              0), (2, "0::/system.slice/slurmstepd.scope/job_7/step_0", 1000),
                             (3, "0::/user.slice/user-1000.slice", 1000),
                             (4, "0::/user.slice/user-1001.slice", 1001)):
        (proc / str(pid)).mkdir(parents=True)
        (proc / str(pid) / "cgroup").write_text(cgroup + "\n")
        os.chown(proc / str(pid), uid, uid)
    owns = job_gpus.job_owns("42", 1000, proc_root=str(proc))
    assert [owns(p) for p in (1, 2, 3, 4, 5)] == [True, False, True, False, False]
    assert not job_gpus.job_owns("42", None, proc_root=str(proc))(3)


def test_released_fails_on_memory_still_used_on_the_jobs_gpus():
    gpus = [_gpu(0, memory_used_mib=512), _gpu(1, memory_used_mib=1024),
            _gpu(2, memory_used_mib=12345), _gpu(3, memory_used_mib=2048)]
    never = set().__contains__
    # driver/context reservations up to the threshold (inclusive) are a free GPU
    assert gpu_released.verdict_released(gpus, {0, 1}, never, 1024).verdict.value == "pass"
    out = gpu_released.verdict_released(gpus, {0, 1, 2, 3}, never, 1024)
    assert out.failed and out.detail == "gpu2 12345 MiB still in use (+1 more)"
    assert out.figures["memory_used_mib"] == [[2, 12345], [3, 2048]]
    # another job's GPU holding memory is not this job's failure
    assert gpu_released.verdict_released(gpus, {0}, never, 1024).verdict.value == "pass"
    assert gpu_released.verdict_released(gpus, {0}, never, 256).detail == \
        "gpu0 512 MiB still in use"
    # a live process is the more precise culprit and is named first
    held = [_gpu(2, memory_used_mib=12345, compute_pids=[77])]
    assert gpu_released.verdict_released(held, {2}, {77}.__contains__, 1024).detail == \
        "gpu2 pid 77 still running"


def test_xids_new_fatal_fails_old_or_benign_does_not():
    old = {"xid": 79, "gpu": 0, "time": 100.0}
    before = {"gathered_at": 200.0, "gpus": [_gpu(0, xids=[old])]}
    assert xid_during_job.verdict_xids(before, [_gpu(0, xids=[old])], [79]).verdict.value == "pass"
    benign = {"xid": 13, "gpu": 0, "time": 250.0}
    out = xid_during_job.verdict_xids(before, [_gpu(0, xids=[old, benign])], [79])
    assert out.verdict.value == "warn"
    fatal = {"xid": 48, "gpu": 3, "time": 260.0}
    out = xid_during_job.verdict_xids(before, [_gpu(3, xids=[fatal])], [48, 79])
    assert out.failed and out.detail == "xid 48 on gpu3 during the job"
    assert xid_during_job.verdict_xids(None, [], [48]).verdict.value == "skip"


def test_ecc_delta():
    before = {"gpus": [_gpu(0, ecc_volatile_uncorrected_dram=2, ecc_volatile_corrected=5)]}
    same = [_gpu(0, ecc_volatile_uncorrected_dram=2, ecc_volatile_corrected=5)]
    assert ecc_during_job.verdict_ecc(before, same).verdict.value == "pass"
    corr = [_gpu(0, ecc_volatile_uncorrected_dram=2, ecc_volatile_corrected=9)]
    assert ecc_during_job.verdict_ecc(before, corr).verdict.value == "warn"
    unc = [_gpu(0, ecc_volatile_uncorrected_dram=3, ecc_volatile_corrected=5)]
    out = ecc_during_job.verdict_ecc(before, unc)
    assert out.failed and "+1 uncorrectable DRAM ECC" in out.detail
    lost = [_gpu(0, lost=True)]
    assert ecc_during_job.verdict_ecc(before, lost).detail == "gpu0 fell off the bus during the job"


def test_sections_validate():
    with pytest.raises(config_mod.ConfigError, match=r"\[prolog\] budget"):
        config_mod.from_dict({"prolog": {"budget": 0}})
    with pytest.raises(config_mod.ConfigError, match=r"\[epilog\] process_grace"):
        config_mod.from_dict({"epilog": {"process_grace": -1}})
    with pytest.raises(config_mod.ConfigError, match=r"\[epilog\] memory_used_max_mib"):
        config_mod.from_dict({"epilog": {"memory_used_max_mib": -1}})
    assert config_mod.from_dict({}).epilog.memory_used_max_mib == 1024
    assert xid_during_job.fatal_xids(config_mod.from_dict({"epilog": {"fatal_xids": [79]}})) == {79}
    default = xid_during_job.fatal_xids(config_mod.from_dict({}))  # the XID policy's fatal set
    assert 79 in default and 13 not in default


def test_prolog_never_imports_torch(fake_node):
    """The prolog runs before every job: its whole path (a passing quick level) stays torch-free."""
    node = fake_node()
    node.prove()
    code = ("import sys; from airlock.hooks import prolog; rc = prolog.main(); "
            "print(rc, 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], env=node.env("prolog", job="7"),
                         cwd=node.root, capture_output=True, text=True, timeout=60)
    assert out.stdout.split() == ["0", "False"], out.stderr
    assert (node.root / "state" / "jobs" / "7.json").exists()
    assert node.slurm.calls() == []  # the pass path asks Slurm nothing


# --- the real cluster ---------------------------------------------------------------------------












def test_the_epilogs_checks_are_registry_checks_that_observe_mode_knows(fake_node):
    """Issue 24: gpu_released, xid_during_job and ecc_during_job lived in hooks/epilog.py,
    outside checks/ and the registry, so `[checks] observe = ["gpu_released"]` was refused as an
    unknown check (the epilog then failed closed on a config error). Now they are the registry's
    "epilog" level: observed, a leftover process is seen and recorded, and drains nothing."""
    import json

    from airlock.checks import registry

    assert [c.name for c in registry.for_level(registry.EPILOG)] == [
        "gpu_released", "xid_during_job", "ecc_during_job"]
    assert not {"gpu_released", "xid_during_job", "ecc_during_job"} & {
        c.name for level in registry.ALL for c in registry.for_level(level)}
    node = fake_node()
    node.prove()
    node.write_config('[epilog]\nprocess_grace = 0\n[checks]\nobserve = ["gpu_released"]\n')
    left = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        entry = json.loads(node.sim.read_text())
        entry["nodes"][node.name]["gpus"][0].update(compute_pids=[left.pid],
                                                     memory_used_mib=30000)
        node.sim.write_text(json.dumps(entry))
        out = node.run("epilog", job="43", SLURM_JOB_GPUS="0")
        assert out.returncode == 0 and "epilog warn" in out.stderr, out.stderr
        assert node.slurm.updates() == []  # observed: seen, never a drain
        run = json.loads((node.root / "state" / "latest.json").read_text())
        rec = next(r for r in run["checks"] if r["check"] == "gpu_released")
        assert rec["verdict"] == "fail" and rec["observe"] is True, rec
        assert f"pid {left.pid} still running" in rec["detail"]
    finally:
        left.kill()
        left.wait()
