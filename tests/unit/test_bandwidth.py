"""PCIe bandwidth and the P2P matrix: the pure verdicts with GPU figures (a link trained down,
one slow pair), and the real checks with this machine's CPU-only torch on the device plan:
a GPU node without usable CUDA fails them, the dev cluster's simulated GPUs run on labelled
stand-ins that are never a GPU figure, and the injected faults (pcie_slow with a link the NVML
simulation reports at x8, p2p_slow on one pair) are named."""

from __future__ import annotations

import json

import pytest

from airlock.checks import p2p, pcie_bw
from airlock.checks.base import Verdict
from airlock.checks.context import Context
from airlock.config import loader as config
from airlock.hw import faults, nvml

B = pcie_bw.DeviceBw
H100_FLOORS = {"h2d": 48.0, "d2h": 48.0}


def test_a_link_trained_down_is_named_with_the_bandwidth_it_costs():
    results = [B(f"cuda:{i}", i, 53.1, 54.0) for i in range(8)]
    results[3] = B("cuda:3", 3, 26.4, 27.0)
    links = {i: pcie_bw.Link(5, 16, 5, 16) for i in range(8)}
    links[3] = pcie_bw.Link(5, 8, 5, 16)
    out = pcie_bw.verdict_pcie_bw(results, H100_FLOORS, links, 0.8, True, "cuda")
    assert out.failed
    assert out.detail == "gpu3 H2D 26.4 GB/s < 48 (link gen5 x8, expected x16)"
    assert out.figures["links"]["gpu3"] == "gen5 x8, expected x16"
    # a slow GPU whose link is fine: the link is named as fine
    results[3] = B("cuda:3", 3, 30.0, 54.0)
    links[3] = pcie_bw.Link(5, 16, 5, 16)
    out = pcie_bw.verdict_pcie_bw(results, H100_FLOORS, links, 0.8, True, "cuda")
    assert out.detail == "gpu3 H2D 30.0 GB/s < 48 (link gen5 x16)"


def test_without_floors_a_straggler_fails_on_gpus_and_only_warns_on_stand_ins():
    results = [B(f"cuda:{i}", i, 25.0, 25.0) for i in range(4)] + [B("cuda:4", 4, 12.0, 25.0)]
    out = pcie_bw.verdict_pcie_bw(results, {}, {}, 0.8, True, "cuda")
    assert out.failed and out.detail == "gpu4 H2D 12.0 GB/s < 0.8 x the others' 25.0"
    stand = [B("cpu0", 0, 9.0, 9.0), B("cpu1", 1, 2.0, 9.0)]
    out = pcie_bw.verdict_pcie_bw(stand, {}, {1: pcie_bw.Link(5, 8, 5, 16)}, 0.8, False,
                                  "stand-in")
    assert out.verdict is Verdict.WARN
    assert out.detail == ("cpu1 H2D 2.0 GB/s < 0.8 x the others' 9.0 (for gpu1, NVML: link "
                          "gen5 x8, expected x16) (stand-in: not a PCIe figure)")


def test_a_narrow_link_within_the_floor_warns_and_a_healthy_node_passes():
    results = [B(f"cuda:{i}", i, 53.0, 54.0) for i in range(2)]
    links = {0: pcie_bw.Link(5, 16, 5, 16), 1: pcie_bw.Link(5, 8, 5, 16)}
    out = pcie_bw.verdict_pcie_bw(results, {"h2d": 20.0, "d2h": 20.0}, links, 0.8, True, "cuda")
    assert out.verdict is Verdict.WARN and out.detail.startswith("gpu1 link gen5 x8, expected")
    links[1] = pcie_bw.Link(5, 16, 5, 16)
    out = pcie_bw.verdict_pcie_bw(results, H100_FLOORS, links, 0.8, True, "cuda")
    assert out.verdict is Verdict.PASS and out.detail == "2 GPUs, lowest 53.0 GB/s"


def test_the_slow_pair_is_named_and_missing_peer_access_fails_on_nvlink():
    pairs = [p2p.PairBw(f"gpu{i}", f"gpu{j}", 360.0) for i in range(4) for j in range(4)
             if i != j]
    pairs[7] = p2p.PairBw("gpu2", "gpu5", 121.4)
    out = p2p.verdict_p2p(pairs, 335.0, 0.8, True, True, "cuda")
    assert out.failed and out.detail == "gpu2->gpu5 121.4 GB/s < 335"
    pairs[7] = p2p.PairBw("gpu2", "gpu5", 250.0, peer=False)
    out = p2p.verdict_p2p(pairs, 0.0, 0.8, True, True, "cuda")
    assert out.failed and out.detail == "gpu2->gpu5 no peer access"
    # a PCIe SKU without NVLink: no peer access is normal, the bandwidth is judged
    out = p2p.verdict_p2p(pairs, 0.0, 0.8, True, False, "cuda")
    assert out.failed and out.detail == "gpu2->gpu5 250.0 GB/s < 0.8 x the other pairs' 360.0"
    assert p2p.verdict_p2p([], 1, 0.8, True, True, "cuda").verdict is Verdict.SKIP


