"""Launching a node's worker elsewhere (srun, a registration batch member) and reading its
answer: the command line, and the report from its stdout."""

from __future__ import annotations

import sys
from typing import Any

from airlock import protocol


def worker_argv(master_addr: str, master_port: int, world_size: int, rank_offset: int,
                local_ranks: int = 0, host_store: bool = False, node: str = "",
                level: str = "standard", python: str = "", secret_file: str = "",
                **options: Any) -> list[str]:
    """The command line of one node's launcher; options: sizes (list of bytes), iters, warmup,
    dtype, timeout, backend, faults (a switch string; "" = none, omitted = the node's own).
    secret_file names the run's secret (a path, never the secret: argv is world-readable)."""
    argv = [python or sys.executable, "-m", "airlock.collective", "worker",
            "--master-addr", master_addr, "--master-port", str(master_port),
            "--world-size", str(world_size), "--rank-offset", str(rank_offset),
            "--local-ranks", str(local_ranks), "--level", level]
    if host_store:
        argv.append("--host-store")
    if node:
        argv += ["--node", node]
    if secret_file:
        argv += ["--secret-file", secret_file]
    for key, value in options.items():
        if value is None:
            continue
        if key == "sizes":
            value = ",".join(str(int(v)) for v in value)
        argv += [f"--{key}", str(value)]
    return argv


def parse_report(stdout: str) -> dict[str, Any] | None:
    """The node report from a launcher's stdout (the last `AIRLOCK-DIST ` line); None if absent
    or damaged (the caller counts that node's ranks as missing)."""
    return protocol.last(stdout, protocol.DIST)
