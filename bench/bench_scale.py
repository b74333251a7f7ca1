"""Hundreds of nodes joining one controller at once, and group checks that grow with them.

Join mode (the default): N State=FUTURE nodes of a real dev cluster (one slurmctld, N slurmd on
this machine) start at once, each with a job pinned to it (submitted before the nodes start).
Run twice side by side: with Airlock's hooks ("airlock") and with no-op hooks ("baseline"), and
reports for each:

  * time from the start to each node in service (its pinned job started): median, p95, max;
  * user code that ran before its node's pass (a job that started before the node's
    registration verdict was recorded; must be 0);
  * slurmctld RPCs by message type during the join (`sdiag -r` before the slurmds start,
    `sdiag` once every pinned job has run, plus 10 s for its completion to reach slurmctld),
    per joining node (sdiag's own call left out);
  * the CPU time and peak RSS of everything Airlock ran: every hook (its own rusage, through a
    wrapper that waits for it) and every registration suite with its checks (reaped here: this
    process is their subreaper once the hook that started them exits), and the largest sum of
    the resident sets of Airlock's processes alive at one moment (sampled every 0.5 s, and never
    below the largest single process's own peak, which a sample can miss).

No Slurm call of the bench's own falls inside the measured window: progress is read from the
jobs' marker files and Airlock's node records.

    python bench/bench_scale.py [--nodes 50 100 200] [--slurm 22.05 24.11 26.05] [--level quick]
                                [--only airlock|baseline] [--json FILE]
    python bench/bench_scale.py --nodes 70 --only airlock --window 30 [--window-max 16]
                                [--window-concurrency 1]   # one registration window: batches

Group mode (`--group`):

  * the culprit search over simulated tests (pure, no processes): rounds and tests to find 1
    and 2 corrupt members of 16, 64 and 256, every position tried (1) or 200 random pairs (2),
    against the bound airlock/groups/culprit.py claims;
  * with --members M (e.g. 64): a real group of M members on this machine (airlock.dev.group:
    each member one node's launcher with its relay and --ranks ranks, gloo on the CPU, 4 KiB
    tensors), first whole and healthy, then with --culprits members planted corrupt
    (allreduce_corrupt), found by the real search, each round's tests run side by side. Reports
    the rounds, the tests and the time.

    python bench/bench_scale.py --group [--members 64] [--ranks 1] [--culprits 1]

Reads mode (`--reads N [N ...]`): what one node's read and one update cost slurmctld in a
cluster of N nodes (a controller only: the nodes are configured, never started), per call, from
sdiag's own timing, side by side: `scontrol -o --future show node X` (the whole node table,
then the partitions), `sinfo -N -n X` (one node, then the partitions), a drain, a resume.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import math
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from airlock.dev.cluster import VERSIONS, DevCluster
from airlock.records.proof import NodeState

SDIAG_LINE = re.compile(r"^\s+(\S+)\s+\(\s*\d+\)\s+count:(\d+)\s+ave_time:(\d+)\s+"
                        r"total_time:(\d+)")
PR_SET_CHILD_SUBREAPER = 36
NOOP = "#!/bin/sh\nexit 0\n"
SETTLE_S = 10.0
STALL_S = 120.0


def parse_sdiag(text: str) -> dict[str, tuple[int, int]]:
    """{message type: (count, total µs in slurmctld)} from sdiag's "by message type" block."""
    out: dict[str, tuple[int, int]] = {}
    block = False
    for line in text.splitlines():
        if "by message type" in line:
            block = True
            continue
        if block and "by user" in line:
            break
        m = SDIAG_LINE.match(line) if block else None
        if m:
            count, total = out.get(m.group(1), (0, 0))
            out[m.group(1)] = (count + int(m.group(2)), total + int(m.group(4)))
    return out


