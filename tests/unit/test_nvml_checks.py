"""NVML quick checks: every verdict function from simulated GPUs, then each simulated fault through
the whole quick level (the same run_level the HealthCheckProgram uses), and the hung gather."""

from __future__ import annotations

import json
import time

import pytest

from airlock.checks import inventory
from airlock.checks import nvml_checks as nc
from airlock.checks.base import Verdict
from airlock.config import loader as config
from airlock.finish import summarize
from airlock.hw.nvml import Gpu, NvmlError, NvmlTimeout, Snapshot, gpu_from_dict, healthy_gpu_dict
from airlock.runner import run_level
from tests.unit.fakeslurm import FakeSlurm


def gpus(n: int = 8, **change) -> list[Gpu]:
    return [gpu_from_dict({**healthy_gpu_dict(i), **change}, i) for i in range(n)]


def with_gpu(gs: list[Gpu], index: int, **change) -> list[Gpu]:
    return [g._replace(**change) if g.index == index else g for g in gs]


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


def test_confirmation_rereads_nvml(tmp_path):
    """The confirmation re-run reads the hardware again, not the first snapshot: a fault gone
    on the second reading passes it (run_level then records fail-then-pass as a WARN: see the
    flaky_check tests below)."""
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


def test_hung_nvml_fails_as_nvml_timeout_and_nothing_waits_again(tmp_path):
    entry = healthy_entry()
    entry["nvml_hang_s"] = 4
    cfg = make_cfg(tmp_path, entry, nvml={"timeout": 0.5})
    run = quick(cfg)
    assert run["failed_check"] == "nvml"
    assert run["detail"].startswith("timeout")
    from airlock.finish import failure_reason
    from airlock.slurm import reasons

    assert failure_reason(run).format().startswith(f"{reasons.PREFIX} FAIL nvml timeout")
    nvml_checks = [r for r in run["checks"]
                   if r["check"] not in ("nvml", "xid", "rdma", "link_flap", "disk", "mounts",
                                         "memory", "dcgm")]
    # each check that needs NVML says so itself (issue 25: a skip pointing at `nvml` let an
    # observed `nvml` pass the node), on its first reading: a hang is not confirmed
    assert nvml_checks and all(r["verdict"] == "fail" and r["attempts"] == 1 and
                               r["detail"].startswith("nvml timeout") for r in nvml_checks), \
        run["checks"]
    # nobody waited for the stuck driver a second time (0.5 s each would be 6 s here)
    assert sum(r["duration_s"] for r in nvml_checks) < 0.5


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
    code = ("import sys; from airlock.config import loader as config; "
            "from airlock.runner import run_level; "
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

    from airlock.hw import nvml

    src = inspect.getsource(nvml)
    used = set(re.findall(r"\bnv\.(\w+)", src)) | set(re.findall(r"\bpynvml\.(\w+)", src))
    used |= set(nvml._THROTTLE_BITS)
    used |= {"NVML_ERROR_GPU_IS_LOST", "NVML_ERROR_UNKNOWN", "NVML_ERROR_LIBRARY_NOT_FOUND",
             "NVML_ERROR_DRIVER_NOT_LOADED", "nvmlDeviceGetCurrentClocksEventReasons"}
    missing = sorted(n for n in used if not hasattr(pynvml, n))
    assert not missing, missing
    # every bit the backend names maps to a throttle name the profiles may use
    from airlock.hw import profiles

    assert set(nvml._THROTTLE_BITS.values()) == set(profiles.THROTTLE_NAMES)


def test_pynvml_without_a_driver_is_no_nvml_and_says_why():
    from airlock.hw import nvml

    assert nvml.real_nvml_available() is False  # no libnvidia-ml here
    snap = nvml.PynvmlBackend().snapshot()  # real pynvml, real failing nvmlInit
    assert snap.source == "none" and snap.count == 0
    assert snap.note.startswith("NVML: ") and "Not Found" in snap.note, snap.note


# --- no missed GPUs: the PCI bus against NVML (issue 9) -----------------------------------------
def fake_pci(root, devices: dict[str, tuple[int, int]], vf: tuple[str, ...] = (),
             vfio: tuple[str, ...] = ()) -> str:
    """A sysfs tree: <root>/bus/pci/devices/<addr>/{vendor,class}, as the kernel lays it out."""
    base = root / "sys" / "bus" / "pci" / "devices"
    for addr, (vendor, cls) in devices.items():
        d = base / addr
        d.mkdir(parents=True)
        (d / "vendor").write_text(f"0x{vendor:04x}\n")
        (d / "class").write_text(f"0x{cls:06x}\n")
        if addr in vf:
            (d / "physfn").symlink_to(base)
        if addr in vfio:
            drv = root / "sys" / "bus" / "pci" / "drivers" / "vfio-pci"
            drv.mkdir(parents=True, exist_ok=True)
            (d / "driver").symlink_to(drv)
    return str(root / "sys")


def h100_bus(n: int = 8) -> dict[str, tuple[int, int]]:
    bus = {f"0000:{0x18 + i * 0x10:02x}:00.0": (0x10DE, 0x030200) for i in range(n)}
    bus.update({"0000:05:00.0": (0x10DE, 0x068000),  # an NVSwitch: a bridge, not a GPU
                "0000:06:00.0": (0x15B3, 0x020700),  # a ConnectX NIC
                "0000:00:00.0": (0x8086, 0x060000)})
    return bus


def test_pci_scan_finds_nvidia_gpus_only(tmp_path):
    from airlock.hw import nvml

    bus = {"0000:3b:00.0": (0x10DE, 0x030200), "0000:3c:00.0": (0x10DE, 0x030000),
           "0000:3d:00.0": (0x10DE, 0x068000), "0000:3e:00.1": (0x10DE, 0x040300),
           "0000:3f:00.0": (0x15B3, 0x020700), "0000:40:00.4": (0x10DE, 0x030200),
           "0000:41:00.0": (0x10DE, 0x030200)}
    root = fake_pci(tmp_path, bus, vf=("0000:40:00.4",), vfio=("0000:41:00.0",))
    assert nvml.pci_gpus(root) == ["0000:3b:00.0", "0000:3c:00.0"]
    assert nvml.pci_gpus(str(tmp_path / "nothing")) == []


def no_sim_cfg(tmp_path, sys_root: str, **extra) -> config.Config:
    """Real NVML (pynvml is installed, libnvidia-ml is not: NVML cannot load here)."""
    raw = {"state_dir": str(tmp_path / "state"), "log_dir": str(tmp_path / "log"),
           "xid": {"kernel_log": ""}, "profile": {"gres": False},
           "system": {"sys_root": sys_root}}
    raw.update(extra)
    return config.from_dict(raw)


def test_gpu_node_whose_nvml_cannot_load_fails_instead_of_passing_as_cpu(tmp_path):
    cfg = no_sim_cfg(tmp_path, fake_pci(tmp_path, h100_bus()))
    run = quick(cfg)
    assert run["verdict"] == "fail" and run["profile"] == "auto:nvidia-pci", run["checks"]
    by = {r["check"]: r for r in run["checks"]}
    assert by["nvml"]["verdict"] == "fail"
    assert by["nvml"]["detail"].startswith("8 NVIDIA GPUs on the PCI bus, but NVML: ")
    assert by["gpu_count"]["verdict"] == "fail"
    assert by["gpu_count"]["detail"] == "NVML sees 0 of 8 NVIDIA GPUs on the PCI bus"
    # the same node with its GPUs gone from the bus is a CPU node
    cpu = quick(no_sim_cfg(tmp_path, fake_pci(tmp_path / "cpu", {"0000:00:00.0": (0x8086,
                                                                                    0x060000)})))
    assert cpu["verdict"] == "pass" and cpu["profile"] == "cpu", cpu["checks"]
    assert {r["check"]: r["verdict"] for r in cpu["checks"]}["nvml"] == "skip"


def test_gpu_node_configured_as_cpu_still_fails(tmp_path):
    cfg = no_sim_cfg(tmp_path, fake_pci(tmp_path, h100_bus(2)), profile={"name": "cpu",
                                                                         "gres": False})
    run = quick(cfg)
    assert run["profile"] == "cpu" and run["failed_check"] == "nvml", run["checks"]
    by = {r["check"]: r for r in run["checks"]}
    assert by["gpu_count"]["detail"] == "NVML sees 0 of 2 NVIDIA GPUs on the PCI bus"


def test_nvml_seeing_fewer_gpus_than_the_bus_fails_gpu_count(tmp_path):
    root = fake_pci(tmp_path, h100_bus())
    run = quick(make_cfg(tmp_path, healthy_entry(7), system={"sys_root": root}))
    assert run["failed_check"] == "gpu_count"
    assert run["detail"] == "NVML sees 7 of 8 NVIDIA GPUs on the PCI bus"
    # an unknown SKU's profile comes from what NVML sees: the bus still counts
    entry = {"gpus": [healthy_gpu_dict(i, model="NVIDIA Future GPU") for i in range(7)]}
    run = quick(make_cfg(tmp_path, entry, system={"sys_root": root}))
    assert run["profile"] == "auto:NVIDIA Future GPU" and run["failed_check"] == "gpu_count"
    # all eight seen: the bus agrees
    assert quick(make_cfg(tmp_path, healthy_entry(), system={"sys_root": root}))["verdict"] \
        == "pass"


# --- the GRES: at registration only, and there it must be readable (issue 9) -------------------
def gres_cfg(tmp_path, **slurm) -> config.Config:
    return make_cfg(tmp_path, healthy_entry(), profile={"gres": True}, slurm=slurm)


def test_registration_fails_closed_when_slurm_cannot_say_the_gres(tmp_path):
    """Closed, as Airlock's own trouble (issue 25, blame by type): Slurm that cannot say the
    GRES measured nothing of the node, so the check is inconclusive (the boot stays closed,
    recovery never acts), never the node's FAIL."""
    empty = tmp_path / "no-slurm"
    empty.mkdir()
    records, _ = run_level(gres_cfg(tmp_path, bin_dir=str(empty)), "n1", "standard",
                           only=["gpu_count"])
    assert records[0]["verdict"] == "error", records
    assert records[0]["detail"].startswith("Slurm GRES unreadable: scontrol not found")


def test_registration_fails_closed_when_scontrol_is_slow(tmp_path):
    fake = FakeSlurm(tmp_path / "slurm", nodes=["n1"])
    fake.fail("show", mode="hang")  # a controller that never answers
    cfg = gres_cfg(tmp_path, bin_dir=fake.bin_dir, timeout=1.0)
    records, _ = run_level(cfg, "n1", "deep", only=["gpu_count"])
    assert records[0]["verdict"] == "error" and "Slurm GRES unreadable" in records[0]["detail"]
    assert "timed out" in records[0]["detail"] or "timeout" in records[0]["detail"], records


def test_quick_level_asks_slurm_nothing_for_the_gres(tmp_path):
    empty = tmp_path / "no-slurm"
    empty.mkdir()
    records, ctx = run_level(gres_cfg(tmp_path, bin_dir=str(empty)), "n1", "quick",
                             only=["gpu_count"])
    assert records[0]["verdict"] == "pass", records
    assert "gres" not in records[0]["figures"]
    assert not ctx.slurm_facts_read  # no Slurm call was made at all


# --- the fault switches through run_level, where fail-then-pass becomes a WARN (issue 12) ------
def switch_cfg(tmp_path, switch: str, check: str, confirm: int = 1) -> config.Config:
    entry = healthy_entry()
    entry["faults"] = {switch: check}  # the dev cluster's way: the node's simulation entry
    return make_cfg(tmp_path, entry, checks={"confirm_runs": confirm})


def test_flaky_check_is_recorded_as_a_warning_not_a_failure(tmp_path):
    run = quick(switch_cfg(tmp_path, "flaky_check", "ecc"))
    assert run["verdict"] == "warn" and run["failed_check"] is None, run["checks"]
    ecc = next(r for r in run["checks"] if r["check"] == "ecc")
    assert ecc["verdict"] == "warn" and ecc["attempts"] == 2
    assert ecc["detail"] == "flaky: failed then passed (injected flaky failure (flaky_check))"
    assert ecc["figures"]["figures"]["dram"] == 0  # the passing reading is kept beside it
    others = [r["verdict"] for r in run["checks"] if r["check"] != "ecc"]
    assert "fail" not in others and "warn" not in others


def test_flaky_check_without_confirmation_fails(tmp_path):
    run = quick(switch_cfg(tmp_path, "flaky_check", "ecc", confirm=0))
    assert run["verdict"] == "fail" and run["failed_check"] == "ecc"
    assert run["detail"] == "injected flaky failure (flaky_check)"


def test_fail_check_fails_on_every_attempt_and_names_the_error(tmp_path):
    run = quick(switch_cfg(tmp_path, "fail_check", "nvlink", confirm=2))
    assert run["verdict"] == "fail" and run["failed_check"] == "nvlink"
    assert run["detail"] == "error RuntimeError: injected failure (fail_check)"
    rec = next(r for r in run["checks"] if r["check"] == "nvlink")
    assert rec["attempts"] == 3
    assert [r["check"] for r in run["checks"] if r["verdict"] == "fail"] == ["nvlink"]


def test_flaky_isolated_check_warns_through_its_own_process(tmp_path, monkeypatch):
    """The same rule for a check run in a process of its own (`python -m airlock.runner one`),
    with the switch from $AIRLOCK_FAULTS as `airlock check` by hand would set it."""
    cfg_file = tmp_path / "airlock.toml"
    cfg_file.write_text(f'state_dir = "{tmp_path}/state"\nlog_dir = "{tmp_path}/log"\n'
                        '[memtest]\ncpu_mib = 1\n')
    monkeypatch.setenv("AIRLOCK_FAULTS", "flaky_check=memtest")
    records, _ = run_level(config.load(str(cfg_file)), "n1", "standard", only=["memtest"])
    assert records[0]["verdict"] == "warn", records
    assert records[0]["attempts"] == 2
    assert records[0]["detail"].startswith("flaky: failed then passed")
    assert records[0]["figures"]["figures"]["tested_mib"]  # the second attempt really ran


def test_observing_nvml_does_not_hide_the_other_nvml_checks(tmp_path):
    """Issue 25 item 4: with `nvml` observed and NVML hung, main's other NVML checks skipped
    ("see check nvml"), so the run passed and a job started on a node whose NVML hangs. Each
    check that needs NVML says so itself, and the run fails on the first enforced one."""
    entry = healthy_entry()
    entry["nvml_hang_s"] = 4
    cfg = make_cfg(tmp_path, entry, nvml={"timeout": 0.3}, checks={"confirm_runs": 1,
                                                                   "observe": ["nvml"]})
    run = quick(cfg)
    assert run["verdict"] == "fail", run
    assert run["failed_check"] == "gpu_lost" and run["detail"].startswith("nvml timeout"), run
    needs_nvml = [r for r in run["checks"] if r["check"] in
                  ("gpu_lost", "gpu_memory", "driver", "ecc", "nvlink", "pcie", "throttle",
                   "temperature", "persistence")]
    assert needs_nvml and all(r["verdict"] == "fail" for r in needs_nvml), run["checks"]
