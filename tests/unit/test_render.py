"""`airlock render`: the committed slurm.conf.d fragment is exactly what the template renders,
bad values are one-line errors, the systemd unit runs `airlock recover` with the config and
parses as a unit (configparser, and systemd-analyze verify: setup installs it), and the example
config is valid. (That Slurm accepts the rendered fragment is proved in test_doctor.py, whose
cluster Includes it.)"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from airlock import render
from airlock.config import DEFAULT_PATH
from airlock.errors import AirlockError

ROOT = Path(__file__).resolve().parents[2]


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
        "SchedulerParameters": "nohold_on_prolog_fail",
        "RebootProgram": "/usr/sbin/reboot",
    }
    assert "RebootProgram" not in _settings(render.slurm_conf())
    assert "wrapper that exports AIRLOCK_CONFIG" in render.slurm_conf(config="/srv/a.toml")
    assert "wrapper" not in render.slurm_conf()


def test_site_scheduler_parameters_are_kept_and_nohold_added_once():
    text = render.slurm_conf(scheduler_parameters="bf_continue, nohold_on_prolog_fail,defer")
    assert _settings(text)["SchedulerParameters"] == "bf_continue,defer,nohold_on_prolog_fail"
    with pytest.raises(AirlockError, match="without spaces"):
        render.slurm_conf(scheduler_parameters="bf_continue,max rpc")


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


# --- the recovery service's systemd unit ------------------------------------------------------
# No rendered copy of the unit is shipped in the repository (only the template), so there is no
# drift to test: `airlock render systemd` is the one way to get it.


def _unit(text: str):
    import configparser

    # systemd's syntax: "=" only, repeatable keys, case-sensitive keys, no interpolation
    unit = configparser.ConfigParser(strict=False, interpolation=None, delimiters=("=",))
    unit.optionxform = str
    unit.read_string(text)
    return unit


def test_systemd_unit_runs_recover_with_the_config():
    unit = _unit(render.systemd_unit("/opt/airlock/bin/airlock", "/srv/airlock/airlock.toml"))
    assert unit.sections() == ["Unit", "Service", "Install"]
    service = unit["Service"]
    assert service["ExecStart"] == "/opt/airlock/bin/airlock recover"
    assert service["Environment"] == "AIRLOCK_CONFIG=/srv/airlock/airlock.toml"
    assert service["User"] == "root"
    assert service["StateDirectory"] == "airlock"  # /var/lib/airlock, the default db's folder
    assert service["Restart"] == "on-failure"
    assert unit["Unit"]["Documentation"] == "file:///srv/airlock/airlock.toml"
    assert "slurmctld.service" in unit["Unit"]["After"].split()
    assert unit["Install"]["WantedBy"] == "multi-user.target"


def test_systemd_unit_optional_variables():
    unit = _unit(render.systemd_unit("/usr/bin/airlock", "/etc/airlock/airlock.toml",
                                     user="slurm", interval=15,
                                     state_dir="/var/lib/airlock-recovery"))
    assert unit["Service"]["ExecStart"] == "/usr/bin/airlock recover --interval 15"
    assert unit["Service"]["User"] == "slurm"
    assert unit["Service"]["StateDirectory"] == "airlock-recovery"


def test_systemd_unit_passes_systemd_analyze_verify(tmp_path):
    """systemd's own parser, where the machine has it (Debian's `systemd` package): no error and
    no warning (an unknown key or a bad value is only a warning there). The unit must name an
    executable that exists, so it points at this install's `airlock`."""
    airlock_bin = shutil.which("airlock") or str(Path(sys.executable).with_name("airlock"))
    assert os.access(airlock_bin, os.X_OK), f"no airlock entry point at {airlock_bin}"
    path = tmp_path / "airlock-recover.service"
    path.write_text(render.systemd_unit(airlock_bin, "/etc/airlock/airlock.toml"))
    assert _unit(path.read_text())["Service"]["ExecStart"] == f"{airlock_bin} recover"
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.fail("systemd-analyze is needed (scripts/setup.sh installs systemd)")
    run = subprocess.run([analyze, "verify", str(path)], capture_output=True, text=True,
                         timeout=60)
    assert run.returncode == 0 and not run.stderr.strip(), run.stderr
    # and the check is real: the same verify rejects a unit whose ExecStart cannot run
    path.write_text(render.systemd_unit(str(tmp_path / "missing" / "airlock"),
                                        "/etc/airlock/airlock.toml"))
    bad = subprocess.run([analyze, "verify", str(path)], capture_output=True, text=True,
                         timeout=60)
    assert bad.returncode != 0 and "is not executable" in bad.stderr


def test_systemd_cli_writes_the_unit(tmp_path):
    out = tmp_path / "airlock-recover.service"
    run = subprocess.run([sys.executable, "-m", "airlock.cli", "render", "systemd",
                          "--airlock-bin", "/opt/x/bin/airlock", "--airlock-config",
                          "/etc/x/airlock.toml", "-o", str(out)], capture_output=True,
                         text=True, timeout=30)
    assert run.returncode == 0, run.stderr
    assert out.read_text() == render.systemd_unit("/opt/x/bin/airlock", "/etc/x/airlock.toml")
    assert [p.name for p in tmp_path.iterdir()] == ["airlock-recover.service"]
    # without --airlock-bin the unit runs the airlock found on PATH, by its absolute path
    found = subprocess.run([sys.executable, "-m", "airlock.cli", "render", "systemd"],
                           capture_output=True, text=True, timeout=30)
    assert found.returncode == 0, found.stderr
    exec_start = _unit(found.stdout)["Service"]["ExecStart"]
    assert exec_start.endswith("/airlock recover") and exec_start.startswith("/")
    assert _unit(found.stdout)["Service"]["Environment"] == f"AIRLOCK_CONFIG={DEFAULT_PATH}"


def test_systemd_unit_refuses_paths_systemd_would_misread():
    import pytest as _pytest

    from airlock.errors import AirlockError
    from airlock.render import systemd_unit

    for kwargs, needle in (
        ({"config": "/etc/air lock/airlock.toml"}, "without spaces"),
        ({"config": "airlock.toml"}, "absolute path"),
        ({"state_dir": "/srv/airlock"}, "StateDirectory"),
    ):
        with _pytest.raises(AirlockError, match=needle):
            systemd_unit("/usr/local/bin/airlock", **kwargs)
