"""`airlock render`: the committed slurm.conf.d fragment is exactly what the template renders,
bad values are one-line errors, and the other renderings are complete. (That Slurm accepts the
rendered fragment is proved in test_doctor.py, whose cluster Includes it.)"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from airlock import render
from airlock.errors import AirlockError

ROOT = Path(__file__).resolve().parent.parent


def test_committed_fragment_matches_template():
    committed = (ROOT / "slurm.conf.d" / "airlock.conf").read_text()
    assert committed == render.slurm_conf(), (
        "slurm.conf.d/airlock.conf drifted from templates/slurm-airlock.conf.j2: run "
        "`airlock render slurm-conf -o slurm.conf.d/airlock.conf`")


def _settings(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines()
                if line and not line.startswith("#"))


def test_fragment_carries_every_line_for_the_install_paths():
    text = render.slurm_conf(bin_dir="/opt/airlock/bin", interval=120, node_state="cycle",
                             prolog_epilog_timeout=45, reboot_program="/usr/sbin/reboot")
    assert _settings(text) == {
        "HealthCheckProgram": "/opt/airlock/bin/airlock-healthcheck",
        "HealthCheckInterval": "120",
        "HealthCheckNodeState": "CYCLE",
        "Prolog": "/opt/airlock/bin/airlock-prolog",
        "Epilog": "/opt/airlock/bin/airlock-epilog",
        "PrologEpilogTimeout": "45",
        "RebootProgram": "/usr/sbin/reboot",
    }
    assert "RebootProgram" not in _settings(render.slurm_conf())
    assert "wrapper that exports AIRLOCK_CONFIG" in render.slurm_conf(config="/srv/a.toml")
    assert "wrapper" not in render.slurm_conf()


@pytest.mark.parametrize("kwargs, message", [
    ({"node_state": "SOMETIMES"}, "node state 'SOMETIMES'"),
    ({"interval": -1}, "interval -1"),
    ({"prolog_epilog_timeout": 0}, "prolog-epilog-timeout"),
    ({"bin_dir": "relative/bin"}, "must be an absolute path"),
    ({"prolog": "/opt/my prolog"}, "must be an absolute path without spaces"),
])
def test_bad_values_are_clear_errors(kwargs, message):
    with pytest.raises(AirlockError, match=message):
        render.slurm_conf(**kwargs)


def test_cli_writes_file_atomically_and_reports_errors(tmp_path):
    out = tmp_path / "airlock.conf"
    run = subprocess.run([sys.executable, "-m", "airlock.cli", "render", "slurm-conf",
                          "--bin-dir", "/opt/x", "-o", str(out)], capture_output=True, text=True,
                         timeout=30)
    assert run.returncode == 0, run.stderr
    assert "HealthCheckProgram=/opt/x/airlock-healthcheck" in out.read_text()
    assert [p.name for p in tmp_path.iterdir()] == ["airlock.conf"]
    bad = subprocess.run([sys.executable, "-m", "airlock.cli", "render", "slurm-conf",
                          "--interval", "-5"], capture_output=True, text=True, timeout=30)
    assert bad.returncode == 2
    assert bad.stderr.strip() == "airlock: interval -5: must be >= 0 (0 disables the periodic run)"


def test_example_config_is_valid(tmp_path):
    from airlock import config as config_mod

    path = tmp_path / "airlock.toml"
    path.write_text(render.example_config())
    cfg = config_mod.load(path)
    for name in config_mod.SECTIONS:
        cfg.section(name)
