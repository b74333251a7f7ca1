"""All-reduce: the exact-sum pattern, combining node reports and the verdict from hand-made
reports; then real gloo process groups on the CPU: healthy, each fault switch (corrupt, slow,
hang) caught and named, the hang killed with no process left behind (also through the runner's
isolated path), and two launchers joining one world the way the group check runs them across
nodes."""

from __future__ import annotations

import pytest

from airlock.config import loader as config
from airlock.config.sections.checks import AllreduceSection

CPU = AllreduceSection(cpu_sizes_kib=[64, 1024], cpu_iters=5, cpu_warmup=1, timeout=30)


# --- in the real Slurm test cluster ---------------------------------------------------------
@pytest.mark.cluster
def test_registration_drains_torch_faults_naming_the_check(cluster_factory):
    """A memtest fault and an all-reduce fault, one per node, each drain their node at
    registration with the check that caught them in the reason."""
    from airlock.records.proof import NodeState

    c = cluster_factory(start=False, nodes=["node1", "node2"])
    c.write_files()
    c.set_node_sim("node1", faults={"memtest_corrupt": "1"})
    c.set_node_sim("node2", faults={"allreduce_corrupt": "1"})
    c.start()
    cfg = config.load(c.airlock_conf)

    def verdict(name):
        n = c.node(name)
        done = (NodeState(cfg, name).load() or {}).get("status") == "done"
        return n if done and not n.reason_in_force.startswith("airlock: pending") else None

    n1 = c.wait(lambda: verdict("node1"), 150, "node1 verdict")
    n2 = c.wait(lambda: verdict("node2"), 150, "node2 verdict")
    assert n1.drained and n1.reason.startswith("airlock: FAIL memtest cpu1 1 bad words"), n1
    assert n2.drained and n2.reason.startswith(
        "airlock: FAIL allreduce rank 1 (node2) sent wrong data"), n2
