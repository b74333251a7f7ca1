"""A real Slurm cluster on one machine: munged, slurmctld and several slurmd, all in one directory.

Used by the integration tests and by `airlock demo`. Debian's slurmd supports several daemons per
host (`slurmd -N name`), each on its own port; every daemon and file lives under `root`, nothing
touches /etc. Every process started here carries AIRLOCK_DEVCLUSTER=<root> in its environment,
which is how stop() finds and kills leftovers (slurmstepd outlives a killed slurmd, and so do
Airlock's detached suites) without touching anything else on the machine.

Three Slurm versions: "22.05" runs the host's Debian 12 packages; "24.11" runs Debian 13's and
"26.05" Debian sid's, each inside the chroot scripts/slurm-chroot.sh builds for it (shared by
every cluster, so never written to). A chrooted cluster gets its own mount namespace, held by
one small process: the chroot is mounted there as an overlay (writes go to a tmpfs), with /proc,
/sys, /dev, the host's /tmp, the cluster's root, the host's Python and the project tree bound in
at the same paths, so slurm.conf, airlock.toml, the hooks (the host's Airlock, started by the
chrooted slurmd) and the tests need no translation. None of these mounts is visible on the host
and all of them end with the cluster's processes. Client commands reach a chrooted controller
through wrappers in <root>/slurm-bin (Airlock's [slurm] bin_dir): from the host they enter the
namespace and the chroot, inside it they are the real binaries. `accounting=True` (24.11 and
26.05) sets AccountingStorageType=accounting_storage/slurmdbd pointed at a port nobody listens
on: 23.11+ clears a resumed node's reason only when an accounting plugin is loaded, so this
variant behaves like 22.05 on resume.

The Airlock lines of slurm.conf (HealthCheckProgram and its interval, node state and, on 26.05,
HealthCheckTimeout; Prolog, Epilog, ...) are the ones `airlock render slurm-conf` renders for
the cluster's version, so the tests run what a site installs.

A fresh boot (`fresh_boot=True`: reboots, cloud power-ups) starts slurmd, and so everything it
starts, in a new time namespace whose boot clock starts now and a private mount namespace with a
new random /proc/sys/kernel/random/boot_id, as a real reboot would present.

Cloud nodes (`cloud=[...]`) are declared State=CLOUD with power saving on: they start powered
down; the ResumeProgram starts a node's slurmd as a freshly booted new instance and the
SuspendProgram releases it (slurmd stopped, its Airlock processes killed, its simulated GPUs
back to the healthy image a new instance gets).
"""

from __future__ import annotations

import json
import os
import random
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import tomli_w

import airlock
from airlock.admin import render
from airlock.paths import atomic_write_text
from airlock.slurm.client import Node, Slurm, expand, parse_version

MARKER = "AIRLOCK_DEVCLUSTER"
VERSIONS = ("22.05", "24.11", "26.05")
# The Debian suite whose chroot runs each version the host does not ship (scripts/slurm-chroot.sh
# builds them in AIRLOCK_CHROOT_DIR, default /var/cache/airlock).
SUITES = {"24.11": "trixie", "26.05": "sid"}
CHROOT_DIR = "/var/cache/airlock"
CHROOT_MARK = "/etc/airlock-chroot"  # exists inside a chroot only
CLIENTS = ("scontrol", "sbatch", "srun", "sinfo", "scancel", "squeue", "strigger", "salloc",
           "sdiag")
REBOOT_OFF_S = 3.0  # how long the RebootProgram's "machine" stays off
# How long a new cloud instance takes to boot before its slurmd starts. slurmctld ignores a
# powering-up node's registration while its (whole-second) boot time is older than the power-up;
# the fresh boot clock starts 1-2 s in the past and slurmd rounds its uptime, hence 4 s.
POWER_ON_S = 4.0
# Never bound over the chroot's own: a system Python (base prefix /usr) is bound file by file.
_SYSTEM_DIRS = {"/", "/usr", "/usr/local", "/usr/lib", "/usr/bin", "/bin", "/lib", "/etc",
                "/var", "/opt", "/root", "/home", "/tmp", "/run", "/proc", "/sys", "/dev"}


def free_port(taken: set[int] | frozenset[int] = frozenset()) -> int:
    """A TCP port free on loopback now, below the kernel's range for outgoing connections
    (ip_local_port_range): a port the kernel picked for us (bind to 0) can be picked again for
    someone's outgoing connection before our daemon binds it, which with a hundred slurmds
    starting at once happened (`Unable to bind listen port`). taken: ports already given out."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as fh:
            ephemeral = int(fh.read().split()[0])
    except (OSError, ValueError, IndexError):
        ephemeral = 32768
    low, high = 10000, max(10001, ephemeral - 1)
    for _ in range(1000):
        port = random.randint(low, high)
        if port in taken:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        return port
    raise RuntimeError(f"no free port in {low}-{high}")


def chroot_path(version: str) -> Path:
    """Where scripts/slurm-chroot.sh builds the chroot of a chrooted version."""
    return Path(os.environ.get("AIRLOCK_CHROOT_DIR") or CHROOT_DIR) / SUITES[version]


def in_chroot() -> bool:
    """True inside a Slurm chroot (the hooks, RebootProgram and power programs run there)."""
    return os.path.exists(CHROOT_MARK)


def host_uptime() -> float:
    """Seconds since the machine booted, whatever time namespace we are in: a reboot program runs
    under an earlier fresh boot's namespace, whose /proc/uptime is offset."""
    with open("/proc/uptime") as fh:
        up = float(fh.read().split()[0])
    try:
        with open("/proc/self/timens_offsets") as fh:
            for line in fh:
                clock, secs, nsecs = line.split()
                if clock in ("boottime", "7"):  # named since 5.x, CLOCK_BOOTTIME's id before
                    up -= int(secs) + int(nsecs) / 1e9
    except (OSError, ValueError):
        pass  # no time namespaces in this kernel: /proc/uptime is the machine's
    return up


