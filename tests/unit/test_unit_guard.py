"""The unit tests' guard (tests/unit/conftest.py) holds: what reaches for the host's Slurm finds
a tripwire and fails the test, a process started without the guard's environment is refused,
and the hooks' runtime files land in the test's directory, never in the host's /run."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from airlock.config import loader as config_mod
from airlock.errors import SlurmError
from airlock.slurm.client import Slurm
from tests.unit import conftest

REPO = Path(__file__).resolve().parents[2]


def test_the_host_s_scontrol_is_out_of_reach_in_process(host_guard, monkeypatch):
    client = Slurm()  # no bin_dir: $PATH, then airlock.slurm.client's usual places
    assert Path(client.binary("scontrol")).parent == host_guard["bin_dir"]
    assert Path(Slurm(conf="/etc/slurm/slurm.conf").binary("srun")).parent == \
        host_guard["bin_dir"]
    with monkeypatch.context() as m:
        m.setenv("PATH", "/nonexistent-bin")  # no tripwire on it: the client's usual places
        assert Path(client.binary("scontrol")).parent == host_guard["bin_dir"]
    with pytest.raises(SlurmError, match="unit test reached for a real scontrol"):
        client.node("n1")
    assert host_guard["tripwire"].read_text() == "scontrol -o --future show node n1\n"
    host_guard["tripwire"].write_text("")  # seen: this test's own call, not a leak


def test_a_process_without_the_guard_is_refused_before_it_starts(tmp_path):
    conf = tmp_path / "airlock.toml"
    conf.write_text(f'state_dir = "{tmp_path}/state"\n')  # no [slurm] bin_dir
    # The guard judges the environment, not the program: a harmless one stands in for a hook,
    # so that a broken guard lets nothing reach the host.
    argv = [sys.executable, "-c", "import sys; sys.exit(3)"]
    slurmd_env = {"SLURMD_NODENAME": "n1", "AIRLOCK_CONFIG": str(conf)}  # no PATH
    with pytest.raises(AssertionError, match="could reach the host's Slurm or /run: no "):
        subprocess.run(argv, env=slurmd_env, capture_output=True)
    runtime = {config_mod.RUNTIME_ENV: os.environ[config_mod.RUNTIME_ENV]}
    with pytest.raises(AssertionError, match="nor a config with \\[slurm\\] bin_dir"):
        subprocess.run(argv, env={**slurmd_env, **runtime}, capture_output=True)
    with pytest.raises(AssertionError, match="no \\$AIRLOCK_RUNTIME_DIR outside /run"):
        subprocess.run(argv, env={**os.environ, config_mod.RUNTIME_ENV: "/run/airlock"},
                       capture_output=True)
    conf.write_text(f'state_dir = "{tmp_path}/state"\n[slurm]\nbin_dir = "{tmp_path}"\n[x\n')
    assert conftest.unguarded({**slurmd_env, **runtime}, "/t") == ""  # salvaged bin_dir


def test_hooks_remember_their_config_in_the_test_s_runtime_dir(fake_node, host_guard):
    node = fake_node()
    node.prove()
    out = node.run("healthcheck")
    assert out.returncode == 0, out.stderr
    name = Path(config_mod._memory(str(node.conf))).name
    assert (host_guard["runtime"] / name).exists()
    assert not (conftest.HOST_RUNTIME / name).exists()


def test_a_runtime_file_named_after_this_session_is_found(tmp_path, monkeypatch,
                                                          tmp_path_factory):
    base = tmp_path_factory.getbasetemp()
    fake_run = tmp_path / "run-airlock"
    fake_run.mkdir()
    monkeypatch.setattr(conftest, "HOST_RUNTIME", fake_run)
    monkeypatch.setenv(config_mod.RUNTIME_ENV, str(fake_run))
    config_mod.remember(config_mod.from_dict({}, path=str(tmp_path / "airlock.toml")))
    (fake_run / "config-etc_airlock_airlock.toml.json").write_text("{}")  # not this session's
    leaks = conftest.host_runtime_leaks(base)
    assert len(leaks) == 1 and "airlock.toml" in next(iter(leaks))
    (fake_run / leaks.pop()).unlink()  # else this test's own guard reports it, as it should


def test_a_test_that_escapes_fails(tmp_path):
    """An inner session with the guard: a call swallowed by the code under test still fails
    its test, and so does a hook started as slurmd would start it, without a fake."""
    (tmp_path / "conftest.py").write_text("from tests.unit.conftest import *  # noqa\n")
    (tmp_path / "test_escape.py").write_text(textwrap.dedent("""
        import subprocess, sys
        from airlock.slurm.client import Slurm

        def test_swallowed():
            try:
                Slurm().node("n1")
            except Exception:
                pass  # the code under test hides the failure; the guard does not

        def test_hook_without_a_fake():  # (a harmless stand-in: see the test above)
            subprocess.run([sys.executable, "-c", "pass"], env={"SLURMD_NODENAME": "n1"})
    """))
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rfE", "-p", "no:cacheprovider",
                          "-p", "no:xdist", str(tmp_path)], cwd=REPO, capture_output=True,
                         text=True, timeout=120)
    assert "1 failed, 1 passed, 1 error" in out.stdout, out.stdout + out.stderr
    assert "ERROR at teardown of test_swallowed" in out.stdout
    assert "the test reached for the host's Slurm: ['scontrol -o --future show node n1']" \
        in out.stdout
    assert "FAILED " in out.stdout and "test_hook_without_a_fake" in out.stdout
    assert "AssertionError: a unit test started" in out.stdout
