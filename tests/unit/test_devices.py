"""GPUs are proved on CUDA, never on a stand-in (issue 17, item 1).

On cb0b8e2 a node whose NVML showed 8 GPUs while torch could use none of them (a CPU-only torch
here; on a real node the fabric manager down, CUDA error 802, a driver/runtime mismatch) passed
its registration: burnin, memtest and allreduce quietly ran on CPU devices under the CPU profile.
These tests run the real checks with the real (CPU-only) torch of this machine, against the NVML
simulation.
"""

from __future__ import annotations

import json

import pytest

from airlock.checks import allreduce as allreduce_check
from airlock.checks import burnin, device_plan, memtest
from airlock.checks import cuda as cuda_check
from airlock.checks.context import Context
from airlock.checks.cuda import verdict_cuda
from airlock.checks.device_plan import CudaDevice, CudaView, match
from airlock.config import loader as config
from airlock.hw import faults, nvml


def gpus(n: int = 8) -> list[nvml.Gpu]:
    return [nvml.gpu_from_dict(nvml.healthy_gpu_dict(i), i) for i in range(n)]


def dev(i: int, uuid: str = "", pci: str = "") -> CudaDevice:
    g = nvml.healthy_gpu_dict(i)
    return CudaDevice(i, g["name"], device_plan.norm_uuid(uuid or g["uuid"]),
                      nvml.pci_key(pci or g["pci_bus_id"]))


# --- pure -----------------------------------------------------------------------------------
def test_match_by_uuid_then_pci_in_any_order():
    view = CudaView(tuple(dev(i) for i in reversed(range(8))))
    m = match(gpus(), view)
    assert len(m.pairs) == 8 and not m.missing and not m.extra
    assert all(g.index == d.index for g, d in m.pairs)
    # no UUID from torch (an old driver): the PCI bus id decides
    by_pci = CudaView((CudaDevice(0, "x", "", nvml.pci_key("00000000:28:00.0")),))
    m = match(gpus(2), by_pci)
    assert [(g.index, d.index) for g, d in m.pairs] == [(1, 0)] and m.missing[0].index == 0


def test_cuda_fails_naming_what_torch_cannot_see():
    none = CudaView((), "AssertionError: Torch not compiled with CUDA enabled")
    out = verdict_cuda(8, 8, match(gpus(), none), none)
    assert out.failed
    assert out.detail == "8 GPUs in NVML, torch sees 0: AssertionError: Torch not compiled " \
                         "with CUDA enabled"
    seven = CudaView(tuple(dev(i) for i in range(8) if i != 3))
    out = verdict_cuda(8, 8, match(gpus(), seven), seven)
    assert out.failed and out.detail.startswith("8 GPUs in NVML, torch sees 7: missing gpu3 "
                                                "(GPU-00000003-sim0"), out.detail
    stranger = CudaView((*(dev(i) for i in range(8)), dev(9, uuid="GPU-beef")))
    out = verdict_cuda(8, 8, match(gpus(), stranger), stranger)
    assert out.failed and "torch sees cuda:9 (beef) that NVML does not list" in out.detail


def test_cuda_passes_only_a_full_match_and_skips_only_without_gpus():
    full = CudaView(tuple(dev(i) for i in range(8)))
    out = verdict_cuda(8, 8, match(gpus(), full), full)
    assert out.verdict.value == "pass" and out.figures["devices_kind"] == "cuda"
    assert verdict_cuda(0, 0, match([], CudaView()), CudaView()).verdict.value == "skip"
    # NVML lost the GPUs too: both see nothing, but the profile expects 8
    out = verdict_cuda(0, 8, match([], CudaView((), "no device")), CudaView((), "no device"))
    assert out.failed and out.detail == "0 GPUs in NVML, torch sees 0: no device"


# --- the real checks on this machine's CPU-only torch --------------------------------------
def _ctx(tmp_path, cuda: dict | None, node_gpus: int = 8, fault: str = "") -> Context:
    entry: dict = {"gpus": [nvml.healthy_gpu_dict(i) for i in range(node_gpus)]}
    if cuda is not None:
        entry["cuda"] = cuda
    sim = tmp_path / "sim.json"
    sim.write_text(json.dumps({"nodes": {"n1": entry}}))
    cfg = config.from_dict({"state_dir": str(tmp_path / "state"),
                            "nvml": {"simulate": str(sim)},
                            "burnin": {"dtypes": ["fp32"], "cpu_iterations": 4},
                            "memtest": {"cpu_mib": 2},
                            "allreduce": {"cpu_iters": 2, "cpu_warmup": 1,
                                          "cpu_sizes_kib": [4]}})
    return Context(cfg=cfg, node="n1", level="standard", faults=faults.parse(fault))


@pytest.mark.parametrize("check", [burnin.check_burnin, memtest.check_memtest,
                                   allreduce_check.check_allreduce, cuda_check.check_cuda])
def test_a_gpu_node_without_usable_cuda_fails_every_heavy_check(tmp_path, check):
    """NVML shows 8 H100s, torch here is a CPU build: no heavy check may pass on the CPU."""
    out = check(_ctx(tmp_path, cuda=None))
    assert out.failed, out
    assert "8 GPUs in NVML, torch sees 0: AssertionError: Torch not compiled with CUDA" \
        in out.detail, out.detail


def test_simulated_cuda_error_text_is_named(tmp_path):
    out = cuda_check.check_cuda(_ctx(tmp_path, cuda={"error": "CUDA error 802: system not yet "
                                                           "initialized"}))
    assert out.failed and out.detail == ("8 GPUs in NVML, torch sees 0: CUDA error 802: system "
                                         "not yet initialized")


def test_a_hidden_gpu_fails_cuda_and_the_heavy_checks(tmp_path):
    ctx = _ctx(tmp_path, cuda={"stand_in": True, "hide": [5]})
    out = cuda_check.check_cuda(ctx)
    assert out.failed and "torch sees 7: missing gpu5" in out.detail
    out = burnin.check_burnin(ctx)
    assert out.failed and "GPUs not usable by CUDA: 8 GPUs in NVML, torch sees 7" in out.detail


def test_simulated_cuda_runs_on_labelled_stand_ins_under_the_cpu_profile(tmp_path):
    ctx = _ctx(tmp_path, cuda={"stand_in": True})
    out = cuda_check.check_cuda(ctx)
    assert out.verdict.value == "pass" and "simulated: CPU stand-ins" in out.detail
    out = burnin.check_burnin(ctx)
    assert not out.failed, out.detail
    assert out.figures["devices_kind"] == "stand-in" and out.figures["profile"] == "cpu"
    mem = memtest.check_memtest(ctx)
    assert not mem.failed and mem.figures["devices_kind"] == "stand-in"


def test_the_cpu_profile_runs_on_cpu_devices(tmp_path):
    ctx = _ctx(tmp_path, cuda=None, node_gpus=0)
    assert cuda_check.check_cuda(ctx).verdict.value == "skip"
    out = burnin.check_burnin(ctx)
    assert not out.failed and out.figures["devices_kind"] == "cpu"
    assert out.figures["profile"] == "cpu"


def test_probe_of_this_cpu_only_torch_names_the_error():
    import torch

    for view in (device_plan.probe(torch), device_plan.probe_forked(torch, timeout=60)):
        assert view.devices == ()
        assert view.error == "AssertionError: Torch not compiled with CUDA enabled"
