"""Each check's time at registration on the CPU dev cluster: N nodes (default 4) register at once
at level standard (so they share this machine's cores, as the dev cluster's nodes do), and the
duration of every check is read from each node's recorded run. The figures docs/guide.md gives
for the deep checks on the dev cluster come from this command:

    python bench/bench_deep_checks.py [--nodes 4] [--level standard] [--json FILE]

On the dev cluster the GPUs are simulated and the heavy checks run on CPU stand-ins (torch's
start dominates them); DCGM and the loopback tools are absent there (their checks skip in a
millisecond); drift has no fleet yet when every node registers at once.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile

from airlock.dev.cluster import DevCluster


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", type=int, default=4)
    p.add_argument("--level", default="standard", choices=("standard", "deep"))
    p.add_argument("--json", help="write the per-node figures here")
    args = p.parse_args(argv)
    nodes = [f"node{i}" for i in range(1, args.nodes + 1)]
    root = tempfile.mkdtemp(prefix="alc-", dir="/tmp")
    c = DevCluster(root, nodes=nodes, health_interval=3600,
                   airlock={"registration": {"level": args.level}})
    runs = {}
    try:
        c.start(wait=False)

        def recorded():
            for n in nodes:
                path = c.root / "airlock" / "state" / n / f"latest-{args.level}.json"
                if n not in runs and path.exists():
                    runs[n] = json.loads(path.read_text())
            return len(runs) == len(nodes)

        c.wait(recorded, 1800, f"{len(nodes)} registrations at level {args.level}")
    finally:
        c.stop()
        shutil.rmtree(root, ignore_errors=True)
    checks = [r["check"] for r in runs[nodes[0]]["checks"]]
    print(f"{len(nodes)} nodes registering at once at level {args.level}: each check's "
          "duration, median (min-max) over the nodes, and its verdicts")
    print(f"{'check':<14} {'seconds':>20}  verdicts")
    for check in checks:
        recs = [next(r for r in runs[n]["checks"] if r["check"] == check) for n in nodes]
        secs = [r["duration_s"] for r in recs]
        verdicts = ",".join(sorted({r["verdict"] for r in recs}))
        print(f"{check:<14} {statistics.median(secs):>8.3f} ({min(secs):.3f}-{max(secs):.3f})"
              f"  {verdicts}")
    whole = [runs[n]["duration_s"] for n in nodes]
    print(f"{'whole run':<14} {statistics.median(whole):>8.1f} ({min(whole):.1f}-{max(whole):.1f})")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(runs, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
