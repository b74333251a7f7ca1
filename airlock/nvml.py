"""The NVML layer: one snapshot of the node's GPUs, from real NVML or from a simulation file.

Real nodes use pynvml (the nvidia-ml-py package). Tests and demos point [nvml] simulate at a JSON
file `{"nodes": {"<node>": {"gpus": [ {...}, ... ], "faults": {...}}}}`; every test node shares one
host, so the simulation is keyed by node name. Without NVML and without a simulation the node has
zero GPUs (a profile that expects GPUs then fails it with a clear reason).

A hung driver call must not hang the hook: gather() runs under a watchdog thread and raises
NvmlTimeout, which the checks report as its own failure ("nvml timeout").
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from airlock.errors import AirlockError


class NvmlError(AirlockError):
    pass


class NvmlTimeout(NvmlError):
    pass


@dataclass(frozen=True)
class XidEvent:
    xid: int
    time: float  # epoch seconds
    gpu: int = -1
    source: str = "nvml"


@dataclass(frozen=True)
class Gpu:
    index: int
    name: str = ""
    uuid: str = ""
    pci_bus_id: str = ""
    memory_total_mib: int = 0
    driver_version: str = ""
    lost: bool = False  # fell off the bus (NVML_ERROR_GPU_IS_LOST)
    ecc_volatile_uncorrected_dram: int = 0
    ecc_volatile_uncorrected_sram: int = 0
    ecc_volatile_corrected: int = 0
    retired_pages_pending: bool = False
    remap_pending: bool = False
    remap_failure: bool = False
    remap_uncorrectable_rows: int = 0
    nvlink_active: tuple[bool, ...] = ()  # one entry per link the GPU has
    pcie_gen: int = 0
    pcie_gen_max: int = 0
    pcie_width: int = 0
    pcie_width_max: int = 0
    throttle_reasons: tuple[str, ...] = ()  # names, e.g. "hw_slowdown", "hw_thermal"
    temperature_c: int = 0
    persistence_mode: bool = True
    xids: tuple[XidEvent, ...] = ()
    compute_pids: tuple[int, ...] = ()  # processes holding a CUDA context on this GPU


@dataclass(frozen=True)
class Snapshot:
    source: str  # "nvml", "simulated" or "none"
    gpus: tuple[Gpu, ...] = ()
    driver_version: str = ""
    gathered_at: float = field(default_factory=time.time)
    duration_s: float = 0.0

    @property
    def count(self) -> int:
        return len(self.gpus)

    @property
    def models(self) -> list[str]:
        return sorted({g.name for g in self.gpus})


# Fields the simulation file may set per GPU: exactly Gpu's fields (xids as a list of dicts).
_GPU_FIELDS = set(Gpu.__dataclass_fields__)


def gpu_from_dict(data: dict[str, Any], index: int) -> Gpu:
    unknown = set(data) - _GPU_FIELDS
    if unknown:
        raise NvmlError(f"simulation: GPU {index}: unknown field '{sorted(unknown)[0]}'")
    values = dict(data)
    values.setdefault("index", index)
    if "nvlink_active" in values:
        values["nvlink_active"] = tuple(bool(x) for x in values["nvlink_active"])
    if "throttle_reasons" in values:
        values["throttle_reasons"] = tuple(values["throttle_reasons"])
    if "compute_pids" in values:
        values["compute_pids"] = tuple(int(p) for p in values["compute_pids"])
    if "xids" in values:
        values["xids"] = tuple(
            XidEvent(xid=int(x["xid"]), time=float(x.get("time", time.time())),
                     gpu=int(x.get("gpu", values["index"])), source=x.get("source", "nvml"))
            for x in values["xids"]
        )
    try:
        return Gpu(**values)
    except TypeError as exc:
        raise NvmlError(f"simulation: GPU {index}: {exc}") from None


def read_simulation(path: str, node: str) -> dict[str, Any]:
    try:
        with open(path) as fh:
            data = json.load(fh)
    except FileNotFoundError:
        raise NvmlError(f"simulation file {path}: not found") from None
    except (OSError, ValueError) as exc:
        raise NvmlError(f"simulation file {path}: {exc}") from None
    nodes = data.get("nodes") if isinstance(data, dict) else None
    if not isinstance(nodes, dict):
        raise NvmlError(f"simulation file {path}: expected {{\"nodes\": {{...}}}}")
    entry = nodes.get(node, nodes.get("*"))
    if entry is None:
        return {"gpus": []}
    if not isinstance(entry, dict) or not isinstance(entry.get("gpus", []), list):
        raise NvmlError(f"simulation file {path}: node {node}: expected {{\"gpus\": [...]}}")
    return entry


class SimulatedBackend:
    def __init__(self, path: str, node: str):
        self.path = path
        self.node = node

    def snapshot(self) -> Snapshot:
        entry = read_simulation(self.path, self.node)
        hang = float(entry.get("nvml_hang_s", 0))
        if hang:
            time.sleep(hang)  # stands in for a driver call stuck in the kernel
        gpus = tuple(gpu_from_dict(g, i) for i, g in enumerate(entry.get("gpus", [])))
        drivers = {g.driver_version for g in gpus if g.driver_version}
        return Snapshot("simulated", gpus, driver_version=min(drivers) if drivers else "")


class NoGpuBackend:
    def snapshot(self) -> Snapshot:
        return Snapshot("none")


class PynvmlBackend:
    """Real NVML. Each field is read on its own so one unsupported query does not hide the rest."""

    def snapshot(self) -> Snapshot:
        import pynvml

        pynvml.nvmlInit()
        try:
            driver = _str(pynvml.nvmlSystemGetDriverVersion())
            gpus = tuple(self._gpu(pynvml, i, driver)
                         for i in range(pynvml.nvmlDeviceGetCount()))
        finally:
            try:
                pynvml.nvmlShutdown()
            except pynvml.NVMLError:
                pass
        return Snapshot("nvml", gpus, driver_version=driver)

    def _gpu(self, nv, i: int, driver: str) -> Gpu:
        try:
            h = nv.nvmlDeviceGetHandleByIndex(i)
        except nv.NVMLError as exc:
            if getattr(exc, "value", None) == getattr(nv, "NVML_ERROR_GPU_IS_LOST", -1):
                return Gpu(index=i, lost=True, driver_version=driver)
            raise NvmlError(f"GPU {i}: {exc}") from None
        values: dict[str, Any] = {"index": i, "driver_version": driver}

        def read(key: str, fn, *args, post=lambda v: v):
            try:
                values[key] = post(fn(*args))
            except nv.NVMLError as exc:
                if getattr(exc, "value", None) == getattr(nv, "NVML_ERROR_GPU_IS_LOST", -1):
                    values["lost"] = True
            except Exception:
                pass

        read("name", nv.nvmlDeviceGetName, h, post=_str)
        read("uuid", nv.nvmlDeviceGetUUID, h, post=_str)
        read("pci_bus_id", nv.nvmlDeviceGetPciInfo, h, post=lambda p: _str(p.busId))
        read("memory_total_mib", nv.nvmlDeviceGetMemoryInfo, h,
             post=lambda m: int(m.total // (1 << 20)))
        read("ecc_volatile_uncorrected_dram", nv.nvmlDeviceGetMemoryErrorCounter, h,
             nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nv.NVML_VOLATILE_ECC,
             nv.NVML_MEMORY_LOCATION_DRAM)
        read("ecc_volatile_uncorrected_sram", nv.nvmlDeviceGetMemoryErrorCounter, h,
             nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nv.NVML_VOLATILE_ECC,
             nv.NVML_MEMORY_LOCATION_SRAM)
        read("ecc_volatile_corrected", nv.nvmlDeviceGetTotalEccErrors, h,
             nv.NVML_MEMORY_ERROR_TYPE_CORRECTED, nv.NVML_VOLATILE_ECC)
        read("retired_pages_pending", nv.nvmlDeviceGetRetiredPagesPendingStatus, h,
             post=lambda v: bool(v))
        try:
            rows = nv.nvmlDeviceGetRemappedRows(h)  # (corr, unc, pending, failure)
            values.update(remap_uncorrectable_rows=int(rows[1]), remap_pending=bool(rows[2]),
                          remap_failure=bool(rows[3]))
        except Exception:
            pass
        links = []
        for link in range(getattr(nv, "NVML_NVLINK_MAX_LINKS", 18)):
            try:
                links.append(nv.nvmlDeviceGetNvLinkState(h, link) == nv.NVML_FEATURE_ENABLED)
            except nv.NVMLError:
                break
        values["nvlink_active"] = tuple(links)
        read("pcie_gen", nv.nvmlDeviceGetCurrPcieLinkGeneration, h)
        read("pcie_gen_max", nv.nvmlDeviceGetMaxPcieLinkGeneration, h)
        read("pcie_width", nv.nvmlDeviceGetCurrPcieLinkWidth, h)
        read("pcie_width_max", nv.nvmlDeviceGetMaxPcieLinkWidth, h)
        read("throttle_reasons", nv.nvmlDeviceGetCurrentClocksThrottleReasons, h,
             post=lambda mask: _throttle_names(nv, mask))
        read("temperature_c", nv.nvmlDeviceGetTemperature, h, nv.NVML_TEMPERATURE_GPU)
        read("persistence_mode", nv.nvmlDeviceGetPersistenceMode, h,
             post=lambda v: v == nv.NVML_FEATURE_ENABLED)
        read("compute_pids", nv.nvmlDeviceGetComputeRunningProcesses, h,
             post=lambda procs: tuple(int(p.pid) for p in procs))
        return Gpu(**values)


_THROTTLE_BITS = {
    "nvmlClocksThrottleReasonGpuIdle": "gpu_idle",
    "nvmlClocksThrottleReasonApplicationsClocksSetting": "app_clocks",
    "nvmlClocksThrottleReasonSwPowerCap": "sw_power_cap",
    "nvmlClocksThrottleReasonHwSlowdown": "hw_slowdown",
    "nvmlClocksThrottleReasonSyncBoost": "sync_boost",
    "nvmlClocksThrottleReasonSwThermalSlowdown": "sw_thermal",
    "nvmlClocksThrottleReasonHwThermalSlowdown": "hw_thermal",
    "nvmlClocksThrottleReasonHwPowerBrakeSlowdown": "hw_power_brake",
    "nvmlClocksThrottleReasonDisplayClockSetting": "display_clocks",
}


def _throttle_names(nv, mask: int) -> tuple[str, ...]:
    return tuple(name for const, name in _THROTTLE_BITS.items()
                 if getattr(nv, const, 0) and mask & getattr(nv, const))


def _str(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def real_nvml_available() -> bool:
    try:
        import pynvml

        pynvml.nvmlInit()
        pynvml.nvmlShutdown()
        return True
    except Exception:
        return False


def backend_for(cfg, node: str):
    if cfg.nvml.simulate:
        return SimulatedBackend(cfg.nvml.simulate, node)
    if real_nvml_available():
        return PynvmlBackend()
    return NoGpuBackend()


def gather(backend, timeout: float) -> Snapshot:
    """Take a snapshot under a watchdog: a hung call raises NvmlTimeout instead of hanging."""
    box: dict[str, Any] = {}

    def work() -> None:
        try:
            box["snap"] = backend.snapshot()
        except BaseException as exc:  # noqa: BLE001 - carried to the caller's thread
            box["exc"] = exc

    started = time.monotonic()
    t = threading.Thread(target=work, name="nvml-gather", daemon=True)
    t.start()
    t.join(timeout)
    if t.is_alive():
        raise NvmlTimeout(f"nvml timeout: no answer within {timeout:g} s")
    if "exc" in box:
        exc = box["exc"]
        if isinstance(exc, AirlockError):
            raise exc
        raise NvmlError(f"nvml error: {exc}")
    snap: Snapshot = box["snap"]
    return Snapshot(snap.source, snap.gpus, snap.driver_version, snap.gathered_at,
                    time.monotonic() - started)