# --- the real checks on the device plan -------------------------------------------------------
def _ctx(tmp_path, cuda: dict | None, node_gpus: int = 8, fault: str = "",
         change: dict | None = None) -> Context:
    gpus = [nvml.healthy_gpu_dict(i) for i in range(node_gpus)]
    for g, fields in (change or {}).items():
        gpus[g].update(fields)
    entry: dict = {"gpus": gpus}
    if cuda is not None:
        entry["cuda"] = cuda
    sim = tmp_path / "sim.json"
    sim.write_text(json.dumps({"nodes": {"n1": entry}}))
    cfg = config.from_dict({"state_dir": str(tmp_path / "state"), "nvml": {"simulate": str(sim)},
                            "pcie_bw": {"cpu_size_mib": 4, "iters": 3},
                            "p2p": {"cpu_size_mib": 4, "iters": 3}})
    return Context(cfg=cfg, node="n1", level="standard", faults=faults.parse(fault))


@pytest.mark.parametrize("check", [pcie_bw.check_pcie_bw, p2p.check_p2p])
def test_a_gpu_node_without_usable_cuda_fails_never_falls_back(tmp_path, check):
    out = check(_ctx(tmp_path, cuda=None))
    assert out.failed
    assert out.detail.startswith("GPUs not usable by CUDA: 8 GPUs in NVML, torch sees 0")


def test_stand_ins_are_labelled_and_judged_by_the_cpu_profile(tmp_path):
    ctx = _ctx(tmp_path, cuda={"stand_in": True})
    for check in (pcie_bw.check_pcie_bw, p2p.check_p2p):
        out = check(ctx)
        assert not out.failed, out
        assert out.figures["devices_kind"] == "stand-in" and out.figures["profile"] == "cpu"
        assert "not a" in out.detail and "GPU" not in out.detail.split("(")[0]


def test_injected_slow_link_on_a_stand_in_names_nvmls_link_and_never_fails(tmp_path):
    ctx = _ctx(tmp_path, cuda={"stand_in": True}, fault="pcie_slow=1:0.05",
               change={1: {"pcie_width": 8}})
    out = pcie_bw.check_pcie_bw(ctx)
    assert out.verdict is Verdict.WARN, out
    assert out.detail.startswith("cpu1 "), out.detail
    assert "(for gpu1, NVML: link gen5 x8, expected x16) (stand-in: not a PCIe figure)" in \
        out.detail
    assert out.figures["links"]["gpu1"] == "gen5 x8, expected x16"


def test_injected_slow_pair_is_named(tmp_path):
    ctx = _ctx(tmp_path, cuda={"stand_in": True}, fault="p2p_slow=0-1:0.05")
    out = p2p.check_p2p(ctx)
    assert out.verdict is Verdict.WARN, out  # stand-ins: a warning, never a drain
    assert out.detail.startswith("cpu0->cpu1 ") and "(stand-in: not a GPU figure)" in out.detail
    assert out.figures["devices_kind"] == "stand-in"


@pytest.mark.parametrize("check", [pcie_bw.check_pcie_bw, p2p.check_p2p])
def test_a_node_without_gpus_has_nothing_to_measure(tmp_path, check):
    out = check(_ctx(tmp_path, cuda=None, node_gpus=0))
    assert out.verdict is Verdict.SKIP and out.detail.startswith("no GPUs")


@pytest.mark.parametrize("check, name", [(pcie_bw.check_pcie_bw, "pcie_bw"),
                                         (p2p.check_p2p, "p2p")])
@pytest.mark.parametrize("node_gpus, cuda", [(0, None), (8, None), (8, {"stand_in": True})])
def test_every_outcome_is_recorded_under_its_own_check(tmp_path, check, name, node_gpus, cuda):
    """The record's name is the outcome's: p2p's skip on a GPU-less node once said pcie_bw."""
    out = check(_ctx(tmp_path, cuda=cuda, node_gpus=node_gpus))
    assert out.check == name, out


def test_the_pcie_floor_itself_passes_and_just_below_it_fails():
    """Issue 25 item 11: a figure at the floor meets it (`<`, not `<=`), the floor is held in
    both directions, and 0.1 GB/s below it fails."""
    links = {i: pcie_bw.Link(5, 16, 5, 16) for i in range(2)}
    at = [B("cuda:0", 0, 48.0, 48.0), B("cuda:1", 1, 48.0, 48.0)]
    out = pcie_bw.verdict_pcie_bw(at, H100_FLOORS, links, 0.8, True, "cuda")
    assert out.verdict is Verdict.PASS, out
    for below in (B("cuda:1", 1, 47.9, 48.0), B("cuda:1", 1, 48.0, 47.9)):
        out = pcie_bw.verdict_pcie_bw([at[0], below], H100_FLOORS, links, 0.8, True, "cuda")
        assert out.failed and out.detail.startswith("gpu1 ") and "< 48" in out.detail, out
