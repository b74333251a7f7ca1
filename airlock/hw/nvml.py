"""The NVML layer: one snapshot of the node's GPUs, from real NVML or from a simulation file.

Real nodes use pynvml (the nvidia-ml-py package). Tests and demos point [nvml] simulate at a JSON
file `{"nodes": {"<node>": {"gpus": [ {...}, ... ], "faults": {...}}}}`; every test node shares one
host, so the simulation is keyed by node name. Without NVML and without a simulation the node has
zero GPUs (a profile that expects GPUs then fails it with a clear reason). A simulated fault is
one field changed from healthy_gpu_dict(): "ecc_volatile_uncorrected_dram": 2, "remap_pending":
true, "lost": true, an "nvlink_active" entry false, "xids": [{"xid": 79}], ...; a node's
"nvml_hang_s" makes its gather hang that long; a node's "cuda" says what CUDA could use of the
simulated GPUs (airlock/hw/faults.py, checks/device_plan.py).

A hung driver call must not hang the hook: gather() runs under a watchdog thread and raises
NvmlTimeout, which the `nvml` check reports as its own failure ("nvml timeout"). The stuck thread
cannot be killed, and NVML serialises calls, so a second gather in the same process would hang
too: while an earlier gather of the same backend is still stuck, gather() raises NvmlTimeout at
once instead of waiting again.

XIDs: NVML delivers XID events only to a process registered before they happen, so the snapshot
holds those seen while it was taken (and the simulation's); the durable record is the kernel log,
read by airlock.checks.xid.
"""

from __future__ import annotations

import json
import os
import threading
import time
from typing import Any, NamedTuple

from airlock.errors import AirlockError


class NvmlError(AirlockError):
    pass


class NvmlTimeout(NvmlError):
    pass


class XidEvent(NamedTuple):
    xid: int
    time: float  # epoch seconds
    gpu: int = -1
    source: str = "nvml"


# NamedTuples, not dataclasses: as immutable, and the periodic hook pays neither for importing
# dataclasses nor for generating code over 27 fields at every start.
class Gpu(NamedTuple):
    index: int
    name: str = ""
    uuid: str = ""
    pci_bus_id: str = ""
    memory_total_mib: int = 0
    # NVML's (v1) used memory: an idle GPU already shows a few hundred MiB of driver/context
    # reservations; the epilog compares it with [epilog] memory_used_max_mib
    memory_used_mib: int = 0
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
    # What the fleet-drift check compares and the recovery service's memory keys on
    serial: str = ""
    vbios_version: str = ""
    inforom_version: str = ""  # the InfoROM image version ("GPU firmware" in nvidia-smi -q)


class Snapshot(NamedTuple):
    source: str  # "nvml", "simulated" or "none"
    gpus: tuple[Gpu, ...] = ()
    driver_version: str = ""
    gathered_at: float = 0.0  # epoch seconds; gather() stamps it
    duration_s: float = 0.0
    note: str = ""  # with source "none": why NVML is absent (no library, driver not loaded)
    cuda_version: str = ""  # the CUDA version the driver supports, e.g. "12.4"

    @property
    def count(self) -> int:
        return len(self.gpus)

    @property
    def models(self) -> list[str]:
        return sorted({g.name for g in self.gpus})


# Fields the simulation file may set per GPU: exactly Gpu's fields (xids as a list of dicts).
_GPU_FIELDS = set(Gpu._fields)


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


