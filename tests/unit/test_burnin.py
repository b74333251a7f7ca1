"""Burn-in: the pure verdict helpers from hand-made inputs, the fleet reader against files written
by the real results store, and the check itself on CPU "devices", for real, healthy and with each
fault switch (gemm_corrupt, gemm_slow, alloc_fail) caught and named."""

from __future__ import annotations

import json

import pytest

from airlock.checks import burnin, fleet
from airlock.checks.burnin import DeviceRun, verdict_burnin
from airlock.checks.context import Context
from airlock.config import loader as config
from airlock.errors import ConfigError
from airlock.hw import faults
from airlock.records.results import ResultStore


def run(dev: str, dtype: str = "fp32", tflops: float = 1.0, **kw) -> DeviceRun:
    return DeviceRun(dev, "cpu", dtype, tflops=tflops, sustained=tflops, gemms=4, **kw)


# --- pure helpers -------------------------------------------------------------------------------
def test_majority_names_the_odd_device():
    assert burnin.majority({"g0": 5, "g1": 5, "g2": 7}) == (5, ["g2"])
    assert burnin.majority({"g0": 5, "g1": 5}) == (5, [])


def test_majority_tie_has_no_reference():
    assert burnin.majority({"g0": 5, "g1": 6}) == (None, ["g0", "g1"])
    assert burnin.majority({}) == (None, [])


def test_stragglers_below_fraction_of_median():
    med, slow = burnin.stragglers({"g0": 100.0, "g1": 98.0, "g2": 60.0, "g3": 101.0}, 0.85)
    assert med == 99.0 and slow == ["g2"]
    # two devices: the slow one is judged against the other, not against their mean
    assert burnin.stragglers({"g0": 100.0, "g1": 40.0}, 0.5)[1] == ["g1"]
    assert burnin.stragglers({"g0": 100.0, "g1": 60.0}, 0.5)[1] == []
    assert burnin.stragglers({"g0": 100.0}, 0.85)[1] == []
    assert burnin.stragglers({"g0": 100.0, "g1": 10.0}, 0.0)[1] == []


def test_fleet_reference_needs_enough_nodes():
    per_node = {"a": {"bf16": 600.0}, "b": {"bf16": 640.0}, "c": {"bf16": 700.0, "fp32": 50.0}}
    assert fleet.fleet_reference(per_node, "bf16", 3) == 640.0
    assert fleet.fleet_reference(per_node, "fp32", 3) is None
    assert fleet.fleet_reference(per_node, "bf16", 4) is None


def test_verdict_pass_reports_figures():
    out = verdict_burnin([run("g0", tflops=2.0), run("g1", tflops=2.1)], {"fp32": 1.0})
    assert out.verdict.value == "pass"
    assert out.figures["min_tflops"] == 2.0 and out.figures["floor"] == 1.0
    assert out.figures["median_tflops"] == {"fp32": 2.05}


def test_verdict_order_error_first():
    runs = [run("g0", mismatches=3), run("g1", error="allocation failed: x")]
    out = verdict_burnin(runs)
    assert out.failed and out.detail == "g1 fp32 allocation failed: x"


def test_verdict_mismatch_names_device_and_place():
    out = verdict_burnin([run("g0"), run("g1", mismatches=12, first_mismatch=(3, 4))])
    assert out.detail == "g1 fp32 12 mismatches vs other devices first at (3, 4)"
    assert out.remediation == "replace"
    tie = verdict_burnin([run("g0"), run("g1", mismatches=1, first_mismatch=(0, 0), versus="g0")])
    assert tie.detail == "g1 fp32 1 mismatches vs g0 (no majority) first at (0, 0)"


def test_verdict_golden_checksum_and_nan():
    out = verdict_burnin([run("g0", "bf16", golden_error=0.5, golden_at=(1, 2))])
    assert out.failed and out.detail.startswith("g0 bf16 checksum off by 5.00e-01 at (1, 2)")
    nan = verdict_burnin([run("g0", golden_error=float("nan"), golden_at=(0, 0))])
    assert nan.failed and "checksum off" in nan.detail
    ok = verdict_burnin([run("g0", "bf16", golden_error=burnin.TOLERANCE["bf16"] / 2)])
    assert not ok.failed


def test_verdict_unstable_result():
    out = verdict_burnin([run("g0", unstable=2)])
    assert out.failed and out.detail == "g0 fp32 result changed in 2 chunks"


