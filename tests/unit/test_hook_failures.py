"""Issue 17, section 2: the last fail-opens. Each test runs a real hook as Slurm runs it (a child
process, SLURMD_NODENAME and no PATH) against a scontrol in `[slurm] bin_dir` that stands in
for the controller, so no test here can reach a real controller."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from airlock.dev.cluster import healthy_gpus
from airlock.dev.proof import prove_boot

UNREACHABLE = """#!/bin/sh
echo "$@" >> "{log}"
echo "slurm_load_node error: Unable to contact slurm controller (connect failure)" >&2
exit 1
"""


def setup(tmp_path: Path, gpus: int, scontrol: str) -> tuple[Path, Path]:
    sim = tmp_path / "gpus.json"
    sim.write_text(json.dumps({"nodes": {"n1": {"gpus": healthy_gpus(gpus)}}}))
    bin_dir, log = tmp_path / "bin", tmp_path / "scontrol.log"
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text(scontrol.format(log=log))
    (bin_dir / "scontrol").chmod(0o755)
    conf = tmp_path / "airlock.toml"
    conf.write_text(f'state_dir = "{tmp_path}/state"\nlog_dir = "{tmp_path}/log"\n'
                    f'[nvml]\nsimulate = "{sim}"\n'
                    f'[slurm]\nbin_dir = "{bin_dir}"\ntimeout = 5\n'
                    # the quick level's profile: 8 GPUs expected
                    f'[profile]\nname = "h100-sxm-8x"\n')
    return conf, log


def run_hook(module: str, conf: Path, tmp_path: Path, job: str = "") -> subprocess.CompletedProcess:
    env = {"AIRLOCK_CONFIG": str(conf), "SLURMD_NODENAME": "n1",
           "AIRLOCK_RUNTIME_DIR": str(tmp_path / "run")}
    if job:
        env["SLURM_JOB_ID"] = job
    return subprocess.run([sys.executable, "-m", module], env=env, capture_output=True,
                          text=True, timeout=120)


def test_prolog_refuses_the_job_when_its_failure_drain_fails(tmp_path):
    """A proven boot, a quick check that fails (a GPU fell off), and a controller that does not
    answer the drain: on cb0b8e2 guard() took the SlurmError for Airlock's own trouble on a
    proven boot and exited 0, so the job ran on a node that had just failed. It must exit 1:
    Slurm's own prolog-failure drain then holds the node and the job is requeued."""
    conf, log = setup(tmp_path, gpus=7, scontrol=UNREACHABLE)
    prove_boot(conf, "n1")
    p = run_hook("airlock.hooks.prolog", conf, tmp_path, job="42")
    assert p.returncode == 1, p.stderr
    assert "update" in log.read_text() or "show" in log.read_text()  # the drain was tried
    assert "gpu_count" in p.stderr and "drain failed" in p.stderr, p.stderr


def test_a_pid_without_its_start_time_is_never_trusted_or_killed():
    """Issue 17: with pid_start None (a suite that exited before the hook read its start time;
    an adopted record), alive() took any process with that PID for the suite, and the watch
    SIGKILLed its whole process group: an unrelated process that reused the PID."""
    from airlock.hooks import gate
    from airlock.hw import boot

    stranger = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                                start_new_session=True)
    try:
        assert not boot.alive(stranger.pid, None)
        gate._kill_session(stranger.pid, None)
        assert stranger.poll() is None, "an unrelated process group was killed"
        assert boot.alive(stranger.pid, boot.process_start(stranger.pid))
    finally:
        stranger.kill()
        stranger.wait()
