"""All-reduce busbw measured by Airlock's sweep (airlock/collective.py: verified rounds, progress
marks, per-iteration straggler timing) against a bare torch.distributed all_reduce loop, side by
side in one run (interleaved rounds, alternating which goes first).

* raw: N forked processes, init_process_group, warm-up, then `dist.all_reduce(buf)` ITERS times;
  the slowest rank's loop time gives algbw and busbw = algbw * 2(n-1)/n;
* airlock: dist.run_local with the same ranks, size, warm-up and iterations.

The ratio airlock/raw has a goal of >= 0.95. gloo on the CPU here; NCCL where GPUs are.

    python bench/bench_allreduce.py [--ranks 2] [--size 16M] [--iters 20] [--rounds 5]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import socket
import statistics
import time

from airlock import collective as dist


def _raw_rank(rank: int, world: int, port: int, nbytes: int, iters: int, warmup: int,
              backend: str, q) -> None:
    from datetime import timedelta

    import torch
    import torch.distributed as tdist

    torch.set_num_threads(1)
    tdist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                             world_size=world, timeout=timedelta(seconds=60))
    device = torch.device("cuda", rank) if backend == "nccl" else torch.device("cpu")
    if backend == "nccl":
        torch.cuda.set_device(device)
    buf = torch.zeros(nbytes // 4, dtype=torch.float32, device=device)
    for _ in range(warmup):
        tdist.all_reduce(buf)
    tdist.all_reduce(torch.zeros(1, device=device))
    if backend == "nccl":
        torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(iters):
        tdist.all_reduce(buf)
    if backend == "nccl":
        torch.cuda.synchronize()
    q.put(time.perf_counter() - start)
    tdist.destroy_process_group()


def raw(world: int, nbytes: int, iters: int, warmup: int, backend: str) -> float:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("fork")  # as Airlock's launcher: torch is already imported
    q = ctx.Queue()
    procs = [ctx.Process(target=_raw_rank, args=(r, world, port, nbytes, iters, warmup,
                                                 backend, q)) for r in range(world)]
    for p in procs:
        p.start()
    times = [q.get(timeout=120) for _ in procs]
    for p in procs:
        p.join()
    t = max(times) / iters
    return nbytes / t / 1e9 * dist.bus_factor(world)


def airlock(world: int, nbytes: int, iters: int, warmup: int) -> float:
    params = dist.SweepParams([nbytes], iters, warmup, "fp32", "auto", 120)
    report = dist.run_local(world, params)
    sweep = dist.combine([report])
    if sweep.errors or sweep.timed_out or sweep.wrong_sum or sweep.sent_bad:
        raise SystemExit(f"the sweep did not pass: {sweep.to_dict()}")
    return sweep.sizes[-1].busbw_gbps


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--ranks", type=int, default=0, help="0 = GPUs here, else 2")
    p.add_argument("--size", default="16M")
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args()
    import torch  # noqa: F401 - imported once here, inherited by every forked rank

    world = args.ranks or dist.local_gpu_count() or 2
    backend = dist.resolve_backend("auto", world)
    (nbytes,) = dist.parse_sizes(args.size)
    raw_r, ours, ratios = [], [], []
    for i in range(args.rounds):
        if i % 2:
            r = raw(world, nbytes, args.iters, args.warmup, backend)
        a = airlock(world, nbytes, args.iters, args.warmup)
        if not i % 2:
            r = raw(world, nbytes, args.iters, args.warmup, backend)
        raw_r.append(r)
        ours.append(a)
        ratios.append(a / r)
    print(f"{world} ranks, {backend}, {args.size} messages, {args.iters} iterations, "
          f"{args.rounds} rounds")
    print(f"raw all_reduce loop    busbw {statistics.median(raw_r):.3f} GB/s (median)")
    print(f"airlock sweep          busbw {statistics.median(ours):.3f} GB/s (median)")
    print(f"ratio airlock/raw      {statistics.median(ratios):.3f} (median of per-round ratios; "
          f"min {min(ratios):.3f}, max {max(ratios):.3f}; goal >= 0.95)")


if __name__ == "__main__":
    main()