class ScaleCluster(DevCluster):
    """The dev cluster as this bench needs it on any Airlock tree it measures (the "before"
    figures run an older one): MaxNodeCount at least the node count, and every daemon port
    below the kernel's ephemeral range (see airlock.dev.cluster.free_port)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        taken: set[int] = set()
        for n in self.all_nodes:
            self.ports[n] = _port(taken)
            taken.add(self.ports[n])
        self.ctld_port = _port(taken)

    def slurm_conf(self, *args, **kwargs) -> str:
        text = super().slurm_conf(*args, **kwargs)
        return re.sub(r"^MaxNodeCount=\d+$", f"MaxNodeCount={max(64, len(self.all_nodes))}",
                      text, flags=re.M)


def _port(taken: set[int]) -> int:
    import random
    import socket

    while True:
        port = random.randint(10000, 32000)
        if port in taken:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        return port


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(round(q * (len(s) - 1))))] if s else float("nan")


# --- what Airlock ran: rusage of hooks (wrapper) and suites (subreaper) -----------------------
HOOK_WRAPPER = """\
import os, sys
# bench_scale: run the real hook, wait for it, record its rusage (the hook's own and its waited-for
# children's), and exit with its status. This wrapper's own cost is not counted.
log, name, real = sys.argv[1:4]
pid = os.fork()
if pid == 0:
    os.execv(real, [real, *sys.argv[4:]])
_, status, ru = os.wait4(pid, 0)
with open(log, "a") as fh:
    fh.write(f"{name} {ru.ru_utime + ru.ru_stime:.4f} {ru.ru_maxrss}\\n")
sys.exit(os.waitstatus_to_exitcode(status) & 0xff)
"""


def wrap_hooks(root: Path, log: Path) -> None:
    """Each Airlock hook of the dev cluster runs under HOOK_WRAPPER."""
    (root / "bin" / "hookwrap.py").write_text(HOOK_WRAPPER)
    for name in ("healthcheck", "prolog", "epilog"):
        real = root / "bin" / name
        shutil.copy(real, real.with_name(f"{name}.real"))
        real.write_text(f"#!/bin/sh\nexec {sys.executable} {root}/bin/hookwrap.py {log} {name} "
                        f"{real.with_name(name + '.real')} \"$@\"\n")
        real.chmod(0o755)


def sdiag_cmd(c: DevCluster) -> str:
    """sdiag of the cluster's Slurm (24.11: inside the chroot, through a client wrapper made
    like scontrol's when the dev cluster has none)."""
    if not c.slurm_bin:
        return "sdiag"
    path = c.slurm_bin / "sdiag"
    if not path.exists():
        text = (c.slurm_bin / "scontrol").read_text().replace("scontrol", "sdiag")
        path.write_text(text)
        path.chmod(0o755)
    return str(path)


class Reaper:
    """Reaps the registration suites that are reparented to this process and sums their
    rusage; samples the resident set of Airlock's processes (cluster marker + airlock module)."""

    def __init__(self, root: str):
        self.root = root
        self.suites: list[tuple[float, int]] = []  # (cpu s, max rss KiB)
        self.peak_rss_kib = 0
        self._stop = threading.Event()
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _ours(self) -> list[int]:
        me, out = os.getpid(), []
        for e in os.listdir("/proc"):
            if not e.isdigit():
                continue
            try:
                with open(f"/proc/{e}/stat") as fh:
                    stat = fh.read()
            except OSError:
                continue
            fields = stat.rsplit(")", 1)[1].split()
            if int(fields[1]) == me and "(python" in stat:
                out.append(int(e))
        return out

    def _sample(self) -> None:
        total = 0
        for e in os.listdir("/proc"):
            if not e.isdigit():
                continue
            try:
                with open(f"/proc/{e}/cmdline", "rb") as fh:
                    cmd = fh.read()
                if b"-m\0airlock." not in cmd and b"airlock.hooks" not in cmd:
                    continue
                with open(f"/proc/{e}/environ", "rb") as fh:
                    if f"AIRLOCK_DEVCLUSTER={self.root}".encode() not in fh.read():
                        continue
                with open(f"/proc/{e}/statm") as fh:
                    total += int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024
            except OSError:
                continue
        self.peak_rss_kib = max(self.peak_rss_kib, total)

    def _reap(self) -> None:
        for pid in self._ours():
            try:
                got, status, ru = os.wait4(pid, os.WNOHANG)
            except ChildProcessError:
                continue
            if got:
                self.suites.append((ru.ru_utime + ru.ru_stime, ru.ru_maxrss))

    def _loop(self) -> None:
        while not self._stop.wait(0.5):
            self._sample()
            self._reap()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self._reap()


