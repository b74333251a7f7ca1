"""One rank of the sweep: join the group, run the verified rounds and the timed loop per size,
and report what it saw (see airlock.collective.report.combine for how reports are read)."""

from __future__ import annotations

import statistics
import time
from typing import Any

from airlock.collective import rendezvous
from airlock.collective.params import KEY, SweepParams
from airlock.collective.pattern import (
    ELEMENT,
    contribution_values,
    expected_values,
    human_bytes,
    pattern_modulus,
    tiled,
)
from airlock.hw import faults as faults_mod

SLOW_DEFAULT_S = 0.02  # allreduce_slow=RANK: seconds slept before each collective


def _fault_rank(faults: dict[str, str], name: str, local_rank: int, default: float
                ) -> float | None:
    arg = faults_mod.device_arg(faults.get(name), default)
    return arg[1] if arg and arg[0] == local_rank else None


def _sync(torch, device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def run_rank(rank: int, local_rank: int, world_size: int, spec: dict[str, Any],
             params: SweepParams, backend: str, faults: dict[str, str], node: str
             ) -> dict[str, Any]:
    """One rank's whole sweep, meeting the others through the launcher's rendezvous spec.
    Returns its report (see combine for the fields)."""
    from datetime import timedelta

    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)  # ranks share the cores; gloo has threads of its own
    timeout = timedelta(seconds=params.timeout)
    rendezvous.bind_collectives(spec)
    store = rendezvous.connect(spec, world_size, params.timeout)

    def progress(step: int, label: str) -> None:
        store.set(f"{KEY}p/{rank}", f"{step}|{label}")

    progress(0, "connected")
    if backend == "nccl":
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    dist.init_process_group(backend, store=dist.PrefixStore("pg/", store), rank=rank,
                            world_size=world_size, timeout=timeout)
    progress(1, "joined")
    dtype = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[params.dtype]
    m = pattern_modulus(world_size, params.dtype)
    slow = _fault_rank(faults, "allreduce_slow", local_rank, SLOW_DEFAULT_S)
    corrupt = _fault_rank(faults, "allreduce_corrupt", local_rank, 1.0)
    hang = _fault_rank(faults, "allreduce_hang", local_rank, 0.0)
    report: dict[str, Any] = {"rank": rank, "local_rank": local_rank, "node": node,
                              "device": str(device), "sizes": [], "verify": []}
    for si, nbytes in enumerate(params.sizes):
        numel = max(1, nbytes // ELEMENT[params.dtype])
        label = human_bytes(numel * ELEMENT[params.dtype])
        if hang is not None:  # allreduce_hang: this rank never joins the collective
            while True:
                time.sleep(3600)
        progress(2 + 2 * si, f"verify {label}")
        x = tiled(torch, contribution_values(rank, m), numel, dtype, device)
        if corrupt is not None:  # allreduce_corrupt: this rank's buffer holds one wrong value
            x[numel // 2] += 1
        sent = tiled(torch, contribution_values(rank, m), numel, dtype, device)
        sent_bad = x != sent
        v: dict[str, Any] = {"bytes": numel * ELEMENT[params.dtype],
                             "sent_bad": int(sent_bad.sum().item())}
        if v["sent_bad"]:
            v["sent_first"] = int(sent_bad.nonzero()[0].item())
        if slow:
            time.sleep(slow)
        dist.all_reduce(x)
        _sync(torch, device)
        exp = tiled(torch, expected_values(world_size, m), numel, dtype, device)
        wrong = x != exp
        v["bad"] = int(wrong.sum().item())
        if v["bad"]:
            j = int(wrong.nonzero()[0].item())
            v.update(first=j, expected=float(exp[j].item()), got=float(x[j].item()))
        report["verify"].append(v)
        del x, exp, wrong, sent, sent_bad
        progress(3 + 2 * si, f"timed {label}")
        report["sizes"].append(_timed(torch, dist, numel, dtype, device, params, slow))
    fence = torch.zeros(1, device=device)
    dist.all_reduce(fence)  # every rank is past the sweep before anyone leaves
    _sync(torch, device)
    progress(2 + 2 * len(params.sizes), "done")
    store.add(f"{KEY}done", 1)
    dist.destroy_process_group()
    return report


def _timed(torch, dist, numel: int, dtype, device, params: SweepParams,
           slow: float | None) -> dict[str, Any]:
    buf = torch.zeros(numel, dtype=dtype, device=device)
    for _ in range(params.warmup):
        dist.all_reduce(buf)
    fence = torch.zeros(1, device=device)
    dist.all_reduce(fence)  # start the clock together
    _sync(torch, device)
    own: list[float] = []
    start = mark = time.perf_counter()
    for _ in range(params.iters):
        if slow:
            time.sleep(slow)
        call = time.perf_counter()
        own.append(call - mark)
        dist.all_reduce(buf)
        mark = time.perf_counter()
    _sync(torch, device)
    loop = time.perf_counter() - start
    return {"bytes": numel * buf.element_size(), "iters": params.iters, "loop_s": loop,
            "own_median_s": statistics.median(own)}