def test_verdict_floor_straggler_fleet():
    floor = verdict_burnin([run("g0", tflops=0.5), run("g1", tflops=2.0)], {"fp32": 1.0})
    assert floor.detail == "g0 fp32 0.5 TFLOPS < floor 1"
    strag = verdict_burnin([run("g0", tflops=1.0), run("g1", tflops=2.0), run("g2", tflops=2.0)],
                           {"fp32": 0.1}, straggler_fraction=0.85)
    assert strag.detail == "g0 fp32 straggler 1 TFLOPS < 0.85 x the others' median 2"
    low = verdict_burnin([run("g0", tflops=2.0), run("g1", tflops=2.0)], {"fp32": 0.1},
                         fleet={"fp32": 3.0}, fleet_fraction=0.85)
    assert low.verdict.value == "warn"
    assert low.detail == ("g0 fp32 2 TFLOPS < 0.85 x fleet median 3 (a warning: only the "
                          "profile floor fails a node)")
    assert low.figures["fleet_median"] == {"fp32": 3.0}


def test_cpu_stand_in_below_its_floor_warns_never_fails():
    # Issue 24: two spinning processes beside a console test made a healthy node's CPU stand-in
    # measure 6.6e-05 TFLOPS against the CPU profile's 1e-4 floor, and the node was failed with
    # "remediation: reboot". A stand-in's speed on shared cores is not evidence about hardware.
    slow = verdict_burnin([run("cpu0", tflops=6.6e-05), run("cpu1", tflops=2e-4)],
                          {"fp32": 1e-4}, straggler_fails=False)
    assert not slow.failed and slow.verdict.value == "warn", slow.detail
    assert slow.detail == ("cpu0 fp32 6.6e-05 TFLOPS < floor 0.0001 (CPU devices share cores: "
                           "a warning, never a drain)")
    # A wrong result on a stand-in still fails: correctness is evidence, speed is not.
    bad = verdict_burnin([run("cpu0", mismatches=1), run("cpu1")], {"fp32": 1e-4},
                         straggler_fails=False)
    assert bad.failed


def test_verdict_no_devices():
    assert verdict_burnin([]).detail == "no devices ran"


# --- the fleet, from files the results store wrote ----------------------------------------------
def _store_run(cfg, node: str, profile: str, verdict: str, med: float, run_id: str,
               dtype: str = "bf16") -> None:
    rec = {"check": "burnin", "verdict": verdict, "detail": "", "remediation": "",
           "figures": {"profile": profile, "median_tflops": {dtype: med}}}
    ResultStore(cfg, node).write({"node": node, "run_id": run_id, "level": "standard",
                            "verdict": verdict, "checks": [rec]})


def test_read_fleet_latest_passing_same_profile(tmp_path):
    cfg = config.from_dict({"state_dir": str(tmp_path / "state/{node}"),
                            "shared_dir": str(tmp_path / "shared")})
    _store_run(cfg, "a", "h100", "pass", 600.0, "20260101T000000-1-a")
    _store_run(cfg, "a", "h100", "pass", 650.0, "20260102T000000-1-a")  # newer wins
    _store_run(cfg, "b", "h100", "fail", 100.0, "20260102T000000-1-b")  # failed: ignored
    _store_run(cfg, "c", "a100", "pass", 300.0, "20260102T000000-1-c")  # other SKU
    _store_run(cfg, "me", "h100", "pass", 1.0, "20260102T000000-1-me")  # this node
    (tmp_path / "shared" / "d" / "results").mkdir(parents=True)
    (tmp_path / "shared" / "d" / "results" / "x.json").write_text("{not json")
    assert fleet.read_fleet(cfg.shared_dir, "me", "h100") == {"a": {"bf16": 650.0}}
    assert fleet.read_fleet("", "me", "h100") == {}


# --- for real on the CPU ---------------------------------------------------------------------
def make_ctx(tmp_path, fault: str = "", level: str = "standard", **burnin_cfg) -> Context:
    cfg = config.from_dict({"state_dir": str(tmp_path / "state"),
                            "shared_dir": str(tmp_path / "shared"),
                            "burnin": {"dtypes": ["fp32", "bf16"], "cpu_iterations": 8,
                                       **burnin_cfg}})
    return Context(cfg=cfg, node="n1", level=level, faults=faults.parse(fault))