def read_hook_log(path: Path) -> list[tuple[str, float, int]]:
    out = []
    if path.exists():
        for line in path.read_text().splitlines():
            name, cpu, rss = line.split()
            out.append((name, float(cpu), int(rss)))
    return out


def group_outcomes(cfg, names: list[str], root: Path) -> dict[str, Any]:
    """What the registration batches decided: group_allreduce verdicts, group sizes, rounds."""
    from airlock.paths import read_json

    verdicts: dict[str, int] = {}
    for name in names:
        rec = NodeState(cfg, name).load() or {}
        run = read_json(NodeState(cfg, name).path.parent / "results" /
                        f"{rec.get('run_id')}.json") or {}
        got = [c["verdict"] for c in run.get("checks", []) if c["check"] == "group_allreduce"]
        key = got[0] if got else "none"
        verdicts[key] = verdicts.get(key, 0) + 1
    groups = []
    for folder in sorted((root / "airlock" / "shared" / ".batches").glob("batch-*")):
        members = read_json(folder / "members.json") or {}
        verdict = read_json(folder / "verdict.json") or {}
        groups.append({"members": len(members.get("members", [])),
                       "rounds": verdict.get("rounds"), "tests": verdict.get("tests"),
                       "good": len(verdict.get("good", [])),
                       "inconclusive": len(verdict.get("inconclusive", [])),
                       "bad": len(verdict.get("bad", []))})
    return {"group_allreduce": verdicts, "groups": groups}


