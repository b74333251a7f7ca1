"""The checks, declared as data: which levels run each one, where its code lives, whether it
needs a process of its own (anything that imports torch or can hang in a native call), and its
default timeout. Each function takes a Context and returns an Outcome."""

from __future__ import annotations

from typing import NamedTuple

from airlock.errors import ConfigError

QUICK, STANDARD, DEEP = "quick", "standard", "deep"
ALL = (QUICK, STANDARD, DEEP)
# After every job (hooks/epilog.py): the job's GPUs against the prolog's snapshot of them.
EPILOG = "epilog"
HEAVY = (STANDARD, DEEP)


class CheckSpec(NamedTuple):
    name: str
    levels: tuple[str, ...]
    target: str  # "module:function"
    isolated: bool = False  # run in its own process group, killed on timeout
    timeout: float = 0.0  # 0 = [checks] timeout
    timeout_key: str = ""  # "section.key" in the config that overrides the timeout


CHECKS: tuple[CheckSpec, ...] = (
    # NVML: `nvml` first, so a failed or hung gather is named once, as itself. Its timeout is a
    # backstop above [nvml] timeout (the gather's own watchdog, 5 s by default).
    CheckSpec("nvml", ALL, "airlock.checks.nvml_checks:check_nvml", timeout=30),
    CheckSpec("gpu_lost", ALL, "airlock.checks.nvml_checks:check_gpu_lost", timeout=10),
    CheckSpec("gpu_count", ALL, "airlock.checks.inventory:check_gpu_count", timeout=10),
    CheckSpec("gpu_memory", ALL, "airlock.checks.nvml_checks:check_gpu_memory", timeout=10),
    CheckSpec("driver", ALL, "airlock.checks.nvml_checks:check_driver", timeout=10),
    CheckSpec("ecc", ALL, "airlock.checks.nvml_checks:check_ecc", timeout=10),
    CheckSpec("retired_pages", ALL, "airlock.checks.nvml_checks:check_retired_pages", timeout=10),
    CheckSpec("row_remap", ALL, "airlock.checks.nvml_checks:check_row_remap", timeout=10),
    CheckSpec("xid", ALL, "airlock.checks.xid:check_xid", timeout=10),
    CheckSpec("nvlink", ALL, "airlock.checks.nvml_checks:check_nvlink", timeout=10),
    CheckSpec("pcie", ALL, "airlock.checks.nvml_checks:check_pcie", timeout=10),
    CheckSpec("throttle", ALL, "airlock.checks.nvml_checks:check_throttle", timeout=10),
    CheckSpec("temperature", ALL, "airlock.checks.nvml_checks:check_temperature", timeout=10),
    CheckSpec("persistence", ALL, "airlock.checks.nvml_checks:check_persistence", timeout=10),
    # System: a hung NFS mount blocks statvfs/open, so each has a timeout of its own.
    CheckSpec("rdma", ALL, "airlock.checks.system:check_rdma", timeout=5),
    CheckSpec("link_flap", ALL, "airlock.checks.flaps:check_link_flap", timeout=5),
    CheckSpec("disk", ALL, "airlock.checks.system:check_disk", timeout=10),
    CheckSpec("mounts", ALL, "airlock.checks.system:check_mounts", timeout=10),
    CheckSpec("memory", ALL, "airlock.checks.system:check_memory", timeout=5),
    # One Slurm call (the fleet's members) and reads of the shared directory, which can hang.
    CheckSpec("drift", HEAVY, "airlock.checks.drift:check_drift", timeout=60),
    # CUDA must see exactly the GPUs NVML lists before any heavy check claims to have run on
    # them (checks/cuda.py); it imports torch and initialises CUDA, which can hang.
    CheckSpec("cuda", HEAVY, "airlock.checks.cuda:check_cuda", isolated=True, timeout=90),
    CheckSpec("burnin", HEAVY, "airlock.checks.burnin:check_burnin", isolated=True,
              timeout_key="burnin.timeout"),
    CheckSpec("memtest", HEAVY, "airlock.checks.memtest:check_memtest", isolated=True,
              timeout_key="memtest.timeout"),
    CheckSpec("pcie_bw", HEAVY, "airlock.checks.pcie_bw:check_pcie_bw", isolated=True,
              timeout_key="pcie_bw.timeout"),
    CheckSpec("p2p", HEAVY, "airlock.checks.p2p:check_p2p", isolated=True,
              timeout_key="p2p.timeout"),
    # DCGM runs its own processes under its own time limit (a hang is inconclusive, never a
    # verdict); the registry's timeout is only the backstop above it.
    CheckSpec("dcgm", ALL, "airlock.checks.dcgm:check_dcgm", timeout_key="dcgm.check_timeout"),
    CheckSpec("loopback", HEAVY, "airlock.checks.loopback:check_loopback",
              timeout_key="loopback.check_timeout"),
    CheckSpec("allreduce", HEAVY, "airlock.checks.allreduce:check_allreduce", isolated=True,
              timeout_key="allreduce.check_timeout"),
    # The epilog's: gpu_released first, since it waits for the job's processes to let go and
    # takes the reading the other two compare.
    CheckSpec("gpu_released", (EPILOG,), "airlock.checks.gpu_released:check_gpu_released",
              timeout=60),
    CheckSpec("xid_during_job", (EPILOG,), "airlock.checks.xid_during_job:check_xid_during_job",
              timeout=10),
    CheckSpec("ecc_during_job", (EPILOG,), "airlock.checks.ecc_during_job:check_ecc_during_job",
              timeout=10),
)


def for_level(level: str, only: list[str] | None = None) -> list[CheckSpec]:
    specs = [c for c in CHECKS if level in c.levels]
    if only:
        known = {c.name for c in CHECKS}
        unknown = [o for o in only if o not in known]
        if unknown:

            raise ConfigError(f"unknown check {unknown[0]!r} (known: {', '.join(sorted(known))})")
        specs = [c for c in CHECKS if c.name in only]
    return specs


def names() -> set[str]:
    return {c.name for c in CHECKS}


def by_name(name: str) -> CheckSpec:
    for c in CHECKS:
        if c.name == name:
            return c
    raise KeyError(name)


def timeout_for(spec: CheckSpec, cfg) -> float:
    if spec.timeout_key:
        section, _, key = spec.timeout_key.partition(".")
        return float(getattr(cfg.section(section), key))
    return spec.timeout or cfg.checks.timeout
