"""The checks' own sections: [burnin] [memtest] [allreduce] [system] [xid] [profile]."""

from __future__ import annotations

import os

from airlock.config.sections import Section, choice, positive, setting
from airlock.errors import ConfigError
from airlock.hw.profiles import check_names
from airlock.hw.profiles.xid_policy import load_policies

# The memory test's patterns, in the order they run (checks/memtest.py implements them).
MEMTEST_PATTERNS = ("walking_ones", "random", "address")


class BurninSection(Section):
    """[burnin]: verified GEMMs on every local device at once (see checks/burnin.py)."""
    dtypes: list[str] = setting(
        factory=lambda: ["bf16", "fp16", "tf32", "fp32"],
        doc='GEMM data types: bf16, fp16, tf32, fp32')
    duration: float = setting(60.0, 'GPU: seconds of GEMMs per dtype at level standard')
    deep_duration: float = setting(300.0, 'GPU: the same at level deep')
    size: int = setting(0, 'GPU matrix edge; 0 = 8192')
    cpu_devices: int = setting(2, 'no GPU: this many "virtual devices" (threads) share the CPU')
    cpu_size: int = setting(128, 'no GPU: a fixed small amount, so tests and CPU nodes stay quick')
    cpu_iterations: int = setting(16, 'no GPU: GEMMs per dtype per device (doubled at level deep)')
    straggler_fraction: float = setting(
        0.85,
        "a device below this share of the others' median fails")
    cpu_straggler_fraction: float = setting(
        0.5,
        'CPU "devices" share cores (and SMT siblings) with everything else: +-30 % is noise there.')
    fleet_fraction: float = setting(
        0.85,
        'a device below this share of the fleet median for the SKU warns (other nodes\' '
        'documents are a second opinion: only the profile floor fails a node); the fleet is '
        'the nodes Slurm lists that ran the same profile')
    fleet_min_nodes: int = setting(
        3,
        'other nodes with history needed before the fleet is consulted')
    fleet_cpu: bool = setting(
        False,
        'CPU "devices" share cores with whatever else runs, so their speed says little about the '
        'node; compare them with the fleet only when asked.')
    timeout: float = setting(0.0, 'whole check, seconds; 0 = derived from the deep duration')

    def __post_init__(self) -> None:
        if self.timeout == 0:
            # Covers level deep too: the registry has one timeout per check, and a hung device
            # is caught sooner by the burn-in's own per-device watchdog.
            self.timeout = len(self.dtypes) * max(self.duration, self.deep_duration) * 1.25 + 300

    def validate(self) -> None:
        if not self.dtypes:
            raise ValueError("dtypes: must name at least one of fp32, tf32, fp16, bf16")
        for d in self.dtypes:
            choice(d, ("fp32", "tf32", "fp16", "bf16"), "dtypes")
        positive(self.timeout, "timeout")
        positive(self.duration, "duration")
        positive(self.deep_duration, "deep_duration")
        if self.size < 0:
            raise ValueError(f"size: must be >= 0 (0 = chosen by device), got {self.size}")
        for key in ("cpu_devices", "cpu_size", "cpu_iterations", "fleet_min_nodes"):
            if getattr(self, key) <= 0:
                raise ValueError(f"{key}: must be > 0, got {getattr(self, key)}")
        for key in ("straggler_fraction", "cpu_straggler_fraction", "fleet_fraction"):
            if not 0 <= getattr(self, key) <= 1:
                raise ValueError(f"{key}: must be between 0 and 1, got {getattr(self, key)}")


