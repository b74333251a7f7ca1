"""Fleet drift: the pure majority and verdict, the validation of other nodes' facts, and the
check end to end: nodes run it for real and publish their facts to the shared directory, a
node whose driver differs from the fleet's warns (fails only when configured), and forged
documents (a folder for a node Slurm does not list, a link, a document of another node, a fact
that is not a version) drain no one."""

from __future__ import annotations

import json
import os

import pytest

from airlock import finish
from airlock.checks import drift
from airlock.checks.base import Verdict
from airlock.config import loader as config
from airlock.errors import ConfigError
from airlock.hw.nvml import healthy_gpu_dict
from airlock.runner import run_level
from tests.unit.fakeslurm import FakeSlurm


def fleet_of(n: int, **facts) -> dict[str, dict[str, str]]:
    base = {"driver": "550.54.15", "cuda": "12.4", "kernel": "6.1.0-18-amd64"}
    return {f"n{i}": {**base, **facts} for i in range(2, 2 + n)}


def test_a_node_that_differs_from_the_majority_warns_or_fails_as_configured():
    mine = {"driver": "550.90.07", "cuda": "12.4", "kernel": "6.1.0-18-amd64"}
    fleet = fleet_of(3)
    out = drift.verdict_drift(mine, fleet, list(drift.FACTS), 3, 0.5, "warn")
    assert out.verdict is Verdict.WARN
    assert out.detail == "driver 550.90.07 vs fleet 550.54.15 (3/3 nodes)"
    out = drift.verdict_drift(mine, fleet, list(drift.FACTS), 3, 0.5, "fail")
    assert out.failed and out.detail == "driver 550.90.07 vs fleet 550.54.15 (3/3 nodes)"
    # the node agrees: pass, naming what was judged
    ok = drift.verdict_drift({**mine, "driver": "550.54.15"}, fleet, list(drift.FACTS), 3, 0.5,
                             "fail")
    assert ok.verdict is Verdict.PASS and ok.detail.startswith("driver, cuda, kernel as")


def test_no_majority_no_verdict():
    mine = {"driver": "550.90.07"}
    assert drift.verdict_drift(mine, fleet_of(2), ["driver"], 3, 0.5, "fail").verdict \
        is Verdict.SKIP
    split = {"a": {"driver": "1"}, "b": {"driver": "1"}, "c": {"driver": "2"},
             "d": {"driver": "2"}}
    assert drift.fleet_majority(split, "driver", 3, 0.5) == (None, 2, 4)
    assert drift.verdict_drift(mine, split, ["driver"], 3, 0.5, "fail").verdict is Verdict.SKIP


def test_other_nodes_facts_are_validated_field_by_field():
    def run(facts, profile="h100-sxm-8x"):
        return {"profile": profile, "checks": [{"check": "drift", "verdict": "pass",
                                                "figures": {"facts": facts}}]}
    good = {"driver": "550.54.15", "kernel": "6.1.0-18-amd64", "hca_firmware": "28.39.1002"}
    assert drift.facts_of(run(good), "h100-sxm-8x") == good
    assert drift.facts_of(run(good), "h200-8x") is None  # another profile's fleet
    assert drift.facts_of(run(good, "h200-8x"), "h100-sxm-8x") is None
    assert drift.facts_of(run({**good, "bios": "1"}), "h100-sxm-8x") is None
    assert drift.facts_of(run({**good, "driver": 550}), "h100-sxm-8x") is None
    assert drift.facts_of(run({**good, "driver": "x\n$(reboot)"}), "h100-sxm-8x") is None
    assert drift.facts_of(run({**good, "driver": "9" * 200}), "h100-sxm-8x") is None


# --- end to end: nodes publish, a node compares --------------------------------------------------
NODES = ["n1", "n2", "n3", "n4"]


