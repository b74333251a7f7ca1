"""Decision time for one recovery poll over 10,000 nodes, from synthetic `scontrol show node -o`
output: parse + decide (pure), and the SQLite write of the decision, side by side.

    python bench/bench_recovery_poll.py [--nodes 10000] [--fail-share 0.05] [--repeat 5]
"""

from __future__ import annotations

import argparse
import io
import random
import statistics
import time

from airlock import config
from airlock.recovery import machine as m
from airlock.recovery import policy as pol
from airlock.recovery.journal import Journal
from airlock.recovery.providers import Provider
from airlock.recovery.service import Service
from airlock.recovery.store import RecoveryStore
from airlock.slurm import parse_show_node

CHECKS = ["gpu_count", "burnin", "xid", "nccl", "row_remap", "mounts"]


def synthetic(n: int, fail_share: float, seed: int = 1) -> str:
    rnd = random.Random(seed)
    lines = []
    for i in range(n):
        name = f"gpu{i:05d}"
        state, reason = "IDLE", ""
        r = rnd.random()
        if r < fail_share:
            check = rnd.choice(CHECKS)
            state = "IDLE+DRAIN"
            reason = (f" Reason=airlock: FAIL {check} gpu{rnd.randrange(8)} detail {i} "
                      f"[root@2026-11-30T08:00:00]")
        elif r < fail_share * 1.4:
            state, reason = "IDLE+DRAIN", " Reason=admin: bad fan [alice@2026-11-30T07:00:00]"
        elif r < 0.6:
            state = "ALLOCATED"
        lines.append(
            f"NodeName={name} Arch=x86_64 CoresPerSocket=48 "
            f"CPUAlloc={96 if state == 'ALLOCATED' else 0} CPUEfctv=192 CPUTot=192 CPULoad=1.00 "
            f"AvailableFeatures=gpu,h100 ActiveFeatures=gpu,h100 "
            f"Gres=gpu:h100:8 NodeAddr={name} NodeHostName={name} Version=22.05.8 "
            f"OS=Linux 6.1.0 #1 SMP RealMemory=2000000 AllocMem=0 FreeMem=1900000 Sockets=2 "
            f"Boards=1 State={state} ThreadsPerCore=2 TmpDisk=0 Weight=1 Owner=N/A "
            f"MCS_label=N/A Partitions=gpu BootTime=2026-11-29T10:00:00 "
            f"SlurmdStartTime=2026-11-29T10:01:00 LastBusyTime=2026-11-30T07:00:00 "
            f"CfgTRES=cpu=192,mem=2000000M,billing=192,gres/gpu=8 AllocTRES= CapWatts=n/a "
            f"CurrentWatts=0 AveWatts=0 ExtSensorsJoules=n/s ExtSensorsWatts=0 "
            f"ExtSensorsTemp=n/s{reason}")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=10000)
    ap.add_argument("--fail-share", type=float, default=0.05)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    text = synthetic(args.nodes, args.fail_share)
    cfg = config.from_dict({"recovery": {"detect_grace": 0, "max_actions_per_hour": 20,
                                         "max_in_flight": 10, "breaker_share": 0.5,
                                         "breaker_same_check": 100000}})
    lim, policy = cfg.recovery, pol.load()
    parse_s, first_s, steady_s, commit_s = [], [], [], []
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        nodes = parse_show_node(text)
        obs = [m.Obs.from_node(n) for n in nodes]
        t1 = time.perf_counter()
        d1 = m.decide({}, obs, 1000.0, policy, lim, m.Ledger())  # every failure is new
        t2 = time.perf_counter()
        d2 = m.decide(d1.cases, obs, 1001.0, policy, lim, m.Ledger())  # cases open, rails pick
        t3 = time.perf_counter()
        store = RecoveryStore(":memory:")
        svc = Service(cfg, None, store, Provider(), Provider(), Journal(store, io.StringIO()))
        t4 = time.perf_counter()
        svc.commit_decision({}, d1, 1000.0)
        t5 = time.perf_counter()
        parse_s.append(t1 - t0)
        first_s.append(t2 - t1)
        steady_s.append(t3 - t2)
        commit_s.append(t5 - t4)
    med = statistics.median
    failing = sum(1 for o in obs if o.failing)
    print(f"nodes {len(nodes)}, airlock failures {failing}, starts on 2nd poll {len(d2.starts)}, "
          f"held {len(d2.held)}")
    print(f"parse scontrol -o output : {med(parse_s) * 1e3:8.1f} ms")
    print(f"decide (new failures)    : {med(first_s) * 1e3:8.1f} ms")
    print(f"decide (steady state)    : {med(steady_s) * 1e3:8.1f} ms")
    print(f"parse + decide per poll  : {(med(parse_s) + med(steady_s)) * 1e3:8.1f} ms "
          f"({(med(parse_s) + med(steady_s)) / len(nodes) * 1e6:.1f} us/node)")
    print(f"SQLite commit of new cases: {med(commit_s) * 1e3:7.1f} ms")
    print(f"ratio decide/parse       : {med(steady_s) / med(parse_s):8.2f}")


if __name__ == "__main__":
    main()
