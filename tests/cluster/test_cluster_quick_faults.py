"""The quick level in a real Slurm cluster: simulated hardware faults put into the NVML simulation
after the nodes passed registration are drained by the periodic HealthCheckProgram
(HealthCheckInterval=5) with the failing check named; a healthy node and a node whose profile comes
from its Slurm partition are never drained over repeated runs.

One cluster for all faults. Registration runs the quick level here (no burn-in), so the nodes are
up in seconds and what is measured is the periodic path."""

from __future__ import annotations

import re
import time

from airlock.hw.nvml import healthy_gpu_dict

FAULTS = {
    # node: (change on gpu3, the reason Slurm must show)
    "node2": ({"ecc_volatile_uncorrected_dram": 2}, "airlock: FAIL ecc gpu3 2 DRAM uncorrectable"),
    "node3": ({"remap_pending": True}, "airlock: FAIL row_remap gpu3 row remap pending"),
    "node4": ({"xids": [{"xid": 79}]}, "airlock: FAIL xid 79 gpu3 within 2h"),
    "node5": ({"nvlink_active": [True] * 15 + [False] * 3},
              "airlock: FAIL nvlink gpu3 15/18 links active"),
    "node6": ({"lost": True}, "airlock: FAIL gpu_lost gpu3 fell off the bus"),
}
HEALTHY = ["node1", "node7"]  # node7: in partition "h200", which config maps to h200-8x


def gpus(model: str = "NVIDIA H100 80GB HBM3", memory: int = 81559, change=None):
    out = [healthy_gpu_dict(i, model=model, memory_mib=memory) for i in range(8)]
    out[3].update(change or {})
    return out


def quick_runs(cluster, node: str) -> list[str]:
    p = cluster.root / "airlock" / "log" / node / "healthcheck.log"
    text = p.read_text() if p.exists() else ""
    return re.findall(r"quick (pass|warn|fail)[^\n]*", text)


def test_periodic_quick_level_drains_each_fault_and_never_a_healthy_node(cluster_factory):
    nodes = HEALTHY + list(FAULTS)
    c = cluster_factory(
        start=False, nodes=nodes, partitions={"h200": ["node7"]},
        airlock={"registration": {"level": "quick"},
                 "profile": {"by_partition": {"h200": "h200-8x"}}},
    )
    c.write_files()
    sims = {n: {"gpus": gpus()} for n in nodes}
    sims["node7"] = {"gpus": gpus("NVIDIA H200", 143771)}
    c.write_sim(sims)
    c.start(wait=True)

    def all_resumed():
        ns = c.slurm.nodes(nodes)
        return all(n.state == "IDLE" and not n.drained and not n.reason_in_force and n.responding
                   for n in ns)
    c.wait(all_resumed, 60, "every node registered and resumed")
    resumed_at = time.monotonic()

    for node, (change, _) in FAULTS.items():
        c.set_node_sim(node, gpus=gpus(change=change))

    drained: dict[str, str] = {}
    healthy_seen: dict[str, list[str]] = {n: [] for n in HEALTHY}
    deadline = time.monotonic() + 45
    while time.monotonic() < deadline:
        for n in c.slurm.nodes(nodes):
            if n.name in HEALTHY:
                assert not n.drained and not n.reason_in_force, \
                    f"healthy {n.name} drained: {n.reason!r}"
            elif n.drained and n.name not in drained:
                drained[n.name] = n.reason
        # several periodic runs on the healthy nodes after the faults went in
        runs = {h: quick_runs(c, h) for h in HEALTHY}
        if len(drained) == len(FAULTS) and time.monotonic() - resumed_at > 20 \
                and all(len(r) >= 3 for r in runs.values()):
            healthy_seen = runs
            break
        time.sleep(0.5)

    assert {n: drained.get(n) for n in FAULTS} == {n: want for n, (_, want) in FAULTS.items()}
    for node, runs in healthy_seen.items():
        assert len(runs) >= 3, (node, runs)
        assert all(r.startswith("pass") for r in runs), (node, runs)
    # the partition-mapped node really was judged as an H200 (memory 143771 MiB, not H100's)
    import json

    latest = c.root / "airlock" / "state" / "node7"
    records = [json.loads(p.read_text()) for p in latest.glob("latest-quick.json")]
    assert records and records[0]["profile"] == "h200-8x", records