class MemtestSection(Section):
    """[memtest]: see checks/memtest.py."""
    share: float = setting(0.5, "GPU: share of each device's free memory tested at level standard")
    deep_share: float = setting(0.9, '... at level deep')
    rounds: int = setting(1, 'times the whole pattern list runs at level standard')
    deep_rounds: int = setting(3, '... at level deep')
    chunk_mib: int = setting(
        256,
        'GPU allocation unit (also the temporary space one compare needs)')
    patterns: list[str] = setting(
        factory=lambda: list(MEMTEST_PATTERNS),
        doc='test patterns, in order: walking_ones, random, address')
    cpu_devices: int = setting(2, 'no GPU: this many small CPU buffers, tested at once')
    cpu_mib: int = setting(4, 'no GPU: size of each (doubled at level deep)')
    max_report: int = setting(8, 'bad locations reported per device')
    timeout: float = setting(900.0, 'whole check, seconds (covers level deep)')

    def validate(self) -> None:
        for key in ("share", "deep_share"):
            v = getattr(self, key)
            if not 0 < v <= 0.95:
                raise ValueError(f"{key}: must be > 0 and <= 0.95 (the compare needs room), "
                                 f"got {v}")
        for key in ("rounds", "deep_rounds", "chunk_mib", "cpu_devices", "cpu_mib",
                    "max_report"):
            if getattr(self, key) <= 0:
                raise ValueError(f"{key}: must be > 0, got {getattr(self, key)}")
        if not self.patterns:
            raise ValueError(f"patterns: name at least one of {', '.join(MEMTEST_PATTERNS)}")
        for p in self.patterns:
            if p not in MEMTEST_PATTERNS:
                raise ValueError(f"patterns: must be one of {', '.join(MEMTEST_PATTERNS)}, "
                                 f"got {p!r}")
        if not self.timeout > 0:
            raise ValueError(f"timeout: must be > 0, got {self.timeout}")


class AllreduceSection(Section):
    """[allreduce]: see checks/allreduce.py and airlock/collective.py."""
    sizes_kib: list[int] = setting(
        factory=lambda: [1024, 16384, 262144, 1048576],
        doc='GPU message sizes, KiB: 1 MiB to 1 GiB (busbw is judged at the largest).')
    iters: int = setting(20, 'timed iterations per message size')
    warmup: int = setting(5, 'untimed iterations before them')
    deep_iters: int = setting(100, 'level deep: more iterations per size')
    dtype: str = setting("fp32", 'sums stay exact in fp32 up to 2^24 / 7 ranks')
    backend: str = setting("auto", 'nccl when every local rank has a GPU, else gloo')
    cpu_ranks: int = setting(2, 'no GPU: this many gloo processes share the CPU')
    cpu_sizes_kib: list[int] = setting(
        factory=lambda: [64, 1024, 4096],
        doc='no GPU: message sizes, KiB')
    cpu_iters: int = setting(10, 'no GPU: timed iterations per size')
    cpu_warmup: int = setting(2, 'no GPU: untimed iterations')
    straggler_fraction: float = setting(
        0.5,
        "A rank whose median time outside each all-reduce exceeds this share of the collective's "
        'time straggles (a healthy rank spends microseconds there).')
    timeout: float = setting(
        120.0,
        'hard limit on the collectives; past it: FAIL allreduce timeout')

    @property
    def check_timeout(self) -> float:
        # The process start and torch import come on top of the collectives' own limit, so the
        # sweep's timeout (which names the stuck ranks) fires before the runner's.
        return self.timeout + 30.0

    def validate(self) -> None:
        for key in ("sizes_kib", "cpu_sizes_kib"):
            sizes = getattr(self, key)
            if not sizes or any(s <= 0 for s in sizes):
                raise ValueError(f"{key}: need at least one positive size")
        for key in ("iters", "deep_iters", "cpu_iters", "cpu_ranks"):
            if getattr(self, key) <= 0:
                raise ValueError(f"{key}: must be > 0, got {getattr(self, key)}")
        if self.warmup < 0 or self.cpu_warmup < 0:
            raise ValueError("warmup/cpu_warmup: must be >= 0")
        if self.dtype not in ("fp32", "fp16", "bf16"):
            raise ValueError(f"dtype: must be one of fp32, fp16, bf16, got {self.dtype!r}")
        if self.backend not in ("auto", "nccl", "gloo"):
            raise ValueError(f"backend: must be one of auto, nccl, gloo, got {self.backend!r}")
        if not 0 < self.straggler_fraction <= 1:
            raise ValueError(f"straggler_fraction: must be in (0, 1], got "
                             f"{self.straggler_fraction}")
        if not self.timeout > 0:
            raise ValueError(f"timeout: must be > 0, got {self.timeout}")


