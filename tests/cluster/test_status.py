"""`airlock status` against a real cluster: the JSON matches Slurm's real states and the
documented schema, history, a node whose results directory is unreachable (or hung), and the
controller's metrics from the same data."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import jsonschema
import pytest

from airlock.config import loader as config_mod
from airlock.dev.cluster import DevCluster, healthy_gpus
from airlock.records import results
from airlock.status import collect as status
from tests.cluster.conftest import running_cluster

DOCS = Path(__file__).resolve().parents[2] / "docs"
SCHEMA = json.loads((DOCS / "status-schema.json").read_text())


@pytest.fixture(scope="module")
def cluster(slurm_variant):
    """node3 has lost a GPU: registration fails it; node1 and node2 pass."""
    with running_cluster(slurm_variant, nodes=["node1", "node2", "node3"], health_interval=3600,
                         airlock={"registration": {"level": "quick"}},
                         prepare=lambda c: c.set_node_sim("node3", gpus=healthy_gpus(7))) as c:
        c.wait(lambda: _settled(c), 60, "registration verdicts")
        yield c


def _settled(c: DevCluster) -> bool:
    nodes = {n.name: n for n in c.slurm.nodes()}
    return (all(nodes[n].state == "IDLE" and not nodes[n].reason_in_force and not nodes[n].flags
                and nodes[n].slurmd_start_time for n in ("node1", "node2"))
            and nodes["node3"].reason_in_force.startswith("airlock: FAIL")
            and "NOT_RESPONDING" not in nodes["node3"].flags)


def _status(c: DevCluster, *args: str, config: Path | None = None):
    env = c.env()
    if config is not None:
        env["AIRLOCK_CONFIG"] = str(config)
    out = subprocess.run([sys.executable, "-m", "airlock.cli", "status", *args], env=env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout


@pytest.mark.cluster
def test_status_json_matches_slurm_and_schema(cluster):
    data = json.loads(_status(cluster, "--json"))
    jsonschema.validate(data, SCHEMA)
    real = {n.name: n for n in cluster.slurm.nodes()}
    rows = {r["node"]: r for r in data["nodes"]}
    assert set(rows) == set(real)
    for name, row in rows.items():
        assert row["slurm_state"] == real[name].state_text
        assert row["reason"] == real[name].reason
    for name in ("node1", "node2"):
        assert rows[name]["airlock"] == "healthy"
        assert rows[name]["verdict"] == "pass" and rows[name]["failed_check"] is None
        assert rows[name]["results_source"] == "shared" and rows[name]["results_problem"] == ""
    n3 = rows["node3"]
    assert n3["airlock"] == "failed" and n3["reason_owner"] == "airlock"
    assert "DRAIN" in n3["slurm_state"]
    assert n3["failed_check"] == "gpu_count" and n3["detail"].startswith("7 GPUs")
    assert n3["verdict"] == "fail" and n3["last_level"] == "quick"
    assert n3["last_trigger"] == "new" and n3["duration_s"] >= 0
    assert data["summary"] == {**dict.fromkeys(status.STATES, 0), "healthy": 2, "failed": 1}


@pytest.mark.cluster
def test_status_table_history_and_node_selection(cluster):
    text = _status(cluster)
    assert text.rstrip().endswith(
        "3 nodes: 2 healthy, 0 quarantined, 1 failed, 0 own-error, 0 recovering")
    line = next(ln for ln in text.splitlines() if ln.startswith("node3 "))
    assert re.search(r"node3\s+IDLE\+DRAIN\s+failed\s+gpu_count\s+7 GPUs", line), line
    hist = json.loads(_status(cluster, "node[2-3]", "--json", "--history", "3"))
    jsonschema.validate(hist, SCHEMA)
    assert [r["node"] for r in hist["nodes"]] == ["node2", "node3"]
    (h3,) = hist["nodes"][1]["history"]  # one registration run so far
    assert h3["verdict"] == "fail" and h3["failed_check"] == "gpu_count"
    assert "node3 history:" in _status(cluster, "node3", "--history", "2")
    bad = subprocess.run([sys.executable, "-m", "airlock.cli", "status", "node9"],
                         env=cluster.env(), capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and bad.stderr.startswith("airlock: ")
    assert "node9" in bad.stderr and "Traceback" not in bad.stderr


@pytest.mark.cluster
def test_unreachable_results_dir_still_shows_node_from_slurm(cluster, tmp_path):
    """The controller's view when node2's shared results dir is gone (a dangling mount point)
    and node-local copies are not on this host."""
    cfg_text = cluster.airlock_conf.read_text().replace(
        f'"{cluster.root}/airlock/state/{{node}}"', f'"{tmp_path}/controller-state"')
    conf = tmp_path / "controller.toml"
    conf.write_text(cfg_text)
    node2_dir = cluster.root / "airlock" / "shared" / "node2"
    moved = tmp_path / "node2-moved"
    node2_dir.rename(moved)
    node2_dir.symlink_to(tmp_path / "gone")
    try:
        data = json.loads(_status(cluster, "--json", config=conf))
        text = _status(cluster, config=conf)
    finally:
        node2_dir.unlink()
        moved.rename(node2_dir)
    jsonschema.validate(data, SCHEMA)
    rows = {r["node"]: r for r in data["nodes"]}
    n2 = rows["node2"]
    assert n2["results_source"] == "slurm" and n2["verdict"] is None
    assert n2["slurm_state"] == "IDLE" and n2["airlock"] == "healthy"
    # A link in Airlock's own tree is never followed (docs/security.md), dangling or not.
    why = f"shared results: {node2_dir}: is a symbolic link; Airlock does not follow links in " \
          "its own tree"
    assert n2["results_problem"] == why
    assert rows["node1"]["results_source"] == "shared"
    assert f"  node2: {why}" in text


@pytest.mark.cluster
def test_fifo_in_the_results_store_is_named_not_waited_for(cluster):
    """A FIFO in place of a node's latest.json (a user's trap, or what a hung read looked like)
    is opened without blocking and refused as not a regular file; the other nodes still read.
    (read_many's timeout for a filesystem that hangs in the kernel stays in place.)"""
    cfg = config_mod.load(cluster.airlock_conf)
    latest = cluster.root / "airlock" / "shared" / "node1" / "latest.json"
    saved = latest.read_bytes()
    latest.unlink()
    os.mkfifo(latest)
    try:
        started = time.monotonic()
        got = results.read_many(cfg, ["node1", "node2"], timeout=5.0)
        took = time.monotonic() - started
    finally:
        latest.unlink()
        latest.write_bytes(saved)
    assert got["node1"].problem == f"shared results: {latest}: not a regular file"
    assert took < 5.0
    # this host also sees the node-local copy (state_dir holds {node}): used, the FIFO named
    assert got["node1"].source == "local" and got["node2"].source == "shared"


@pytest.mark.cluster
def test_controller_metrics_from_the_cluster(cluster, tmp_path):
    from prometheus_client.parser import text_string_to_metric_families

    out = subprocess.run([sys.executable, "-m", "airlock.cli", "metrics", "--controller",
                          "--textfile-dir", str(tmp_path)], env=cluster.env(),
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    text = (tmp_path / "airlock-controller.prom").read_text()
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for fam in text_string_to_metric_families(text) for s in fam.samples}
    assert samples[("airlock_node_state", (("node", "node3"), ("state", "failed")))] == 1
    assert samples[("airlock_node_state", (("node", "node1"), ("state", "healthy")))] == 1
    assert samples[("airlock_nodes", (("state", "healthy"),))] == 2
    assert samples[("airlock_node_results_readable", (("node", "node2"),))] == 1
    # No recovery database here: no recovery metric at all rather than made-up zeros.
    assert not any(name.startswith("airlock_recovery") for name, _ in samples)






