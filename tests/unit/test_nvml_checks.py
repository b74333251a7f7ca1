"""NVML quick checks: every verdict function from simulated GPUs, then each simulated fault through
the whole quick level (the same run_level the HealthCheckProgram uses), and the hung gather."""

from __future__ import annotations

import json
import time
from dataclasses import replace

import pytest

from airlock import config
from airlock.checks import inventory
from airlock.checks import nvml_checks as nc
from airlock.checks.base import Verdict
from airlock.finish import summarize
from airlock.nvml import Gpu, NvmlError, NvmlTimeout, Snapshot, gpu_from_dict, healthy_gpu_dict
from airlock.runner import run_level


def gpus(n: int = 8, **change) -> list[Gpu]:
    return [gpu_from_dict({**healthy_gpu_dict(i), **change}, i) for i in range(n)]


def with_gpu(gs: list[Gpu], index: int, **change) -> list[Gpu]:
    return [replace(g, **change) if g.index == index else g for g in gs]


# --- verdicts ----------------------------------------------------------------------------------
def test_nvml_verdicts():
    snap = Snapshot("simulated", tuple(gpus()), duration_s=0.002)
    assert nc.verdict_nvml(snap).verdict is Verdict.PASS
    assert nc.verdict_nvml(Snapshot("none")).verdict is Verdict.SKIP
    out = nc.verdict_nvml(None, NvmlTimeout("nvml timeout: no answer within 5 s"))
    assert (out.verdict, out.detail) == (Verdict.FAIL, "timeout: no answer within 5 s")
    assert out.remediation == "reboot"
    other = nc.verdict_nvml(None, NvmlTimeout("nvml timeout: x"), check="ecc")
    assert other.check == "ecc" and other.detail == "nvml timeout: x"
    err = nc.verdict_nvml(None, NvmlError("nvml init failed: Driver/library version mismatch"))
    assert err.failed and err.detail == "init failed: Driver/library version mismatch"


def test_gpu_lost_verdict():
    assert nc.verdict_gpu_lost(gpus()).verdict is Verdict.PASS
    out = nc.verdict_gpu_lost(with_gpu(gpus(), 5, lost=True))
    assert out.failed and out.detail == "gpu5 fell off the bus" and out.figures["lost"] == [5]


def test_gpu_count_verdict_and_gres():
    assert inventory.verdict_gpu_count(8, 8, "h100-sxm-8x").verdict is Verdict.PASS
    short = inventory.verdict_gpu_count(7, 8, "h100-sxm-8x")
    assert short.failed and short.detail == "7 GPUs, profile h100-sxm-8x expects 8"
    gres = inventory.verdict_gpu_count(8, 8, "h100-sxm-8x", gres=4)
    assert gres.failed and "GRES says 4" in gres.detail
    model = inventory.verdict_gpu_count(8, 8, "h100-sxm-8x", None, ["NVIDIA A100-SXM4-80GB"],
                                        ("H100 80GB HBM3",))
    assert model.failed and "not a h100-sxm-8x GPU" in model.detail
    assert inventory.gres_gpus("gpu:8") == 8
    assert inventory.gres_gpus("gpu:h100:8(S:0-1)") == 8
    assert inventory.gres_gpus("gpu:a100:4(S:0,1),gpu:h100:4") == 8
    assert inventory.gres_gpus("(null)") is None
    assert inventory.gres_gpus("") is None
    assert inventory.gres_gpus("nic:2") is None


def test_driver_verdict():
    assert nc.verdict_driver(gpus()).detail == "550.90.07"
    mixed = nc.verdict_driver(with_gpu(gpus(), 2, driver_version="535.54.03"))
    assert mixed.failed and "535.54.03 (gpu2)" in mixed.detail
    assert nc.verdict_driver(gpus(driver_version="")).verdict is Verdict.SKIP