def healthy_gpus(count: int = 8, model: str = "NVIDIA H100 80GB HBM3") -> list[dict[str, Any]]:
    """A simulated node's GPUs, all healthy (the NVML simulation's file format)."""
    return [
        {
            "index": i,
            "name": model,
            "uuid": f"GPU-{i:08x}-sim0-0000-0000-000000000000",
            "pci_bus_id": f"00000000:{0x18 + i * 0x10:02X}:00.0",
            "memory_total_mib": 81559,
        }
        for i in range(count)
    ]


def sim_node(gpus: int) -> dict[str, Any]:
    """A simulated node's NVML entry. Its GPUs are simulated, so CUDA is declared simulated too
    ("stand_in"): the heavy checks run on CPU stand-ins under the cpu profile, labelled as such
    (checks/device_plan.py). Without it they would find no CUDA for the GPUs and fail the node."""
    return {"gpus": healthy_gpus(gpus), "cuda": {"stand_in": True}}


def _minimal(paths: Iterable[str]) -> list[str]:
    """The paths not inside another one of them."""
    out: list[str] = []
    for p in sorted(set(paths), key=len):
        if not any(p == q or p.startswith(q.rstrip("/") + "/") for q in out):
            out.append(p)
    return sorted(out)


def python_paths() -> list[str]:
    """What the host's Python and Airlock need inside the chroot, to bind there read-only."""
    project = str(Path(airlock.__file__).resolve().parents[1])
    if os.path.realpath(sys.base_prefix) not in _SYSTEM_DIRS:
        cands = [os.path.realpath(p) for p in (sys.base_prefix, sys.prefix, project)]
    else:  # Debian's python3: its files, not /usr; the hooks exec sys.executable by its name
        cands = [os.path.abspath(sys.executable), os.path.realpath(sys.executable), project,
                 *(os.path.realpath(p) for p in sys.path if p and os.path.isdir(p))]
    return [p for p in _minimal(cands)
            if p not in _SYSTEM_DIRS and not p.startswith("/tmp/") and os.path.exists(p)]


