"""Soak: rounds of healthy registrations, several nodes at once, on the real dev cluster.

Every round reboots all N nodes together (each slurmd restarts in a fresh boot: a new time
namespace and a new kernel boot id, as after a real reboot), waits until each has a verdict, and
records for each registration whether Airlock drained the node (any `airlock: FAIL` reason) and
how long it took from the reboot to the node being back in service. The hardware is healthy
throughout: every drain is a false drain.

    python bench/soak_registration.py [--nodes 3] [--rounds 7] [--level standard]

Prints one line per round, then the number of registrations, the drains (with their reasons)
and the time-to-service distribution (median and max). Exit 1 when any node was drained.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time

from airlock.config import loader as config_mod
from airlock.dev.cluster import DevCluster
from airlock.records.proof import NodeState


def in_service(c: DevCluster, name: str, cfg, after_run: str):
    """The node's registration for a new boot finished and Slurm has it back (or drained)."""
    rec = NodeState(cfg, name).load()
    if rec is None or rec["run_id"] == after_run or rec["status"] != "done":
        return None
    node = c.node(name)
    if node.drained and node.reason.startswith("airlock: FAIL"):
        return ("drained", node.reason, rec["run_id"])
    if not node.drained and node.responding and node.state == "IDLE":
        return ("resumed", "", rec["run_id"])
    return None


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--level", default="standard", choices=("quick", "standard"))
    ap.add_argument("--timeout", type=float, default=600, help="per round, seconds")
    args = ap.parse_args()
    names = [f"node{i}" for i in range(1, args.nodes + 1)]
    root = tempfile.mkdtemp(prefix="als-", dir="/tmp")
    c = DevCluster(root, nodes=names, health_interval=30,
                   airlock={"registration": {"level": args.level}})
    times: list[float] = []
    drains: list[tuple[int, str, str]] = []
    try:
        c.start(wait=True)
        cfg = config_mod.load(c.airlock_conf)
        last = {n: "" for n in names}
        # Round 0 is the first boot of every node; rounds 1.. are reboots of all at once.
        for rnd in range(args.rounds):
            t0 = time.monotonic()
            if rnd:
                for n in names:
                    c.stop_node(n)
                for n in names:
                    c.start_node(n, wait=False, fresh_boot=True)
            done: dict[str, float] = {}
            deadline = t0 + args.timeout
            while len(done) < len(names) and time.monotonic() < deadline:
                for n in names:
                    if n in done:
                        continue
                    seen = in_service(c, n, cfg, last[n])
                    if seen is not None:
                        done[n] = time.monotonic() - t0
                        last[n] = seen[2]
                        if seen[0] == "drained":
                            drains.append((rnd, n, seen[1]))
                time.sleep(0.2)
            missing = sorted(set(names) - set(done))
            if missing:
                print(f"round {rnd}: no verdict within {args.timeout:g} s for {missing}",
                      flush=True)
                return 2
            times += done.values()
            print(f"round {rnd}: " + ", ".join(f"{n} {done[n]:.1f} s" for n in names)
                  + f"; drains so far {len(drains)}", flush=True)
    finally:
        c.stop()
    print(f"\n{len(times)} registrations ({args.nodes} nodes at once, level {args.level}, "
          f"{args.rounds} rounds)")
    print(f"drains: {len(drains)}")
    for rnd, n, reason in drains:
        print(f"  round {rnd} {n}: {reason}")
    print(f"time to service: median {statistics.median(times):.1f} s, max {max(times):.1f} s, "
          f"min {min(times):.1f} s")
    return 1 if drains else 0


if __name__ == "__main__":
    sys.exit(main())
