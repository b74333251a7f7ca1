"""Wall time and peak RSS of `airlock check --level quick` (simulated 8-GPU node) against
`python -c pass`, side by side in one run (interleaved), with a check that the quick path never
imports torch. With --standard, also the whole standard level on this machine (CPU burn-in,
memtest and all-reduce, each in its own process): wall time, CPU time, and each check's time.

    python bench/bench_quick.py [--runs 7] [--standard]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

from airlock.dev.cluster import healthy_gpus

# Runs one command and reports its wall time, CPU time and peak RSS (children only, so the
# measuring interpreter itself is not counted).
MEASURE = """
import json, resource, subprocess, sys, time
t = time.perf_counter()
p = subprocess.run(sys.argv[1:], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
wall = time.perf_counter() - t
ru = resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps({"wall": wall, "cpu": ru.ru_utime + ru.ru_stime, "rss_kb": ru.ru_maxrss,
                  "rc": p.returncode, "stdout": p.stdout.decode()[-20000:],
                  "stderr": p.stderr.decode()[-20000:]}))
"""


def measure(argv: list[str], env: dict[str, str]) -> dict:
    out = subprocess.run([sys.executable, "-c", MEASURE, *argv], capture_output=True, text=True,
                         env=env, check=True)
    return json.loads(out.stdout)


def setup(root: str) -> dict[str, str]:
    sim = os.path.join(root, "sim.json")
    with open(sim, "w") as fh:
        json.dump({"nodes": {"bench1": {"gpus": healthy_gpus(8)}}}, fh)
    conf = os.path.join(root, "airlock.toml")
    with open(conf, "w") as fh:
        fh.write(f'state_dir = "{root}/state"\nlog_dir = "{root}/log"\n'
                 f'[nvml]\nsimulate = "{sim}"\n')
    env = dict(os.environ)
    env["AIRLOCK_CONFIG"] = conf
    env.pop("AIRLOCK_FAULTS", None)
    return env


def imported_torch(importtime_log: str) -> bool:
    """From PYTHONPROFILEIMPORTTIME output: "import time: self | cumulative | module"."""
    return any(line.split("|")[-1].strip() == "torch"
               for line in importtime_log.splitlines() if line.startswith("import time:"))


def airlock_argv(*args: str) -> list[str]:
    exe = shutil.which("airlock")
    return ([exe] if exe else [sys.executable, "-m", "airlock.cli"]) + list(args)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--runs", type=int, default=7)
    p.add_argument("--standard", action="store_true")
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="airlock-bench-") as root:
        env = setup(root)
        quick = airlock_argv("check", "--level", "quick", "--node", "bench1", "--json")
        base = [sys.executable, "-c", "pass"]
        q, b = [], []
        for i in range(args.runs):
            pair = [(quick, q), (base, b)] if i % 2 else [(base, b), (quick, q)]
            for argv, sink in pair:
                sink.append(measure(argv, env))
        if any(r["rc"] != 0 for r in q):
            bad = next(r for r in q if r["rc"] != 0)
            raise SystemExit(f"quick level did not pass: {bad['stdout'][-500:]}")
        probe = measure(airlock_argv("check", "--level", "quick", "--node", "bench1"),
                        {**env, "PYTHONPROFILEIMPORTTIME": "1"})
        torch_seen = imported_torch(probe["stderr"])
        qw = statistics.median(r["wall"] for r in q)
        bw = statistics.median(r["wall"] for r in b)
        qr = statistics.median(r["rss_kb"] for r in q)
        br = statistics.median(r["rss_kb"] for r in b)
        print(f"{args.runs} runs each, interleaved, medians")
        print(f"python -c pass          wall {bw * 1000:7.1f} ms   peak RSS {br / 1024:6.1f} MiB")
        print(f"airlock check quick     wall {qw * 1000:7.1f} ms   peak RSS {qr / 1024:6.1f} MiB")
        print(f"ratio quick/pass        wall {qw / bw:7.2f} x    peak RSS {qr / br:6.2f} x")
        print(f"quick level imported torch: {'YES' if torch_seen else 'no'}")
        if args.standard:
            r = measure(airlock_argv("check", "--level", "standard", "--node", "bench1",
                                     "--json"), env)
            run = json.loads(r["stdout"])
            heavy = {c["check"]: c["duration_s"] for c in run["checks"]
                     if c["check"] in ("burnin", "memtest", "allreduce")}
            print(f"standard level (CPU)    wall {r['wall']:6.2f} s   CPU {r['cpu']:6.2f} s   "
                  f"verdict {run['verdict']}   " + ", ".join(f"{k} {v:.2f}s"
                                                          for k, v in heavy.items()))


if __name__ == "__main__":
    main()
