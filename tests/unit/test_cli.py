"""The CLI: every command loads and answers --help; the root lists exactly the commands."""

from __future__ import annotations

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
