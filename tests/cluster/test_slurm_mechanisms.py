"""What Slurm offers a registration gate, measured on the real daemons of each release: how and
when the HealthCheckProgram runs (HealthCheckInterval=0, 25.11's START_ONLY, 26.05's
REBOOT_ONLY and HealthCheckTimeout), and where RebootProgram runs (reboot_from_controller).
The hooks are plain scripts that record what they see, so what is tested is Slurm's behaviour;
`airlock render slurm-conf` and `airlock doctor` act on it (docs/guide.md, Supported Slurm,
has the decisions). bench/slurm_features.py measures the rest (the timings, the controller's
HTTP endpoints, scontrol reboot FORCE, slurmrestd)."""

from __future__ import annotations

import time

import pytest

from tests.cluster.conftest import DEFAULT_VARIANTS, RELEASES

# Each run: the node, what slurmctld says of it (State, SlurmdStartTime) when the run starts,
# then once a second for as many seconds as @ROOT@/hc.sleep says (that run only). No PATH is
# given to a hook.
SEEN = """#!/bin/sh
PATH=/usr/bin:/bin
seen() {
  SLURM_CONF=@ROOT@/slurm.conf scontrol -o show node "$SLURMD_NODENAME" 2>/dev/null \\
    | tr ' ' '\\n' | grep -E '^(State|SlurmdStartTime)=' | tr '\\n' ' '
}
echo "$SLURMD_NODENAME start $(seen)" >> @ROOT@/hc.log
n=$(cat @ROOT@/hc.sleep 2>/dev/null || echo 0); rm -f @ROOT@/hc.sleep
while [ "$n" -gt 0 ]; do
  sleep 1; n=$((n - 1)); echo "$SLURMD_NODENAME wait $(seen)" >> @ROOT@/hc.log
done
exit 0
"""
HOOKS = {"healthcheck": SEEN, "prolog": "#!/bin/sh\nexit 0\n", "epilog": "#!/bin/sh\nexit 0\n"}


def runs(c, node: str = "node1", what: str = "start") -> list[dict[str, str]]:
    """What each run of node's program saw: {"State": ..., "SlurmdStartTime": ...}."""
    path = c.root / "hc.log"
    out = []
    for line in path.read_text().splitlines() if path.exists() else []:
        name, kind, *fields = line.split()
        if name == node and kind == what:
            out.append(dict(f.split("=", 1) for f in fields))
    return out


def slurmd_log(c, node: str = "node1") -> str:
    path = c.root / "log" / f"slurmd-{node}.log"
    return path.read_text(errors="replace") if path.exists() else ""


@pytest.mark.slurm_variants(*RELEASES)
def test_interval_0_runs_the_program_not_even_at_slurmd_start(cluster_factory):
    """HealthCheckInterval=0 with the default node state: no run at slurmd start, none at a
    reboot, on every release (so `airlock render` refuses --interval 0 before 25.11 and sets
    START_ONLY from 25.11 on, and doctor warns)."""
    c = cluster_factory(nodes=["node1"], hooks=HOOKS, health_interval=3600, wait=True,
                        slurm_settings={"HealthCheckInterval": "0", "HealthCheckTimeout": None})
    c.restart_node("node1", fresh_boot=True)
    c.wait(lambda: c.node("node1").state == "IDLE", 30, "node1 back")
    assert runs(c) == []


@pytest.mark.slurm_variants("26.05")
def test_start_only_runs_the_program_at_each_slurmd_start_before_registration(cluster_factory):
    """START_ONLY (25.11+), what `airlock render --interval 0` sets: the program runs at every
    slurmd start, before the node registers (it sees the previous SlurmdStartTime, or none)."""
    c = cluster_factory(nodes=["node1"], hooks=HOOKS, health_interval=0, wait=True)
    assert "HealthCheckNodeState=START_ONLY" in c.conf.read_text()
    (first,) = runs(c)
    assert first["State"].startswith("UNKNOWN")
    registered = c.node("node1").slurmd_start_time
    time.sleep(1.1)  # SlurmdStartTime has whole seconds: the next start must show another
    c.restart_node("node1", fresh_boot=True)
    c.wait(lambda: c.node("node1").slurmd_start_time != registered, 30, "node1 re-registered")
    (_, second) = runs(c)
    assert second["SlurmdStartTime"] == registered  # slurmctld had not heard of this start yet


