"""`airlock doctor` against a real cluster whose slurm.conf Includes the fragment `airlock render
slurm-conf` produced (so this also proves Slurm accepts the rendered fragment), then broken item
by item."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from airlock import doctor
from tests.unit.fakeslurm import FakeSlurm


def test_doctor_unreachable_slurm_is_one_line(tmp_path):
    fake = FakeSlurm(tmp_path / "slurm", nodes=["n1"])
    fake.unreachable()  # slurmctld away: scontrol answers with its own error
    conf = tmp_path / "airlock.toml"
    conf.write_text(f'state_dir = "{tmp_path}/s"\nlog_dir = "{tmp_path}/l"\n'
                    f'[slurm]\nbin_dir = "{fake.bin_dir}"\ntimeout = 5\n')
    env = {**os.environ, "AIRLOCK_CONFIG": str(conf)}
    out = subprocess.run([sys.executable, "-m", "airlock.cli", "doctor", "--node", "n1",
                          "--no-torch"], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 1
    assert "Traceback" not in out.stderr
    ping = [ln for ln in out.stdout.splitlines() if "scontrol ping:" in ln]
    assert len(ping) == 1 and ping[0].startswith("FAIL") and "is DOWN" in ping[0], ping
    assert "NVML:" in out.stdout  # the items after Slurm are still checked


def test_interval_and_timeout_items():
    items = doctor.check_interval({"HealthCheckInterval": "0"}, 30)
    assert items[0].status == "WARN" and "only at slurmd start" in items[0].detail
    assert items[1].status == "WARN"  # PrologEpilogTimeout unset
    assert doctor.check_interval({"HealthCheckInterval": "40 sec"}, 30)[0].status == "WARN"
    assert doctor.check_interval({"HealthCheckInterval": "7200"}, 30)[0].status == "WARN"
    ok = doctor.check_interval({"HealthCheckInterval": "300", "HealthCheckNodeState": "ANY",
                                "PrologEpilogTimeout": "60"}, 30)
    assert [i.status for i in ok] == ["OK", "OK"]
    assert doctor.check_interval({"HealthCheckInterval": "x"}, 30)[0].status == "FAIL"
    unlimited = doctor.check_interval({"HealthCheckInterval": "300",
                                       "PrologEpilogTimeout": "65534"}, 30)
    assert unlimited[1].status == "WARN"


def test_torch_probe_reports_cpu_only_torch():
    (item,) = doctor.check_torch()
    # This machine has a CPU build of torch: fine where no GPU is expected.
    assert item.status == "OK" and "CPU-only build" in item.detail, item


def test_a_cpu_only_torch_fails_on_a_node_whose_profile_expects_gpus():
    """Issue 17: the heavy checks never fall back to the CPU on a GPU node, so a CPU wheel
    installed by mistake fails every registration; doctor says so first."""
    (item,) = doctor.check_torch(gpus=doctor.Gpus(8, "h100-sxm-8x"))
    assert item.status == "FAIL", item
    assert item.detail == ("2.13.0+cpu, a CPU-only build: profile h100-sxm-8x expects 8 GPUs; "
                           "install a CUDA build of torch")
    (sim,) = doctor.check_torch(gpus=doctor.Gpus(8, "h100-sxm-8x", simulated=True))
    assert sim.status == "OK" and "stand-ins" in sim.detail


@pytest.mark.parametrize("seen, status, detail", [
    ({"version": "2.5.1", "cuda": "12.4", "devices": 0,
      "error": "RuntimeError: CUDA error 802: system not yet initialized"}, "FAIL",
     "2.5.1 (CUDA 12.4) sees 0 CUDA devices: profile h100 expects 8 GPUs: RuntimeError: CUDA "
     "error 802: system not yet initialized"),
    ({"version": "2.5.1", "cuda": "12.4", "devices": 8}, "OK",
     "2.5.1 (CUDA 12.4), 8 CUDA devices (profile h100 expects 8 GPUs)"),
])
def test_torch_judged_against_the_profile(seen, status, detail):
    item = doctor.judge_torch(seen, doctor.Gpus(8, "h100"))
    assert (item.status, item.detail) == (status, detail)


DATA = Path(__file__).parents[1] / "data"


@pytest.mark.parametrize("version", ["22.05", "24.11"])
def test_hooks_and_version_from_recorded_show_config(version):
    """22.05 prints `Prolog = x`; 24.11 prints `Prolog[0] = x` and leaves unset ones out."""
    conf = doctor.parse_show_config((DATA / version / "show-config.txt").read_text())
    for key in ("Prolog", "Epilog"):
        (path,) = doctor.hook_paths(conf, key)
        assert path.startswith("/tmp/alc-rec-") and path.endswith(f"/bin/{key.lower()}")
    items = {i.name: i for i in doctor.check_hooks(conf)}
    for key in ("Prolog", "Epilog"):  # the recording cluster's hooks: gone, not "not set"
        assert items[key].status == "FAIL" and "not set" not in items[key].detail
    (v,) = doctor.check_version(conf)
    assert v.status == "OK" and v.detail.startswith(version + ".") and "tested in CI" in v.detail


def test_hook_lists_and_untested_versions():
    conf = {"Prolog[1]": "/b,/c", "Prolog[0]": "/a", "Epilog": "(null)", "SLURM_VERSION": "23.02.7"}
    assert doctor.hook_paths(conf, "Prolog") == ["/a", "/b", "/c"]
    assert doctor.hook_paths(conf, "Epilog") == []
    assert doctor.hook_paths({"PrologSlurmctld": "/x"}, "Prolog") == []
    (v,) = doctor.check_version(conf)
    assert v.status == "WARN" and "never tested in CI" in v.detail and "22.05, 24.11" in v.detail
    assert doctor.check_version({})[0].status == "WARN"