def test_check_burnin_cpu_healthy(tmp_path):
    seen = []
    out = burnin.check_burnin(make_ctx(tmp_path), progress=seen.append)
    # A loaded machine can make one CPU thread look slow: that is a warning, nothing else is.
    assert out.verdict.value == "pass" or (
        out.verdict.value == "warn" and "straggler" in out.detail), out.detail
    figs = out.figures
    assert figs["devices"] == ["cpu0", "cpu1"] and figs["profile"] == "cpu"
    assert set(figs["tflops"]) == {"fp32", "bf16"} and figs["min_tflops"] > 0
    assert figs["gemms"] == 2 * 2 * 8 and figs["mode"] == "8 GEMMs per dtype"
    json.dumps(out.to_dict())  # goes into the results store as is


@pytest.mark.parametrize("fault, expect", [
    ("gemm_corrupt=1", "cpu1 fp32 1 mismatches vs other devices first at (1, 1)"),
    ("alloc_fail=0", "cpu0 fp32 allocation failed: MemoryError: injected alloc_fail on cpu0"),
])
def test_check_burnin_faults_named(tmp_path, fault, expect):
    out = burnin.check_burnin(make_ctx(tmp_path, fault))
    assert out.failed and out.detail == expect


def test_gemm_slow_is_a_straggler(tmp_path):
    out = burnin.check_burnin(make_ctx(tmp_path, "gemm_slow=1:0.1"))
    # On CPU "devices" (threads sharing cores) a slow device is named but only warns, whether
    # it fell below the others' median or, on a busy machine, below the CPU profile's floor.
    assert out.detail.startswith("cpu1 fp32 "), out.detail
    assert out.verdict.value == "warn", out.detail
    assert "straggler" in out.detail or "< floor" in out.detail, out.detail
    assert out.detail.endswith("(CPU devices share cores: a warning, never a drain)")


def test_gpu_straggler_still_fails_cpu_straggler_warns():
    runs = [run("cuda:0", tflops=1.0), run("cuda:1", tflops=2.0), run("cuda:2", tflops=2.0)]
    gpu = verdict_burnin(runs, {"fp32": 0.1}, straggler_fraction=0.85)
    assert gpu.failed and "straggler" in gpu.detail and gpu.remediation == "reboot"
    cpu = verdict_burnin(runs, {"fp32": 0.1}, straggler_fraction=0.85, straggler_fails=False)
    assert cpu.verdict.value == "warn" and "straggler" in cpu.detail
    # a warning does not hide a real fault found after it
    bad = [*runs[:2], run("cuda:2", tflops=2.0, mismatches=1, first_mismatch=(0, 0))]
    assert verdict_burnin(bad, {"fp32": 0.1}, 0.85, straggler_fails=False).failed


def test_repeated_healthy_cpu_burnins_never_fail(tmp_path):
    """Back to back on this machine as it is (2 shared cores, other tests running): the CPU
    burn-in of a healthy node must never FAIL (issue 9: no false drains)."""
    seen = []
    for i in range(5):
        out = burnin.check_burnin(make_ctx(tmp_path / str(i)))
        seen.append((out.verdict.value, out.detail))
    assert all(v != "fail" for v, _ in seen), seen


def test_single_device_corruption_caught_by_golden_checksum(tmp_path):
    out = burnin.check_burnin(make_ctx(tmp_path, "gemm_corrupt=0", cpu_devices=1))
    assert out.failed and out.detail.startswith("cpu0 fp32 checksum off by"), out.detail
    assert out.detail.endswith("at (1, 1)")


def _slurm_listing(tmp_path, names) -> str:
    """A scontrol in a bin dir that lists exactly these nodes (what Slurm knows)."""
    bin_dir = tmp_path / "slurm-bin"
    bin_dir.mkdir(exist_ok=True)
    lines = "".join(f"NodeName={n} State=IDLE Partitions=main\n" for n in names)
    (bin_dir / "nodes.txt").write_text(lines)
    (bin_dir / "scontrol").write_text(f"#!/bin/sh\ncat {bin_dir}/nodes.txt\n")
    (bin_dir / "scontrol").chmod(0o755)
    return str(bin_dir)


