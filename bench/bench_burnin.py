"""Verified burn-in throughput against a raw torch.matmul loop on the same devices, measured side
by side in one run (interleaved rounds, so a busy machine slows both alike).

* raw: one thread per device, `torch.matmul(a, b, out=c)` in a loop, nothing else;
* burn-in: airlock.checks.burnin.run_dtype on the same devices, same size and GEMM count,
  timed whole: inputs, float64 golden sums, per-chunk fingerprints, the final verification.

Both are reported as aggregate TFLOPS over wall time; the ratio's goal is >= 0.95. On a machine
without GPUs the devices are the burn-in's CPU "devices" (one core each), and the CPU is shared
with whatever else runs, so the ratio of work per CPU-second (process CPU time) is printed too:
it is what the verification costs, whatever the neighbours do. Rounds alternate which side goes
first. On GPUs pass --duration to time the burn-in's duration mode instead of a fixed count.

    python bench/bench_burnin.py [--size 512] [--gemms 64] [--dtype fp32] [--rounds 5]
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time

import torch

from airlock.checks import burnin
from airlock.checks.device_plan import bench_devices


def raw(devices: list[str], size: int, gemms: int, dtype: str) -> tuple[float, float]:
    """Aggregate TFLOPS of a bare matmul loop on every device at once."""
    dt = burnin._torch_dtype(torch, dtype)
    gen = torch.Generator().manual_seed(1)
    a_host = torch.randn(size, size, generator=gen).to(dt)
    b_host = torch.randn(size, size, generator=gen).to(dt)
    prepared = []
    for d in devices:
        dev = burnin._tdev(d)
        a, b = a_host.to(dev), b_host.to(dev)
        c = torch.empty(size, size, dtype=dt, device=dev)
        torch.matmul(a, b, out=c)
        burnin._sync(torch, dev)
        prepared.append((dev, a, b, c))

    def loop(dev, a, b, c) -> None:
        for _ in range(gemms):
            torch.matmul(a, b, out=c)
        burnin._sync(torch, dev)

    threads = [threading.Thread(target=loop, args=p) for p in prepared]
    start, cpu = time.perf_counter(), time.process_time()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    work = 2.0 * size**3 * gemms * len(devices) / 1e12
    return work / wall, work / cpu


def verified(devices: list[tuple[str, str]], size: int, gemms: int, dtype: str,
             duration: float) -> tuple[float, float, bool, float]:
    """Aggregate TFLOPS of the whole verified burn-in of one dtype: over wall time end to end
    (inputs, reference sums and final checks included), per CPU-second, whether it verified,
    and the figure the burn-in itself reports and judges (each device's median chunk)."""
    plan = burnin.Plan(size=size, dtypes=[dtype], duration=duration, iterations=gemms,
                       thread_clock=not devices[0][0].startswith("cuda"))
    start, cpu = time.perf_counter(), time.process_time()
    runs = burnin.run_dtype(torch, devices, dtype, plan, {})
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    # Correctness only: speed verdicts (floors, stragglers) are not what this measures.
    bad = [r for r in runs if r.error or r.mismatches or r.unstable
           or not r.golden_error <= burnin.TOLERANCE[r.dtype]]
    work = 2.0 * size**3 * sum(r.gemms for r in runs) / 1e12
    return work / wall, work / cpu, not bad, sum(r.tflops for r in runs)


def compare(devices: list[tuple[str, str]], size: int, gemms: int, dtype: str, rounds: int,
            duration: float = 0.0) -> dict:
    """Raw and verified TFLOPS of one dtype, `rounds` interleaved rounds (alternating which goes
    first); medians and per-round ratios. On GPUs a duration calibrates the raw loop to the
    verified run's length."""
    names = [d for d, _m in devices]
    on_gpu = devices[0][0].startswith("cuda")
    if on_gpu and duration:
        t = time.perf_counter()
        raw(names, size, 10, dtype)
        gemms = max(10, int(10 * duration / (time.perf_counter() - t)))
    raw_r, ver_r, rep_r, ratios, rep_ratios, cpu_ratios = [], [], [], [], [], []
    for i in range(rounds):
        if i % 2:
            r, r_cpu = raw(names, size, gemms, dtype)
        v, v_cpu, ok, reported = verified(devices, size, gemms, dtype, duration if on_gpu else 0)
        if not i % 2:
            r, r_cpu = raw(names, size, gemms, dtype)
        if not ok:
            raise SystemExit("burn-in did not pass on this machine; fix that first")
        raw_r.append(r)
        ver_r.append(v)
        rep_r.append(reported)
        ratios.append(v / r)
        rep_ratios.append(reported / r)
        cpu_ratios.append(v_cpu / r_cpu)
    out = {"devices": names, "model": devices[0][1], "size": size, "dtype": dtype,
           "gemms": gemms, "rounds": rounds, "duration_s": duration,
           "raw_tflops": statistics.median(raw_r),
           "burnin_tflops": statistics.median(ver_r), "ratio": statistics.median(ratios),
           "ratio_min": min(ratios), "ratio_max": max(ratios),
           "burnin_reported_tflops": statistics.median(rep_r),
           "ratio_reported": statistics.median(rep_ratios)}
    if not on_gpu:
        out["ratio_per_cpu_second"] = statistics.median(cpu_ratios)
    return out


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--size", type=int, default=512)
    p.add_argument("--gemms", type=int, default=64, help="GEMMs per device (CPU/fixed mode)")
    p.add_argument("--dtype", default="fp32", choices=tuple(burnin.TOLERANCE))
    p.add_argument("--rounds", type=int, default=9)
    p.add_argument("--cpu-devices", type=int, default=2)
    p.add_argument("--duration", type=float, default=0.0, help="GPU: seconds per round")
    args = p.parse_args()
    devices = bench_devices(torch, args.cpu_devices)
    on_gpu = devices[0][0].startswith("cuda")
    if not on_gpu:
        torch.set_num_threads(1)  # as the burn-in does: one core per CPU "device"
    c = compare(devices, args.size, args.gemms, args.dtype, args.rounds, args.duration)
    print(f"devices: {', '.join(c['devices'])} ({c['model']}), size {args.size}, {args.dtype}, "
          f"{c['gemms']} GEMMs per device per round, {args.rounds} rounds")
    print(f"raw torch.matmul       {c['raw_tflops']:.4f} TFLOPS (median)")
    print(f"verified burn-in       {c['burnin_tflops']:.4f} TFLOPS (median, end to end)")
    print(f"ratio verified/raw     {c['ratio']:.3f} (median of per-round ratios; "
          f"min {c['ratio_min']:.3f}, max {c['ratio_max']:.3f}; goal >= 0.95)")
    print(f"burn-in's own figure   {c['burnin_reported_tflops']:.4f} TFLOPS (median chunk), "
          f"ratio {c['ratio_reported']:.3f}")
    if not on_gpu:
        print(f"ratio per CPU-second   {c['ratio_per_cpu_second']:.3f} (median)")


if __name__ == "__main__":
    main()
