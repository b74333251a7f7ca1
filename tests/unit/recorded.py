"""A recorded cluster: what `airlock status` and `airlock serve` read, without daemons.

A fake 22.05 controller (tests/unit/fakeslurm.py, which `[slurm] bin_dir` points at), a shared
results directory holding run documents as the nodes' finish pipeline stores them
(airlock.records.results), and an airlock.toml that points at both. For the console's unit tests
(tests/unit/test_serve.py) and bench/bench_serve.py (10,000 nodes of recorded status);
tests/cluster/test_serve.py runs the service against real Slurm daemons.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import tomli_w

from airlock.paths import SafeDir
from tests.unit.fakeslurm import FakeSlurm

SLURM_TIME = "%Y-%m-%dT%H:%M:%S"


def slurm_time(epoch: float) -> str:
    return time.strftime(SLURM_TIME, time.localtime(epoch))


def node_fields(state: str = "IDLE", reason: str = "", reason_user: str = "root",
                reason_at: float | None = None, partitions: tuple[str, ...] = ("main",),
                features: tuple[str, ...] = ("gpu",), busy: bool = False) -> dict[str, Any]:
    """A node of the fake controller: "IDLE+DRAIN" is state IDLE with the DRAIN flag."""
    base, *flags = state.split("+")
    fields: dict[str, Any] = {"state": base, "flags": flags, "cpu_alloc": 1 if busy else 0,
                              "partitions": ",".join(partitions),
                              "features": ",".join(features)}
    if reason:
        fields.update(reason=reason, reason_user=reason_user,
                      reason_time=slurm_time(reason_at or time.time()))
    return fields


def check(name: str, verdict: str = "pass", detail: str = "", **figures: Any) -> dict[str, Any]:
    return {"check": name, "verdict": verdict, "detail": detail, "figures": figures,
            "remediation": "", "duration_s": 0.5, "attempts": 1}


def run_doc(node: str, level: str = "standard", trigger: str = "new", verdict: str = "pass",
            finished_at: float | None = None, checks: list[dict[str, Any]] | None = None,
            profile: str = "cpu", duration_s: float = 30.0, seq: int = 0) -> dict[str, Any]:
    """A run document as airlock.finish.summarize writes it."""
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
    """add_node() to the fake controller and add_run() documents, then write() the config
    (extra tables merged in); config is its path."""

    def __init__(self, root: str | os.PathLike):
        self.root = Path(root)
        self.slurm = FakeSlurm(self.root / "slurm", nodes=())
        self.config = self.root / "airlock.toml"
        self.shared = self.root / "shared"
        self.shared.mkdir(parents=True, exist_ok=True)

    def add_node(self, name: str, **kw: Any) -> None:
        self.slurm.add(name, **node_fields(**kw))

    def add_nodes(self, nodes: dict[str, dict[str, Any]]) -> None:
        """Many at once ({name: node_fields keywords}), in one write of the fake's table."""
        self.slurm.add_many({n: node_fields(**kw) for n, kw in nodes.items()})

    def add_run(self, run: dict[str, Any], latest: bool = True) -> None:
        """A run as the node's finish pipeline stores its shared copy."""
        with SafeDir.open(self.shared, [run["node"]], create=True) as d:
            with d.sub("results", create=True) as folder:
                folder.write_json(f"{run['run_id']}.json", run)
            if latest:
                d.write_json("latest.json", run)

    def write(self, **extra: Any) -> Path:
        cfg: dict[str, Any] = {"state_dir": str(self.root / "state"),
                               "shared_dir": str(self.shared),
                               "slurm": {"bin_dir": self.slurm.bin_dir, "timeout": 60},
                               "recovery": {"db": str(self.root / "recovery.db")}}
        for key, value in extra.items():
            cfg[key] = {**cfg.get(key, {}), **value} if isinstance(value, dict) else value
        self.config.write_text(tomli_w.dumps(cfg))
        return self.config
