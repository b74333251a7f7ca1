"""What a job preflight adds to a job's start, at 2, 8, 32 members, with its breakdown.

Each member is a process of its own running the prolog's preflight (airlock.preflight.entry.run)
as a qualifying job's prolog would: the meeting in a shared directory, the batch's all-reduce
rounds (one `python -m airlock.collective worker` per member per round, gloo on the CPU, one rank
each,
[ondemand] group_sizes_mb), the judging and the run document. What is not the prolog's: the
members start together here (slurmd's prologs start within its own fan-out), and a member's own
address comes from the bench, not from `scontrol show node` (one call per member in the prolog).
All members share this machine's cores, so the collective's time grows with the members here
much faster than on a cluster, where each member has its own node.

    python bench/bench_preflight.py [--members 2 8 32] [--sizes-mb 0.25 1] [--json FILE]

Reports per member count: seconds added (median and max over the members) and its breakdown
(rendezvous: announcing and waiting for every member; collective: the all-reduce rounds;
judging: the verdict, the totals and the run document).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


class _Node:
    address = "127.0.0.1"


class _Slurm:
    def node(self, name: str) -> _Node:
        return _Node()


class BenchHook:
    """What entry.run uses of airlock.hooks.common.Hook."""

    def __init__(self, cfg, node: str):
        self.cfg, self.node = cfg, node

    def slurm(self):
        return _Slurm()

    def time_left(self) -> float:
        return float("inf")

    def log(self, msg: str) -> None:
        print(f"{self.node}: {msg}", file=sys.stderr)


def member(root: str, node: str, members: int, sizes: list[float]) -> int:
    from airlock.config import loader as config
    from airlock.preflight import entry
    from airlock.preflight.policy import Job

    cfg = config.from_dict({
        "state_dir": f"{root}/state/{{node}}", "log_dir": f"{root}/log/{{node}}",
        "shared_dir": f"{root}/shared",
        "ondemand": {"group_sizes_mb": sizes},
        "preflight": {"enabled": True, "budget": 600.0, "rendezvous_timeout": 120.0,
                      "round_timeout": 300.0},
    })
    job = Job("4242", f"b[1-{members}]", members, "main", "", "", "")
    rc, msg = entry.run(BenchHook(cfg, node), job)
    run = json.loads((Path(root) / "state" / node / "latest-preflight.json").read_text())
    figs = run["checks"][0]["figures"]
    print(json.dumps({"node": node, "rc": rc, "verdict": run["verdict"], "msg": msg,
                      **{k: figs[k] for k in ("rendezvous_s", "collective_s", "judging_s",
                                              "added_s")}}))
    return 0


def one(members: int, sizes: list[float]) -> dict:
    root = tempfile.mkdtemp(prefix="pfb-")
    nodes = [f"b{i}" for i in range(1, members + 1)]
    t0 = time.monotonic()
    procs = [subprocess.Popen([sys.executable, __file__, "--member", n, "--root", root,
                               "--members", str(members), "--sizes-mb", *map(str, sizes)],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
             for n in nodes]
    rows = []
    for p in procs:
        out, _ = p.communicate(timeout=900)
        rows.append(json.loads(out.strip().splitlines()[-1]))
    wall = time.monotonic() - t0
    verdicts = sorted({r["verdict"] for r in rows})

    def stat(key: str) -> dict:
        vals = [r[key] for r in rows]
        return {"median": round(statistics.median(vals), 2), "max": round(max(vals), 2)}

    return {"members": members, "verdicts": verdicts, "wall_s": round(wall, 2),
            **{k: stat(k) for k in ("added_s", "rendezvous_s", "collective_s", "judging_s")}}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--members", type=int, nargs="+", default=[2, 8, 32])
    ap.add_argument("--sizes-mb", type=float, nargs="+", default=[0.25, 1.0])
    ap.add_argument("--json", default="")
    ap.add_argument("--member", default="", help=argparse.SUPPRESS)
    ap.add_argument("--root", default="", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.member:
        return member(args.root, args.member, args.members[0], args.sizes_mb)
    results = []
    print(f"{'members':>7} {'verdict':>8} {'added med/max s':>16} {'rendezvous':>11} "
          f"{'collective':>11} {'judging':>8}  (cores: {os.cpu_count()})")
    for m in args.members:
        r = one(m, args.sizes_mb)
        results.append(r)
        print(f"{m:>7} {','.join(r['verdicts']):>8} "
              f"{r['added_s']['median']:>7.2f}/{r['added_s']['max']:<8.2f} "
              f"{r['rendezvous_s']['median']:>11.2f} {r['collective_s']['median']:>11.2f} "
              f"{r['judging_s']['median']:>8.2f}", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