class DevCluster:
    def __init__(
        self,
        root: str | os.PathLike,
        nodes: Iterable[str] = ("node1", "node2", "node3"),
        future: Iterable[str] = (),
        gpus_per_node: int = 8,
        health_interval: int = 5,
        airlock: dict[str, Any] | None = None,
        partitions: dict[str, list[str]] | None = None,
        features: dict[str, list[str]] | None = None,
        cloud: Iterable[str] = (),
        suspend_time: int = 3600,
        suspend_timeout: int = 5,
        slurm_version: str = "22.05",
        accounting: bool = False,
        chroot: str | os.PathLike | None = None,
        hooks: dict[str, str] | None = None,
        slurm_settings: dict[str, str | None] | None = None,
        python: str | os.PathLike | None = None,
    ):
        if slurm_version not in VERSIONS:
            raise ValueError(f"slurm_version must be one of {', '.join(VERSIONS)}, "
                             f"not {slurm_version!r}")
        if accounting and slurm_version == "22.05":
            raise ValueError("accounting=True is a 24.11+ variant (22.05 clears reasons without)")
        self.root = Path(root).resolve()
        self.nodes = list(nodes)
        self.future = list(future)
        self.gpus_per_node = gpus_per_node
        self.health_interval = health_interval
        self.airlock_extra = airlock or {}
        # {"healthcheck"|"prolog"|"epilog": shell script} replacing Airlock's hook, to see
        # Slurm's own behaviour (the Slurm-version tests, tests/data/record.py); @ROOT@ in it
        # becomes the cluster's root (Slurm gives a hook no environment to find it by)
        self.hooks = dict(hooks or {})
        # slurm.conf keys set to these values (a line of the same key replaced, else added):
        # what a test of one Slurm setting changes
        self.slurm_settings = dict(slurm_settings or {})
        # The interpreter the hooks (and the suites they start) run with: this one by default,
        # or a venv with Airlock installed from its wheel, so a module or data file the wheel
        # leaves out fails the cluster's tests (tests/install/wheel.py builds one).
        self.python = str(python) if python else sys.executable
        self.partitions = partitions or {}
        self.features = features or {}
        self.cloud = list(cloud)
        # Long by default: an idle cloud node must not power down on its own during a test.
        self.suspend_time = suspend_time
        self.suspend_timeout = suspend_timeout
        self.ports: dict[str, int] = {}
        for n in self.all_nodes:
            self.ports[n] = free_port(set(self.ports.values()))
        self.ctld_port = free_port(set(self.ports.values()))
        # slurmctld queues accounting records for this port, where nothing ever listens
        self.dbd_port = free_port({*self.ports.values(), self.ctld_port}) if accounting else 0
        self._setup(slurm_version, accounting, chroot)

    def _setup(self, version: str, accounting: bool, chroot: str | os.PathLike | None) -> None:
        self.slurm_version = version
        self.accounting = accounting
        self.chroot = Path(chroot) if chroot else \
            chroot_path(version) if version in SUITES else Path("/")
        self.conf = self.root / "slurm.conf"
        self.airlock_conf = self.root / "airlock.toml"
        self.sim_file = self.root / "gpus.json"
        self.image_file = self.root / "cloud-image.json"
        self.munge_socket = self.root / "munge" / "run" / "munge.socket"
        # 24.11, 26.05: where the chroot is mounted in the cluster's namespace, the process
        # holding that namespace, and the client wrappers that enter it
        self.fs = self.root / "fs"
        self.ns_pid_file = self.root / "run" / "namespace.pid"
        self.slurm_bin = self.root / "slurm-bin" if self.chrooted else None
        self._ns = ""  # the namespace's id (mnt:[inode]) once started
        self._seen_ns: set[str] = set()  # every mount namespace a process of ours was seen in
        self.slurm = Slurm(conf=str(self.conf), timeout=15,
                           bin_dir=str(self.slurm_bin) if self.slurm_bin else "")
        self._started = False

    @property
    def chrooted(self) -> bool:
        return self.slurm_version != "22.05"

    @property
    def variant(self) -> str:
        """The version, "-dbd" added with the accounting plugin: "22.05", "24.11-dbd", ..."""
        return self.slurm_version + ("-dbd" if self.accounting else "")

    @property
    def all_nodes(self) -> list[str]:
        return self.nodes + self.future + self.cloud

    # --- layout ------------------------------------------------------------------------------
    def env(self, **extra: str) -> dict[str, str]:
        env = dict(os.environ)
        env.update(SLURM_CONF=str(self.conf), AIRLOCK_CONFIG=str(self.airlock_conf))
        if self.slurm_bin:  # sbatch & co. from a test's subprocess reach this cluster's version
            env["PATH"] = f"{self.slurm_bin}:{env.get('PATH') or '/usr/bin:/bin'}"
        env[MARKER] = str(self.root)
        env.update(extra)
        return env

    def write_files(self) -> None:
        for d in ("munge/run", "munge/lib", "state", "run", "log", "bin", "airlock", "jobs"):
            (self.root / d).mkdir(parents=True, exist_ok=True)
        for n in self.all_nodes:
            (self.root / "spool" / n).mkdir(parents=True, exist_ok=True)
        os.chmod(self.root / "munge", 0o700)
        os.chmod(self.root / "munge" / "run", 0o755)
        key = self.root / "munge" / "munge.key"
        if not key.exists():
            key.write_bytes(os.urandom(1024))
        os.chmod(key, 0o400)
        (self.root / "cluster.json").write_text(json.dumps({
            "slurm_version": self.slurm_version, "accounting": self.accounting,
            "chroot": str(self.chroot)}))
        self._write_hooks()
        if self.chrooted:
            self._write_clients()
            # 24.11+'s slurmd always loads a cgroup plugin and fails without a cgroup filesystem;
            # 22.05 has no "disabled" and needs no cgroup.conf here.
            (self.root / "cgroup.conf").write_text("CgroupPlugin=disabled\n")
        self.conf.write_text(self.slurm_conf())
        self.write_airlock_config()
        if not self.sim_file.exists():
            self.write_sim({n: sim_node(self.gpus_per_node) for n in self.all_nodes})
        if self.cloud and not self.image_file.exists():
            # What a new instance of each cloud node looks like (the SuspendProgram restores it).
            self.image_file.write_text(json.dumps(
                {n: sim_node(self.gpus_per_node) for n in self.cloud}, indent=1))

    def _checkout_path(self) -> str:
        """With this interpreter, the hooks import the airlock this process imported: a second
        checkout (a git worktree) must test its own code, not whichever tree the editable
        install names. With a wheel's venv, nothing: it must run what it installed."""
        if self.python != sys.executable:
            return ""
        project = Path(airlock.__file__).resolve().parents[1]
        return f"export PYTHONPATH={shlex.quote(str(project))}\n"

    def _write_hooks(self) -> None:
        py = self.python
        # Slurm gives these programs almost no environment and no arguments; a site points
        # (They run from /, as a daemon's children do: `python -m` puts the working directory
        # first on sys.path, and a checkout's airlock/ there would shadow the installed one.)
        # slurm.conf at a wrapper like this (or at the installed entry point with the config in
        # /etc/airlock). The marker lets stop() find the detached suites later.
        for name, target in (
            ("healthcheck", "airlock.hooks.healthcheck"),
            ("prolog", "airlock.hooks.prolog"),
            ("epilog", "airlock.hooks.epilog"),
            ("reboot", "airlock.dev.cluster"),
            ("suspend", "airlock.dev.cluster"),
            ("resume", "airlock.dev.cluster"),
        ):
            script = self.root / "bin" / name
            if name in self.hooks:
                script.write_text(self.hooks[name].replace("@ROOT@", str(self.root)))
                script.chmod(0o755)
                continue
            extra = f" {name}-program" if target == "airlock.dev.cluster" else ""
            # slurmctld runs the power programs (and a controller-side RebootProgram) with every
            # descriptor closed: keep their words
            log = f"exec >>{self.root}/log/{name}.out 2>&1\n" \
                if name in ("suspend", "resume", "reboot") else ""
            script.write_text(
                textwrap.dedent(f"""\
                #!/bin/sh
                export AIRLOCK_CONFIG={self.airlock_conf}
                export SLURM_CONF={self.conf}
                export AIRLOCK_RUNTIME_DIR={self.root}/run/airlock
                export {MARKER}={self.root}
                """) + self._checkout_path() + log + f'cd /\nexec {py} -m {target}{extra} "$@"\n'
            )
            script.chmod(0o755)

    def _write_clients(self) -> None:
        """<root>/slurm-bin/<tool> for a chrooted version. Inside the chroot (the hooks) it is
        the real binary; from the host it enters the cluster's mount namespace and the chroot,
        in the caller's working directory when that exists in there (sbatch records it for the
        job)."""
        self.slurm_bin.mkdir(exist_ok=True)
        enter = (f'exec {_host_tool("nsenter")} --target "$(cat {self.ns_pid_file})" --mount -- '
                 f'{_host_tool("chroot")} {self.fs} /bin/sh -c \'cd "$0" 2>/dev/null; '
                 f'exec "$@"\' "$PWD"')
        for tool in CLIENTS:
            script = self.slurm_bin / tool
            script.write_text(
                f"#!/bin/sh\n# {tool} of the Slurm {self.slurm_version} dev cluster in "
                f"{self.root}\n"
                f'if [ -e {CHROOT_MARK} ]; then exec /usr/bin/{tool} "$@"; fi\n'
                f'{enter} /usr/bin/{tool} "$@"\n')
            script.chmod(0o755)

    def slurm_conf(self, accounting: bool | None = None) -> str:
        r = self.root
        accounting = self.accounting if accounting is None else accounting
        lines = [
            "# Written by airlock.dev.cluster: a throwaway test cluster on one machine, "
            f"Slurm {self.variant}.",
            "ClusterName=airlockdev",
            "SlurmctldHost=localhost",
            f"SlurmctldPort={self.ctld_port}",
            "SlurmUser=root",
            "SlurmdUser=root",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            # cred_expire is also how long a requeued job waits before it may start again
            # (120 s by default): a job the prolog refused runs 20 s later here.
            f"AuthInfo=socket={self.munge_socket},cred_expire=20",
            f"StateSaveLocation={r}/state",
            f"SlurmdSpoolDir={r}/spool/%n",
            f"SlurmctldPidFile={r}/run/slurmctld.pid",
            f"SlurmdPidFile={r}/run/slurmd-%n.pid",
            f"SlurmctldLogFile={r}/log/slurmctld.log",
            f"SlurmdLogFile={r}/log/slurmd-%n.log",
            "SlurmctldDebug=info",
            "SlurmdDebug=info",
            "ProctrackType=proctrack/pgid",
            "TaskPlugin=task/none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_CPU",
            "SchedulerType=sched/backfill",
            # A job whose prolog refuses it is requeued, never held: Airlock's prolog refuses
            # jobs while a node proves itself, and they must run elsewhere or later on their own.
            "SchedulerParameters=nohold_on_prolog_fail",
            "ReturnToService=2",
            "MpiDefault=none",
            "MailProg=/bin/true",
            "JobCompType=jobcomp/none",
            *(["AccountingStorageType=accounting_storage/slurmdbd",
               "AccountingStorageHost=localhost", f"AccountingStoragePort={self.dbd_port}"]
              if accounting else ["AccountingStorageType=accounting_storage/none"]),
            "InactiveLimit=0",
            "KillWait=2",
            "MinJobAge=600",  # tests and the demo read finished jobs back
            "SlurmdTimeout=30",
            "SlurmctldTimeout=30",
            "ResumeTimeout=60",
            "TreeWidth=65533",
            f"MaxNodeCount={max(64, len(self.all_nodes))}",
            f"HealthCheckProgram={r}/bin/healthcheck",
            # what `airlock render slurm-conf` renders for this version and interval
            *(f"{k}={v}" for k, v in render.healthcheck_settings(
                parse_version(self.slurm_version), self.health_interval).items()),
            f"RebootProgram={r}/bin/reboot",
            f"Prolog={r}/bin/prolog",
            f"Epilog={r}/bin/epilog",
            "PrologEpilogTimeout=60",
        ]
        if self.cloud:
            # Power saving: slurmctld runs these with a hostlist expression of node names.
            lines += [
                f"SuspendProgram={r}/bin/suspend",
                f"ResumeProgram={r}/bin/resume",
                f"SuspendTime={self.suspend_time}",
                f"SuspendTimeout={self.suspend_timeout}",
                "SuspendRate=0",
                "ResumeRate=0",
                # the power_save thread's default 10 s period would dominate a test's runtime
                "SlurmctldParameters=power_save_interval=1",
                # without it a powered-down cloud node is missing from scontrol's output, even
                # for root, and Airlock cannot follow it through a replacement
                "PrivateData=cloud",
            ]
            if self.nodes + self.future:
                lines.append(f"SuspendExcNodes={','.join(self.nodes + self.future)}")
        for n in self.all_nodes:
            feats = ",".join(self.features.get(n, ["gpu"]))
            state = "FUTURE" if n in self.future else "CLOUD" if n in self.cloud else "UNKNOWN"
            lines.append(
                f"NodeName={n} NodeHostname=localhost NodeAddr=127.0.0.1 Port={self.ports[n]} "
                f"CPUs=1 RealMemory=1000 Features={feats} State={state}"
            )
        lines.append("PartitionName=main Nodes=ALL Default=YES MaxTime=INFINITE State=UP")
        for part, members in self.partitions.items():
            lines.append(
                f"PartitionName={part} Nodes={','.join(members)} MaxTime=INFINITE State=UP")
        return "\n".join(_override(lines, self.slurm_settings)) + "\n"

    def write_airlock_config(self) -> None:
        slurm: dict[str, Any] = {"conf": str(self.conf), "timeout": 15}
        if self.slurm_bin:
            slurm["bin_dir"] = str(self.slurm_bin)
        base: dict[str, Any] = {
            "state_dir": f"{self.root}/airlock/state/{{node}}",
            "log_dir": f"{self.root}/airlock/log/{{node}}",
            "shared_dir": f"{self.root}/airlock/shared",
            "slurm": slurm,
            "nvml": {"simulate": str(self.sim_file)},
            "registration": {"suite_timeout": 240},
        }
        for key, value in self.airlock_extra.items():
            if isinstance(value, dict) and isinstance(base.get(key), dict):
                base[key] = {**base[key], **value}
            else:
                base[key] = value
        self.set_airlock_config(tomli_w.dumps(base))

    def set_airlock_config(self, text: str) -> None:
        """Replace airlock.toml as config management should: atomically. A hook that reads a
        file being rewritten in place sees the keys written so far, and the defaults of the
        rest (another state_dir among them)."""
        atomic_write_text(self.airlock_conf, text)

    # --- the simulated hardware ----------------------------------------------------------------
    def read_sim(self) -> dict[str, Any]:
        return json.loads(self.sim_file.read_text())["nodes"]

    def write_sim(self, nodes: dict[str, Any]) -> None:
        tmp = self.sim_file.with_suffix(".tmp")
        tmp.write_text(json.dumps({"nodes": nodes}, indent=1))
        os.replace(tmp, self.sim_file)

    def set_node_sim(self, node: str, **values: Any) -> None:
        nodes = self.read_sim()
        nodes.setdefault(node, sim_node(self.gpus_per_node)).update(values)
        self.write_sim(nodes)

    # --- a chrooted version's mount namespace --------------------------------------------------
    def _start_namespace(self) -> None:
        """One process, `sleep infinity` in a new private mount namespace, holds the mounts the
        chrooted daemons and clients run in; they all enter it (nsenter) and the chroot."""
        if not (self.chroot / CHROOT_MARK.lstrip("/")).exists():
            raise RuntimeError(f"no Slurm {self.slurm_version} chroot at {self.chroot}: run "
                               f"bash scripts/slurm-chroot.sh {SUITES[self.slurm_version]}")
        fs, ovl, ready = self.fs, self.root / "run" / "overlay", self.root / "run" / "ns.ready"
        for d in (fs, ovl):
            d.mkdir(parents=True, exist_ok=True)
        ready.unlink(missing_ok=True)
        q = shlex.quote
        rw = ["/tmp"] if str(self.root).startswith("/tmp/") else ["/tmp", str(self.root)]
        lines = [
            # the shared chroot stays untouched: every write in there goes to this tmpfs
            f"mount -t tmpfs -o mode=0755 airlock-overlay {q(str(ovl))}",
            f"mkdir {q(str(ovl / 'upper'))} {q(str(ovl / 'work'))}",
            f"mount -t overlay airlock-chroot -o lowerdir={q(str(self.chroot))},"
            f"upperdir={q(str(ovl / 'upper'))},workdir={q(str(ovl / 'work'))} {q(str(fs))}",
            f"mount -t proc proc {q(str(fs / 'proc'))}",
            f"mount -t sysfs sysfs {q(str(fs / 'sys'))}",
            f"mount --rbind /dev {q(str(fs / 'dev'))}",
            f"mount -t tmpfs -o mode=0755 airlock-run {q(str(fs / 'run'))}",
            # 24.11+ resolves SlurmctldHost=localhost to this machine's name
            f"printf '127.0.0.1 localhost %s\\n' {q(socket.gethostname())} "
            f"> {q(str(fs / 'etc/hosts'))}",
        ]
        for path in rw:
            lines += [f"mkdir -p {q(str(fs) + path)}",
                      f"mount --bind {q(path)} {q(str(fs) + path)}"]
        venv = [] if self.python == sys.executable else \
            [os.path.realpath(Path(self.python).parents[1])]
        for path in _minimal([*python_paths(), *(v for v in venv if not v.startswith("/tmp/"))]):
            dst = q(str(fs) + path)
            make = f"mkdir -p {dst}" if os.path.isdir(path) else \
                f"mkdir -p {q(str(fs) + os.path.dirname(path))} && touch {dst}"
            lines += [make, f"mount --bind {q(path)} {dst}", f"mount -o remount,bind,ro {dst}"]
        lines += [f"touch {q(str(ready))}", "exec sleep infinity"]
        pid = self._spawn(["unshare", "--mount", "--propagation", "private", "--", "sh", "-ec",
                           "\n".join(lines)], "namespace", resolve=True)
        self.ns_pid_file.write_text(f"{pid}\n")
        self._wait(lambda: ready.exists() or not _alive(pid), 30, "the chroot's mounts")
        if not ready.exists():
            log = (self.root / "log" / "namespace.out").read_text(errors="replace").strip()
            raise RuntimeError(f"mounting the chroot failed: {log.splitlines()[-1:]}")
        self._ns = _mount_ns(pid)  # read once unshare has made it, for leftover_mounts()

    def _ns_pid(self) -> int:
        try:
            return int(self.ns_pid_file.read_text())
        except (OSError, ValueError):
            return 0

    def _enter(self) -> list[str]:
        """The argv prefix that runs a program in this cluster's world from where we are."""
        if not self.chrooted or in_chroot():
            return []
        return [_host_tool("nsenter"), f"--target={self._ns_pid()}", "--mount", "--",
                _host_tool("chroot"), str(self.fs)]

    # --- daemons ---------------------------------------------------------------------------------
    def start(self, wait: bool = True) -> DevCluster:
        self.write_files()
        self._started = True
        if self.chrooted and not in_chroot():
            self._start_namespace()
        self._spawn(
            ["munged", "--foreground", "--force", f"--key-file={self.root}/munge/munge.key",
             f"--socket={self.munge_socket}", f"--pid-file={self.root}/munge/run/munged.pid",
             f"--log-file={self.root}/log/munged.log", f"--seed-file={self.root}/munge/lib/seed"],
            "munged",
        )
        self._wait(lambda: self.munge_socket.exists(), 10, "munged socket")
        if self.accounting:
            self._seed_accounting()
        self._spawn(["slurmctld", "-D", "-i", "-f", str(self.conf)], "slurmctld")
        self._wait(self._ctld_up, 30, "slurmctld answering")
        for n in self.nodes:
            self.start_node(n, wait=False)
        if wait:
            self.wait_nodes_registered(self.nodes, 60)
        return self

    def controller_pid(self) -> int | None:
        for pid in _pids_with_marker(str(self.root)):
            cmd = _cmdline(pid)
            if cmd and Path(cmd[0]).name == "slurmctld":
                return pid
        return None

    def stop_controller(self, timeout: float = 15) -> None:
        """slurmctld goes away (a controller restart, an outage); its state stays on disk."""
        _terminate(self.controller_pid(), timeout)

    def start_controller(self, wait: bool = True) -> None:
        """slurmctld comes back with the state it saved (jobs, node reasons)."""
        self._spawn(["slurmctld", "-D", "-i", "-f", str(self.conf)], "slurmctld")
        if wait:
            self._wait(self._ctld_up, 30, "slurmctld answering")

    def _seed_accounting(self) -> None:
        """24.11's slurmctld refuses its first start while slurmdbd is down, but one that has
        started before (its cluster id is in StateSaveLocation) starts without it. So: one start
        without accounting, keeping only that bootstrap state, then the accounting config."""
        self.conf.write_text(self.slurm_conf(accounting=False))
        pid = self._spawn(["slurmctld", "-D", "-i", "-f", str(self.conf)], "slurmctld-seed")
        self._wait(self._ctld_up, 30, "slurmctld (accounting seed) answering")
        _kill(pid, signal.SIGTERM)
        self._wait(lambda: not _alive(pid), 15, "slurmctld (accounting seed) to exit")
        for f in (self.root / "state").iterdir():
            if f.name.startswith(("node_state", "job_state", "part_state", "resv_state",
                                  "trigger_state", "last_config_lite")):
                f.unlink()
        self.conf.write_text(self.slurm_conf())

    def _ctld_up(self) -> bool:
        try:
            self.slurm.scontrol("ping", timeout=5)
            return True
        except Exception:
            return False

    def _spawn(self, argv: list[str], log: str, prefix: list[str] | None = None,
               resolve: bool = False) -> int:
        """Start argv[0] (a daemon name) of this cluster's version in its own session."""
        if self.chrooted and not in_chroot() and not resolve:
            exe = next((f"/usr/{d}/{argv[0]}" for d in ("sbin", "bin")
                        if (self.chroot / "usr" / d / argv[0]).exists()), None)
            full = [*self._enter(), *(prefix or []), exe or argv[0], *argv[1:]]
        else:
            exe = shutil.which(argv[0], path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin")
            full = [*(prefix or []), exe or argv[0], *argv[1:]]
        if exe is None:
            where = f"the chroot {self.chroot}" if self.chrooted and not in_chroot() else "PATH"
            raise RuntimeError(f"{argv[0]} not found in {where}: install munge, slurmctld and "
                               "slurmd (scripts/setup.sh)")
        with open(self.root / "log" / f"{log}.out", "ab") as out:
            proc = subprocess.Popen(full, stdout=out, stderr=out, stdin=subprocess.DEVNULL,
                                    env=self.env(), start_new_session=True)
        (self.root / "run" / f"{log}.spawned").write_text(str(proc.pid))
        return proc.pid

    def _fresh_boot(self, name: str) -> list[str]:
        """The argv prefix of a machine that just booted: a new time namespace whose boot clock
        starts now, and a private mount namespace in which /proc/sys/kernel/random/boot_id is a
        new random UUID. Both hold for slurmd and everything it starts (hooks, suites, jobs).
        Inside the chroot of a chrooted version (its unshare, mount and sh), so the bind lands
        on its /proc."""
        boot_id = self.root / "run" / f"boot_id-{name}"
        boot_id.write_text(f"{uuid.uuid4()}\n")
        return ["/usr/bin/unshare", "--time", "--mount", "--propagation", "private", "--fork",
                f"--boottime=-{int(host_uptime()) - 1}", "/bin/sh", "-c",
                'mount --bind "$0" /proc/sys/kernel/random/boot_id && exec "$@"', str(boot_id)]

    def start_node(self, name: str, wait: bool = True, fresh_boot: bool = False) -> None:
        prefix = self._fresh_boot(name) if fresh_boot else None
        self._spawn(["slurmd", "-D", "-N", name, "-f", str(self.conf)], f"slurmd-{name}", prefix)
        if wait:
            self.wait_nodes_registered([name], 60)

    def slurmd_pid(self, name: str) -> int | None:
        for pid in _pids_with_marker(str(self.root)):
            cmd = _cmdline(pid)
            if cmd and Path(cmd[0]).name == "slurmd" and "-N" in cmd \
                    and cmd[cmd.index("-N") + 1:cmd.index("-N") + 2] == [name]:
                return pid
        return None

    def stop_node(self, name: str, timeout: float = 10) -> None:
        _terminate(self.slurmd_pid(name), timeout)

    def kill_node_processes(self, name: str) -> list[int]:
        """Kill what Airlock left running for one node (its registration suite and checks),
        as a reboot or a replaced instance would; return the PIDs."""
        killed = []
        for pid in _pids_with_marker(str(self.root)):
            cmd = _cmdline(pid)
            if "--node" in cmd and cmd[cmd.index("--node") + 1:cmd.index("--node") + 2] == [name] \
                    and any("airlock" in part for part in cmd):
                _kill(pid, signal.SIGKILL)
                killed.append(pid)
        return killed

    def release_instance(self, name: str) -> None:
        """A cloud node's instance goes away: slurmd and Airlock's processes end, and its
        simulated GPUs become what a new instance will have (healthy unless the image says)."""
        self.stop_node(name)
        self.kill_node_processes(name)
        image = json.loads(self.image_file.read_text()) if self.image_file.exists() else {}
        if name in image:
            nodes = self.read_sim()
            nodes[name] = image[name]
            self.write_sim(nodes)

    def restart_node(self, name: str, fresh_boot: bool = True, wait: bool = True) -> None:
        self.stop_node(name)
        self.start_node(name, wait=wait, fresh_boot=fresh_boot)

    def wait_nodes_registered(self, names: Iterable[str], timeout: float) -> None:
        names = list(names)

        def registered() -> bool:
            nodes = {n.name: n for n in self.slurm.nodes(names)}
            return all(nodes[n].slurmd_start_time and nodes[n].responding for n in names)

        self._wait(registered, timeout, f"nodes {','.join(names)} registered")

    def members(self) -> list[int]:
        """Every live process of this cluster: those carrying the marker, and every process in
        a mount namespace one of them was seen in (a chroot's, a fresh boot's). 24.11+'s
        slurmstepd overwrites its environment with its process title, marker included."""
        me = os.getpid()
        marked = set(_pids_with_marker(str(self.root)))
        host = _mount_ns(me)
        for pid in marked:
            ns = _mount_ns(pid)
            if ns and ns != host:
                self._seen_ns.add(ns)
        if self._ns:
            self._seen_ns.add(self._ns)
        if self._seen_ns:
            # A namespace id is an inode number the kernel reuses once the namespace is gone,
            # so one we saw can be another cluster's now: its marked processes are never ours,
            # and an id with nobody left in it is forgotten before it can be reused.
            in_seen = [p for p in _all_pids() if _mount_ns(p) in self._seen_ns]
            marked.update(p for p in in_seen if not _foreign(p, str(self.root)))
            held = {_mount_ns(p) for p in in_seen}
            self._seen_ns = {ns for ns in self._seen_ns if ns in held or ns == self._ns}
        marked.discard(me)
        return sorted(p for p in marked if _alive(p))

    def stop(self) -> list[int]:
        """Stop everything this cluster started, by PID; return the PIDs that had to be killed.
        The namespace holder goes last: with it and the daemons gone, so are the mounts."""
        if not self._started:
            return []
        holder = self._ns_pid() if self.chrooted else 0

        def ours() -> list[int]:
            return [p for p in self.members() if p != holder]

        killed = []
        order = ("slurmd", "slurmstepd", "slurmctld", "munged")
        for name in order:
            for pid in ours():
                cmd = _cmdline(pid)
                if cmd and name in Path(cmd[0]).name:
                    _kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and ours():
            time.sleep(0.1)
        # Jobs' processes and detached suites do not go with the daemons; they get a moment
        # to exit cleanly, then SIGKILL.
        for pid in ours():
            _kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 2
        while time.monotonic() < deadline and ours():
            time.sleep(0.1)
        for pid in ours():
            _kill(pid, signal.SIGKILL)
            killed.append(pid)
        # A RebootProgram helper sleeping through the above (the "machine" is off for a moment)
        # may have started its node since: kill until nothing of the cluster is left.
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and (late := ours()):
            for pid in late:
                _kill(pid, signal.SIGKILL)
                killed.append(pid)
            time.sleep(0.1)
        if holder and holder in self.members():
            _kill(holder, signal.SIGKILL)  # sleep holds nothing but the namespace
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and self.members():
            time.sleep(0.05)
        self._started = False
        return killed

    def leftovers(self) -> list[int]:
        return self.members()

    def leftover_mounts(self) -> list[str]:
        """Mounts of this cluster still alive: any on the host under its root or the chroot
        (there should never be one), and its namespaces while a process still holds one."""
        prefixes = (f"{self.root}/", *((f"{self.chroot}/",) if self.chrooted else ()))
        left = [m for m in _host_mounts()
                if m == str(self.root) or m.startswith(prefixes)]
        for ns in sorted(self._seen_ns | ({self._ns} if self._ns else set())):
            left += [f"{ns} held by pid {p} ({' '.join(_cmdline(p))[:80]})"
                     for p in _pids_in_mount_ns(ns) if not _foreign(p, str(self.root))]
        return left

    # --- using it ----------------------------------------------------------------------------
    def node(self, name: str) -> Node:
        return self.slurm.node(name)

    def client(self, tool: str) -> str:
        """The path of a Slurm client command that talks to this cluster."""
        if self.slurm_bin:
            return str(self.slurm_bin / tool)
        return self.slurm.binary(tool)

    def run(self, argv: list[str], timeout: float = 30, check: bool = True) -> str:
        if argv and argv[0] in CLIENTS:
            argv = [self.client(argv[0]), *argv[1:]]
        proc = subprocess.run(argv, env=self.env(), capture_output=True, text=True,
                              timeout=timeout, stdin=subprocess.DEVNULL)
        if check and proc.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)}: exit {proc.returncode}: {proc.stderr.strip()}")
        return proc.stdout

    def sbatch(self, script: str = "hostname", *args: str) -> int:
        out = self.run(["sbatch", "--parsable", "-o", f"{self.root}/jobs/%j.out", *args,
                        "--wrap", script])
        return int(out.strip().split(";")[0])

    def job(self, job_id: int) -> dict[str, str]:
        out = self.run(["scontrol", "-o", "show", "job", str(job_id)], check=False)
        fields = {}
        for tok in out.split():
            k, _, v = tok.partition("=")
            fields.setdefault(k, v)
        return fields

    def wait(self, predicate: Callable[[], Any], timeout: float, what: str) -> Any:
        return self._wait(predicate, timeout, what)

    def _wait(self, predicate: Callable[[], Any], timeout: float, what: str) -> Any:
        deadline = time.monotonic() + timeout
        last_exc = None
        while time.monotonic() < deadline:
            try:
                value = predicate()
                if value:
                    return value
            except Exception as exc:  # the daemons are still coming up
                last_exc = exc
            time.sleep(0.2)
        raise TimeoutError(f"timed out after {timeout:g} s waiting for {what}"
                           + (f" (last error: {last_exc})" if last_exc else ""))

    @classmethod
    def attach(cls, root: str | os.PathLike) -> DevCluster:
        """A handle on a running dev cluster, rebuilt from its files (for helper processes)."""
        self = cls.__new__(cls)
        self.root = Path(root).resolve()
        try:
            meta = json.loads((self.root / "cluster.json").read_text())
        except (OSError, ValueError):
            meta = {}
        self._setup(meta.get("slurm_version", "22.05"), bool(meta.get("accounting")),
                    meta.get("chroot") or None)
        self._started = True
        return self

    def __enter__(self) -> DevCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _override(lines: list[str], settings: dict[str, str]) -> list[str]:
    """slurm.conf lines with each key of settings set to its value (keys compared as Slurm
    does, without case): the line of that key replaced, or one added before the nodes; a value
    of None removes the key's line."""
    wanted = {k.lower(): f"{k}={v}" for k, v in settings.items() if v is not None}
    dropped = {k.lower() for k, v in settings.items() if v is None}
    out, done = [], set()
    for line in lines:
        key = line.split("=", 1)[0].lower()
        if key in dropped:
            continue
        if key in wanted and key not in ("nodename", "partitionname"):
            if key not in done:
                out.append(wanted[key])
                done.add(key)
            continue
        if key == "nodename" and len(done) < len(wanted):
            out += [v for k, v in wanted.items() if k not in done]
            done.update(wanted)
        out.append(line)
    return out + [v for k, v in wanted.items() if k not in done]


