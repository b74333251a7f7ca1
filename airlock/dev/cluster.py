"""A real Slurm cluster on one machine: munged, slurmctld and several slurmd, all in one directory.

Used by the integration tests and by `airlock demo`. Debian's slurmd supports several daemons per
host (`slurmd -N name`), each on its own port; every daemon and file lives under `root`, nothing
touches /etc. Every process started here carries AIRLOCK_DEVCLUSTER=<root> in its environment,
which is how stop() finds and kills leftovers (slurmstepd outlives a killed slurmd, and so do
Airlock's detached suites) without touching anything else on the machine.

Cloud nodes (`cloud=[...]`) are declared State=CLOUD with power saving on: they start powered
down; the ResumeProgram starts a node's slurmd as a freshly booted new instance and the
SuspendProgram releases it (slurmd stopped, its Airlock processes killed, its simulated GPUs
back to the healthy image a new instance gets).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import tomli_w

from airlock.slurm import Node, Slurm, expand

MARKER = "AIRLOCK_DEVCLUSTER"
REBOOT_OFF_S = 3.0  # how long the RebootProgram's "machine" stays off
# How long a new cloud instance takes to boot before its slurmd starts. slurmctld ignores a
# powering-up node's registration while its (whole-second) boot time is older than the power-up;
# the fresh boot clock starts 1-2 s in the past and slurmd rounds its uptime, hence 4 s.
POWER_ON_S = 4.0


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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
    ):
        self.root = Path(root).resolve()
        self.nodes = list(nodes)
        self.future = list(future)
        self.gpus_per_node = gpus_per_node
        self.health_interval = health_interval
        self.airlock_extra = airlock or {}
        self.partitions = partitions or {}
        self.features = features or {}
        self.cloud = list(cloud)
        # Long by default: an idle cloud node must not power down on its own during a test.
        self.suspend_time = suspend_time
        self.suspend_timeout = suspend_timeout
        self.ports = {n: free_port() for n in self.all_nodes}
        self.ctld_port = free_port()
        self.conf = self.root / "slurm.conf"
        self.airlock_conf = self.root / "airlock.toml"
        self.sim_file = self.root / "gpus.json"
        self.image_file = self.root / "cloud-image.json"
        self.munge_socket = self.root / "munge" / "run" / "munge.socket"
        self.slurm = Slurm(conf=str(self.conf), timeout=15)
        self._started = False

    @property
    def all_nodes(self) -> list[str]:
        return self.nodes + self.future + self.cloud

    # --- layout ------------------------------------------------------------------------------
    def env(self, **extra: str) -> dict[str, str]:
        env = dict(os.environ)
        env.update(SLURM_CONF=str(self.conf), AIRLOCK_CONFIG=str(self.airlock_conf))
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
        self._write_hooks()
        self.conf.write_text(self.slurm_conf())
        self.write_airlock_config()
        if not self.sim_file.exists():
            self.write_sim({n: {"gpus": healthy_gpus(self.gpus_per_node)} for n in self.all_nodes})
        if self.cloud and not self.image_file.exists():
            # What a new instance of each cloud node looks like (the SuspendProgram restores it).
            self.image_file.write_text(json.dumps(
                {n: {"gpus": healthy_gpus(self.gpus_per_node)} for n in self.cloud}, indent=1))

    def _write_hooks(self) -> None:
        py = sys.executable
        # Slurm gives these programs almost no environment and no arguments; a site points
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
            extra = f" {name}-program" if target == "airlock.dev.cluster" else ""
            # slurmctld runs the power programs with every descriptor closed: keep their words
            log = f"exec >>{self.root}/log/{name}.out 2>&1\n" if name in ("suspend", "resume") \
                else ""
            script.write_text(
                textwrap.dedent(f"""\
                #!/bin/sh
                export AIRLOCK_CONFIG={self.airlock_conf}
                export SLURM_CONF={self.conf}
                export AIRLOCK_RUNTIME_DIR={self.root}/run/airlock
                export {MARKER}={self.root}
                """) + log + f'exec {py} -m {target}{extra} "$@"\n'
            )
            script.chmod(0o755)

    def slurm_conf(self) -> str:
        r = self.root
        lines = [
            "# Written by airlock.dev.cluster: a throwaway test cluster on one machine.",
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
            "AccountingStorageType=accounting_storage/none",
            "InactiveLimit=0",
            "KillWait=2",
            "MinJobAge=600",  # tests and the demo read finished jobs back
            "SlurmdTimeout=30",
            "SlurmctldTimeout=30",
            "ResumeTimeout=60",
            "TreeWidth=65533",
            "MaxNodeCount=64",
            f"HealthCheckProgram={r}/bin/healthcheck",
            f"HealthCheckInterval={self.health_interval}",
            "HealthCheckNodeState=ANY",
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
        return "\n".join(lines) + "\n"

    def write_airlock_config(self) -> None:
        base: dict[str, Any] = {
            "state_dir": f"{self.root}/airlock/state/{{node}}",
            "log_dir": f"{self.root}/airlock/log/{{node}}",
            "shared_dir": f"{self.root}/airlock/shared",
            "slurm": {"conf": str(self.conf), "timeout": 15},
            "nvml": {"simulate": str(self.sim_file)},
            "registration": {"suite_timeout": 240},
        }
        for key, value in self.airlock_extra.items():
            if isinstance(value, dict) and isinstance(base.get(key), dict):
                base[key] = {**base[key], **value}
            else:
                base[key] = value
        self.airlock_conf.write_text(tomli_w.dumps(base))

    # --- the simulated hardware ----------------------------------------------------------------
    def read_sim(self) -> dict[str, Any]:
        return json.loads(self.sim_file.read_text())["nodes"]

    def write_sim(self, nodes: dict[str, Any]) -> None:
        tmp = self.sim_file.with_suffix(".tmp")
        tmp.write_text(json.dumps({"nodes": nodes}, indent=1))
        os.replace(tmp, self.sim_file)

    def set_node_sim(self, node: str, **values: Any) -> None:
        nodes = self.read_sim()
        nodes.setdefault(node, {"gpus": healthy_gpus(self.gpus_per_node)}).update(values)
        self.write_sim(nodes)

    # --- daemons ---------------------------------------------------------------------------------
    def start(self, wait: bool = True) -> DevCluster:
        self.write_files()
        self._started = True
        self._spawn(
            ["munged", "--foreground", "--force", f"--key-file={self.root}/munge/munge.key",
             f"--socket={self.munge_socket}", f"--pid-file={self.root}/munge/run/munged.pid",
             f"--log-file={self.root}/log/munged.log", f"--seed-file={self.root}/munge/lib/seed"],
            "munged",
        )
        self._wait(lambda: self.munge_socket.exists(), 10, "munged socket")
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
        pid = self.controller_pid()
        if pid is None:
            return
        _kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        if _alive(pid):
            _kill(pid, signal.SIGKILL)

    def start_controller(self, wait: bool = True) -> None:
        """slurmctld comes back with the state it saved (jobs, node reasons)."""
        self._spawn(["slurmctld", "-D", "-i", "-f", str(self.conf)], "slurmctld")
        if wait:
            self._wait(self._ctld_up, 30, "slurmctld answering")

    def _ctld_up(self) -> bool:
        try:
            self.slurm.scontrol("ping", timeout=5)
            return True
        except Exception:
            return False

    def _spawn(self, argv: list[str], log: str, prefix: list[str] | None = None) -> int:
        exe = shutil.which(argv[0], path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin")
        if exe is None:
            raise RuntimeError(f"{argv[0]} not found: install munge, slurmctld and slurmd")
        with open(self.root / "log" / f"{log}.out", "ab") as out:
            proc = subprocess.Popen([*(prefix or []), exe, *argv[1:]], stdout=out, stderr=out,
                                    stdin=subprocess.DEVNULL, env=self.env(),
                                    start_new_session=True)
        (self.root / "run" / f"{log}.spawned").write_text(str(proc.pid))
        return proc.pid

    def start_node(self, name: str, wait: bool = True, fresh_boot: bool = False) -> None:
        prefix = None
        if fresh_boot:
            # A new time namespace whose boot clock starts now: slurmd and the hook both see a
            # machine that just booted, exactly as after a real reboot.
            uptime = float(Path("/proc/uptime").read_text().split()[0])
            prefix = ["unshare", "--time", "--fork", f"--boottime=-{int(uptime) - 1}"]
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
        pid = self.slurmd_pid(name)
        if pid is None:
            return
        _kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        if _alive(pid):
            _kill(pid, signal.SIGKILL)

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

    def stop(self) -> list[int]:
        """Stop everything this cluster started, by PID; return the PIDs that had to be killed."""
        if not self._started:
            return []
        killed = []
        order = ("slurmd", "slurmstepd", "slurmctld", "munged")
        for name in order:
            for pid in _pids_with_marker(str(self.root)):
                cmd = _cmdline(pid)
                if cmd and name in Path(cmd[0]).name:
                    _kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and _pids_with_marker(str(self.root)):
            time.sleep(0.1)
        # Jobs' processes and detached suites do not go with the daemons; they get a moment
        # to exit cleanly, then SIGKILL.
        for pid in _pids_with_marker(str(self.root)):
            _kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 2
        while time.monotonic() < deadline and _pids_with_marker(str(self.root)):
            time.sleep(0.1)
        for pid in _pids_with_marker(str(self.root)):
            _kill(pid, signal.SIGKILL)
            killed.append(pid)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and _pids_with_marker(str(self.root)):
            time.sleep(0.05)
        self._started = False
        return killed

    def leftovers(self) -> list[int]:
        return _pids_with_marker(str(self.root))

    # --- using it ----------------------------------------------------------------------------
    def node(self, name: str) -> Node:
        return self.slurm.node(name)

    def run(self, argv: list[str], timeout: float = 30, check: bool = True) -> str:
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
        self.conf = self.root / "slurm.conf"
        self.airlock_conf = self.root / "airlock.toml"
        self.sim_file = self.root / "gpus.json"
        self.image_file = self.root / "cloud-image.json"
        self.munge_socket = self.root / "munge" / "run" / "munge.socket"
        self.slurm = Slurm(conf=str(self.conf), timeout=15)
        self._started = True
        return self

    def __enter__(self) -> DevCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


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


def _kill(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def reboot_program() -> int:
    """RebootProgram for the dev cluster: restart the calling slurmd as a freshly booted node.

    Slurm runs RebootProgram with no arguments and no node name, so the node is found by walking
    up to the slurmd that started us. The restart happens from a detached child because this
    process dies with that slurmd.
    """
    pid = os.getppid()
    name = None
    while pid > 1:
        cmd = _cmdline(pid)
        if cmd and Path(cmd[0]).name == "slurmd" and "-N" in cmd:
            name = cmd[cmd.index("-N") + 1]
            break
        pid = _ppid(pid)
    root = os.environ.get(MARKER)
    if not name or not root:
        print("airlock dev cluster reboot: not called from a dev-cluster slurmd", file=sys.stderr)
        return 1
    if os.fork() == 0:
        os.setsid()
        cluster = DevCluster.attach(root)
        cluster.stop_node(name)
        cluster.kill_node_processes(name)  # a real reboot ends everything that ran on the node
        # slurmctld completes a reboot only when the node reports a boot time no earlier than
        # the (whole-second) time the reboot was issued; the fresh boot clock starts about 1-2 s
        # in the past, so the "machine" stays off for a moment, as a real one would.
        time.sleep(REBOOT_OFF_S)
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
        sys.exit(reboot_program())
    if sys.argv[1:2] in (["suspend-program"], ["resume-program"]):
        sys.exit(power_program(sys.argv[1].split("-")[0], sys.argv[2:]))
    print("usage: python -m airlock.dev.cluster reboot-program|suspend-program NODES|"
          "resume-program NODES", file=sys.stderr)
    sys.exit(2)
