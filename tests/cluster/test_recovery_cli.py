"""`airlock recover` from the command line: dry run on the real cluster, one-line errors, the
systemd unit template."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from airlock.dev.cluster import healthy_gpus


@pytest.mark.cluster
def test_dry_run_prints_and_changes_nothing(cluster_factory, tmp_path):
    db = tmp_path / "recovery.db"
    cluster = cluster_factory(start=False, nodes=["node1", "node2"], airlock={
        "registration": {"level": "quick"},
        "recovery": {"db": str(db), "detect_grace": 0.0}})
    cluster.write_files()
    cluster.set_node_sim("node2", gpus=healthy_gpus(7))
    cluster.start(wait=True)
    cluster.wait(lambda: cluster.node("node2").reason_in_force.startswith("airlock: FAIL"), 40,
                 "node2 failed")
    before = cluster.node("node2").reason
    p = subprocess.run([sys.executable, "-m", "airlock", "recover", "--once", "--dry-run"],
                       env=cluster.env(), capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    lines = [json.loads(line) for line in p.stdout.splitlines()]
    assert any(e["event"] == "detected" and e["node"] == "node2" and e["dry_run"]
               for e in lines)
    assert any(e["event"] == "would_reboot" and e["node"] == "node2" for e in lines)
    assert not db.exists()  # nothing written
    assert cluster.node("node2").reason == before
    show = subprocess.run([sys.executable, "-m", "airlock", "recover", "--show"],
                          env=cluster.env(), capture_output=True, text=True, timeout=60)
    assert show.returncode == 2 and "does not exist yet" in show.stderr