def _host_tool(name: str) -> str:
    return shutil.which(name, path="/usr/bin:/usr/sbin:/bin:/sbin") or name


def _host_mounts() -> list[str]:
    try:
        with open("/proc/self/mountinfo") as fh:
            # field 5 is the mount point, with spaces etc. as octal escapes
            return [line.split()[4].encode().decode("unicode_escape") for line in fh]
    except OSError:
        return []


def _mount_ns(pid: int) -> str:
    if pid <= 0:
        return ""
    try:
        return os.readlink(f"/proc/{pid}/ns/mnt")
    except OSError:
        return ""


def _all_pids() -> list[int]:
    return [int(e) for e in os.listdir("/proc") if e.isdigit()]


def _pids_in_mount_ns(ns: str) -> list[int]:
    return [p for p in _all_pids() if _mount_ns(p) == ns and _alive(p)]


def pid_is_ours(pid: int, root: str) -> bool:
    return pid in _pids_with_marker(root)


def _foreign(pid: int, root: str) -> bool:
    """Whether a process carries another dev cluster's marker (so is that cluster's)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as fh:
            env = fh.read().split(b"\0")
    except OSError:
        return False
    prefix = f"{MARKER}=".encode()
    return any(e.startswith(prefix) and e != prefix + root.encode() for e in env)


def _pids_with_marker(root: str) -> list[int]:
    needle = f"{MARKER}={root}".encode()
    me = os.getpid()
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as fh:
                env = fh.read()
        except OSError:
            continue
        if (needle + b"\0" in env or env.endswith(needle)) and _alive(int(entry)):
            pids.append(int(entry))
    return pids


def _cmdline(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return [a.decode(errors="replace") for a in fh.read().split(b"\0") if a]
    except OSError:
        return []


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _terminate(pid: int | None, timeout: float) -> None:
    """SIGTERM, then SIGKILL after timeout seconds (a daemon's orderly stop, then its end)."""
    if pid is None:
        return
    _kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    if _alive(pid):
        _kill(pid, signal.SIGKILL)


def _kill(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def reboot_program(args: list[str] | None = None) -> int:
    """RebootProgram for the dev cluster: restart each node as a freshly booted one.

    On a node (the default) Slurm runs RebootProgram with no arguments and no node name, so the
    node is found by walking up to the slurmd that started us. On the controller (26.05's
    SlurmctldParameters=reboot_from_controller, or a PowerAction with Location=slurmctld) it
    gets the node list as its first argument. The restart happens from a detached child:
    a node-side caller dies with its slurmd, a controller-side one must return at once.
    Every call is logged with its nodes and where it ran (log/reboot.out).
    """
    args = list(args or [])
    root = os.environ.get(MARKER)
    if args:
        names, where = expand(args[0]), "slurmctld"
    else:
        pid, names, where = os.getppid(), [], "slurmd"
        while pid > 1:
            cmd = _cmdline(pid)
            if cmd and Path(cmd[0]).name == "slurmd" and "-N" in cmd:
                names = [cmd[cmd.index("-N") + 1]]
                break
            pid = _ppid(pid)
    if not names or not root:
        print("airlock dev cluster reboot: not called from a dev-cluster slurmd or slurmctld "
              "with a node list", file=sys.stderr)
        return 1
    print(f"{time.time():.3f} reboot-program from {where}: {','.join(names)}", flush=True)
    if os.fork() == 0:
        os.setsid()
        # slurmctld runs its programs with most signals blocked; slurmd would inherit that
        signal.pthread_sigmask(signal.SIG_SETMASK, set())
        cluster = DevCluster.attach(root)
        for name in names:
            cluster.stop_node(name)
            cluster.kill_node_processes(name)  # a real reboot ends everything that ran there
        # slurmctld completes a reboot only when the node reports a boot time no earlier than
        # the (whole-second) time the reboot was issued; the fresh boot clock starts about 1-2 s
        # in the past, so the "machine" stays off for a moment, as a real one would.
        time.sleep(REBOOT_OFF_S)
        for name in names:
            cluster.start_node(name, wait=False, fresh_boot=True)
        os._exit(0)
    return 0


def power_program(verb: str, args: list[str]) -> int:
    """SuspendProgram / ResumeProgram for the dev cluster's cloud nodes.

    slurmctld passes one hostlist expression of node names. Suspend releases each instance
    before returning. Resume must return quickly, so a detached child boots the new instances
    (a fresh boot clock, as a new machine) while this process exits.
    """
    root = os.environ.get(MARKER)
    if not root or len(args) != 1:
        print(f"airlock dev cluster {verb}: expected one node list from a dev-cluster slurmctld",
              file=sys.stderr)
        return 1
    names = expand(args[0])
    cluster = DevCluster.attach(root)
    if verb == "suspend":
        for name in names:
            cluster.release_instance(name)
        return 0
    if os.fork() == 0:
        os.setsid()
        # slurmctld runs us with most signals blocked; slurmd would inherit that and ignore
        # SIGTERM, so the next SuspendProgram could not stop it
        signal.pthread_sigmask(signal.SIG_SETMASK, set())
        time.sleep(POWER_ON_S)
        for name in names:
            cluster.start_node(name, wait=False, fresh_boot=True)
        os._exit(0)
    return 0


def _ppid(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return int(fh.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return 1




if __name__ == "__main__":
    if sys.argv[1:2] == ["reboot-program"]:
        sys.exit(reboot_program(sys.argv[2:]))
    if sys.argv[1:2] in (["suspend-program"], ["resume-program"]):
        sys.exit(power_program(sys.argv[1].split("-")[0], sys.argv[2:]))
    print("usage: python -m airlock.dev.cluster reboot-program [NODES]|suspend-program NODES|"
          "resume-program NODES", file=sys.stderr)
    sys.exit(2)