@pytest.mark.slurm_variants("26.05")
def test_reboot_only_misses_new_and_unplanned_boots_and_runs_once_the_node_is_in_service(
        cluster_factory):
    """REBOOT_ONLY (26.05): no run at a new node's slurmd start nor at an unplanned reboot; after
    `scontrol reboot` the program runs only once the node has registered and is IDLE, i.e.
    schedulable. Nothing a gate can use: render refuses it, doctor FAILs it."""
    c = cluster_factory(nodes=["node1"], hooks=HOOKS, health_interval=5, wait=True,
                        slurm_settings={"HealthCheckNodeState": "REBOOT_ONLY"})
    c.restart_node("node1", fresh_boot=True)  # an unplanned reboot
    c.wait(lambda: c.node("node1").state == "IDLE", 30, "node1 back")
    assert runs(c) == []
    c.run(["scontrol", "reboot", "node1"])
    (seen,) = c.wait(lambda: runs(c), 60, "the program after scontrol reboot")
    assert seen["State"] == "IDLE", seen  # registered, in service, no drain: jobs could land
    assert seen["SlurmdStartTime"] == c.node("node1").slurmd_start_time


@pytest.mark.slurm_variants("26.05")
def test_health_check_timeout_kills_the_program_and_the_node_registers_after_it(
        cluster_factory):
    """HealthCheckTimeout (26.05; 4 s below the 5 s interval, as rendered): slurmd kills the
    program then (SIGTERM), and the node registers only once the program is over: all that
    time slurmctld still sees the node unregistered. So a boot-time hook's Slurm calls must
    fit in it (tests/cluster/test_fault_matrix.py), and a longer one holds the node out."""
    c = cluster_factory(nodes=["node1"], hooks=HOOKS, health_interval=5, start=False)
    c.write_files()
    assert "HealthCheckTimeout=4" in c.conf.read_text()
    (c.root / "hc.sleep").write_text("8")
    c.start(wait=True)
    assert "health_check poll timeout @ 4000 msec" in slurmd_log(c)
    assert "health_check killed by signal 15" in slurmd_log(c)
    waited = runs(c, what="wait")
    assert 2 <= len(waited) < 8 and all(w["State"].startswith("UNKNOWN") for w in waited), waited


@pytest.mark.slurm_variants(*DEFAULT_VARIANTS)
def test_reboot_from_controller_reboots_a_node_whose_slurmd_is_gone(cluster_factory):
    """SlurmctldParameters=reboot_from_controller (every release here, not new in 26.05): one
    RebootProgram on the controller gets the node list and reboots a node whose slurmd died,
    which a node-side RebootProgram cannot (that reboot times out at ResumeTimeout,
    bench/slurm_features.py). Airlock's reboot path is unchanged: the drain survives."""
    c = cluster_factory(nodes=["node1", "node2"], hooks=HOOKS, health_interval=3600, wait=True,
                        slurm_settings={"SlurmctldParameters": "reboot_from_controller"})
    reason = "airlock: recover reboot r-1"
    for n in ("node1", "node2"):
        assert c.slurm.drain(n, reason).changed
    before = c.node("node1").boot_time
    c.stop_node("node1")
    c.run(["scontrol", "reboot", f"reason={reason}", "node[1-2]"])
    for n in ("node1", "node2"):
        c.wait(lambda n=n: (m := c.node(n)).responding and m.boot_time != before
               and "REBOOT_ISSUED" not in m.flags, 60, f"{n} back from its reboot")
        assert c.node(n).drained and c.node(n).reason == f"{reason} : reboot issued"
    calls = (c.root / "log" / "reboot.out").read_text().splitlines()
    assert [ln.split(None, 1)[1] for ln in calls] == ["reboot-program from slurmctld: node1,node2"]