# --- one join -----------------------------------------------------------------------------
def join(n: int, version: str, airlock: bool, level: str, timeout: float,
         window: dict[str, Any] | None = None) -> dict[str, Any]:
    """window: [registration] group_* settings (group_window > 0: the nodes test in batches)."""
    names = [f"n{i:03d}" for i in range(1, n + 1)]
    root = tempfile.mkdtemp(prefix="albs-", dir="/tmp")
    hooks = {} if airlock else {"healthcheck": NOOP, "prolog": NOOP, "epilog": NOOP}
    extra: dict[str, Any] = {"registration": {"level": level, "suite_timeout": 900,
                                              **(window or {})}}
    if window:  # the group all-reduce's sizes: tiny, one CPU rank per node
        extra["ondemand"] = {"group_sizes_mb": [0.0625], "group_busbw_floor_gbps": 0.0}
    c = ScaleCluster(root, nodes=[], future=names, health_interval=600, slurm_version=version,
                     airlock=extra, hooks=hooks)
    hook_log = Path(root) / "hook-rusage.log"
    reaper = None
    out: dict[str, Any] = {"nodes": n, "slurm": version,
                           "hooks": "airlock" if airlock else "baseline", "level": level}
    try:
        c.start(wait=False)  # (writes the hooks: wrapped after it, before any slurmd starts)
        if airlock:
            wrap_hooks(Path(root), hook_log)
            reaper = Reaper(str(c.root))
        sdiag = sdiag_cmd(c)
        marks = Path(root) / "marks"
        marks.mkdir()
        for name in names:
            c.sbatch(f"date +%s.%N > {marks}/{name}; sleep 1; touch {marks}/{name}.done",
                     "-w", name, "-J", name)
        c.run([sdiag, "-r"])
        t0 = time.time()
        for name in names:
            c.start_node(name, wait=False)
        started = time.time() - t0
        deadline = time.monotonic() + timeout
        dead: list[str] = []
        done, progress = 0, time.monotonic()
        while time.monotonic() < deadline:
            now_done = sum((marks / f"{name}.done").exists() for name in names)
            if now_done == n:
                break
            if now_done > done:
                done, progress = now_done, time.monotonic()
            elif time.monotonic() - progress > STALL_S:
                # No job has finished for a while: a job that could not run (a slurmd that
                # could not start, a batch script its slurmstepd could not find) is reported,
                # not waited for until the timeout.
                dead = [x for x in names if not (marks / f"{x}.done").exists()]
                print(f"no job ended for {STALL_S:g} s; missing {', '.join(dead)}: see "
                      f"{root}/log and {root}/jobs", flush=True)
                break
            time.sleep(0.5)
        elapsed = time.time() - t0
        time.sleep(SETTLE_S)  # the jobs' completion and epilog messages reach slurmctld
        stats = parse_sdiag(c.run([sdiag]))
        stats.pop("REQUEST_STATS_INFO", None)  # sdiag itself
        rpc = {t: v[0] for t, v in stats.items()}
        at = {name: float((marks / name).read_text() or "nan")
              for name in names if (marks / name).exists()}
        early = 0
        if airlock:
            from airlock.config import loader as config_mod

            cfg = config_mod.load(c.airlock_conf)
            if window:
                out["group"] = group_outcomes(cfg, names, Path(root))
            for name, when in at.items():
                rec = NodeState(cfg, name).load() or {}
                if rec.get("verdict") not in ("pass", "warn") or \
                        not rec.get("finished_at") or when < rec["finished_at"]:
                    early += 1
        service = [when - t0 for when in at.values()]
        out.update(
            slurmd_start_s=round(started, 1), in_service=len(at), elapsed_s=round(elapsed, 1),
            service_median_s=round(statistics.median(service), 1) if service else None,
            service_p95_s=round(pct(service, 0.95), 1) if service else None,
            service_max_s=round(max(service), 1) if service else None,
            user_code_before_pass=early if airlock else None,
            rpc=rpc, rpc_total=sum(rpc.values()),
            rpc_per_node=round(sum(rpc.values()) / n, 2),
            rpc_time_ms_per_node=round(sum(v[1] for v in stats.values()) / n / 1000, 2),
            rpc_time_ms={t: round(v[1] / 1000, 1) for t, v in stats.items()},
            jobs_missing=dead)
    finally:
        c.stop()
        if reaper is not None:
            reaper.stop()
            hooks_ru = read_hook_log(hook_log)
            cpu = sum(h[1] for h in hooks_ru) + sum(s[0] for s in reaper.suites)
            max_kib = max([h[2] for h in hooks_ru] + [s[1] for s in reaper.suites] + [0])
            # The total is sampled every 0.5 s and a quick suite can finish between samples
            # (it read 0); every process's own peak comes from its rusage, so the largest one
            # is a floor for the total that no sampling luck can miss.
            out.update(hook_runs=len(hooks_ru), suites_reaped=len(reaper.suites),
                       airlock_cpu_s=round(cpu, 1),
                       airlock_cpu_s_per_node=round(cpu / n, 2),
                       max_process_rss_mib=round(max_kib / 1024, 1),
                       peak_total_rss_mib=round(max(reaper.peak_rss_kib, max_kib) / 1024, 1))
        if not out.get("jobs_missing"):
            shutil.rmtree(root, ignore_errors=True)
    return out


# --- reads mode -------------------------------------------------------------------------------
class ConfiguredCluster(ScaleCluster):
    """Nodes configured (State=UNKNOWN, never started): the controller's tables at full size."""

    def slurm_conf(self, *args, **kwargs) -> str:
        return super().slurm_conf(*args, **kwargs).replace(" State=FUTURE", " State=UNKNOWN")