def healthy_gpu_dict(index: int, model: str = "NVIDIA H100 80GB HBM3", memory_mib: int = 81559,
                     nvlinks: int = 18, pcie_gen: int = 5, pcie_width: int = 16,
                     driver: str = "550.90.07") -> dict[str, Any]:
    """One healthy GPU in the simulation file's format, with every field the quick checks read
    set to a plausible value (a fault is this dict with one field changed)."""
    return {
        "index": index,
        "name": model,
        "uuid": f"GPU-{index:08x}-sim0-0000-0000-000000000000",
        "pci_bus_id": f"00000000:{0x18 + index * 0x10:02X}:00.0",
        "memory_total_mib": memory_mib,
        "driver_version": driver,
        "nvlink_active": [True] * nvlinks,
        "pcie_gen": pcie_gen,
        "pcie_gen_max": pcie_gen,
        "pcie_width": pcie_width,
        "pcie_width_max": pcie_width,
        "throttle_reasons": ["gpu_idle"],
        "temperature_c": 34,
        "persistence_mode": True,
        "serial": f"165{index:010d}",
        "vbios_version": "96.00.74.00.01",
        "inforom_version": "G520.0200.00.05",
    }


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


def pci_key(bus_id: str) -> str:
    """'00000000:3B:00.0' (NVML) and 'PCI:0000:3b:00' (kernel log) -> '0000:3b:00'."""
    text = bus_id.strip().lower()
    if text.startswith("pci:"):
        text = text[4:]
    text = text.split(".")[0]
    parts = text.split(":")
    if len(parts) == 3:
        try:
            return f"{int(parts[0], 16):04x}:{int(parts[1], 16):02x}:{int(parts[2], 16):02x}"
        except ValueError:
            return text
    return text


class SimulatedBackend:
    def __init__(self, path: str, node: str):
        self.path = path
        self.node = node
        self.key = f"simulated:{path}:{node}"

    def snapshot(self) -> Snapshot:
        entry = read_simulation(self.path, self.node)
        hang = float(entry.get("nvml_hang_s", 0))
        if hang:
            time.sleep(hang)  # stands in for a driver call stuck in the kernel
        gpus = tuple(gpu_from_dict(g, i) for i, g in enumerate(entry.get("gpus", [])))
        drivers = {g.driver_version for g in gpus if g.driver_version}
        return Snapshot("simulated", gpus, driver_version=min(drivers) if drivers else "",
                        cuda_version=str(entry.get("cuda_version", "")))


