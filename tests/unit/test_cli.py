"""The CLI: every command loads and answers --help; the root lists exactly the commands."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from airlock.cli import COMMANDS


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_command_loads(command):
    out = subprocess.run([sys.executable, "-m", "airlock.cli", command, "--help"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "Traceback" not in out.stderr and "Usage: " in out.stdout


def test_root_lists_the_commands():
    out = subprocess.run([sys.executable, "-m", "airlock.cli", "--help"], capture_output=True,
                         text=True, timeout=60)
    listed = {line.split()[0] for line in out.stdout.split("Commands:")[1].splitlines()
              if line.strip()}
    assert listed == set(COMMANDS)


def test_check_without_a_config_file_uses_the_defaults(tmp_path):
    """The first command a new user types: no /etc/airlock/airlock.toml is not an error. The
    defaults put its results in /var/lib/airlock: it runs in a mount namespace of its own over
    an empty /var/lib, so that they land there, never in the host's."""
    from airlock.config import loader as config

    if os.path.exists(config.DEFAULT_PATH):
        pytest.fail(f"this test needs no {config.DEFAULT_PATH} on the machine")
    unshare = shutil.which("unshare")
    if unshare is None:
        pytest.fail("unshare (util-linux) is needed")
    env = {k: v for k, v in os.environ.items() if k != "AIRLOCK_CONFIG"}
    script = 'mount -t tmpfs airlock-unit /var/lib && "$@" && ls /var/lib/airlock'
    out = subprocess.run([unshare, "--mount", "--propagation", "private", "sh", "-c", script,
                          "sh", sys.executable, "-m", "airlock.cli", "check", "--only",
                          "memory", "--node", "clitest", "--json"], capture_output=True,
                         text=True, env=env, timeout=60)
    assert out.returncode == 0, out.stderr
    assert '"verdict": "pass"' in out.stdout
    assert "latest.json" in out.stdout.split()  # written under the default state_dir
    named = subprocess.run([sys.executable, "-m", "airlock.cli", "check", "--only", "memory"],
                           capture_output=True, text=True, timeout=60,
                           env={**env, "AIRLOCK_CONFIG": str(tmp_path / "absent.toml")})
    assert named.returncode == 2
    assert named.stderr.strip() == f"airlock: config {tmp_path / 'absent.toml'}: file not found"


def _verdict_check(verdict: str):
    from airlock.checks import base

    def check(ctx):
        if verdict == "error":
            return base.inconclusive("probe", "no verdict: the tool hung")
        return (base.failed if verdict == "fail" else base.passed)("probe", verdict)
    return check


@pytest.mark.parametrize("verdict, rc", [("pass", 0), ("fail", 1), ("error", 2)])
def test_check_exit_code_is_the_run_s_verdict(tmp_path, monkeypatch, verdict, rc):
    """README: `airlock check` exits 0 on a pass, 1 on a failure, 2 when it could not see the
    node (a check without a verdict is no pass), as it does for a config error."""
    from click.testing import CliRunner

    from airlock.checks import registry

    monkeypatch.setattr(sys.modules[__name__], "probe", _verdict_check(verdict), raising=False)
    spec = registry.CheckSpec("probe", registry.ALL, f"{__name__}:probe", timeout=5)
    monkeypatch.setattr(registry, "for_level", lambda level, only=None: [spec])
    conf = tmp_path / "airlock.toml"
    conf.write_text(f'state_dir = "{tmp_path}/state"\nlog_dir = "{tmp_path}/log"\n')
    from airlock.cli import cli

    out = CliRunner().invoke(cli, ["--config", str(conf), "check", "--node", "n1", "--json"])
    assert out.exit_code == rc, out.output
    assert f'"verdict": "{verdict}"' in out.output
