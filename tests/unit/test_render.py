"""`airlock render`: the committed slurm.conf.d fragments are exactly what the template renders
for their releases, each release gets the settings measured best for it (and none that cannot
work), bad values are one-line errors, the systemd unit runs `airlock recover` with the config and
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

from airlock.admin import render
from airlock.config.loader import DEFAULT_PATH
from airlock.errors import AirlockError
from airlock.slurm import client as slurm
from tests.unit.fakeslurm import FakeSlurm

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name, release", sorted(render.COMMITTED.items()))
def test_committed_fragments_match_template(name, release):
    committed = (ROOT / "slurm.conf.d" / name).read_text()
    assert committed == render.slurm_conf(release), (
        f"slurm.conf.d/{name} drifted from templates/slurm-airlock.conf.j2: run `airlock render "
        f"slurm-conf --slurm-version {release} -o slurm.conf.d/{name}`")


def _settings(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines()
                if line and not line.startswith("#"))


def test_fragment_carries_every_line_for_the_install_paths():
    text = render.slurm_conf("22.05", bin_dir="/opt/airlock/bin", interval=120,
                             node_state="cycle", prolog_epilog_timeout=45,
                             reboot_program="/usr/sbin/reboot")
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
    assert "RebootProgram" not in _settings(render.slurm_conf("22.05"))
    assert "wrapper that exports AIRLOCK_CONFIG" in render.slurm_conf("22.05",
                                                                    config="/srv/a.toml")
    assert "wrapper" not in render.slurm_conf("22.05")


def test_site_scheduler_parameters_are_kept_and_nohold_added_once():
    text = render.slurm_conf("24.11",
                             scheduler_parameters="bf_continue, nohold_on_prolog_fail,defer")
    assert _settings(text)["SchedulerParameters"] == "bf_continue,defer,nohold_on_prolog_fail"
    with pytest.raises(AirlockError, match="without spaces"):
        render.slurm_conf("24.11", scheduler_parameters="bf_continue,max rpc")


@pytest.mark.parametrize("kwargs, message", [
    ({"node_state": "SOMETIMES"}, "node state 'SOMETIMES'"),
    ({"interval": -1}, "interval -1"),
    ({"prolog_epilog_timeout": 0}, "prolog-epilog-timeout"),
    ({"bin_dir": "relative/bin"}, "must be an absolute path"),
    ({"prolog": "/opt/my prolog"}, "must be an absolute path without spaces"),
    ({"slurm_version": "latest"}, "slurm version 'latest'"),
])
def test_bad_values_are_clear_errors(kwargs, message):
    with pytest.raises(AirlockError, match=message):
        render.slurm_conf(**{"slurm_version": "26.05", **kwargs})


# --- what each release offers the gate (measured: docs/guide.md, Supported Slurm) -------------
def health(release: str, interval: int, node_state: str = "") -> dict[str, str]:
    return render.healthcheck_settings(slurm.parse_version(release), interval, node_state)


def test_26_05_timeout_is_below_every_interval_and_older_releases_have_none():
    """26.05 wants HealthCheckTimeout below HealthCheckInterval (slurmctld logs an error
    otherwise, and Slurm's default of 60 is not below a short interval): for every interval
    Slurm accepts, the rendered timeout is at least 1 and below it, and as long as allowed up
    to BOOT_HOLD_MAX_S (how long a boot-time run may hold the node's registration)."""
    for interval in range(2, 65536):
        timeout = int(health("26.05", interval)["HealthCheckTimeout"])
        assert 1 <= timeout < interval and timeout == min(interval - 1, render.BOOT_HOLD_MAX_S)
    assert health("26.05", 0)["HealthCheckTimeout"] == str(render.BOOT_HOLD_MAX_S)
    with pytest.raises(AirlockError, match="interval 1: .*2 or more"):
        health("26.05", 1)
    for release in ("22.05", "24.11", "25.05", "25.11"):
        assert "HealthCheckTimeout" not in health(release, 5)


def test_interval_0_means_start_only_where_slurm_has_it_and_is_refused_before():
    """Measured on 22.05, 24.11 and 26.05: HealthCheckInterval=0 switches the program off even
    at slurmd start; START_ONLY (25.11+) runs it there only."""
    for release in ("25.11", "26.05"):
        assert health(release, 0)["HealthCheckNodeState"] == "START_ONLY"
        assert health(release, 0, "start_only")["HealthCheckNodeState"] == "START_ONLY"
    for release in ("22.05", "24.11"):
        with pytest.raises(AirlockError, match="never runs the HealthCheckProgram, not even"):
            health(release, 0)
    with pytest.raises(AirlockError, match="interval 0 with node state ANY"):
        health("26.05", 0, "ANY")
    with pytest.raises(AirlockError, match="START_ONLY with interval 300"):
        health("26.05", 300, "START_ONLY")
    assert health("26.05", 300) == {"HealthCheckInterval": "300", "HealthCheckNodeState": "ANY",
                                    "HealthCheckTimeout": "299"}


def test_reboot_only_is_refused_on_every_release():
    """REBOOT_ONLY (26.05) never isolates a new node or an unplanned reboot, and runs after a
    planned one has registered (measured: the node was IDLE when the program ran)."""
    for release in ("22.05", "26.05"):
        with pytest.raises(AirlockError, match="REBOOT_ONLY.*never isolated"):
            health(release, 300, "REBOOT_ONLY")


def test_running_release_is_asked_of_the_running_slurm(tmp_path):
    fake = FakeSlurm(tmp_path / "slurm", nodes=["n1"])
    client = slurm.Slurm(bin_dir=fake.bin_dir)
    assert render.running_release(client) == "22.05"  # the fake is 22.05's scontrol
    fake.fail("show")  # no controller: the local scontrol's version
    assert render.running_release(client) == "22.05"
    with pytest.raises(AirlockError, match="cannot tell the Slurm release here.*--slurm-version"):
        render.running_release(slurm.Slurm(bin_dir=str(tmp_path)))  # no Slurm at all


def test_cli_writes_file_atomically_and_reports_errors(tmp_path):
    out = tmp_path / "airlock.conf"
    run = subprocess.run([sys.executable, "-m", "airlock.cli", "render", "slurm-conf",
                          "--slurm-version", "26.05", "--bin-dir", "/opt/x", "-o", str(out)],
                         capture_output=True, text=True, timeout=30)
    assert run.returncode == 0, run.stderr
    assert "HealthCheckProgram=/opt/x/airlock-healthcheck" in out.read_text()
    assert [p.name for p in tmp_path.iterdir()] == ["airlock.conf"]
    bad = subprocess.run([sys.executable, "-m", "airlock.cli", "render", "slurm-conf",
                          "--slurm-version", "24.11", "--interval", "0"], capture_output=True,
                         text=True, timeout=30)
    assert bad.returncode == 2
    assert bad.stderr.strip() == (
        "airlock: interval 0: Slurm 24.11 then never runs the HealthCheckProgram, not even at "
        "slurmd start (START_ONLY, which runs it there only, is 25.11+); use an interval")


def test_example_config_is_valid(tmp_path):
    from airlock.config import loader as config_mod

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

    from airlock.admin.render import systemd_unit
    from airlock.errors import AirlockError

    for kwargs, needle in (
        ({"config": "/etc/air lock/airlock.toml"}, "without spaces"),
        ({"config": "airlock.toml"}, "absolute path"),
        ({"state_dir": "/srv/airlock"}, "StateDirectory"),
    ):
        with _pytest.raises(AirlockError, match=needle):
            systemd_unit("/usr/local/bin/airlock", **kwargs)


@pytest.mark.parametrize("release, qos_told", [("22.05", False), ("24.11", False),
                                               ("26.05", True)])
def test_preflight_adds_the_slurm_lines_it_needs_per_release(release, qos_told):
    """[preflight] enabled: PrologFlags=Alloc (every member's prolog at allocation), a
    PrologEpilogTimeout raised above [prolog] budget + [preflight] budget + the spare seconds,
    and, before 26.05, the note that a QOS filter costs a Slurm call; off: none of it."""
    from airlock.preflight.entry import SPARE_S

    plain = _settings(render.slurm_conf(release))
    assert "PrologFlags" not in plain and plain["PrologEpilogTimeout"] == "60"
    text = render.slurm_conf(release, preflight=(10.0, 90.0))
    got = _settings(text)
    assert got["PrologFlags"] == "Alloc"
    assert int(got["PrologEpilogTimeout"]) >= 10 + 90 + SPARE_S
    assert {k: v for k, v in got.items() if k not in ("PrologFlags", "PrologEpilogTimeout")} \
        == {k: v for k, v in plain.items() if k != "PrologEpilogTimeout"}
    assert ("does not give the prolog SLURM_JOB_QOS" in text) is not qos_told
    # a longer timeout the site asked for is kept
    assert _settings(render.slurm_conf(release, prolog_epilog_timeout=600,
                                       preflight=(10.0, 90.0)))["PrologEpilogTimeout"] == "600"


def test_cli_renders_the_preflight_lines_when_the_config_enables_it(tmp_path):
    conf = tmp_path / "airlock.toml"

    def run():
        out = subprocess.run([sys.executable, "-m", "airlock.cli", "render", "slurm-conf",
                              "--slurm-version", "24.11", "--airlock-config", str(conf)],
                             capture_output=True, text=True, timeout=30)
        assert out.returncode == 0, out.stderr
        return _settings(out.stdout)

    conf.write_text("[preflight]\nenabled = true\nbudget = 150.0\n")
    got = run()
    assert got["PrologFlags"] == "Alloc" and int(got["PrologEpilogTimeout"]) >= 168
    conf.write_text("[preflight]\nenabled = false\n")
    assert "PrologFlags" not in run()
