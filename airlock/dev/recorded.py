"""A recorded cluster: what `airlock status` and `airlock serve` read, without daemons.

A folder with a stand-in `scontrol` that answers `scontrol -o [--future] show node [NODES]` from a
file of recorded `scontrol -o` lines (Slurm 22.05's format, tests/data/22.05), a shared results
directory holding run documents as the nodes write them (airlock.results), and an airlock.toml
that points at both. For the console's unit tests and bench/bench_serve.py (10,000 nodes of
recorded status); every test of Airlock against Slurm itself uses airlock.dev.cluster.

The stand-in answers nothing else: any other scontrol call (an update, a reservation) exits 1
with "not a real Slurm", so nothing can pretend to have changed a node.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

import tomli_w

from airlock.paths import SafeDir

LINE = ("NodeName={name} Arch=x86_64 CoresPerSocket=1 CPUAlloc={alloc} CPUEfctv=1 CPUTot=1 "
        "CPULoad=0.10 AvailableFeatures={features} ActiveFeatures={features} Gres=(null) "
        "NodeAddr=127.0.0.1 NodeHostName={name} Version=22.05.8 RealMemory=1000 AllocMem=0 "
        "FreeMem=900 Sockets=1 Boards=1 State={state} ThreadsPerCore=1 TmpDisk=0 Weight=1 "
        "Owner=N/A MCS_label=N/A Partitions={partitions} BootTime={boot} "
        "SlurmdStartTime={boot} LastBusyTime={boot} CfgTRES=cpu=1,mem=1000M,billing=1 "
        "AllocTRES= CapWatts=n/a CurrentWatts=0 AveWatts=0 ExtSensorsJoules=n/s "
        "ExtSensorsWatts=0 ExtSensorsTemp=n/s")

SCONTROL = '''#!{python}
# Stand-in scontrol of a recorded cluster (airlock/dev/recorded.py): answers `show node` only.
import sys
import hostlist
args = [a for a in sys.argv[1:] if a not in ("-o", "--oneliner", "--future")]
if "--json" in args:
    sys.stderr.write("scontrol: unrecognized option '--json'\\n")
    sys.exit(1)
if args[:2] != ["show", "node"]:
    sys.stderr.write("scontrol: not a real Slurm: only `show node` is answered here\\n")
    sys.exit(1)
lines = [l for l in open({nodes!r}).read().splitlines() if l.strip()]
if len(args) > 2:
    by = {{l.split(" ", 1)[0][len("NodeName="):]: l for l in lines}}
    want = hostlist.expand_hostlist(args[2])
    missing = [n for n in want if n not in by]
    if missing:
        sys.stderr.write("Node %s not found\\n" % missing[0])
        sys.exit(1)
    lines = [by[n] for n in want]
sys.stdout.write("\\n".join(lines) + "\\n")
'''


def slurm_time(epoch: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(epoch))


def node_line(name: str, state: str = "IDLE", reason: str = "", reason_user: str = "root",
              reason_at: float | None = None, partitions: tuple[str, ...] = ("main",),
              features: tuple[str, ...] = ("gpu",), busy: bool = False,
              boot: float | None = None) -> str:
    line = LINE.format(name=name, state=state, alloc=1 if busy else 0,
                       features=",".join(features) or "(null)",
                       partitions=",".join(partitions), boot=slurm_time(boot or time.time()
                                                                          - 86400))
    if reason:
        line += f" Reason={reason} [{reason_user}@{slurm_time(reason_at or time.time())}]"
    return line


def check(name: str, verdict: str = "pass", detail: str = "", **figures: Any) -> dict[str, Any]:
    return {"check": name, "verdict": verdict, "detail": detail, "figures": figures,
            "remediation": "", "duration_s": 0.5, "attempts": 1}


def run_doc(node: str, level: str = "standard", trigger: str = "new", verdict: str = "pass",
            finished_at: float | None = None, checks: list[dict[str, Any]] | None = None,
            profile: str = "cpu", duration_s: float = 30.0, seq: int = 0) -> dict[str, Any]:
    finished = finished_at or time.time()
    checks = checks if checks is not None else [check("gpu_count", found=8, expected=8)]
    failed = next((c for c in checks if c["verdict"] == "fail"), None)
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(finished))
    return {"schema": 1, "node": node, "run_id": f"{stamp}-{1000 + seq}-{node}", "level": level,
            "trigger": trigger, "started_at": finished - duration_s, "finished_at": finished,
            "duration_s": duration_s, "verdict": verdict,
            "failed_check": failed["check"] if failed else None,
            "detail": failed["detail"] if failed else "", "unseen": [], "profile": profile,
            "checks": checks}


class Recorded:
    """Build one: add_node() lines and add_run() documents, then write(); config is the path
    of its airlock.toml (extra tables given to write() are merged in)."""

    def __init__(self, root: str | os.PathLike):
        self.root = Path(root)
        self.lines: list[str] = []
        self.config = self.root / "airlock.toml"
        self.shared = self.root / "shared"
        self.bin = self.root / "bin"

    def add_node(self, name: str, **kw: Any) -> None:
        self.lines.append(node_line(name, **kw))

    def add_run(self, run: dict[str, Any], latest: bool = True) -> None:
        """A run as the node's finish pipeline stores its shared copy."""
        with SafeDir.open(self.shared, [run["node"]], create=True) as d:
            with d.sub("results", create=True) as folder:
                folder.write_json(f"{run['run_id']}.json", run)
            if latest:
                d.write_json("latest.json", run)

    def write(self, **extra: Any) -> Path:
        self.bin.mkdir(parents=True, exist_ok=True)
        self.shared.mkdir(parents=True, exist_ok=True)
        nodes = self.root / "nodes.txt"
        nodes.write_text("\n".join(self.lines) + "\n")
        script = self.bin / "scontrol"
        script.write_text(SCONTROL.format(python=sys.executable, nodes=str(nodes)))
        script.chmod(0o755)
        cfg: dict[str, Any] = {"state_dir": str(self.root / "state"),
                               "shared_dir": str(self.shared),
                               "slurm": {"bin_dir": str(self.bin), "timeout": 60},
                               "recovery": {"db": str(self.root / "recovery.db")}}
        for key, value in extra.items():
            cfg[key] = {**cfg.get(key, {}), **value} if isinstance(value, dict) else value
        self.config.write_text(tomli_w.dumps(cfg))
        return self.config

