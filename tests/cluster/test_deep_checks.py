"""Deep checks in a real Slurm cluster (one cluster, 22.05 only: nothing here differs between
Slurm versions):

* DCGM at registration, through the real suite and the real subprocess path, with a stand-in
  dcgmi per node (tests/data/dcgm/fake-dcgmi replaying NVIDIA's recorded outputs): a passing
  DCGM resumes the node, a failing one drains it naming the GPU, the test and DCGM's message,
  and a DCGM that hangs keeps the boot closed as Airlock's own trouble (`FAIL suite not
  seen: dcgm ...`), never a hardware verdict.
* Observe mode on the periodic level: an ECC fault on a check set to observe never drains its
  node while `airlock status` shows it; the same cluster drains a fault that is not observed.

Registration runs the quick level with [dcgm] quick_level = 1, so the nodes settle in seconds.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from airlock.dev.cluster import healthy_gpus
from tests.cluster.conftest import running_cluster

pytestmark = pytest.mark.slurm_variants("22.05")

DATA = Path(__file__).resolve().parents[1] / "data" / "dcgm"
NODES = ["node1", "node2", "node3", "node4"]
WRAPPER = """#!/bin/sh
# the dev cluster's dcgmi: one recorded DCGM answer per node (the suite runs with SLURMD_NODENAME)
case "$SLURMD_NODENAME" in
  node2) FAKE_DCGMI="replay:{data}/dcgm-3.x-per-gpu-fail.json:226" ;;
  node3) FAKE_DCGMI="hang" ;;
  *) FAKE_DCGMI="replay:{data}/dcgm-3.1.0-real-pass.txt" ;;
esac
export FAKE_DCGMI
exec {python} {data}/fake-dcgmi "$@"
"""


def prepare(c) -> None:
    """The per-node dcgmi in the cluster's bin, and the config that points at it."""
    dcgmi = c.root / "bin" / "dcgmi"
    dcgmi.write_text(WRAPPER.format(data=DATA, python=sys.executable))
    dcgmi.chmod(0o755)
    c.airlock_extra["dcgm"]["dcgmi"] = str(dcgmi)
    c.write_airlock_config()


@pytest.fixture(scope="module")
def cluster(slurm_variant):
    with running_cluster(
            slurm_variant, nodes=NODES, health_interval=5, prepare=prepare,
            airlock={"registration": {"level": "quick"},
                     "checks": {"observe": ["ecc"]},
                     "dcgm": {"quick_level": 1, "timeouts": [4, 900, 2700, 7200]}}) as c:
        yield c


def settled(c) -> dict:
    nodes = {n.name: n for n in c.slurm.nodes(NODES)}
    ok = all(nodes[n].state == "IDLE" and not nodes[n].drained for n in ("node1", "node4"))
    failed = all(nodes[n].drained and nodes[n].reason_in_force.startswith("airlock: FAIL")
                 for n in ("node2", "node3"))
    return nodes if ok and failed else {}


def test_dcgm_at_registration_pass_fail_and_hang(cluster):
    nodes = cluster.wait(lambda: settled(cluster), 120, "DCGM verdicts at registration")
    assert nodes["node2"].reason_in_force.startswith(
        "airlock: FAIL dcgm gpu0 sm_stress: Max stress level of 2128.7 did not exceed desired "
        "stress level of 3000.0 for GPU 0 (DCGM error 50)"), nodes["node2"].reason_in_force
    hung = nodes["node3"].reason_in_force
    assert hung.startswith("airlock: FAIL suite not seen: dcgm (dcgmi diag -r 1 gave no answer "
                           "within 4s"), hung
    latest = json.loads((cluster.root / "airlock" / "state" / "node1" / "latest.json")
                        .read_text())
    rec = next(r for r in latest["checks"] if r["check"] == "dcgm")
    assert rec["verdict"] == "pass" and rec["detail"].startswith("level 1: 10 tests passed")


def test_an_observed_fault_never_drains_and_is_shown(cluster):
    cluster.wait(lambda: settled(cluster), 120, "registration verdicts")
    ecc = healthy_gpus(8)
    ecc[2]["ecc_volatile_uncorrected_dram"] = 4
    cluster.set_node_sim("node1", gpus=ecc)
    remap = healthy_gpus(8)
    remap[1]["remap_pending"] = True
    cluster.set_node_sim("node4", gpus=remap)
    cluster.wait(lambda: {n.name: n for n in cluster.slurm.nodes(["node4"])}["node4"].drained,
                 60, "the fault that is not observed drained")
    log = cluster.root / "airlock" / "log" / "node1" / "healthcheck.log"
    start = len(log.read_text()) if log.exists() else 0

    def observed_runs():
        text = log.read_text()[start:] if log.exists() else ""
        return text.count("quick warn")

    cluster.wait(lambda: observed_runs() >= 3, 60, "three periodic runs on node1 with the fault")
    (node1,) = cluster.slurm.nodes(["node1"])
    assert not node1.drained and not node1.reason_in_force, node1.reason
    (node4,) = cluster.slurm.nodes(["node4"])
    assert node4.reason_in_force == "airlock: FAIL row_remap gpu1 row remap pending"
    out = subprocess.run([sys.executable, "-m", "airlock.cli", "status", "--json"],
                         env=cluster.env(), capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    rows = {r["node"]: r for r in json.loads(out.stdout)["nodes"]}
    assert rows["node1"]["airlock"] == "healthy"
    assert rows["node1"]["observed"] == {"ecc": "fail: gpu2 4 DRAM uncorrectable"}
