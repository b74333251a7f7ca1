"""scripts/gpu-proof.sh --cpu: the GPU proof's every step on the CPU (gloo, simulated NVML), so
the script that runs on a GPU machine only now and then cannot rot. Checks the JSON it writes:
the standard check passed, each injected fault was caught where it was put, the all-reduce was
verified, and the ratios the GPU run reports are there."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_gpu_proof_cpu_mode_runs_every_step_and_catches_every_fault(tmp_path):
    out = tmp_path / "out"
    env = {**os.environ, "OUT": str(out), "PYTHON": sys.executable, "BUDGET": "400"}
    env.pop("AIRLOCK_FAULTS", None)
    env.pop("AIRLOCK_CONFIG", None)
    p = subprocess.run(["bash", str(REPO / "scripts" / "gpu-proof.sh"), "--cpu"], env=env,
                       capture_output=True, text=True, timeout=540, cwd=tmp_path)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    proof = json.loads((out / "gpu-proof.json").read_text())
    summary, steps = proof["summary"], proof["steps"]
    assert proof["mode"] == "cpu" and summary["ok"] is True

    # the profile: the shipped H200 one for one GPU, nothing else changed, written beside it
    assert proof["profile"]["derived_from"] == "h200-8x"
    assert proof["profile"]["changed"] == ["gpus", "nvlink_links"]
    assert steps["snapshot"]["source"] == "simulated" and len(steps["snapshot"]["gpus"]) == 1

    check = steps["check_standard"]
    assert check["verdict"] == "pass" and check["profile"] == "h200-1x-proof", check["detail"]
    for name in ("nvml", "gpu_count", "cuda", "burnin", "memtest"):
        assert check["checks"][name]["verdict"] == "pass", (name, check["checks"][name])
    # the simulated GPU's CUDA is a CPU stand-in, and says so; one device: nothing to all-reduce
    # within the node, exactly as on a one-GPU machine (the proof's own step covers the engine)
    assert check["checks"]["burnin"]["figures"]["devices_kind"] == "stand-in"
    assert check["checks"]["allreduce"]["verdict"] == "skip"

    # the faults, caught where the switches put them (airlock/hw/faults.py)
    assert summary["gemm_corrupt_caught"] and summary["gemm_corrupt_at"] == [1, 1]
    assert steps["faults"]["checks"]["burnin"]["detail"].startswith("cpu0 fp32 checksum off")
    assert summary["gemm_corrupt_caught_by_dtype"] == {"bf16": True, "fp16": True, "fp32": True}
    assert steps["gemm_corrupt_by_dtype"]["fp32"]["at"] == [1, 1]
    assert summary["memtest_corrupt_caught"]
    assert "first at offset 0xfa0" in steps["faults"]["checks"]["memtest"]["detail"]
    # the deep steps: stand-ins labelled, never a GPU figure; DCGM absent here says so; the
    # recorded DCGM failure is caught naming GPU and test, a hang is inconclusive
    deep = steps["deep"]["checks"]
    assert deep["pcie_bw"]["verdict"] == "pass"
    assert deep["pcie_bw"]["figures"]["devices_kind"] == "stand-in"
    assert "not a PCIe figure" in deep["pcie_bw"]["detail"]
    assert deep["p2p"]["verdict"] == "skip"  # one simulated GPU: no pair
    assert deep["dcgm"]["verdict"] == "skip" and "no DCGM on this node" in deep["dcgm"]["detail"]
    assert summary["pcie_slow_caught"] is None  # a stand-in copy is never a PCIe verdict
    assert summary["dcgm_recorded_fail_caught"] and summary["dcgm_hang_inconclusive"]
    assert steps["dcgm_hang"]["rc"] == 2
    assert summary["allreduce_verified"] and summary["allreduce_backend"] == "gloo"
    assert summary["allreduce_corrupt_caught"]
    assert steps["nccl"]["allreduce_corrupt"]["sent_bad"][0]["rank"] == 0

    # the figures the GPU run is judged by are all there
    for dtype in ("fp32", "bf16"):
        ratio = steps["burnin_vs_matmul"][dtype]
        assert ratio["raw_tflops"] > 0 and ratio["burnin_tflops"] > 0 and ratio["ratio"] > 0
        assert ratio["burnin_reported_tflops"] > 0 and summary["burnin_vs_matmul_ratio"][dtype] > 0
        assert summary["floor_margin"][dtype] > 1  # the cpu profile's floors, passed
    for hook in ("hook", "prolog"):
        assert summary[f"{hook}_wall_ratio"] > 0 and summary[f"{hook}_rss_mib"] > 0
        assert steps["hooks"][hook]["forbidden_imports"] == []
    md = (out / "gpu-proof.md").read_text()
    assert "World size 1 proves" in md and "gemm_corrupt=0 | fail" in md
