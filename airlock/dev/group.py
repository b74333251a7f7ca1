"""A multi-node all-reduce group on one machine, for tests and benchmarks of group checks at scale.

Each member is what `python -m airlock.collective worker` runs on its node: airlock.collective's
launcher
(dist.launch), with its own relay, its own forked ranks and the run's secret; the first member
hosts the store. Here the members are forked from one parent that imported torch once, instead
of one interpreter per member: 64 members each importing torch (about 210 MiB resident apiece)
would take most of this machine's memory, which a real node never shares with 63 others. The
rendezvous, the relays, the ranks and the collectives are the real ones, on loopback.

    python -m airlock.dev.group --members 16 --ranks 8 [--port P] [--sizes 4K] [--timeout 90]
                                [--names a,b,c] [--fault NODE=SWITCHES ...]

prints one JSON line: every member's launcher report, each judged as a group member judges its
own (checks.groupcheck.judge), and the seconds the whole group took.
"""

from __future__ import annotations

import argparse
import json
import os
import selectors
import sys
import time
from typing import Any

from airlock import collective as dist
from airlock.checks.groupcheck import judge
from airlock.collective.rendezvous import new_secret
from airlock.hw import faults as faults_mod


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(nodes: list[str], ranks: int, params: dist.SweepParams, port: int = 0,
        secret: bytes | None = None, faults: dict[str, dict[str, str]] | None = None,
        addr: str = "127.0.0.1") -> dict[str, dict[str, Any] | None]:
    """{node: its launcher's report, or None when the member died without one}."""
    import torch  # noqa: F401  (imported once here; every member and rank inherits it)

    port = port or _free_port()
    secret = secret or new_secret().encode()
    faults = faults or {}
    world = ranks * len(nodes)
    children: dict[int, tuple[str, int]] = {}
    for idx, node in enumerate(nodes):
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                os.close(r)
                rep = dist.launch(addr, port, world, idx * ranks, ranks, params,
                                  faults.get(node, {}), host_store=idx == 0, node=node,
                                  secret=secret)
                data = (json.dumps(rep) + "\n").encode()
                while data:
                    data = data[os.write(w, data):]
                code = 0
            finally:
                os._exit(code)
        os.close(w)
        children[pid] = (node, r)
    sel = selectors.DefaultSelector()
    bufs: dict[str, bytes] = {}
    for node, r in children.values():
        sel.register(r, selectors.EVENT_READ, node)
        bufs[node] = b""
    open_count = len(children)
    while open_count:
        for key, _ in sel.select(timeout=1.0):
            chunk = os.read(key.fd, 65536)
            if chunk:
                bufs[key.data] += chunk
            else:
                sel.unregister(key.fd)
                os.close(key.fd)
                open_count -= 1
    sel.close()
    for pid in children:
        os.waitpid(pid, 0)
    out: dict[str, dict[str, Any] | None] = {}
    for node, _ in children.values():
        try:
            out[node] = json.loads(bufs[node].decode())
        except ValueError:
            out[node] = None
    return out


def summary(nodes: list[str], reports: dict[str, dict[str, Any] | None], seconds: float,
            timeout: float) -> dict[str, Any]:
    members = {n: judge(reports[n], 0 if reports[n] else 1, "", 0.0, 0.5, timeout)
               for n in nodes}
    whole = dist.combine([r for r in reports.values() if r])
    return {"members": len(nodes), "world_size": whole.world_size, "seconds": round(seconds, 2),
            "ok": all(m["ok"] for m in members.values()),
            "refused": sum((r or {}).get("refused", 0) for r in reports.values()),
            "verdicts": members}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m airlock.dev.group")
    ap.add_argument("--members", type=int, default=16)
    ap.add_argument("--names", default="", help="member names, comma-separated (instead of "
                    "--members: m000, m001, ...)")
    ap.add_argument("--ranks", type=int, default=8, help="ranks per member (its GPUs)")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--sizes", default="4K")
    ap.add_argument("--iters", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=90.0)
    ap.add_argument("--fault", action="append", default=[], help="NODE=SWITCHES")
    args = ap.parse_args(argv)
    nodes = args.names.split(",") if args.names else [f"m{i:03d}" for i in range(args.members)]
    params = dist.SweepParams(dist.parse_sizes(args.sizes), iters=args.iters, warmup=0,
                              backend="gloo", timeout=args.timeout)
    faults = {}
    for item in args.fault:
        node, _, spec = item.partition("=")
        faults[node] = faults_mod.parse(spec)
    t0 = time.monotonic()
    reports = run(nodes, args.ranks, params, args.port, faults=faults)
    print(json.dumps(summary(nodes, reports, time.monotonic() - t0, args.timeout)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