class PynvmlBackend:
    """Real NVML. Each field is read on its own so one unsupported query does not hide the rest.

    NVML is initialised once per snapshot (an init without persistence mode can take a second
    on a big node): a missing library or an unloaded driver gives an empty "none" snapshot that
    says why; any other init failure is a GPU node's NVML in trouble, an error."""

    key = "nvml"

    def snapshot(self) -> Snapshot:
        try:
            import pynvml
        except ImportError:
            return Snapshot("none", note="nvidia-ml-py (pynvml) is not installed")
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:
            if getattr(exc, "value", None) in _absent_codes(pynvml):
                return Snapshot("none", note=f"NVML: {exc}")
            # e.g. "Driver/library version mismatch" after a driver update without a reboot
            raise NvmlError(f"nvml init failed: {exc}") from None
        try:
            driver = _str(pynvml.nvmlSystemGetDriverVersion())
            gpus = [self._gpu(pynvml, i, driver) for i in range(pynvml.nvmlDeviceGetCount())]
            gpus = _with_xid_events(pynvml, gpus)
            cuda = _cuda_version(pynvml)
        except pynvml.NVMLError as exc:
            raise NvmlError(f"nvml error: {exc}") from None
        finally:
            try:
                pynvml.nvmlShutdown()
            except pynvml.NVMLError:
                pass
        return Snapshot("nvml", tuple(gpus), driver_version=driver, cuda_version=cuda)

    def _gpu(self, nv, i: int, driver: str) -> Gpu:
        try:
            h = nv.nvmlDeviceGetHandleByIndex(i)
        except nv.NVMLError as exc:
            # A GPU that fell off the bus answers GPU_IS_LOST, or UNKNOWN on older drivers
            # (nvidia-smi's "Unable to determine the device handle ... Unknown Error").
            if getattr(exc, "value", None) in _lost_codes(nv):
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
        read("_memory", nv.nvmlDeviceGetMemoryInfo, h)  # total and used in one driver call
        memory = values.pop("_memory", None)
        if memory is not None:
            values.update(memory_total_mib=int(memory.total // (1 << 20)),
                          memory_used_mib=int(memory.used // (1 << 20)))
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
        read("throttle_reasons", _clock_event_reasons, nv, h,
             post=lambda mask: _throttle_names(nv, mask))
        read("temperature_c", nv.nvmlDeviceGetTemperature, h, nv.NVML_TEMPERATURE_GPU)
        read("persistence_mode", nv.nvmlDeviceGetPersistenceMode, h,
             post=lambda v: v == nv.NVML_FEATURE_ENABLED)
        read("compute_pids", nv.nvmlDeviceGetComputeRunningProcesses, h,
             post=lambda procs: tuple(int(p.pid) for p in procs))
        read("serial", nv.nvmlDeviceGetSerial, h, post=_str)
        read("vbios_version", nv.nvmlDeviceGetVbiosVersion, h, post=_str)
        read("inforom_version", nv.nvmlDeviceGetInforomImageVersion, h, post=_str)
        return Gpu(**values)


def _cuda_version(nv) -> str:
    """The CUDA version the driver supports (12040 -> "12.4"); "" when NVML cannot say."""
    for name in ("nvmlSystemGetCudaDriverVersion_v2", "nvmlSystemGetCudaDriverVersion"):
        fn = getattr(nv, name, None)
        if fn is None:
            continue
        try:
            v = int(fn())
        except Exception:
            continue
        return f"{v // 1000}.{v % 1000 // 10}"
    return ""


def _absent_codes(nv) -> set[int | None]:
    """NVML init errors that mean "no NVIDIA driver here" rather than "a driver in trouble"."""
    return {getattr(nv, n, None) for n in
            ("NVML_ERROR_LIBRARY_NOT_FOUND", "NVML_ERROR_DRIVER_NOT_LOADED")} - {None}


def _lost_codes(nv) -> tuple[int, ...]:
    return tuple(getattr(nv, n) for n in ("NVML_ERROR_GPU_IS_LOST", "NVML_ERROR_UNKNOWN")
                 if hasattr(nv, n))


def _clock_event_reasons(nv, handle) -> int:
    # "Clocks event reasons" is the newer name (driver >= 535) of the same bit mask.
    fn = getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None)
    if fn is not None:
        try:
            return fn(handle)
        except nv.NVMLError:
            pass
    return nv.nvmlDeviceGetCurrentClocksThrottleReasons(handle)


def _with_xid_events(nv, gpus: list[Gpu]) -> list[Gpu]:
    """XID events NVML queued while we were registered (see the module note); a best effort,
    never a reason to fail the gather."""
    try:
        event_set = nv.nvmlEventSetCreate()
    except nv.NVMLError:
        return gpus
    handles = {}
    try:
        for g in gpus:
            if g.lost:
                continue
            try:
                h = nv.nvmlDeviceGetHandleByIndex(g.index)
                nv.nvmlDeviceRegisterEvents(h, nv.nvmlEventTypeXidCriticalError, event_set)
                handles[g.index] = h
            except nv.NVMLError:
                continue
        found: dict[int, list[XidEvent]] = {}
        for _ in range(256):
            try:
                data = nv.nvmlEventSetWait_v2(event_set, 0)
            except nv.NVMLError:
                break  # NVML_ERROR_TIMEOUT: nothing more queued
            index = next((i for i, h in handles.items()
                          if ctypes_addr(h) == ctypes_addr(data.device)), -1)
            found.setdefault(index, []).append(
                XidEvent(xid=int(data.eventData), time=time.time(), gpu=index, source="nvml"))
    finally:
        try:
            nv.nvmlEventSetFree(event_set)
        except nv.NVMLError:
            pass
    if not found:
        return gpus
    return [g._replace(xids=g.xids + tuple(found.get(g.index, ()))) for g in gpus]


def ctypes_addr(handle: Any) -> int:
    import ctypes

    try:
        return ctypes.cast(handle, ctypes.c_void_p).value or 0
    except (TypeError, ctypes.ArgumentError):
        return id(handle)


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
    """True when this is a GPU node as far as NVML can tell. Only "no NVML library" and "no
    driver loaded" mean a CPU node; any other init failure (a driver/library mismatch, a driver
    in a bad state) is a GPU node whose gather must fail loudly, not pass as `cpu`."""
    try:
        import pynvml
    except ImportError:
        return False
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        return getattr(exc, "value", None) not in _absent_codes(pynvml)
    except Exception:
        return False
    try:
        pynvml.nvmlShutdown()
    except pynvml.NVMLError:
        pass
    return True


def backend_for(cfg, node: str):
    if cfg.nvml.simulate:
        return SimulatedBackend(cfg.nvml.simulate, node)
    return PynvmlBackend()


# PCI class codes (the upper 16 bits of sysfs `class`) of a GPU: VGA and 3D controllers.
GPU_PCI_CLASSES = (0x0300, 0x0302)
NVIDIA_VENDOR = 0x10DE


def pci_gpus(sys_root: str = "/sys") -> list[str]:
    """PCI addresses of the NVIDIA GPUs on the bus, whatever NVML can see: vendor 0x10de, class
    VGA or 3D controller. NVSwitches (bridges) and audio functions have other classes; SR-IOV
    virtual functions (`physfn`) and devices handed to VMs (bound to vfio-pci) are not this
    host's GPUs. An unreadable bus gives []."""
    base = os.path.join(sys_root, "bus", "pci", "devices")
    try:
        entries = sorted(os.listdir(base))
    except OSError:
        return []
    found = []
    for addr in entries:
        dev = os.path.join(base, addr)
        if _hex(os.path.join(dev, "vendor")) != NVIDIA_VENDOR:
            continue
        if (_hex(os.path.join(dev, "class")) or 0) >> 8 not in GPU_PCI_CLASSES:
            continue
        if os.path.lexists(os.path.join(dev, "physfn")):
            continue
        try:
            if os.path.basename(os.readlink(os.path.join(dev, "driver"))) == "vfio-pci":
                continue
        except OSError:
            pass  # no driver bound: exactly the case this scan is for
        found.append(addr)
    return found


def _hex(path: str) -> int | None:
    try:
        fd = os.open(path, os.O_RDONLY)
        try:
            return int(os.read(fd, 32).strip(), 16)
        finally:
            os.close(fd)
    except (OSError, ValueError):
        return None


_HUNG: dict[str, threading.Thread] = {}  # backend key -> its gather thread that never returned


def gather(backend, timeout: float) -> Snapshot:
    """Take a snapshot under a watchdog: a hung call raises NvmlTimeout instead of hanging."""
    key = getattr(backend, "key", type(backend).__name__)
    stuck = _HUNG.get(key)
    if stuck is not None:
        if stuck.is_alive():
            raise NvmlTimeout("nvml timeout: an earlier call is still hung")
        del _HUNG[key]
    box: dict[str, Any] = {}

    def work() -> None:
        try:
            box["snap"] = backend.snapshot()
        except BaseException as exc:  # carried to the caller's thread
            box["exc"] = exc

    started = time.monotonic()
    t = threading.Thread(target=work, name="nvml-gather", daemon=True)
    t.start()
    t.join(timeout)
    if t.is_alive():
        _HUNG[key] = t
        raise NvmlTimeout(f"nvml timeout: no answer within {timeout:g} s")
    if "exc" in box:
        exc = box["exc"]
        if isinstance(exc, AirlockError):
            raise exc
        raise NvmlError(f"nvml error: {exc}")
    snap: Snapshot = box["snap"]
    return snap._replace(gathered_at=snap.gathered_at or time.time(),
                         duration_s=time.monotonic() - started)
