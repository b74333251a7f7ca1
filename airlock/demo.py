"""`airlock demo`: a real Slurm cluster on this machine shows the whole gate working.

Three nodes boot with simulated GPUs (node3 has lost one GPU), jobs are queued at once, node4
joins later as new capacity. Every node is isolated at registration and checked; the healthy
ones take the jobs, node3 stays drained with a reason that names the failing check.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

import click

from airlock.devcluster import DevCluster, healthy_gpus


class Watch:
    """Prints each node's state whenever it changes."""

    def __init__(self, cluster: DevCluster, t0: float):
        self.cluster = cluster
        self.t0 = t0
        self.seen: dict[str, tuple[str, str]] = {}

    def poll(self) -> None:
        for n in self.cluster.slurm.nodes():
            key = (n.state_text, n.reason)
            if self.seen.get(n.name) != key:
                self.seen[n.name] = key
                reason = f"  reason={n.reason!r}" if n.reason else ""
                click.echo(f"[{time.monotonic() - self.t0:6.1f}s] {n.name:<6} "
                           f"{n.state_text:<22}{reason}")

    def until(self, predicate, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.poll()
            if predicate():
                return True
            time.sleep(0.25)
        return False


def _settled(cluster: DevCluster, names: list[str]) -> bool:
    """Every node registered and its registration suite has reached a verdict."""
    from airlock import config as config_mod
    from airlock.nodestate import NodeState

    cfg = config_mod.load(cluster.airlock_conf)
    for n in cluster.slurm.nodes(names):
        record = NodeState(cfg, n.name).load() or {}
        if not n.slurmd_start_time or record.get("status") != "done":
            return False
        if (n.reason or "").startswith("airlock: pending") or "NOT_RESPONDING" in n.flags:
            return False
    return True


def run_demo(workdir: Path, keep: bool = False) -> int:
    from airlock import config as config_mod
    from airlock import status

    cluster = DevCluster(workdir, nodes=["node1", "node2", "node3"], future=["node4"])
    cluster.write_files()
    cluster.set_node_sim("node3", gpus=healthy_gpus(7))  # one GPU fell off the bus
    t0 = time.monotonic()
    click.echo(f"Demo cluster in {workdir}: slurmctld + slurmd node1..node3, node4 joins later.")
    click.echo("node3's simulated hardware has 7 of 8 GPUs.\n")
    try:
        cluster.start(wait=False)
        watch = Watch(cluster, t0)
        watch.until(lambda: cluster._ctld_up(), 30)
        jobs = [cluster.sbatch("hostname; sleep 1", "-N1") for _ in range(4)]
        click.echo(f"[{time.monotonic() - t0:6.1f}s] queued jobs {jobs} before any node "
                   "has proved itself")
        watch.until(lambda: _settled(cluster, ["node1", "node2", "node3"]), 180)
        click.echo(f"[{time.monotonic() - t0:6.1f}s] node4 boots (new capacity joins)")
        cluster.start_node("node4", wait=False)
        watch.until(lambda: _settled(cluster, ["node4"]), 180)
        watch.until(lambda: all(cluster.job(j).get("JobState") == "COMPLETED" for j in jobs), 90)
        click.echo("\nJobs:")
        for j in jobs:
            info = cluster.job(j)
            click.echo(f"  job {j}: {info.get('JobState')} on {info.get('NodeList')}")
        click.echo("\nairlock status:")
        cfg = config_mod.load(cluster.airlock_conf)
        click.echo(status.render(status.collect(cfg)))
        node3 = cluster.node("node3")
        ok = node3.drained and node3.reason.startswith("airlock: FAIL gpu_count")
        return 0 if ok else 1
    finally:
        if keep:
            click.echo(f"\nCluster left running in {workdir} (SLURM_CONF={cluster.conf}).")
        else:
            cluster.stop()


@click.command("demo")
@click.option("--dir", "workdir", type=click.Path(file_okay=False), default=None,
              help="Where the demo cluster lives (default: a temporary directory).")
@click.option("--keep", is_flag=True, help="Leave the cluster running afterwards.")
def demo_cmd(workdir: str | None, keep: bool) -> None:
    """Run a local demo cluster: nodes join, are isolated, checked, resumed or drained."""
    import sys

    tmp = None
    if workdir is None:
        tmp = tempfile.mkdtemp(prefix="airlock-demo-")
        workdir = tmp
    try:
        rc = run_demo(Path(workdir), keep=keep)
    finally:
        if tmp and not keep:
            shutil.rmtree(tmp, ignore_errors=True)
    sys.exit(rc)