def test_gpu_memory_verdict():
    assert nc.verdict_gpu_memory(gpus(), 81559, 1.0).verdict is Verdict.PASS
    out = nc.verdict_gpu_memory(with_gpu(gpus(), 3, memory_total_mib=40000), 81559, 1.0)
    assert out.failed and out.detail.startswith("gpu3 40000 MiB")
    # within tolerance: drivers report slightly different totals
    assert not nc.verdict_gpu_memory(with_gpu(gpus(), 3, memory_total_mib=81000), 81559, 1.0).failed
    assert nc.verdict_gpu_memory(gpus(), 0, 1.0).verdict is Verdict.SKIP


def test_ecc_verdict_thresholds():
    assert nc.verdict_ecc(gpus()).verdict is Verdict.PASS
    dram = nc.verdict_ecc(with_gpu(gpus(), 4, ecc_volatile_uncorrected_dram=2))
    assert dram.failed and dram.detail == "gpu4 2 DRAM uncorrectable" and dram.figures["dram"] == 2
    sram = nc.verdict_ecc(with_gpu(gpus(), 1, ecc_volatile_uncorrected_sram=1))
    assert sram.failed and "SRAM" in sram.detail
    assert not nc.verdict_ecc(with_gpu(gpus(), 4, ecc_volatile_uncorrected_dram=2),
                              dram_max=2).failed
    # corrected errors alone never fail
    assert not nc.verdict_ecc(gpus(ecc_volatile_corrected=500)).failed


def test_retired_pages_and_row_remap_verdicts():
    assert nc.verdict_retired_pages(gpus()).verdict is Verdict.PASS
    assert nc.verdict_retired_pages(with_gpu(gpus(), 0, retired_pages_pending=True)).failed
    assert nc.verdict_row_remap(gpus()).verdict is Verdict.PASS
    pend = nc.verdict_row_remap(with_gpu(gpus(), 6, remap_pending=True))
    assert pend.failed and pend.detail == "gpu6 row remap pending" and pend.remediation == "reboot"
    fail = nc.verdict_row_remap(with_gpu(gpus(), 6, remap_pending=True, remap_failure=True))
    assert fail.detail == "gpu6 row remap failed" and fail.remediation == "replace"


def test_nvlink_verdict():
    assert nc.verdict_nvlink(gpus(), 18).verdict is Verdict.PASS
    links = (True,) * 17 + (False,)
    out = nc.verdict_nvlink(with_gpu(gpus(), 2, nvlink_active=links), 18)
    assert out.failed and out.detail == "gpu2 17/18 links active"
    assert nc.verdict_nvlink(gpus(), 0).verdict is Verdict.SKIP
    assert nc.verdict_nvlink(gpus(nvlink_active=[]), 18).verdict is Verdict.SKIP


def test_pcie_verdict():
    busy = gpus(throttle_reasons=[])
    assert nc.verdict_pcie(busy, 5, 16).verdict is Verdict.PASS
    narrow = nc.verdict_pcie(with_gpu(busy, 1, pcie_width=8), 5, 16)
    assert narrow.failed and narrow.detail == "gpu1 x8 < x16"
    slow = with_gpu(busy, 1, pcie_gen=3)
    assert nc.verdict_pcie(slow, 5, 16).verdict is Verdict.WARN
    assert nc.verdict_pcie(slow, 5, 16, gen_below="fail").failed
    assert nc.verdict_pcie(slow, 5, 16, gen_below="ignore").verdict is Verdict.PASS
    # an idle GPU downshifts its link: not judged
    idle = with_gpu(gpus(), 1, pcie_gen=1)
    assert nc.verdict_pcie(idle, 5, 16).verdict is Verdict.PASS
    # a Gen4 host caps a Gen5 GPU: the device max (what the system allows) is the bar
    capped = gpus(pcie_gen=4, pcie_gen_max=4, throttle_reasons=[])
    assert nc.verdict_pcie(capped, 5, 16).verdict is Verdict.PASS
    # no expectation in the profile: the device's own max
    assert nc.verdict_pcie(with_gpu(busy, 0, pcie_width=4), 0, 0).failed
    assert nc.verdict_pcie(gpus(pcie_width=0, pcie_gen=0), 5, 16).verdict is Verdict.SKIP