class SystemSection(Section):
    sys_root: str = setting("/sys", 'where /sys is read (tests point it at a fixture tree)')
    proc_root: str = setting("/proc", 'where /proc is read')
    rdma_ports: int = setting(
        0,
        'ACTIVE RDMA (InfiniBand, RoCE or EFA) ports expected; 0 = not checked')
    rdma_devices: list[str] = setting(factory=list, doc='only these devices; [] = all')
    rdma_rate_gbps: float = setting(0.0, 'minimum rate of each active port; 0 = not checked')
    disk_paths: list[str] = setting(
        factory=list,
        doc='paths whose filesystems must have free space and inodes')
    disk_min_free_gib: float = setting(1.0, 'free space floor on each of disk_paths, GiB')
    disk_min_free_inodes_pct: float = setting(
        1.0,
        'free inode floor on each of disk_paths, percent')
    mounts: list[str] = setting(factory=list, doc='must be mount points, and writable')
    mounts_writable: bool = setting(True, 'mounts must also be writable')
    min_memory_gib: float = setting(0.0, 'MemTotal floor; 0 = not checked')

    def validate(self) -> None:
        for key in ("rdma_ports", "rdma_rate_gbps", "disk_min_free_gib",
                    "disk_min_free_inodes_pct", "min_memory_gib"):
            if getattr(self, key) < 0:
                raise ValueError(f"{key}: must be >= 0")
        if self.disk_min_free_inodes_pct > 100:
            raise ValueError("disk_min_free_inodes_pct: must be <= 100")
        for key in ("disk_paths", "mounts"):
            for p in getattr(self, key):
                if not os.path.isabs(p):
                    raise ValueError(f"{key}: {p!r} is not an absolute path")


class XidSection(Section):
    kernel_log: str = setting(
        "dmesg",
        'where XIDs are read, from the kernel only: "dmesg" (the ring buffer: /dev/kmsg read '
        'directly, else `dmesg --kernel`), "journal" (`journalctl -k`), an absolute path to a '
        'syslog file such as /var/log/kern.log (only lines tagged `kernel:` count: anyone can '
        'write to syslog), or "" for none')
    kernel_log_max_bytes: int = setting(4 << 20, 'only the tail of a file is read')
    policy_file: str = setting("", '"" = the built-in xid_policy.toml')
    dmesg_timeout: float = setting(3.0, 'seconds for one dmesg or journalctl call')

    def validate(self) -> None:
        if self.kernel_log not in ("", "dmesg", "journal") and \
                not os.path.isabs(self.kernel_log):
            raise ValueError(f"kernel_log: must be \"dmesg\", \"journal\", \"\" or an absolute "
                             f"path, got {self.kernel_log!r}")
        if self.kernel_log_max_bytes <= 0:
            raise ValueError("kernel_log_max_bytes: must be > 0")
        if not self.dmesg_timeout > 0:
            raise ValueError("dmesg_timeout: must be > 0")
        if self.policy_file:
            load_policies(self.policy_file)  # parsed where the policy format lives


class ProfileSection(Section):
    name: str = setting("", '"" = by_* tables, else detected GPU model and count')
    expected_gpus: int = setting(-1, '-1 = from the profile')
    dirs: list[str] = setting(factory=list, doc='site profile directories')
    by_node: dict[str, str] = setting(factory=dict, doc='node or hostlist -> profile')
    by_partition: dict[str, str] = setting(factory=dict, doc='partition -> profile')
    by_feature: dict[str, str] = setting(factory=dict, doc='node feature -> profile')
    gres: bool = setting(
        True,
        "at registration (standard, deep), compare the GPU count with the node's Slurm GRES (one "
        'scontrol call); a GRES that cannot be read leaves `gpu_count` inconclusive (the boot '
        'stays closed, as Airlock\'s own trouble). The quick level never '
        'asks Slurm for it. NVIDIA GPUs on the PCI bus that NVML cannot see fail '
        '`nvml`/`gpu_count` whatever this says.')
    slurm_timeout: float = setting(
        3.0,
        'seconds for that call at the quick level (choosing the profile by partition or feature); '
        'registration waits the [slurm] timeout')

    def validate(self) -> None:
        if self.expected_gpus < -1:
            raise ValueError("expected_gpus: must be -1 (from profile) or a count >= 0")
        if not self.slurm_timeout > 0:
            raise ValueError("slurm_timeout: must be > 0")
        try:
            check_names(self)  # every site file too, so a typo in one is found at load
        except ConfigError as exc:
            raise ValueError(str(exc)) from None

    @property
    def needs_slurm(self) -> bool:  # for choosing the profile (not for the GRES)
        return bool(self.by_partition or self.by_feature)


# DCGM's run levels (dcgmi diag -r N): 1 about a minute, 2 a few minutes, 3 about 15-30
# minutes, 4 (extended) over an hour, per NVIDIA's DCGM diagnostics guide.
DCGM_LEVELS = (0, 1, 2, 3, 4)


