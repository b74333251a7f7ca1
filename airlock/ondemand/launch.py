"""srun and scancel for an on-demand check: one worker per node (`python -m airlock.ondemand`,
airlock.ondemand.worker) on a set of nodes inside the reservation, through airlock.proc."""

from __future__ import annotations

import sys

from airlock import proc as proc_mod
from airlock.errors import SlurmError
from airlock.slurm.client import Slurm, collect

# The module srun starts on the nodes. Part of a command line: an old node must run what a new
# controller names and the other way round during a rolling upgrade, so it never changes.
WORKER_MODULE = "airlock.ondemand"


class Launcher:
    """Runs a worker on a set of nodes with srun inside the reservation."""

    def __init__(self, cfg, slurm: Slurm, reservation: str):
        self.cfg = cfg
        self.slurm = slurm
        self.reservation = reservation
        self.python = cfg.ondemand.python or sys.executable
        self.env: dict[str, str] = {}  # added to every srun's environment

    def srun(self, nodes: list[str], worker_args: list[str], timeout: float,
             name: str) -> tuple[int, str, str]:
        minutes = int(timeout // 60) + 2
        argv = [self.slurm.binary("srun"), f"--reservation={self.reservation}",
                f"--nodelist={collect(nodes)}", f"--nodes={len(nodes)}",
                "--ntasks-per-node=1", f"--job-name={name}", f"--time={minutes}",
                "--kill-on-bad-exit=0", "--quiet",
                self.python, "-m", WORKER_MODULE, *worker_args]
        env = self.slurm.env()
        env["AIRLOCK_CONFIG"] = self.cfg.path
        env.update(self.env)
        done = proc_mod.run(argv, timeout, env=env)
        if done.timed_out:
            self._cancel(name)  # srun's session is gone; the job's steps go with scancel
            return 124, done.stdout, done.stderr
        return done.returncode if done.returncode is not None else 124, done.stdout, done.stderr

    def _cancel(self, name: str) -> None:
        try:
            self.slurm.run("scancel", [f"--name={name}", f"--reservation={self.reservation}"])
        except SlurmError:
            pass


def srun_error(err: str, out: str, node: str, rc: int) -> str:
    """The line of srun's output that names this node (it says why the launch failed there),
    else its last line."""
    lines = [line.strip() for line in (err or out or "").splitlines() if line.strip()]
    mine = [line for line in lines if node in line]
    text = (mine or lines or [f"exit {rc}"])[-1]
    return text.removeprefix("srun: ").removeprefix("error: ")[:160]
