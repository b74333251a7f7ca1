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

from airlock.config import loader as config_mod
from airlock.dev.cluster import healthy_gpus
from airlock.dev.proof import prove_boot
from airlock.hw import boot as boot_mod
from airlock.records import proof as nodestate
from tests.unit.fakeslurm import FakeSlurm

HOOKS = ("healthcheck", "prolog", "epilog")

# A hook whose wall clock reads `shift` seconds off (the kernel's boot and monotonic clocks
# untouched): every wall-clock read Airlock makes goes through these functions of `time`.
# (faketime does this at the libc level, but libfaketime 0.9.10 with FAKETIME_DONT_FAKE_MONOTONIC
# makes every time.sleep fail with EINVAL, and with it every wait on a subprocess: a hook that
# asks Slurm anything cannot run under it.)
STEPPED = """import runpy, sys, time
hook, shift = sys.argv[1], float(sys.argv[2])
_time, _ns, _local, _gm, _strf = time.time, time.time_ns, time.localtime, time.gmtime, time.strftime
time.time = lambda: _time() + shift
time.time_ns = lambda: _ns() + int(shift * 1e9)
time.localtime = lambda secs=None: _local(time.time() if secs is None else secs)
time.gmtime = lambda secs=None: _gm(time.time() if secs is None else secs)
time.strftime = lambda fmt, t=None: _strf(fmt, time.localtime() if t is None else t)
sys.argv = [hook]
runpy.run_module(f"airlock.hooks.{hook}", run_name="__main__")
"""


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
        self.extra = extra
        self.set_faults(faults or {})
        self.write_config(extra)

    # --- setup ------------------------------------------------------------------------------
    def base_config(self) -> str:
        return (f'state_dir = "{self.root}/state"\nlog_dir = "{self.root}/log"\n'
                f'[slurm]\nbin_dir = "{self.slurm.bin_dir}"\ntimeout = {self.slurm_timeout}\n'
                f'[nvml]\nsimulate = "{self.sim}"\n')

    def write_config(self, extra: str | None = None, level: str | None = None) -> None:
        """The base config plus extra TOML (the last one given when None; [registration] level
        is added unless extra has a [registration] table of its own)."""
        extra = self.extra if extra is None else extra
        self.extra = extra
        text = self.base_config()
        if "[registration]" not in extra:
            text += f'[registration]\nlevel = "{level or self.level}"\n'
        self.conf.write_text(text + extra)

    def set_faults(self, faults: dict, gpus: list[dict] | None = None) -> None:
        """Fault switches in the node's simulation entry (the dev cluster's way: slurmd gives
        the hooks no environment to carry them), and its GPUs (healthy when None)."""
        gpus = healthy_gpus(8) if gpus is None else gpus
        self.sim.write_text(json.dumps({"nodes": {self.name: {"gpus": gpus,
                                                              "faults": faults}}}))

    @property
    def state(self) -> nodestate.NodeState:
        return nodestate.NodeState(config_mod.load(self.conf), self.name)

    def record(self) -> dict | None:
        return self.state.load()

    def prove(self, verdict: str = "pass", settled: bool = False) -> dict:
        """A finished registration of this boot (airlock.dev.proof.prove_boot); settled: an
        old proof, whose periodic pass path asks Slurm nothing any more."""
        return prove_boot(self.conf, self.name, verdict, settled=settled)

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
            wall_shift: float = 0.0, **extra: str) -> subprocess.CompletedProcess:
        """The hook as slurmd runs it (its wall clock wall_shift seconds off, when set); its
        exit code and output."""
        if hook not in HOOKS:
            raise ValueError(hook)
        if wall_shift:
            argv = [*prefix, sys.executable, "-c", STEPPED, hook, str(wall_shift)]
        else:
            argv = [*prefix, sys.executable, "-m", f"airlock.hooks.{hook}"]
        with subprocess.Popen(argv, env=self.env(hook, job, **extra), cwd=self.root,
                              stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) as proc:
            try:
                stdout, stderr = proc.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                stdout, stderr = proc.communicate()
                raise AssertionError(f"{hook} still running after {timeout:g} s: "
                                     f"{stderr[-2000:]}") from None
        out = subprocess.CompletedProcess(argv, proc.returncode, stdout, stderr)
        out.pid = proc.pid  # the hook's calls to the fake Slurm carry it as their ppid
        return out

    def calls_by(self, out: subprocess.CompletedProcess, verb: str = "") -> list[dict]:
        """The fake Slurm calls a hook run made itself (not the suite it started)."""
        return [c for c in self.slurm.calls(verb) if c["ppid"] == out.pid]

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
        """SIGKILL this node's processes (a suite's whole session, and anything it started
        meanwhile) and wait until each is gone or a zombie; the PIDs that were alive."""
        killed: dict[int, int | None] = {}
        deadline = time.monotonic() + timeout
        while True:
            for pid in self.processes():
                if pid not in killed:
                    killed[pid] = boot_mod.process_start(pid)
                    _kill(pid)
            # (An exiting process shows an empty environment before it is gone: each is
            # waited for by its start time, not by the mark.)
            left = [p for p, start in killed.items() if boot_mod.alive(p, start)]
            if not left and not self.processes():
                return sorted(killed)
            if time.monotonic() > deadline:
                raise AssertionError(f"processes of {self.conf} survived SIGKILL: {left}")
            time.sleep(0.05)


def _kill(pid: int) -> None:
    try:
        if os.getsid(pid) == pid:
            os.killpg(pid, signal.SIGKILL)  # a suite's session: its checks too
        else:
            os.kill(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


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