class DcgmSection(Section):
    """[dcgm]: DCGM diagnostics (checks/dcgm.py)."""
    dcgmi: str = setting(
        "dcgmi",
        'dcgmi to run: a name looked up in PATH and /usr/bin, /usr/local/bin, /usr/sbin, '
        '/opt/nvidia/dcgm/bin, or an absolute path. Not found: the check skips, saying so.')
    host: str = setting("", 'nv-hostengine to use (dcgmi --host); "" = the local default')
    quick_level: int = setting(
        0,
        'DCGM level (dcgmi diag -r) at Airlock level quick; 0 = not run there. The periodic '
        "hook's budget cannot hold even level 1 on every SKU.")
    standard_level: int = setting(2, 'at level standard (registration): 2 = PCS MEDIUM')
    deep_level: int = setting(3, 'at level deep: 3 = PCS LONG; 4 = extended (over an hour)')
    timeouts: list[float] = setting(
        factory=lambda: [300.0, 900.0, 2700.0, 7200.0],
        doc='seconds for one dcgmi run at DCGM level 1, 2, 3, 4; past it the run is killed and '
            'the check is inconclusive (never a hardware verdict)')
    warn_tests: list[str] = setting(
        factory=list,
        doc='DCGM tests (as DCGM names them: software, memory, pcie, ...) whose failure only '
            'warns')
    args: list[str] = setting(factory=list, doc='more dcgmi diag arguments, e.g. ["-p", "..."]')

    def timeout_for(self, level: int) -> float:
        return self.timeouts[level - 1]

    @property
    def check_timeout(self) -> float:
        # The runner's backstop sits above dcgmi's own limit, so a hang is named by the check
        # (inconclusive) rather than cut by the runner (a timeout FAIL).
        used = [self.timeout_for(lv) for lv in
                (self.quick_level, self.standard_level, self.deep_level) if lv]
        return max(used or [60.0]) + 30.0

    def validate(self) -> None:
        for key in ("quick_level", "standard_level", "deep_level"):
            if getattr(self, key) not in DCGM_LEVELS:
                raise ValueError(f"{key}: must be 0 (off) or a DCGM level 1-4, got "
                                 f"{getattr(self, key)}")
        if len(self.timeouts) != 4 or any(not t > 0 for t in self.timeouts):
            raise ValueError("timeouts: need four positive numbers (DCGM levels 1-4)")
        if not self.dcgmi:
            raise ValueError("dcgmi: must not be empty")


class FlapsSection(Section):
    """[flaps]: flapping RDMA links (checks/flaps.py), counted at every level's run."""
    max_downs: int = setting(
        3,
        'down-transitions of one port within window that fail the node, naming the HCA and port '
        '(gpud: 3 in 12 h)')
    window: float = setting(43200.0, 'seconds over which downs are counted (12 h)')
    devices: list[str] = setting(
        factory=list,
        doc='only these RDMA devices; [] = [system] rdma_devices, or every device when that is '
            'empty too')

    def validate(self) -> None:
        if self.max_downs < 1:
            raise ValueError(f"max_downs: must be >= 1, got {self.max_downs}")
        positive(self.window, "window")


class LoopbackSection(Section):
    """[loopback]: RDMA loopback bandwidth per port (checks/loopback.py)."""
    perftest: str = setting(
        "ib_write_bw",
        'perftest tool for InfiniBand and RoCE ports (ib_write_bw or ib_read_bw): a name looked '
        'up in PATH and the usual places, or an absolute path')
    fabtests: str = setting("fi_rma_bw", 'fabtests tool for EFA ports')
    size: int = setting(8388608, 'message size, bytes (aznhc uses 8 MiB)')
    duration: float = setting(5.0, 'perftest: seconds of traffic per port (-D)')
    iterations: int = setting(1000, 'fabtests: transfers per port (-I)')
    server_start: float = setting(1.0, 'seconds between starting the server and the client')
    timeout: float = setting(
        60.0,
        'seconds for one port; past it both sides are killed and the check is inconclusive')
    tcp_port: int = setting(18515, 'first TCP port for the tools\' exchange, one more per port')
    devices: list[str] = setting(
        factory=list,
        doc='only these RDMA devices; [] = [system] rdma_devices, or every device')
    check_timeout: float = setting(
        900.0,
        "the whole check's backstop (above timeout times the ports measured)")

    def validate(self) -> None:
        for key in ("duration", "server_start", "timeout", "check_timeout"):
            positive(getattr(self, key), key)
        for key in ("size", "iterations"):
            if getattr(self, key) <= 0:
                raise ValueError(f"{key}: must be > 0, got {getattr(self, key)}")
        if not 1024 <= self.tcp_port <= 65000:
            raise ValueError(f"tcp_port: must be between 1024 and 65000, got {self.tcp_port}")


