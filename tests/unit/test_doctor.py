"""`airlock doctor` against a real cluster whose slurm.conf Includes the fragment `airlock render
slurm-conf` produced (so this also proves Slurm accepts the rendered fragment), then broken item
by item."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from airlock.admin import doctor
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
    assert items[0].status == "WARN" and "never runs the HealthCheckProgram, not even at " \
        "slurmd start" in items[0].detail
    start_only = doctor.check_interval({"HealthCheckInterval": "0",
                                        "HealthCheckNodeState": "START_ONLY"}, 30)
    assert start_only[0].status == "OK" and "at slurmd start only" in start_only[0].detail
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


@pytest.mark.parametrize("version", ["22.05", "24.11", "26.05"])
def test_hooks_and_version_from_recorded_show_config(version):
    """22.05 prints `Prolog = x`; 24.11+ print `Prolog[0] = x` and leave unset ones out."""
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
    assert v.status == "WARN" and "never tested in CI" in v.detail \
        and "22.05, 24.11, 26.05" in v.detail
    assert doctor.check_version({})[0].status == "WARN"


def mechanisms(version: str, budget: float = 30, **conf: str) -> dict[str, doctor.Item]:
    return {i.name: i for i in doctor.check_mechanisms({"SLURM_VERSION": version, **conf},
                                                       budget)}


def test_mechanisms_from_recorded_show_config():
    """What each release offers is asked of the running Slurm: 26.05's show config carries
    HealthCheckTimeout (as "0 sec" when unset: slurmd applies 60), older ones do not."""
    old = doctor.check_mechanisms(doctor.parse_show_config(
        (DATA / "24.11" / "show-config.txt").read_text()), 30)
    assert [(i.name, i.status) for i in old] == [("HealthCheckTimeout", "OK")]
    assert "none in Slurm 24.11: the fixed 60 s" in old[0].detail
    new = doctor.parse_show_config((DATA / "26.05" / "show-config.txt").read_text())
    # the recording cluster's slurm.conf is what `airlock render` sets for a 3600 s interval
    assert new["HealthCheckTimeout"] == "600 sec" and new["HealthCheckInterval"] == "3600 sec"
    assert [(i.name, i.status) for i in doctor.check_mechanisms(new, 30)] == [
        ("HealthCheckTimeout", "OK")]
    # measured on 26.05.5: an unset HealthCheckTimeout shows as "0 sec" (slurmd applies 60)
    (item,) = doctor.check_mechanisms({**new, "HealthCheckTimeout": "0 sec"}, 30)
    assert item.status == "WARN" and item.detail.startswith("not set (Slurm's 60 s): at boot")
    assert item.detail.endswith("`airlock render slurm-conf` sets 600")


def test_a_better_mechanism_available_but_unused_is_named():
    unset_short = mechanisms("26.05.5", HealthCheckInterval="5 sec", HealthCheckTimeout="0 sec")
    assert "not below HealthCheckInterval=5 (slurmctld logs an error)" in \
        unset_short["HealthCheckTimeout"].detail
    assert unset_short["HealthCheckTimeout"].detail.endswith("sets 4")
    too_long = mechanisms("26.05.5", HealthCheckInterval="300 sec", HealthCheckTimeout="300 sec")
    assert too_long["HealthCheckTimeout"].status == "WARN" and "not below" in \
        too_long["HealthCheckTimeout"].detail
    short = mechanisms("26.05.5", HealthCheckInterval="5 sec", HealthCheckTimeout="4 sec")
    assert short["HealthCheckTimeout"].status == "WARN"
    assert "quick level gets about 2.5 s of its [healthcheck] budget of 30 s" in \
        short["HealthCheckTimeout"].detail
    assert mechanisms("26.05.5", budget=2, HealthCheckInterval="5 sec",
                      HealthCheckTimeout="4 sec")["HealthCheckTimeout"].status == "OK"
    good = mechanisms("26.05.5", HealthCheckInterval="300 sec", HealthCheckNodeState="ANY",
                      HealthCheckTimeout="299 sec")
    assert [(i.name, i.status) for i in good.values()] == [("HealthCheckTimeout", "OK")]
    # no periodic run: START_ONLY where Slurm has it (25.11+), nothing to offer before
    zero = mechanisms("25.11.2", HealthCheckInterval="0 sec", HealthCheckNodeState="ANY")
    assert zero["HealthCheckNodeState"].status == "WARN" and "has START_ONLY" in \
        zero["HealthCheckNodeState"].detail
    assert "HealthCheckNodeState" not in mechanisms("24.11.5", HealthCheckInterval="0 sec")
    only = mechanisms("26.05.5", HealthCheckInterval="0 sec", HealthCheckNodeState="START_ONLY",
                      HealthCheckTimeout="600 sec")
    assert [(i.name, i.status) for i in only.values()] == [("HealthCheckTimeout", "OK")]


def test_reboot_only_fails_and_start_only_with_an_interval_warns():
    reboot = mechanisms("26.05.5", HealthCheckInterval="300 sec",
                        HealthCheckNodeState="REBOOT_ONLY", HealthCheckTimeout="299 sec")
    assert reboot["HealthCheckNodeState"].status == "FAIL"
    assert "new nodes and unplanned reboots are never isolated" in \
        reboot["HealthCheckNodeState"].detail
    start = mechanisms("26.05.5", HealthCheckInterval="300 sec",
                       HealthCheckNodeState="START_ONLY", HealthCheckTimeout="299 sec")
    assert start["HealthCheckNodeState"].status == "WARN"
    assert "no periodic quick level" in start["HealthCheckNodeState"].detail
