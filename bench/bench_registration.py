"""Registration latency on the real dev cluster: slurmd start -> RESUME, and the hook's wall time.

Starts a dev cluster with N FUTURE nodes and brings them up one at a time (as continuous
provisioning does), measuring for each:
  * slurmd start -> node resumed by Airlock (IDLE, no drain, no reason);
  * the registration suite's own duration (from its results);
  * the HealthCheckProgram's wall time at start (quarantine) and on periodic runs (quick level),
    from the hook's own log lines, against `python -c pass` measured in the same run.

    python bench/bench_registration.py [--nodes 5] [--level standard|quick]
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from airlock.config import loader as config_mod
from airlock.dev.cluster import DevCluster
from airlock.paths import read_json
from airlock.records.proof import NodeState

HOOK_LINE = re.compile(r" (new|boot): .*\((\d+\.\d+)s\)$|quick \w+ in [\d.]+s \((\d+\.\d+)s\)$")


def python_startup(runs: int = 7) -> float:
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=5)
    ap.add_argument("--level", default="standard", choices=("quick", "standard"))
    args = ap.parse_args()
    names = [f"node{i}" for i in range(1, args.nodes + 1)]
    root = tempfile.mkdtemp(prefix="alb-", dir="/tmp")
    c = DevCluster(root, nodes=[], future=names,
                   airlock={"registration": {"level": args.level}})
    resume_s, suite_s = [], []
    try:
        c.start(wait=False)
        c.wait(c._ctld_up, 30, "slurmctld")
        cfg = config_mod.load(c.airlock_conf)
        for n in names:
            t0 = time.monotonic()
            c.start_node(n, wait=False)
            seen_pending = False

            def resumed(n=n):
                nonlocal seen_pending
                node = c.node(n)
                seen_pending |= node.reason.startswith("airlock: pending")
                return seen_pending and node.state == "IDLE" and not node.drained \
                    and not node.reason and node.responding

            c.wait(resumed, 300, f"{n} resumed")
            resume_s.append(time.monotonic() - t0)
            rec = NodeState(cfg, n).load()
            run = read_json(NodeState(cfg, n).path.parent / "results" / f"{rec['run_id']}.json")
            suite_s.append(run["duration_s"])
            print(f"{n}: slurmd start -> RESUME {resume_s[-1]:.2f} s "
                  f"(suite {suite_s[-1]:.2f} s)", flush=True)
        time.sleep(12)  # a few periodic runs on every node
        hook_wall = []
        for _ in range(7):  # exactly what slurmd runs, with slurmd's near-empty environment
            t = time.perf_counter()
            subprocess.run(["env", "-i", f"SLURMD_NODENAME={names[0]}",
                            str(Path(root) / "bin" / "healthcheck")], check=True,
                           capture_output=True)
            hook_wall.append(time.perf_counter() - t)
        start_hook, periodic_hook = [], []
        for n in names:
            log = Path(root) / "airlock" / "log" / n / "healthcheck.log"
            for line in log.read_text().splitlines():
                m = HOOK_LINE.search(line)
                if m and m.group(2):
                    start_hook.append(float(m.group(2)))
                elif m and m.group(3):
                    periodic_hook.append(float(m.group(3)))
    finally:
        c.stop()
    py = python_startup()
    med = statistics.median
    print(f"\nlevel {args.level}, {args.nodes} nodes joining one at a time")
    print(f"slurmd start -> RESUME     median {med(resume_s):.2f} s  "
          f"(min {min(resume_s):.2f}, max {max(resume_s):.2f})")
    print(f"registration suite         median {med(suite_s):.2f} s  "
          f"(RESUME / suite = {med(resume_s) / med(suite_s):.2f})")
    print(f"hook at start (quarantine) median {med(start_hook):.3f} s over {len(start_hook)}")
    print(f"hook periodic (quick)      median {med(periodic_hook):.3f} s over "
          f"{len(periodic_hook)}")
    print(f"python -c pass             median {py:.3f} s  (hook start work / python startup "
          f"= {med(start_hook) / py:.2f}, periodic work / python startup = "
          f"{med(periodic_hook) / py:.2f})")
    print(f"hook periodic, wall clock  median {med(hook_wall):.3f} s  (env -i, as slurmd runs "
          f"it; / python -c pass = {med(hook_wall) / py:.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
