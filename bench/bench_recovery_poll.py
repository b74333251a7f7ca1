"""One recovery poll over a large cluster: parse Slurm's node listing and decide, for both
readers side by side in one run: `scontrol -o --future show node` text and 24.11's
`scontrol --json --future show node`, at 10,000 and 20,000 nodes (goal: parse + decide
<= 0.5 s at 20,000). Also the SQLite write of a decision, and optionally (--live) the whole
call against a real Slurm controller holding that many FUTURE nodes (dev cluster, each version).
Parse and decide are pure CPU in one thread, so they are timed in process CPU time: on a shared
machine wall time mostly measures the neighbours.

    python bench/bench_recovery_poll.py [--nodes 10000 20000] [--fail-share 0.05] [--repeat 5]
    python bench/bench_recovery_poll.py --live        # also scontrol itself, 22.05 and 24.11

The synthetic nodes are the recorded 24.11 records of tests/data/24.11 (text line and JSON
record of the same node) with name, state, reason and load varied.
"""

from __future__ import annotations

import argparse
import copy
import gc
import io
import json
import random
import statistics
import time
from pathlib import Path

from airlock.config import loader as config
from airlock.recovery import machine as m
from airlock.recovery import policy as pol
from airlock.recovery.journal import Journal
from airlock.recovery.providers import Provider
from airlock.recovery.service import Service
from airlock.recovery.store import RecoveryStore
from airlock.slurm.client import parse_node_json, parse_show_node

DATA = Path(__file__).resolve().parents[1] / "tests" / "data" / "24.11"
CHECKS = ["gpu_count", "burnin", "xid", "nccl", "row_remap", "mounts"]
WHEN = "2026-11-30T08:00:00"


def _templates() -> tuple[str, dict]:
    line = (DATA / "show-node2-o.txt").read_text().strip()
    record = json.loads((DATA / "show-node2.json").read_text())["nodes"][0]
    return line[: line.index(" Reason=")], record


def synthetic(n: int, fail_share: float, seed: int = 1) -> tuple[str, str]:
    """The same n nodes as `scontrol -o` text and as `scontrol --json`."""
    head, record = _templates()
    epoch = int(time.mktime(time.strptime(WHEN, "%Y-%m-%dT%H:%M:%S")))
    rnd = random.Random(seed)
    lines, records = [], []
    for i in range(n):
        name = f"gpu{i:05d}"
        state, reason = ["IDLE"], ""
        r = rnd.random()
        if r < fail_share:
            state = ["IDLE", "DRAIN"]
            reason = f"airlock: FAIL {rnd.choice(CHECKS)} gpu{rnd.randrange(8)} detail {i}"
        elif r < fail_share * 1.4:
            state, reason = ["IDLE", "DRAIN"], "admin: bad fan [ticket 7] k=v"
        elif r < 0.6:
            state = ["ALLOCATED"]
        alloc = 1 if state == ["ALLOCATED"] else 0
        text = (head.replace("NodeName=node2 ", f"NodeName={name} ", 1)
                .replace("State=IDLE+DRAIN", f"State={'+'.join(state)}")
                .replace("CPUAlloc=0", f"CPUAlloc={alloc}"))
        lines.append(text + (f" Reason={reason} [root@{WHEN}]" if reason else ""))
        rec = copy.deepcopy(record)
        rec.update(name=name, state=state, reason=reason, alloc_cpus=alloc,
                   reason_changed_at={"set": True, "infinite": False, "number": epoch},
                   reason_set_by_user="root" if reason else "")
        records.append(rec)
    return "\n".join(lines) + "\n", json.dumps({"nodes": records, "errors": [], "warnings": []})


def measure(n: int, fail_share: float, repeat: int, cfg, lim, policy) -> dict:
    text, js = synthetic(n, fail_share)
    out = {"nodes": n, "text_mb": len(text) / 1e6, "json_mb": len(js) / 1e6}
    med = statistics.median
    parse = {"text": [], "json": []}
    first, steady, commit, obs_s = [], [], [], []
    clock = time.process_time
    by_json = None
    for _ in range(repeat):
        by_json = None  # each reader parses with nothing of the other's alive, as in service
        gc.collect()
        t0 = clock()
        by_text = parse_show_node(text)
        t1 = clock()
        parse["text"].append(t1 - t0)
        if _ == 0:
            by_json = parse_node_json(js)
            assert by_text == by_json, "the two readers disagree on the synthetic nodes"
        by_text, by_json = None, None
        gc.collect()
        t1 = clock()
        by_json = parse_node_json(js)
        t2 = clock()
        parse["json"].append(t2 - t1)
        by_json = None
        gc.collect()
        t2 = clock()
        by_text = parse_show_node(text)
        t2b = clock()
        obs = [m.Obs.from_node(x) for x in by_text]
        t3 = clock()
        d1 = m.decide({}, obs, 1000.0, policy, lim, m.Ledger())  # every failure is new
        t4 = clock()
        d2 = m.decide(d1.cases, obs, 1001.0, policy, lim, m.Ledger())  # cases open, rails pick
        t5 = clock()
        obs_s.append(t3 - t2b)
        first.append(t4 - t3 + (t3 - t2b))
        steady.append(t5 - t4 + (t3 - t2b))
        store = RecoveryStore(":memory:")
        svc = Service(cfg, None, store, Provider(), Provider(), Journal(store, io.StringIO()))
        t6 = time.perf_counter()
        svc.commit_decision({}, d1, 1000.0)
        commit.append(time.perf_counter() - t6)
    out.update(obs=med(obs_s), parse_text=med(parse["text"]), parse_json=med(parse["json"]),
               decide_new=med(first), decide_steady=med(steady), commit=med(commit),
               failing=sum(o.failing for o in obs), starts=len(d2.starts))
    return out


