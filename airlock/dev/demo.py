"""`airlock demo`: a real Slurm cluster on this machine shows the whole gate working.

Three nodes boot with simulated GPUs (node3 has lost one GPU), jobs are queued at once. Every
node is isolated at registration and checked; the healthy ones take the jobs, node3 is drained
with a reason that names the failing check. The recovery service reboots node3 (the fault
persists), then replaces it through the http provider against a cloud on loopback; the new
instance is checked and resumed. node4 joins later as new capacity. `airlock status` ends it.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Any

import click

from airlock.config import loader as config_mod
from airlock.dev.cloud import FakeCloud
from airlock.dev.cluster import DevCluster, healthy_gpus
from airlock.records.proof import NodeState
from airlock.recovery.store import RecoveryStore
from airlock.status import collect as status


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

    cfg = config_mod.load(cluster.airlock_conf)
    for n in cluster.slurm.nodes(names):
        record = NodeState(cfg, n.name).load() or {}
        if not n.slurmd_start_time or record.get("status") != "done":
            return False
        if n.reason_in_force.startswith("airlock: pending") or "NOT_RESPONDING" in n.flags:
            return False
    return True


def fast_recovery(db: Path, **over: Any) -> dict:
    """[recovery] windows short enough for the dev cluster, whose machines boot in seconds
    (production defaults are minutes); over replaces or adds keys."""
    rec = {
        "db": str(db), "poll_interval": 0.5, "detect_grace": 1.0, "cooldown": 1.0,
        "max_actions_per_hour": 6, "max_in_flight": 2, "breaker_window": 60.0,
        "breaker_share": 0.9, "breaker_min_nodes": 3, "breaker_same_check": 3,
        "reboot_timeout": 60.0, "replace_timeout": 60.0, "verdict_timeout": 90.0,
        "refail_window": 30.0,
        # A dev cluster's replacement can boot 3 s after the reboot before it; 2 s still tells
        # a reboot from a slurmd restart (1 s).
        "boot_shift_min": 2.0,
    }
    rec.update(over)
    return rec


def recovery_settings(workdir: Path, cloud) -> dict:
    """Recovery through the http provider against the loopback cloud."""
    token = workdir / "cloud-token"
    token.write_text(cloud.token + "\n")
    token.chmod(0o600)
    return fast_recovery(workdir / "recovery.db", provider="http", http={
        "url": cloud.url, "token_file": str(token), "timeout": 2.0, "retries": 3,
        "backoff": 0.2, "backoff_max": 2.0})


def _healthy(cluster: DevCluster, name: str) -> bool:
    n = cluster.node(name)
    return n.state == "IDLE" and not n.drained and not n.reason_in_force and n.responding


def _ledger_summary(cfg) -> None:
    """The gate's two numbers on this cluster: what it cost and what it caught (airlock
    ledger). A ledger that cannot be read is said, and never costs the demo its verdict."""
    from airlock.errors import AirlockError
    from airlock.ledger import load, report

    click.echo("\nThe ledger (airlock ledger --since 1h):")
    try:
        doc = report.compute(load.load(cfg, 3600.0), cfg.ledger)
    except AirlockError as exc:
        click.echo(f"  ledger unavailable: {exc}")
        return
    for line in report.summary_lines(doc):
        click.echo(f"  {line}")


def run_demo(workdir: Path, keep: bool = False) -> int:
    import sys


    workdir.mkdir(parents=True, exist_ok=True)
    cloud = FakeCloud().start()
    cluster = DevCluster(workdir, nodes=["node1", "node2", "node3"], future=["node4"],
                         airlock={"recovery": recovery_settings(workdir, cloud)})
    cloud.cluster = cluster
    cluster.write_files()
    cluster.set_node_sim("node3", gpus=healthy_gpus(7))  # this instance lost a GPU for good
    t0 = time.monotonic()
    say = lambda msg: click.echo(f"[{time.monotonic() - t0:6.1f}s] {msg}")  # noqa: E731
    click.echo(f"Demo cluster in {workdir}: slurmctld + slurmd node1..node3; node4 joins "
               "later.\nnode3's simulated hardware has 7 of 8 GPUs (it survives a reboot; a "
               "replacement instance is healthy).\n")
    service = None
    try:
        cluster.start(wait=False)
        watch = Watch(cluster, t0)
        watch.until(lambda: cluster._ctld_up(), 30)
        jobs = [cluster.sbatch("hostname; sleep 1", "-N1") for _ in range(4)]
        say(f"queued jobs {jobs} before any node has proved itself")
        watch.until(lambda: _settled(cluster, ["node1", "node2", "node3"]), 240)
        say("recovery service starts (airlock recover, http provider -> loopback cloud)")
        log = open(workdir / "recover.log", "ab")  # noqa: SIM115 - lives as long as the service
        service = subprocess.Popen([sys.executable, "-m", "airlock", "recover", "--interval",
                                    "0.5"], env=cluster.env(), stdout=log,
                                   stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        log.close()
        watch.until(lambda: _healthy(cluster, "node3"), 300)
        say("node4 boots (new capacity joins)")
        cluster.start_node("node4", wait=False)
        watch.until(lambda: _settled(cluster, ["node4"]), 240)
        watch.until(lambda: all(cluster.job(j).get("JobState") == "COMPLETED" for j in jobs), 90)
        click.echo("\nJobs:")
        for j in jobs:
            info = cluster.job(j)
            click.echo(f"  job {j}: {info.get('JobState')} on {info.get('NodeList')}")
        click.echo("\nRecovery of node3 (from the recovery database):")

        store = RecoveryStore(str(workdir / "recovery.db"), readonly=True)
        for a in store.actions("node3"):
            click.echo(f"  {a['kind']:<8} via {a['via']:<6} {a['status']}")
        click.echo(f"  cloud saw: {[(p['action'], p['node']) for p in cloud.posts()]}")
        click.echo("\nairlock status:")
        cfg = config_mod.load(cluster.airlock_conf)
        click.echo(status.render(status.collect(cfg)))
        _ledger_summary(cfg)
        healthy = all(_healthy(cluster, n) for n in ("node1", "node2", "node3", "node4"))
        replaced = [a["kind"] for a in store.actions("node3")] == ["reboot", "replace"]
        return 0 if healthy and replaced else 1
    finally:
        if service is not None and service.poll() is None:
            service.terminate()
            service.wait(10)
        cloud.stop()
        if keep:
            click.echo(f"\nCluster left running in {workdir} (SLURM_CONF={cluster.conf}).")
        else:
            cluster.stop()