def test_throttle_verdict():
    allowed, warn, fail = ["gpu_idle", "sw_power_cap"], ["sw_thermal"], ["hw_slowdown"]
    assert nc.verdict_throttle(gpus(), allowed, warn, fail).verdict is Verdict.PASS
    hw = nc.verdict_throttle(with_gpu(gpus(), 7, throttle_reasons=("hw_slowdown",)),
                             allowed, warn, fail)
    assert hw.failed and hw.detail == "gpu7 hw_slowdown"
    soft = nc.verdict_throttle(with_gpu(gpus(), 7, throttle_reasons=("sw_thermal",)),
                               allowed, warn, fail)
    assert soft.verdict is Verdict.WARN
    # unlisted reasons warn rather than drain
    assert nc.verdict_throttle(with_gpu(gpus(), 0, throttle_reasons=("hw_power_brake",)),
                               allowed, warn, fail).verdict is Verdict.WARN


def test_temperature_verdict():
    assert nc.verdict_temperature(gpus(), 80, 88).detail == "max 34C"
    hot = nc.verdict_temperature(with_gpu(gpus(), 3, temperature_c=91), 80, 88)
    assert hot.failed and hot.detail == "gpu3 91C >= 88C"
    assert nc.verdict_temperature(with_gpu(gpus(), 3, temperature_c=82), 80, 88).verdict \
        is Verdict.WARN
    assert nc.verdict_temperature(gpus(), 0, 0).verdict is Verdict.SKIP
    assert nc.verdict_temperature(gpus(temperature_c=0), 80, 88).verdict is Verdict.SKIP


def test_persistence_verdict():
    off = with_gpu(gpus(), 2, persistence_mode=False)
    assert nc.verdict_persistence(gpus()).verdict is Verdict.PASS
    assert nc.verdict_persistence(off, "warn").verdict is Verdict.WARN
    assert nc.verdict_persistence(off, "fail").failed
    assert nc.verdict_persistence(off, "ignore").verdict is Verdict.PASS


# --- the whole quick level with simulated faults -----------------------------------------------
def make_cfg(tmp_path, node_entry: dict, **extra) -> config.Config:
    sim = tmp_path / "gpus.json"
    sim.write_text(json.dumps({"nodes": {"n1": node_entry}}))
    raw = {
        "state_dir": str(tmp_path / "state"),
        "log_dir": str(tmp_path / "log"),
        "nvml": {"simulate": str(sim)},
        "xid": {"kernel_log": ""},
        "profile": {"gres": False},
        "checks": {"confirm_runs": 1},
    }
    for key, value in extra.items():
        raw[key] = {**raw.get(key, {}), **value} if isinstance(value, dict) else value
    return config.from_dict(raw)


def healthy_entry(n: int = 8) -> dict:
    return {"gpus": [healthy_gpu_dict(i) for i in range(n)]}


def quick(cfg) -> dict:
    started = time.time()
    records, ctx = run_level(cfg, "n1", "quick")
    return summarize("n1", "quick", "test", records, started, ctx.profile_name)


def test_healthy_node_passes_every_quick_check(tmp_path):
    run = quick(make_cfg(tmp_path, healthy_entry()))
    assert run["verdict"] == "pass", run
    assert run["profile"] == "h100-sxm-8x"
    by = {r["check"]: r["verdict"] for r in run["checks"]}
    for name in ("nvml", "gpu_lost", "gpu_count", "gpu_memory", "driver", "ecc", "retired_pages",
                 "row_remap", "xid", "nvlink", "pcie", "throttle", "temperature", "persistence"):
        assert by[name] == "pass", (name, run["checks"])
    assert "burnin" not in by  # never on the quick path


