"""The Slurm-side providers against real Slurm: hyperpod-slurm sets the exact reason HyperPod's
agent acts on, and slurm-power refuses a node that is not State=CLOUD. The other providers
(http on loopback, aws-hyperpod through botocore's model, command) are in
tests/unit/test_recovery_providers.py."""

from __future__ import annotations

import pytest

from airlock.recovery import providers as pv
from airlock.recovery.machine import Obs


def t(node="gpu1", rid="airlock-7-replace-gpu1"):
    return pv.ActionTarget(node, rid, f"airlock: recover replace {rid}")


@pytest.mark.cluster
def test_hyperpod_slurm_reason_exact_and_slurm_power_refuses_non_cloud(cluster_factory):
    cluster = cluster_factory(nodes=["node1", "node2"], wait=True,
                              airlock={"registration": {"level": "quick"}})
    cluster.wait(lambda: not cluster.node("node1").drained, 30, "node1 resumed")
    hp = pv.HyperpodSlurm(cluster.slurm)
    # A node in service (a person resumed it since the poll): nothing is sent.
    res = hp.submit("replace", [t("node1")])["node1"]
    assert res.status == pv.ERROR and "no longer in force" in res.message, res
    assert not cluster.node("node1").drained
    # Airlock's failure in force, the node idle: HyperPod's exact reason.
    cluster.run(["scontrol", "update", "nodename=node1", "state=drain",
                 "reason=airlock: FAIL gpu_count 7 GPUs, profile h100 expects 8"])
    assert hp.submit("replace", [t("node1")])["node1"].status == pv.ISSUED
    n = cluster.node("node1")
    assert n.reason == "Action:Replace" and "FAIL" in n.state_text
    assert hp.lookup("replace", t("node1"), Obs.from_node(n)) and hp.owns_reason(n.reason)
    power = pv.SlurmPower(cluster.slurm)
    res = power.submit("replace", [t("node2")])["node2"]
    assert res.status == pv.REFUSED and "State=CLOUD" in res.message
    assert not cluster.node("node2").reason.startswith("airlock: recover")