def test_forged_fleet_documents_never_drain_an_honest_node(tmp_path):
    """Issue 17: any valid-named folder counted as a fleet member, nodes Slurm does not list
    included. Five ghost nodes with high figures made an honest node a straggler, and the
    confirming re-measurement compared against the same forged median, so the node was drained.
    Fleet members are now nodes Slurm lists; and a shortfall against the fleet alone warns."""
    honest = ("a", "b")
    ctx = make_ctx(tmp_path, fleet_cpu=True, fleet_min_nodes=2)
    ctx.cfg.section("slurm").bin_dir = _slurm_listing(tmp_path, ("n1", *honest))
    for i in range(5):  # ghosts: valid names and documents, root's files, no such nodes
        _store_run(ctx.cfg, f"ghost{i}", "cpu", "pass", 1000.0, f"20260101T000000-1-ghost{i}",
                   "fp32")
    ignored: list[str] = []
    members = fleet.fleet_members(ctx.cfg, ignored)
    assert members == {"n1", *honest}
    assert fleet.read_fleet(ctx.cfg.shared_dir, "n1", "cpu", members=members,
                            ignored=ignored) == {}
    assert any("ghost0" in i and "not a node Slurm lists" in i for i in ignored), ignored
    out = burnin.check_burnin(ctx)
    assert not out.failed, out.detail
    assert "fleet_median" not in out.figures or not out.figures["fleet_median"]


def test_a_fleet_shortfall_alone_warns(tmp_path):
    ctx = make_ctx(tmp_path, fleet_cpu=True, fleet_min_nodes=2)
    ctx.cfg.section("slurm").bin_dir = _slurm_listing(tmp_path, ("n1", "a", "b"))
    for node in ("a", "b"):  # real nodes, a thousand times faster than this one
        _store_run(ctx.cfg, node, "cpu", "pass", 1000.0, f"20260101T000000-1-{node}", "fp32")
    out = burnin.check_burnin(ctx)
    assert out.verdict.value == "warn" and "x fleet median 1e+03" in out.detail, out.detail
    assert "only the profile floor fails" in out.detail


def test_read_fleet_with_node_placeholder(tmp_path):
    """Issue 12: with {node} in shared_dir the glob went one level too deep and found nothing."""
    for template in ("shared/{node}", "shared/airlock-{node}/x"):
        cfg = config.from_dict({"state_dir": str(tmp_path / "state/{node}"),
                                "shared_dir": str(tmp_path / template)})
        _store_run(cfg, "a", "h100", "pass", 650.0, "20260102T000000-1-a")
        _store_run(cfg, "b", "h100", "pass", 600.0, "20260102T000000-1-b")
        assert fleet.read_fleet(cfg.shared_dir, "b", "h100") == {"a": {"bf16": 650.0}}, template


def test_plan_gpu_duration_and_deep():
    cfg = config.from_dict({}).burnin
    std = burnin.make_plan(cfg, True, "standard")
    deep = burnin.make_plan(cfg, True, "deep")
    assert (std.size, std.duration, deep.duration) == (8192, 60.0, 300.0)
    cpu = burnin.make_plan(cfg, False, "deep")
    assert cpu.duration == 0 and cpu.iterations == 32
    assert cpu.thread_clock and not std.thread_clock


def test_config_derives_timeout_and_rejects_bad_values():
    cfg = config.from_dict({}).burnin
    assert cfg.timeout == 4 * 300 * 1.25 + 300
    assert config.from_dict({"burnin": {"timeout": 8}}).burnin.timeout == 8
    for bad, msg in ((({"dtypes": []}), "dtypes: must name"),
                     ({"straggler_fraction": 1.5}, "straggler_fraction: must be between"),
                     ({"cpu_devices": 0}, "cpu_devices: must be > 0")):
        with pytest.raises(ConfigError, match=msg):
            config.from_dict({"burnin": bad}).burnin  # noqa: B018 - loading validates


def test_an_allocation_failure_is_known_by_its_type_not_its_words():
    """Issue 25: blame by type. torch names a failed device allocation by its class
    (torch.cuda.OutOfMemoryError, MemoryError on the host); a kernel error that merely says
    "out of memory" in its text is an error like any other."""
    import torch

    assert burnin._is_alloc_error(MemoryError("x"), torch)
    assert burnin._is_alloc_error(torch.cuda.OutOfMemoryError("CUDA out of memory"), torch)
    assert not burnin._is_alloc_error(RuntimeError("illegal address: out of memory map"), torch)