FAULTS = [
    # (what to change on gpu3, the check that must fail, words in its detail)
    ({"lost": True}, "gpu_lost", "gpu3 fell off the bus"),
    ({"memory_total_mib": 40960}, "gpu_memory", "gpu3 40960 MiB"),
    ({"driver_version": "535.54.03"}, "driver", "versions differ"),
    ({"ecc_volatile_uncorrected_dram": 3}, "ecc", "gpu3 3 DRAM"),
    ({"ecc_volatile_uncorrected_sram": 1}, "ecc", "gpu3 1 SRAM"),
    ({"retired_pages_pending": True}, "retired_pages", "gpu3 page retirement pending"),
    ({"remap_pending": True}, "row_remap", "gpu3 row remap pending"),
    ({"remap_failure": True}, "row_remap", "gpu3 row remap failed"),
    ({"xids": [{"xid": 79}]}, "xid", "79 gpu3"),
    ({"nvlink_active": [True] * 16 + [False] * 2}, "nvlink", "gpu3 16/18 links active"),
    ({"pcie_width": 8}, "pcie", "gpu3 x8 < x16"),
    ({"throttle_reasons": ["hw_slowdown"]}, "throttle", "gpu3 hw_slowdown"),
    ({"temperature_c": 95}, "temperature", "gpu3 95C"),
]


@pytest.mark.parametrize("change,check,words", FAULTS, ids=[f[1] + str(i)
                                                           for i, f in enumerate(FAULTS)])
def test_each_simulated_fault_fails_its_check(tmp_path, change, check, words):
    entry = healthy_entry()
    entry["gpus"][3].update(change)
    run = quick(make_cfg(tmp_path, entry))
    assert run["verdict"] == "fail"
    assert run["failed_check"] == check, run["checks"]
    assert words in run["detail"]
    failing = [r["check"] for r in run["checks"] if r["verdict"] == "fail"]
    assert failing == [check]  # one fault, one named check: no collateral failures
    rec = next(r for r in run["checks"] if r["check"] == check)
    assert rec["attempts"] == 2  # confirmed by a second, fresh reading before it counts


def test_missing_gpu_fails_gpu_count(tmp_path):
    run = quick(make_cfg(tmp_path, healthy_entry(7)))
    assert run["failed_check"] == "gpu_count"
    assert run["detail"] == "7 GPUs, profile h100-sxm-8x expects 8"


def test_application_xid_warns_but_passes(tmp_path):
    entry = healthy_entry()
    entry["gpus"][0]["xids"] = [{"xid": 13}]
    entry["gpus"][1]["xids"] = [{"xid": 45}]
    run = quick(make_cfg(tmp_path, entry))
    assert run["verdict"] == "warn"
    xid = next(r for r in run["checks"] if r["check"] == "xid")
    assert xid["verdict"] == "warn" and xid["detail"].startswith("13 gpu0")
    assert xid["figures"]["ignored"] == ["45@gpu1"]


def test_old_fatal_xid_outside_window_passes(tmp_path):
    entry = healthy_entry()
    entry["gpus"][0]["xids"] = [{"xid": 79, "time": time.time() - 3 * 3600}]
    run = quick(make_cfg(tmp_path, entry))
    assert run["verdict"] == "pass", run["checks"]


def test_fault_that_clears_is_flaky_warning_not_failure(tmp_path):
    """The confirmation re-run re-reads NVML: a fault gone on the second reading warns."""
    entry = healthy_entry()
    entry["gpus"][2]["ecc_volatile_uncorrected_dram"] = 1
    cfg = make_cfg(tmp_path, entry)
    from airlock.checks import registry
    from airlock.checks.context import Context
    from airlock.runner import run_check

    ctx = Context.create(cfg, "n1", "quick")
    spec = registry.by_name("ecc")
    assert run_check(spec, ctx, 10).failed
    entry["gpus"][2]["ecc_volatile_uncorrected_dram"] = 0
    (tmp_path / "gpus.json").write_text(json.dumps({"nodes": {"n1": entry}}))
    ctx.attempt = 2
    assert run_check(spec, ctx, 10).verdict is Verdict.PASS


