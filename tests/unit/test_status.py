"""`airlock status` against a real cluster: the JSON matches Slurm's real states and the
documented schema, history, a node whose results directory is unreachable (or hung), and the
controller's metrics from the same data."""

from __future__ import annotations

import pytest

from airlock.config import loader as config_mod
from airlock.records import results
from airlock.slurm.client import Node
from airlock.status import collect as status


# --- pure logic ----------------------------------------------------------------------------------
@pytest.mark.parametrize("state, flags, reason, expected", [
    ("IDLE", (), "", "healthy"),
    ("ALLOCATED", (), "", "healthy"),
    ("IDLE", ("DRAIN",), "airlock: pending standard check new", "quarantined"),
    ("IDLE", ("DRAIN",), "airlock: checking deep", "quarantined"),
    ("IDLE", ("DRAIN",), "airlock: FAIL gpu_count 7 GPUs", "failed"),
    # Airlock's own trouble: needs an operator, never the recovery service (issue 17)
    ("IDLE", ("DRAIN",), "airlock: FAIL config /etc/airlock/airlock.toml: bad", "own-error"),
    ("IDLE", ("DRAIN",), "airlock: FAIL suite not seen: burnin (no time)", "own-error"),
    ("DOWN", ("DRAIN",), "airlock: recover reboot", "recovering"),
    ("IDLE", ("DRAIN",), "maintenance by bob", "drained-other"),
    ("IDLE", ("DRAIN",), "", "drained-other"),
    ("DOWN", (), "Not responding", "down"),
    ("IDLE", ("NOT_RESPONDING",), "", "down"),
    ("FUTURE", (), "", "future"),
    ("IDLE", ("DRAIN",), "airlock: sleeping", "unknown"),
    # 23.11+ without accounting: a resumed node keeps its old reason; in service is healthy
    ("IDLE", (), "airlock: FAIL row_remap gpu0 row remap failed", "healthy"),
    ("IDLE", (), "airlock: pending standard check new", "healthy"),
    ("ALLOCATED", (), "ops: hold Owner=ops ticket=INC-42", "healthy"),
    ("DOWN", (), "airlock: recover reboot", "recovering"),
])
def test_classify(state, flags, reason, expected):
    assert status.classify(Node("n", state, frozenset(flags), reason)) == expected


def test_results_store_problems_are_named(tmp_path):
    shared = tmp_path / "shared"
    cfg = config_mod.from_dict({"state_dir": str(tmp_path / "state"),
                                "shared_dir": str(shared)})
    assert results.read_node(cfg, "n1").problem.startswith(
        f"shared results dir {shared} unreachable")
    shared.mkdir()
    assert results.read_node(cfg, "n1").problem == "no results in the shared dir yet"
    (shared / "n1").mkdir()
    (shared / "n1" / "latest.json").write_text("{not json")
    assert results.read_node(cfg, "n1").problem == (
        f"shared results: {shared}/n1/latest.json: not valid JSON")
    # A document that is not a valid run of this node is named, never used (docs/security.md).
    (shared / "n1" / "latest.json").write_text('{"verdict": "pass", "finished_at": 5}')
    assert results.read_node(cfg, "n1").problem == (
        f"shared results: {shared}/n1/latest.json: no valid node name")
    (shared / "n1" / "latest.json").write_text(
        '{"node": "n1", "run_id": "r1", "verdict": "pass", "finished_at": 5}')
    got = results.read_node(cfg, "n1")
    assert got.source == "shared" and got.run["verdict"] == "pass"
    alone = config_mod.from_dict({"state_dir": str(tmp_path / "state")})
    assert "no shared_dir configured" in results.read_node(alone, "elsewhere").problem


def test_store_writes_shared_copy_and_history(tmp_path):
    cfg = config_mod.from_dict({"state_dir": str(tmp_path / "s" / "{node}"),
                                "shared_dir": str(tmp_path / "shared" / "{node}")})
    store = results.ResultStore(cfg, "n1")
    for i, verdict in enumerate(("pass", "fail")):
        run = {"node": "n1", "run_id": f"2026010{i}T000000-1-n1", "level": "quick",
               "verdict": verdict, "finished_at": 100.0 + i, "checks": []}
        assert store.write(run) == []
    got = results.read_node(cfg, "n1", history=5)
    assert got.source == "shared" and got.run["verdict"] == "fail"
    assert [r["verdict"] for r in got.history] == ["fail", "pass"]
    assert (tmp_path / "s" / "n1" / "latest-quick.json").exists()
    # A shared dir that is a file: the local write still happens, the problem is returned.
    cfg2 = config_mod.from_dict({"state_dir": str(tmp_path / "s2"),
                                 "shared_dir": str(tmp_path / "s" / "n1" / "latest.json")})
    problems = results.ResultStore(cfg2, "n1").write({"node": "n1", "run_id": "x",
                                                       "verdict": "pass"})
    assert len(problems) == 1 and "shared results dir" in problems[0]
    assert (tmp_path / "s2" / "latest.json").exists()


def test_status_joins_every_node_with_one_slurm_call(tmp_path):
    """README: `airlock status` joins the results with one Slurm call, however many nodes."""
    from tests.unit.recorded import Recorded, run_doc

    r = Recorded(tmp_path)
    for i in range(1, 13):
        r.add_node(f"node{i}")
        r.add_run(run_doc(f"node{i}"))
    cfg = config_mod.load(r.write())
    doc = status.collect(cfg)
    assert len(doc["nodes"]) == 12 and all(row["verdict"] == "pass" for row in doc["nodes"])
    assert len(r.slurm.calls()) == 1, r.slurm.calls()


def test_a_hung_results_store_is_given_up_on_not_waited_for(tmp_path, monkeypatch):
    """docs/guide.md: the controller gives up on a hung filesystem (here: node2's read never
    returns, as a read stuck in the kernel on a dead NFS server) and names it; the other
    nodes are read."""
    import threading

    cfg = config_mod.from_dict({"state_dir": str(tmp_path / "state"),
                                "shared_dir": str(tmp_path / "shared")})
    for n in ("node1", "node2"):
        results.ResultStore(cfg, n).write({"node": n, "run_id": f"20260101T000000-1-{n}",
                                           "level": "quick", "verdict": "pass",
                                           "finished_at": 5.0, "checks": []})
    release = threading.Event()
    real = results.read_node

    def hangs_on_node2(cfg, node, history=0):
        if node == "node2":
            release.wait(60)  # let go at the end, so that no thread outlives the test
        return real(cfg, node, history)

    monkeypatch.setattr(results, "read_node", hangs_on_node2)
    try:
        got = results.read_many(cfg, ["node1", "node2"], timeout=0.5)
    finally:
        release.set()
    assert got["node1"].run["verdict"] == "pass"
    assert got["node2"].run is None
    assert got["node2"].problem == "results store did not answer within 0.5s"
    assert results.READ_TIMEOUT == 5.0  # what `airlock status` waits (docs/guide.md)
