"""Unit tests never reach a real Slurm controller and never write the host's /run.

Every unit test runs with (autouse `host_guard`):

* $AIRLOCK_RUNTIME_DIR in its own temporary directory, so the config essentials a hook
  remembers (airlock.config.loader.remember) land there, not in the host's /run/airlock;
* a tripwire first on $PATH and as airlock.slurm.client's whole search list: scontrol, sinfo, srun,
  sbatch, ... that log the call and fail. A test that needs Slurm uses a fake one
  (tests/unit/fakeslurm.py) through `[slurm] bin_dir`; anything that reaches for the host's
  Slurm finds the tripwire instead, and the test fails naming the call;
* $SLURM_CONF naming a file that does not exist, so even a real scontrol found some other way
  has no controller to talk to.

A process a test starts with an environment of its own (a hook as slurmd runs it: no PATH)
inherits none of that, and airlock.slurm.client then finds the host's /usr/bin/scontrol. So such a
process is refused at its start unless its environment carries the runtime directory and
either the tripwire on its PATH or a config whose `[slurm] bin_dir` is set (a fake Slurm:
tests/unit/fakenode.py starts the hooks that way).

After the test, a call to the tripwire fails it, and so does a file in the host's /run/airlock
named after a config under this session's temporary directory (the name remember() gives it):
the mark of a process that escaped the rules above.
"""

from __future__ import annotations

import os
import re
import subprocess
import tomllib
from pathlib import Path

import pytest

from airlock.config import loader as config_mod
from airlock.slurm import client as slurm_mod
from tests.unit import fakeslurm
from tests.unit.fakenode import FakeNode

HOST_RUNTIME = Path("/run/airlock")


def _mangled(path: Path) -> str:
    """How airlock.config.loader._memory names the runtime file of a config under path."""
    return "config-" + re.sub(r"[^A-Za-z0-9._-]", "_", str(path).strip("/"))


def host_runtime_leaks(basetemp: Path) -> set[str]:
    try:
        names = os.listdir(HOST_RUNTIME)
    except OSError:
        return set()
    prefix = _mangled(basetemp)
    return {n for n in names if n.startswith(prefix)}


def configured_bin_dir(conf: str) -> str:
    """[slurm] bin_dir of a config file, also of one whose TOML is broken (as the hooks'
    salvage reads it: a `bin_dir = "..."` line)."""
    try:
        with open(conf, "rb") as fh:
            data = fh.read()
    except OSError:
        return ""
    try:
        return str(tomllib.loads(data.decode()).get("slurm", {}).get("bin_dir", ""))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError, AttributeError):
        m = re.search(rb'^\s*bin_dir\s*=\s*"([^"]+)"', data, re.M)
        return m.group(1).decode() if m else ""


def unguarded(env: dict, tripwire: str) -> str:
    """Why a process started with env could reach the host's Slurm or /run ("" if it cannot)."""
    runtime = env.get(config_mod.RUNTIME_ENV, "")
    if not runtime or runtime.startswith("/run"):
        return f"no ${config_mod.RUNTIME_ENV} outside /run"
    if tripwire in env.get("PATH", "").split(os.pathsep):
        return ""
    conf = env.get(config_mod.ENV_VAR, "")
    if conf and configured_bin_dir(conf):
        return ""
    return (f"neither the tripwire on PATH nor a config with [slurm] bin_dir "
            f"({config_mod.ENV_VAR}={conf or 'unset'})")


@pytest.fixture(autouse=True)
def host_guard(tmp_path_factory, monkeypatch):
    guard = tmp_path_factory.mktemp("guard")
    calls = guard / "tripwire.log"
    calls.touch()
    bin_dir = fakeslurm.tripwire(guard / "bin", calls)
    runtime = guard / "run"
    monkeypatch.setenv(config_mod.RUNTIME_ENV, str(runtime))
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.setenv("SLURM_CONF", str(guard / "no-slurm.conf"))
    monkeypatch.setattr(slurm_mod, "SEARCH_DIRS", (str(bin_dir),))
    slurm_mod._JSON_SUPPORT.clear()
    real_popen = subprocess.Popen

    class GuardedPopen(real_popen):
        def __init__(self, args, *a, **kw):
            env = kw.get("env")
            program = args[0] if isinstance(args, (list, tuple)) and args else ""
            if env is not None and not fakeslurm.is_fake(str(program)):
                why = unguarded(env, str(bin_dir))
                if why:
                    raise AssertionError(
                        f"a unit test started {args!r} with an environment of its own that "
                        f"could reach the host's Slurm or /run: {why} (use "
                        "tests/unit/fakenode.py, or pass os.environ on)")
            super().__init__(args, *a, **kw)

    monkeypatch.setattr(subprocess, "Popen", GuardedPopen)
    basetemp = tmp_path_factory.getbasetemp()
    before = host_runtime_leaks(basetemp)
    yield {"tripwire": calls, "bin_dir": bin_dir, "runtime": runtime}
    reached = calls.read_text().splitlines()
    leaked = sorted(host_runtime_leaks(basetemp) - before)
    problems = []
    if reached:
        problems.append(f"the test reached for the host's Slurm: {reached}")
    if leaked:
        problems.append(f"the test wrote the host's {HOST_RUNTIME}: {leaked}")
    if problems:
        pytest.fail("; ".join(problems) + " (tests/unit/conftest.py)", pytrace=False)


@pytest.fixture
def fake_node(tmp_path):
    """FakeNode(root, **kw) factory (tests/unit/fakenode.py); the processes of every node it
    made are ended after the test."""
    made: list[FakeNode] = []

    def make(name: str = "n1", **kw) -> FakeNode:
        node = FakeNode(tmp_path / f"node-{len(made)}", name=name, **kw)
        made.append(node)
        return node

    yield make
    for node in made:
        node.stop()
