"""Multi-node all-reduce: one member per node, one process per local device.

Used by the on-demand group check (launched on every target by srun) and by registration
batches (launched by each member's registration suite). Every process of every node joins one
torch.distributed group (NCCL on GPUs, gloo on CPU) through a TCP rendezvous on the first node,
runs a message-size sweep, verifies the reduced values exactly and reports algbw and busbw.
The member's processes run in their own process group, killed whole on timeout.

Node-scoped fault switches (airlock/faults.py), read on the faulty node itself:
  group_corrupt = 1       this node's first process contributes a wrong value
  group_slow = SECONDS    this node's first process sleeps before each collective
  group_hang = 1          this node's first process never joins the collectives
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from typing import Any

from airlock import faults as faults_mod

MARK = "AIRLOCK-GROUPRANK "


def verdict_group(ranks: list[dict[str, Any]], expected: int, floor_gbps: float,
                  timed_out: bool) -> dict[str, Any]:
    """Combine every local process's report into this member's answer."""
    if timed_out:
        return {"ok": False, "detail": "timeout", "figures": {}}
    if len(ranks) < expected:
        return {"ok": False, "detail": f"{expected - len(ranks)} process(es) died", "figures": {}}
    bad = [r for r in ranks if r.get("error")]
    if bad:
        return {"ok": False, "detail": bad[0]["error"][:160], "figures": {}}
    wrong = [r for r in ranks if r["mismatches"]]
    if wrong:
        r = wrong[0]
        return {"ok": False, "detail": f"wrong result: {r['mismatches']} elements "
                f"(got {r['got']}, expected {r['expected']})", "figures": {}}
    busbw = min(r["busbw_gbps"] for r in ranks)
    figures = {"busbw_gbps": round(busbw, 4), "algbw_gbps": round(min(r["algbw_gbps"]
               for r in ranks), 4), "world": ranks[0]["world"], "floor": floor_gbps}
    if floor_gbps and busbw < floor_gbps:
        return {"ok": False, "detail": f"busbw {busbw:.3g} GB/s < floor {floor_gbps:g}",
                "figures": figures}
    return {"ok": True, "detail": f"busbw {busbw:.3g} GB/s", "figures": figures}


def local_process_count() -> int:
    try:
        import torch

        if torch.cuda.is_available():
            return torch.cuda.device_count()
    except ImportError:
        pass
    return 1


def run_member(cfg, node: str, nodes: list[str], master: str, port: int,
               level: str = "standard", timeout: float | None = None) -> dict[str, Any]:
    from airlock.ondemand import group_floor
    from airlock.sku import select

    local = local_process_count()
    idx = nodes.index(node)
    world = local * len(nodes)
    timeout = timeout or cfg.ondemand.group_timeout
    faults = faults_mod.active(cfg, node)
    sizes = cfg.ondemand.group_sizes_mb if level != "deep" else \
        [*cfg.ondemand.group_sizes_mb, 4 * max(cfg.ondemand.group_sizes_mb)]
    try:
        from airlock import nvml

        snap = nvml.gather(nvml.backend_for(cfg, node), cfg.nvml.timeout)
        profile = select(snap.models, snap.count, cfg.profile.name)
        profile_floor = float(profile.get("group_busbw_floor_gbps", 0.0) or 0.0)
    except Exception:  # a missing profile must not stop the group test; no floor then
        profile_floor = 0.0
    floor = group_floor(cfg, profile_floor)
    procs = []
    env = dict(os.environ)
    env.setdefault("PATH", "/usr/bin:/bin")
    for lr in range(local):
        argv = [sys.executable, "-m", "airlock.checks.groupcheck", "--master", master,
                "--port", str(port), "--rank", str(idx * local + lr), "--world", str(world),
                "--local-rank", str(lr), "--sizes", ",".join(str(s) for s in sizes),
                "--timeout", str(timeout)]
        if lr == 0:
            for key in ("group_corrupt", "group_slow", "group_hang"):
                if key in faults:
                    argv += ["--fault", f"{key}={faults[key]}"]
        procs.append(subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True, env=env, start_new_session=True,
                                      stdin=subprocess.DEVNULL))
    deadline = time.monotonic() + timeout
    reports: list[dict[str, Any]] = []
    timed_out = False
    for p in procs:
        try:
            out, err = p.communicate(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            timed_out = True
            break
        for line in out.splitlines():
            if line.startswith(MARK):
                reports.append(json.loads(line[len(MARK):]))
                break
        else:
            tail = err.strip().splitlines()
            reports.append({"error": f"process died: {tail[-1] if tail else p.returncode}"})
    for p in procs:  # the hung ones, and anything they started
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        p.wait()
    result = verdict_group(reports, local, floor, timed_out)
    result["node"] = node
    return result


def _worker(args: argparse.Namespace) -> dict[str, Any]:
    from datetime import timedelta

    import torch
    import torch.distributed as dist

    faults = faults_mod.parse(",".join(args.fault))
    cuda = torch.cuda.is_available()
    device = torch.device(f"cuda:{args.local_rank}") if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if cuda else "gloo",
                            init_method=f"tcp://{args.master}:{args.port}", rank=args.rank,
                            world_size=args.world, timeout=timedelta(seconds=args.timeout))
    if "group_hang" in faults:
        time.sleep(args.timeout * 10)
    slow = float(faults.get("group_slow", 0) or 0)
    contribution = args.rank + (2 if "group_corrupt" in faults else 1)
    expected = args.world * (args.world + 1) // 2  # exact in fp32 for any sane world size
    factor = 2 * (args.world - 1) / args.world
    algbw = busbw = 0.0
    mismatches, got = 0, expected
    for size_mb in args.sizes:
        n = max(1, int(size_mb * (1 << 20) / 4))
        buf = torch.empty(n, dtype=torch.float32, device=device)
        iters = 5
        elapsed = 0.0
        for i in range(iters + 1):
            buf.fill_(contribution)
            if slow:
                time.sleep(slow)
            if cuda:
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            dist.all_reduce(buf)
            if cuda:
                torch.cuda.synchronize()
            if i:  # the first is the warm-up
                elapsed += time.perf_counter() - t0
            if i == iters:
                wrong = buf != expected
                mismatches = int(wrong.sum().item())
                if mismatches:
                    got = float(buf[wrong.nonzero()[0]].item())
        algbw = n * 4 / (elapsed / iters) / 1e9
        busbw = algbw * factor
        if mismatches:
            break
    dist.destroy_process_group()
    return {"rank": args.rank, "world": args.world, "algbw_gbps": algbw, "busbw_gbps": busbw,
            "mismatches": mismatches, "got": got, "expected": expected}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m airlock.checks.groupcheck")
    p.add_argument("--master", required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--world", type=int, required=True)
    p.add_argument("--local-rank", type=int, default=0)
    p.add_argument("--sizes", type=lambda s: [float(x) for x in s.split(",")], default=[1.0])
    p.add_argument("--timeout", type=float, default=120)
    p.add_argument("--fault", action="append", default=[])
    args = p.parse_args(argv)
    try:
        report = _worker(args)
    except Exception as exc:  # noqa: BLE001 - reported to the member as this rank's error
        report = {"rank": args.rank, "error": f"{type(exc).__name__}: {exc}"}
    print(MARK + json.dumps(report), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
