"""A node for unit tests of the hooks: a valid config, simulated GPUs, a fake Slurm
(tests/unit/fakeslurm.py) that `[slurm] bin_dir` points at, and the real hooks run as slurmd
runs them: a process of their own with SLURMD_NODENAME (and the job's variables for the
prolog and epilog), $AIRLOCK_CONFIG, no PATH, and the test's own $AIRLOCK_RUNTIME_DIR (never
the host's /run).

Every process a test starts through a node (the hooks, the registration suites they start)
carries the node's config path in its environment; stop() ends exactly those, by PID.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from airlock import boot as boot_mod
from airlock import config as config_mod
from airlock import nodestate
from airlock.dev.cluster import healthy_gpus
from airlock.dev.proof import prove_boot
from tests.unit.fakeslurm import FakeSlurm

HOOKS = ("healthcheck", "prolog", "epilog")


class FakeNode:
    def __init__(self, root: Path, name: str = "n1", level: str = "quick", extra: str = "",
                 faults: dict | None = None, slurm_timeout: float = 5.0, **node_fields):
        self.root = Path(root)
        self.name = name
        self.level = level
        self.slurm_timeout = slurm_timeout
        self.slurm = FakeSlurm(self.root / "slurm", nodes=[name], **node_fields)
        self.sim = self.root / "gpus.json"
        self.conf = self.root / "airlock.toml"
        self.set_faults(faults or {})
        self.write_config(extra)

    # --- setup ------------------------------------------------------------------------------
    def base_config(self) -> str:
        return (f'state_dir = "{self.root}/state"\nlog_dir = "{self.root}/log"\n'
                f'[slurm]\nbin_dir = "{self.slurm.bin_dir}"\ntimeout = {self.slurm_timeout}\n'
                f'[nvml]\nsimulate = "{self.sim}"\n')

    def write_config(self, extra: str = "", level: str | None = None) -> None:
        """The base config plus extra TOML ([registration] level is added unless extra has a
        [registration] table of its own)."""
        text = self.base_config()
        if "[registration]" not in extra:
            text += f'[registration]\nlevel = "{level or self.level}"\n'
        self.conf.write_text(text + extra)

    def set_faults(self, faults: dict) -> None:
        """Fault switches in the node's simulation entry (the dev cluster's way: slurmd gives
        the hooks no environment to carry them)."""
        self.sim.write_text(json.dumps({"nodes": {self.name: {"gpus": healthy_gpus(8),
                                                              "faults": faults}}}))

    @property
    def state(self) -> nodestate.NodeState:
        return nodestate.NodeState(config_mod.load(self.conf), self.name)

    def record(self) -> dict | None:
        return self.state.load()

    def prove(self, verdict: str = "pass") -> dict:
        return prove_boot(self.conf, self.name, verdict)

    def adopt(self) -> dict:
        return self.state.adopt(boot_mod.current(self.name), f"adopt-{os.getpid()}",
                                "running jobs (new)")

    def log(self, hook: str) -> str:
        path = self.root / "log" / f"{hook}.log"
        return path.read_text() if path.exists() else ""

    # --- running the hooks --------------------------------------------------------------------
    def env(self, hook: str, job: str = "9", **extra: str) -> dict[str, str]:
        env = {"SLURMD_NODENAME": self.name, "AIRLOCK_CONFIG": str(self.conf),
               config_mod.RUNTIME_ENV: os.environ[config_mod.RUNTIME_ENV]}
        if hook in ("prolog", "epilog"):
            env.update(SLURM_JOB_ID=job, SLURM_JOB_USER="alice",
                       SLURM_CONF=str(self.slurm.root / "slurm.conf"))
        env.update(extra)
        return env

    def run(self, hook: str, job: str = "9", prefix: tuple[str, ...] = (), timeout: float = 90,
            **extra: str) -> subprocess.CompletedProcess:
        """The hook as slurmd runs it; its exit code and output."""
        if hook not in HOOKS:
            raise ValueError(hook)
        argv = [*prefix, sys.executable, "-m", f"airlock.hooks.{hook}"]
        return subprocess.run(argv, env=self.env(hook, job, **extra), cwd=self.root,
                              capture_output=True, text=True, timeout=timeout)

    # --- the processes of this node -----------------------------------------------------------
    def processes(self) -> list[int]:
        """PIDs of live processes started for this node (its config in their environment)."""
        mark = f"AIRLOCK_CONFIG={self.conf}".encode()
        found = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/environ", "rb") as fh:
                    env = fh.read().split(b"\0")
            except OSError:
                continue
            if mark in env and boot_mod.process_start(int(entry)) is not None:
                found.append(int(entry))
        return found

    def stop(self, timeout: float = 10) -> list[int]:
        """SIGKILL this node's processes (a suite's whole session), wait until they are gone;
        the PIDs that were alive."""
        pids = self.processes()
        for pid in pids:
            try:
                if os.getsid(pid) == pid:
                    os.killpg(pid, signal.SIGKILL)
                else:
                    os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        deadline = time.monotonic() + timeout
        while self.processes() and time.monotonic() < deadline:
            time.sleep(0.05)
        left = self.processes()
        if left:
            raise AssertionError(f"processes of {self.conf} survived SIGKILL: {left}")
        return pids


def cmdline(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return [a.decode(errors="replace") for a in fh.read().split(b"\0") if a]
    except OSError:
        return []


def wait_for(what, timeout: float, desc: str):
    """Poll what() until it returns something true; that value."""
    deadline = time.monotonic() + timeout
    while True:
        got = what()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {desc}")
        time.sleep(0.05)
