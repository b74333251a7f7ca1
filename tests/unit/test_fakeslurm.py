"""The fake Slurm of the unit tests speaks 22.05 as recorded from a real controller: Airlock's
own client reads every recorded node back from it unchanged, and its updates, refusals and
faults are Slurm's."""

from __future__ import annotations

import subprocess
import time

import pytest

from airlock.errors import NodeNotFound, SlurmError
from airlock.slurm import drains, reasons
from airlock.slurm.client import Slurm, parse_show_node
from tests.unit.fakeslurm import RECORDED, FakeSlurm


def as_fields(n) -> dict:
    return {"state": n.state, "flags": sorted(n.flags), "reason": n.reason,
            "reason_user": n.reason_user, "reason_time": n.reason_time,
            "cpu_alloc": n.cpu_alloc, "features": ",".join(n.features) or "(null)",
            "gres": n.gres or "(null)", "addr": n.address, "hostname": n.hostname,
            "partitions": ",".join(n.partitions), "boot_time": n.boot_time,
            "slurmd_start_time": n.slurmd_start_time}


def test_every_recorded_node_reads_back_the_same(tmp_path):
    recorded = parse_show_node(RECORDED.read_text())
    fake = FakeSlurm(tmp_path, nodes=())
    for n in recorded:
        fake.add(n.name, **as_fields(n))
    client = Slurm(bin_dir=fake.bin_dir)
    got = client.nodes()  # -o --future: every node, in the controller's order
    assert got == recorded
    assert client.node("node9") == recorded[-1]
    # without --future, FUTURE nodes are left out, as Slurm does
    plain = client.scontrol("-o", "show", "node")
    assert parse_show_node(plain) == [n for n in recorded if n.state != "FUTURE"]
    # the template node comes out exactly as the controller printed it
    line = next(ln for ln in RECORDED.read_text().splitlines() if ln.startswith("NodeName=node5"))
    assert fake.line("node5") == line


def test_updates_follow_the_owned_reason_protocol(tmp_path):
    fake = FakeSlurm(tmp_path, nodes=["n1", "n2"])
    client = Slurm(bin_dir=fake.bin_dir)
    assert drains.isolate(client, "n1", "standard", "new").changed
    n = client.node("n1")
    assert n.state_text == "IDLE+DRAIN" and n.reason == "airlock: pending standard check new"
    assert n.reason_user == "root" and n.owned
    assert drains.release(client, "n1").changed
    assert not client.node("n1").drained and client.node("n1").reason == ""
    fake.set("n2", state="ALLOCATED", cpu_alloc=4)
    client.drain("n2", reasons.pending("standard", "adopt"))
    n2 = client.node("n2")
    assert n2.state_text == "ALLOCATED+DRAIN" and n2.busy and n2.drained
    assert fake.updates() == [
        ["nodename=n1", "state=drain", "reason=airlock: pending standard check new"],
        ["nodename=n1", "state=resume"],
        ["nodename=n2", "state=drain", "reason=airlock: pending standard check adopt"]]


def test_refusals_are_slurm_s_own(tmp_path):
    fake = FakeSlurm(tmp_path, nodes=["n1"])
    client = Slurm(bin_dir=fake.bin_dir)
    with pytest.raises(NodeNotFound, match="Node n9 not found"):
        client.node("n9")
    with pytest.raises(SlurmError, match="Invalid node state specified"):
        client.scontrol("update", "nodename=n1", "state=resume")
    with pytest.raises(SlurmError, match="You must specify a reason"):
        client.scontrol("update", "nodename=n1", "state=drain")
    with pytest.raises(NodeNotFound, match="Invalid node name specified"):
        client.scontrol("update", "nodename=n9", "state=drain", "reason=x")
    assert client.has_json() is False  # 22.05: the text reader only


def test_faults_fail_or_hang_as_told(tmp_path):
    fake = FakeSlurm(tmp_path, nodes=["n1"])
    client = Slurm(bin_dir=fake.bin_dir)
    fake.fail("update", times=1)
    with pytest.raises(SlurmError, match="Unable to contact slurm controller"):
        drains.isolate(client, "n1", "standard", "new")
    assert drains.isolate(client, "n1", "standard", "new").changed  # only once
    fake.unreachable()
    with pytest.raises(SlurmError, match="slurm_load_node error: Unable to contact"):
        client.node("n1")
    fake.heal()
    fake.fail("show", mode="hang")
    t0 = time.monotonic()
    with pytest.raises(SlurmError, match="timed out after 1 s"):
        Slurm(bin_dir=fake.bin_dir, timeout=1).node("n1")
    assert time.monotonic() - t0 < 10
    verbs = [c["verb"] for c in fake.calls()]
    assert verbs == ["show", "update", "show", "update", "show", "show"]
    assert fake.calls("show")[-1]["argv"] == ["scontrol", "-o", "--future", "show", "node", "n1"]


def test_the_executable_needs_no_path_and_no_environment(tmp_path):
    fake = FakeSlurm(tmp_path, nodes=["n1"])
    out = subprocess.run([f"{fake.bin_dir}/scontrol", "-o", "show", "node", "n1"], env={},
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0 and out.stdout.startswith("NodeName=n1 "), out.stderr