def reads(n: int, version: str, repeat: int = 20) -> dict[str, Any]:
    names = [f"n{i:05d}" for i in range(n)]
    root = tempfile.mkdtemp(prefix="albr-", dir="/tmp")
    c = ConfiguredCluster(root, nodes=[], future=names, health_interval=600,
                          slurm_version=version)
    out: dict[str, Any] = {"nodes": n, "slurm": version, "calls": {}}
    try:
        c.start(wait=False)
        sdiag = sdiag_cmd(c)
        target = names[n // 2]
        fields = "NodeList:|,StateComplete:|,CPUsState:|,Reason:"
        scontrol, sinfo = c.client("scontrol"), c.client("sinfo")
        update = [scontrol, "update", f"nodename={target}"]
        calls = {
            "scontrol show node X": [[scontrol, "-o", "--future", "show", "node", target]],
            "sinfo -N -n X": [[sinfo, "-h", "-N", "-n", target, "-O", fields]],
            "drain X + resume X": [[*update, "state=drain", "reason=bench"],
                                   [*update, "state=resume"]],
        }
        for label, argvs in calls.items():
            c.run([sdiag, "-r"])
            t = time.perf_counter()
            for _ in range(repeat):
                for argv in argvs:
                    c.run(argv, check=False, timeout=300)
            wall = (time.perf_counter() - t) / repeat
            stats = parse_sdiag(c.run([sdiag]))
            stats.pop("REQUEST_STATS_INFO", None)
            out["calls"][label] = {
                "client_ms": round(wall * 1000, 1),
                "slurmctld": {t: {"count": v[0] / repeat, "ms": round(v[1] / v[0] / 1000, 3)}
                              for t, v in stats.items() if v[0]}}
            print(json.dumps({"nodes": n, "slurm": version, "call": label,
                              **out["calls"][label]}), flush=True)
    finally:
        c.stop()
        shutil.rmtree(root, ignore_errors=True)
    return out


# --- group mode -------------------------------------------------------------------------------
def simulate(n: int, culprits: int, trials: int = 200, seed: int = 1) -> dict[str, Any]:
    import random

    from airlock.groups.culprit import find_culprits

    nodes = [f"n{i:04d}" for i in range(n)]
    rnd = random.Random(seed)
    if culprits == 1:
        cases = [{x} for x in nodes]
    else:
        cases = [set(rnd.sample(nodes, culprits)) for _ in range(trials)]
    rounds, tests = [], []
    for bad in cases:
        s = find_culprits(nodes, test_round=lambda groups, bad=bad: [
            not (set(g) & bad) for g in groups], max_tests=10 * n)
        assert set(s.bad) == bad and not s.inconclusive, (bad, s)
        rounds.append(s.rounds)
        tests.append(len(s.tests))
    bound = 1 + math.ceil(math.log2(n)) + 1
    return {"members": n, "culprits": culprits, "cases": len(cases), "rounds_max": max(rounds),
            "rounds_mean": round(statistics.mean(rounds), 2), "bound": bound,
            "tests_max": max(tests), "tests_mean": round(statistics.mean(tests), 2)}


def real_group(members: int, ranks: int, culprits: int, timeout: float) -> dict[str, Any]:
    """A real group on this machine: healthy, then with culprits planted, searched."""
    import random

    from airlock.groups.batch import round_verdict
    from airlock.groups.culprit import find_culprits

    nodes = [f"m{i:03d}" for i in range(members)]
    bad = set(random.Random(7).sample(nodes, culprits))
    lock = threading.Lock()

    def test(group: list[str], planted: set[str]) -> tuple[bool | None, float]:
        argv = [sys.executable, "-m", "airlock.dev.group", "--names", ",".join(group),
                "--ranks", str(ranks), "--sizes", "4K", "--iters", "1",
                "--timeout", str(timeout)]
        for n in set(group) & planted:
            argv += ["--fault", f"{n}=allreduce_corrupt=0"]
        t = time.monotonic()
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout + 120)
        took = time.monotonic() - t
        try:
            doc = json.loads(proc.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            return None, took
        return round_verdict(group, {n: v for n, v in doc["verdicts"].items()}), took

    t0 = time.monotonic()
    healthy_ok, healthy_s = test(nodes, set())
    healthy = {"ok": healthy_ok, "seconds": round(healthy_s, 1)}
    durations: list[float] = []

    def test_round(groups: list[list[str]]) -> list[bool | None]:
        out: list[bool | None] = [None] * len(groups)

        def one(i: int) -> None:
            ok, took = test(groups[i], bad)
            out[i] = ok
            with lock:
                durations.append(took)

        threads = [threading.Thread(target=one, args=(i,)) for i in range(len(groups))]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        return out

    t1 = time.monotonic()
    s = find_culprits(nodes, test_round=test_round, max_tests=10 * members)
    return {"members": members, "ranks_per_member": ranks, "world_size": members * ranks,
            "healthy_whole_group": healthy, "planted": sorted(bad), "found": sorted(s.bad),
            "inconclusive": s.inconclusive, "rounds": s.rounds, "tests": len(s.tests),
            "bound": 1 + math.ceil(math.log2(members)) + 1,
            "search_seconds": round(time.monotonic() - t1, 1),
            "total_seconds": round(time.monotonic() - t0, 1)}


def rpc_table(runs: list[dict[str, Any]]) -> str:
    types = sorted({t for r in runs for t in r["rpc"]},
                   key=lambda t: -max(r["rpc"].get(t, 0) / r["nodes"] for r in runs))
    head = "message type".ljust(36) + "".join(
        f"{r['hooks'] + ' ' + r['slurm'] + ' N=' + str(r['nodes']):>26}" for r in runs)
    lines = [head]
    for t in types:
        lines.append(t.ljust(36) + "".join(
            f"{r['rpc'].get(t, 0) / r['nodes']:>26.2f}" for r in runs))
    lines.append("total per node".ljust(36) + "".join(f"{r['rpc_per_node']:>26.2f}" for r in runs))
    lines.append("slurmctld ms per node".ljust(36) + "".join(
        f"{r['rpc_time_ms_per_node']:>26.2f}" for r in runs))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="bench_scale")
    ap.add_argument("--nodes", type=int, nargs="+", default=[50, 100, 200])
    ap.add_argument("--slurm", nargs="+", default=["22.05"], choices=VERSIONS)
    ap.add_argument("--level", default="quick", choices=("quick", "standard"))
    ap.add_argument("--only", choices=("airlock", "baseline"))
    ap.add_argument("--timeout", type=float, default=900)
    ap.add_argument("--json", default="", help="also write every run here")
    ap.add_argument("--group", action="store_true", help="group mode (see the docstring)")
    ap.add_argument("--members", type=int, default=0, help="group mode: a real group of this "
                    "many members (0: the simulation only)")
    ap.add_argument("--ranks", type=int, default=1, help="group mode: ranks per member")
    ap.add_argument("--culprits", type=int, default=1, help="group mode: members planted bad")
    ap.add_argument("--group-timeout", type=float, default=120.0)
    ap.add_argument("--window", type=float, default=0.0, help="[registration] group_window: "
                    "the joining nodes test in batches (tiny tensors, one CPU rank per node)")
    ap.add_argument("--window-max", type=int, default=16, help="[registration] group_max")
    ap.add_argument("--window-concurrency", type=int, default=1,
                    help="[registration] group_concurrency (this machine: all members' "
                    "launchers share its 2 cores and 24 GiB)")
    ap.add_argument("--reads", type=int, nargs="*", default=None,
                    help="reads mode: cluster sizes (see the docstring)")
    args = ap.parse_args(argv)
    if args.group:
        return group_main(args)
    if args.reads:
        runs = [reads(n, v) for v in args.slurm for n in args.reads]
        if args.json:
            Path(args.json).write_text(json.dumps(runs, indent=1))
        return 0
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    window = {"group_window": args.window, "group_max": args.window_max,
              "group_concurrency": args.window_concurrency} if args.window else None
    runs = []
    for version in args.slurm:
        for n in args.nodes:
            for airlock in (True, False):
                if args.only and args.only != ("airlock" if airlock else "baseline"):
                    continue
                r = join(n, version, airlock, args.level, args.timeout, window)
                runs.append(r)
                print(json.dumps({k: v for k, v in r.items()
                                  if k not in ("rpc", "rpc_time_ms")}), flush=True)
    print()
    print(rpc_table(runs))
    if args.json:
        Path(args.json).write_text(json.dumps(runs, indent=1))
    return 0


def group_main(args) -> int:
    out: dict[str, Any] = {"simulated": []}
    for n in (16, 64, 256):
        for k in (1, 2):
            r = simulate(n, k)
            out["simulated"].append(r)
            print(json.dumps(r), flush=True)
    if args.members:
        out["real"] = real_group(args.members, args.ranks, args.culprits, args.group_timeout)
        print(json.dumps(out["real"]), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
