"""`airlock doctor` against a real cluster whose slurm.conf Includes the fragment `airlock render
slurm-conf` produced (so this also proves Slurm accepts the rendered fragment), then broken item
by item."""

from __future__ import annotations

import os
import subprocess
import sys

from airlock import doctor


def test_doctor_unreachable_slurm_is_one_line(tmp_path):
    conf = tmp_path / "airlock.toml"
    conf.write_text(f'state_dir = "{tmp_path}/s"\nlog_dir = "{tmp_path}/l"\n'
                    f'[slurm]\nconf = "{tmp_path}/no-slurm.conf"\ntimeout = 5\n')
    env = {**os.environ, "AIRLOCK_CONFIG": str(conf)}
    out = subprocess.run([sys.executable, "-m", "airlock.cli", "doctor", "--node", "n1",
                          "--no-torch"], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 1
    assert "Traceback" not in out.stderr
    ping = [ln for ln in out.stdout.splitlines() if "scontrol ping:" in ln]
    assert len(ping) == 1 and ping[0].startswith("FAIL")
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
    # This machine has a CPU build of torch: the deep level works, on CPU only.
    assert item.status == "WARN" and "without CUDA" in item.detail, item