def live(counts: list[int], repeat: int) -> None:
    """scontrol itself: a dev cluster per version whose controller holds N FUTURE nodes."""
    import shutil
    import tempfile

    from airlock.dev.cluster import DevCluster
    from airlock.slurm.client import Slurm

    class Big(DevCluster):
        size = 0

        def slurm_conf(self, accounting=None) -> str:
            conf = super().slurm_conf(accounting)
            return conf.replace("PartitionName=main", (
                f"NodeName=f[00001-{self.size:05d}] NodeHostname=localhost NodeAddr=127.0.0.1 "
                f"Port={self.ports['node1']} CPUs=1 RealMemory=1000 State=FUTURE\n"
                "PartitionName=main"), 1).replace("MaxNodeCount=64",
                                                  f"MaxNodeCount={self.size + 64}")

    print("\nlive: the whole call (scontrol + parse), median of", repeat)
    print(f"{'version':>8} {'nodes':>6} {'-o text':>9} {'--json':>9} {'json/text':>9}")
    for version in ("22.05", "24.11"):
        for n in counts:
            root = tempfile.mkdtemp(prefix="alc-bench-", dir="/tmp")
            c = Big(root, nodes=["node1"], slurm_version=version, health_interval=0,
                    hooks=dict.fromkeys(("healthcheck", "prolog", "epilog"), "#!/bin/sh\n"))
            c.size = n
            try:
                c.start(wait=True)
                s = Slurm(conf=str(c.conf), bin_dir=c.slurm.bin_dir, timeout=300)
                readers = ["text", "json"] if s.has_json() else ["text"]
                whole: dict[str, list[float]] = {r: [] for r in readers}
                one: dict[str, list[float]] = {r: [] for r in readers}
                for i in range(repeat * 8):  # the readers alternate: same moment, same load
                    for reader in readers:
                        t0 = time.perf_counter()
                        if i < repeat:
                            assert len(s.nodes(reader=reader)) == n + 1
                            whole[reader].append(time.perf_counter() - t0)
                        else:
                            s.nodes(["f00007"], reader=reader)
                            one[reader].append(time.perf_counter() - t0)
                row = {r: statistics.median(v) for r, v in whole.items()}
                one = {r: statistics.median(v) for r, v in one.items()}
                js = f"{row['json']:8.3f}s" if "json" in row else "      n/a"
                ratio = f"{row['json'] / row['text']:9.2f}" if "json" in row else "      n/a"
                print(f"{version:>8} {n:>6} {row['text']:8.3f}s {js} {ratio}")
                ones = "  ".join(f"{k} {v * 1e3:.1f} ms" for k, v in one.items())
                print(f"{'':>8} {'1 node':>6} {ones}   (a cluster of {n})")
            finally:
                c.stop()
                shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, nargs="+", default=[10000, 20000])
    ap.add_argument("--fail-share", type=float, default=0.05)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--live", action="store_true",
                    help="also time scontrol against dev clusters of both versions")
    args = ap.parse_args()
    cfg = config.from_dict({"recovery": {"detect_grace": 0, "max_actions_per_hour": 20,
                                         "max_in_flight": 10, "breaker_share": 0.5,
                                         "breaker_same_check": 100000}})
    lim, policy = cfg.recovery, pol.load()
    rows = [measure(n, args.fail_share, args.repeat, cfg, lim, policy) for n in args.nodes]
    ms = lambda s: f"{s * 1e3:8.1f}"  # noqa: E731
    print(f"recovery poll, median of {args.repeat}, fail share {args.fail_share}, "
          "CPU ms (commit: wall ms)")
    print(f"{'nodes':>6} {'text MB':>8} {'json MB':>8} {'parse -o':>9} {'parse json':>10} "
          f"{'json/-o':>8} {'Obs':>6} {'decide':>8} {'decide new':>10} {'-o+decide':>10} "
          f"{'json+decide':>11} {'commit':>8}")
    for r in rows:
        print(f"{r['nodes']:>6} {r['text_mb']:8.1f} {r['json_mb']:8.1f} {ms(r['parse_text'])} "
              f"{ms(r['parse_json']):>10} {r['parse_json'] / r['parse_text']:8.2f} "
              f"{ms(r['obs'])[2:]} {ms(r['decide_steady'] - r['obs'])} "
              f"{ms(r['decide_new'] - r['obs']):>10} "
              f"{ms(r['parse_text'] + r['decide_steady']):>10} "
              f"{ms(r['parse_json'] + r['decide_steady']):>11} {ms(r['commit'])}")
    print("(Obs = Obs.from_node for every node; decide = decide() with the cases open, as every "
          "poll after the first; decide new = the poll that opens them; X+decide = parse + Obs + "
          "decide)")
    if len(rows) > 1:
        a, b = rows[0], rows[-1]
        dec = (b["decide_steady"] - b["obs"]) / (a["decide_steady"] - a["obs"])
        print(f"{b['nodes']}/{a['nodes']} nodes: parse -o x{b['parse_text'] / a['parse_text']:.2f}"
              f", parse json x{b['parse_json'] / a['parse_json']:.2f}, Obs "
              f"x{b['obs'] / a['obs']:.2f}, decide x{dec:.2f}")
    big = rows[-1]
    best = min(big["parse_text"], big["parse_json"]) + big["decide_steady"]
    print(f"goal parse + decide <= 500 ms at {big['nodes']}: {best * 1e3:.0f} ms "
          f"({'met' if best <= 0.5 else 'NOT met'})")
    if args.live:
        live([100, *args.nodes], 3)


if __name__ == "__main__":
    main()