class _CopyBandwidthSection(Section):
    """What [pcie_bw] and [p2p] share: the same knobs, validated alike (keys in each section,
    where their words differ)."""

    def validate(self) -> None:
        for key in ("size_mib", "iters", "deep_iters", "cpu_devices", "cpu_size_mib"):
            if getattr(self, key) <= 0:
                raise ValueError(f"{key}: must be > 0, got {getattr(self, key)}")
        for key in ("straggler_fraction", "cpu_straggler_fraction"):
            if not 0 <= getattr(self, key) <= 1:
                raise ValueError(f"{key}: must be between 0 and 1")
        positive(self.timeout, "timeout")


class PcieBwSection(_CopyBandwidthSection):
    """[pcie_bw]: host<->device copy bandwidth per GPU (checks/pcie_bw.py)."""
    size_mib: int = setting(256, 'GPU: bytes per copy, MiB (pinned host memory)')
    iters: int = setting(10, 'timed copies per direction and device at level standard')
    deep_iters: int = setting(40, '... at level deep')
    cpu_devices: int = setting(2, 'no GPU (or stand-ins): this many CPU devices')
    cpu_size_mib: int = setting(16, 'no GPU: bytes per copy, MiB')
    straggler_fraction: float = setting(
        0.8,
        "a GPU below this share of the other GPUs' median fails; 0 = off")
    cpu_straggler_fraction: float = setting(
        0.25,
        "the same for the dev cluster's CPU stand-ins (a warning only): host copies share "
        'memory bandwidth and cores with everything else, so 2x is noise there')
    timeout: float = setting(300.0, 'whole check, seconds')


class P2pSection(_CopyBandwidthSection):
    """[p2p]: GPU-to-GPU copy bandwidth of every ordered pair (checks/p2p.py)."""
    size_mib: int = setting(256, 'GPU: bytes per copy, MiB')
    iters: int = setting(10, 'timed copies per pair at level standard')
    deep_iters: int = setting(40, '... at level deep')
    cpu_devices: int = setting(2, 'no GPU (or stand-ins): this many CPU devices')
    cpu_size_mib: int = setting(16, 'no GPU: bytes per copy, MiB')
    straggler_fraction: float = setting(
        0.8,
        "a GPU pair below this share of the other pairs' median fails; 0 = off")
    cpu_straggler_fraction: float = setting(
        0.25,
        "the same for the dev cluster's CPU stand-ins (a warning only): host copies share "
        'memory bandwidth and cores with everything else, so 2x is noise there')
    timeout: float = setting(600.0, 'whole check, seconds')


# The facts checks/drift.py compares with the fleet.
DRIFT_FACTS = ("driver", "cuda", "vbios", "gpu_firmware", "hca_firmware", "kernel")


class DriftSection(Section):
    """[drift]: this node's versions against the fleet of the same profile (checks/drift.py)."""
    facts: list[str] = setting(
        factory=lambda: list(DRIFT_FACTS),
        doc='what is compared: driver, cuda, vbios, gpu_firmware (InfoROM image), '
            'hca_firmware, kernel')
    action: str = setting(
        "warn",
        'a node that differs from the fleet\'s majority: "warn", or "fail" (drains; use it only '
        'where the shared directory is as trusted as the nodes\' root, since whoever writes it '
        'can forge a majority)')
    min_nodes: int = setting(3, 'other nodes of the same profile that must report a fact')
    majority: float = setting(
        0.5,
        'a fleet value counts when more than this share of those nodes agree on it')

    def validate(self) -> None:
        for f in self.facts:
            choice(f, DRIFT_FACTS, "facts")
        choice(self.action, ("warn", "fail"), "action")
        if self.min_nodes < 1:
            raise ValueError(f"min_nodes: must be >= 1, got {self.min_nodes}")
        if not 0.5 <= self.majority < 1:
            raise ValueError(f"majority: must be at least 0.5 and below 1, got {self.majority}")