def test_hung_nvml_fails_once_as_nvml_timeout_and_nothing_waits_again(tmp_path):
    entry = healthy_entry()
    entry["nvml_hang_s"] = 4
    cfg = make_cfg(tmp_path, entry, nvml={"timeout": 0.5})
    run = quick(cfg)
    assert run["failed_check"] == "nvml"
    assert run["detail"].startswith("timeout")
    from airlock import reasons
    from airlock.finish import failure_reason

    assert failure_reason(run).format().startswith(f"{reasons.PREFIX} FAIL nvml timeout")
    nvml_checks = [r for r in run["checks"]
                   if r["check"] not in ("nvml", "xid", "rdma", "disk", "mounts", "memory")]
    assert nvml_checks and all(r["verdict"] == "skip" for r in nvml_checks), run["checks"]
    # nobody waited for the stuck driver a second time (0.5 s each would be 6 s here)
    assert sum(r["duration_s"] for r in nvml_checks) < 0.5
    assert [r["check"] for r in run["checks"] if r["verdict"] == "fail"] == ["nvml"]


def test_only_one_check_with_hung_nvml_reports_it_itself(tmp_path):
    entry = healthy_entry()
    entry["nvml_hang_s"] = 4
    cfg = make_cfg(tmp_path, entry, nvml={"timeout": 0.3})
    records, _ = run_level(cfg, "n1", "quick", only=["ecc"])
    assert records[0]["verdict"] == "fail" and "nvml timeout" in records[0]["detail"]


def test_bad_simulation_field_is_nvml_failure(tmp_path):
    entry = healthy_entry()
    entry["gpus"][0]["ecc_typo"] = 1
    run = quick(make_cfg(tmp_path, entry))
    assert run["failed_check"] == "nvml"
    assert "unknown field 'ecc_typo'" in run["detail"]


def test_cpu_node_quick_level_skips_gpu_checks(tmp_path):
    run = quick(make_cfg(tmp_path, {"gpus": []}))
    assert run["verdict"] == "pass" and run["profile"] == "cpu"
    by = {r["check"]: r["verdict"] for r in run["checks"]}
    assert by["gpu_count"] == "pass"
    assert by["nvlink"] == "skip" and by["temperature"] == "skip"


def test_quick_level_never_imports_torch(tmp_path):
    import subprocess
    import sys

    make_cfg(tmp_path, healthy_entry())  # writes the simulation file
    cfg_file = tmp_path / "airlock.toml"
    cfg_file.write_text(
        f'state_dir = "{tmp_path}/state"\nlog_dir = "{tmp_path}/log"\n'
        f'[nvml]\nsimulate = "{tmp_path}/gpus.json"\n[xid]\nkernel_log = ""\n'
        '[profile]\ngres = false\n')
    code = ("import sys; from airlock import config; from airlock.runner import run_level; "
            f"records, _ = run_level(config.load({str(cfg_file)!r}), 'n1', 'quick'); "
            "assert all(r['verdict'] != 'fail' for r in records), records; "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


# --- the real pynvml backend, as far as a machine without GPUs allows ----------------------------
def test_pynvml_backend_uses_only_names_the_installed_pynvml_has():
    import inspect
    import re

    import pynvml

    from airlock import nvml

    src = inspect.getsource(nvml)
    used = set(re.findall(r"\bnv\.(\w+)", src)) | set(re.findall(r"\bpynvml\.(\w+)", src))
    used |= set(nvml._THROTTLE_BITS)
    used |= {"NVML_ERROR_GPU_IS_LOST", "NVML_ERROR_UNKNOWN", "NVML_ERROR_LIBRARY_NOT_FOUND",
             "NVML_ERROR_DRIVER_NOT_LOADED", "nvmlDeviceGetCurrentClocksEventReasons"}
    missing = sorted(n for n in used if not hasattr(pynvml, n))
    assert not missing, missing
    # every bit the backend names maps to a throttle name the profiles may use
    from airlock import sku

    assert set(nvml._THROTTLE_BITS.values()) == set(sku.THROTTLE_NAMES)


def test_pynvml_without_a_driver_is_a_cpu_node_and_a_clear_error():
    from airlock import nvml

    assert nvml.real_nvml_available() is False  # no libnvidia-ml here
    with pytest.raises(NvmlError, match="nvml init failed"):
        nvml.PynvmlBackend().snapshot()