@pytest.fixture
def fleet(tmp_path):
    slurm = FakeSlurm(tmp_path / "slurm", nodes=NODES)
    sim = {"nodes": {}}
    for n in NODES:
        driver = "550.90.07" if n == "n1" else "550.54.15"
        sim["nodes"][n] = {"gpus": [healthy_gpu_dict(i, driver=driver) for i in range(8)],
                           "cuda_version": "12.4"}
    (tmp_path / "sim.json").write_text(json.dumps(sim))
    (tmp_path / "proc" / "sys" / "kernel").mkdir(parents=True)
    (tmp_path / "proc" / "sys" / "kernel" / "osrelease").write_text("6.1.0-18-amd64\n")
    return tmp_path, slurm


def cfg_for(tmp_path, slurm, **drift_section):
    return config.from_dict({
        "state_dir": str(tmp_path / "state" / "{node}"), "shared_dir": str(tmp_path / "shared"),
        "slurm": {"bin_dir": slurm.bin_dir}, "nvml": {"simulate": str(tmp_path / "sim.json")},
        "system": {"sys_root": str(tmp_path / "sys"), "proc_root": str(tmp_path / "proc")},
        "profile": {"name": "h100-sxm-8x"}, "drift": drift_section})


def register(cfg, node: str) -> dict:
    """The node runs the check for real and publishes its run, as a registration does."""
    records, ctx = run_level(cfg, node, "standard", only=["nvml", "drift"])
    run = finish.summarize(node, "standard", "boot", records, 0.0, ctx.profile_name)
    finish.record_run(cfg, node, run)
    return run


def test_a_driver_that_differs_from_the_fleet_warns_and_fails_when_configured(fleet):
    tmp_path, slurm = fleet
    cfg = cfg_for(tmp_path, slurm)
    for n in ("n2", "n3", "n4"):
        register(cfg, n)
    rec = next(r for r in register(cfg, "n1")["checks"] if r["check"] == "drift")
    assert rec["verdict"] == "warn"
    assert rec["detail"] == "driver 550.90.07 vs fleet 550.54.15 (3/3 nodes)"
    assert rec["figures"]["facts"]["vbios"] == "96.00.74.00.01"
    assert rec["figures"]["identity"]["gpus"][0] == "1650000000000"
    run = register(cfg_for(tmp_path, slurm, action="fail"), "n1")
    assert run["verdict"] == "fail" and run["failed_check"] == "drift"


def test_a_forged_majority_drains_no_one_and_is_named(fleet):
    tmp_path, slurm = fleet
    cfg = cfg_for(tmp_path, slurm, action="fail")
    register(cfg, "n2")  # one honest peer: too few for a majority on its own
    honest = register(cfg, "n1")
    assert next(r for r in honest["checks"] if r["check"] == "drift")["verdict"] == "skip"
    shared = tmp_path / "shared"
    forged = json.loads((shared / "n2" / "latest.json").read_text())
    for i in range(5):  # folders for nodes Slurm does not list
        fake = dict(forged, node=f"evil{i}", run_id=f"20990101T000000-{i}-evil{i}")
        (shared / f"evil{i}" / "results").mkdir(parents=True)
        (shared / f"evil{i}" / "results" / f"{fake['run_id']}.json").write_text(json.dumps(fake))
    # n3 and n4 are real nodes, but their folders hold forgeries: a link to n2's folder, and a
    # document that says it is n2's
    os.symlink(shared / "n2", shared / "n3")
    (shared / "n4" / "results").mkdir(parents=True)
    (shared / "n4" / "results" / "20990101T000000-9-n4.json").write_text(json.dumps(forged))
    run = register(cfg, "n1")
    rec = next(r for r in run["checks"] if r["check"] == "drift")
    assert run["verdict"] != "fail" and rec["verdict"] == "skip"
    assert rec["figures"]["fleet_nodes"] == 1, rec
    ignored = "\n".join(rec["figures"]["ignored"])
    assert "evil0 is not a node Slurm lists" in ignored
    assert "written for node 'n2', not 'n4'" in ignored
    # n3's folder is a link: never followed (SafeDir), so n2's facts did not vote twice


def test_config_is_validated():
    with pytest.raises(ConfigError, match="facts: must be one of"):
        config.from_dict({"drift": {"facts": ["bios"]}})
    with pytest.raises(ConfigError, match="action: must be one of warn, fail"):
        config.from_dict({"drift": {"action": "drain"}})
