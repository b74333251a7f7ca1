"""Intra-node all-reduce: one process per local GPU (NCCL), or [allreduce] cpu_ranks processes on
the CPU (gloo), through airlock/collective.py, which the group check also runs across nodes.

The verdict is checks/allreduce_verdict.py's, the same one that judges the group check's sweep.
"""

from __future__ import annotations

from airlock import collective as dist
from airlock.checks.allreduce_verdict import CHECK, verdict_allreduce
from airlock.checks.base import Outcome, skipped
from airlock.checks.device_plan import plan as device_plan
from airlock.checks.device_plan import unusable
from airlock.config.sections.checks import AllreduceSection


def check_allreduce(ctx) -> Outcome:
    import torch  # in the check's own process only (it never initialises CUDA: ranks fork)

    cfg: AllreduceSection = ctx.cfg.allreduce
    where = device_plan(ctx, torch, cfg.cpu_ranks, fork=True)
    if where.problem:
        return unusable(CHECK, where)
    ranks = len(where.devices)
    if ranks < 2:
        return skipped(CHECK, "one device: nothing to all-reduce within the node")
    params = dist.params_for(cfg, on_gpu=where.on_gpu, level=ctx.level)
    if params.backend == "auto":  # the plan decided: NCCL on the matched GPUs, else gloo
        params.backend = "nccl" if where.on_gpu else "gloo"
    report = dist.run_local(ranks, params, ctx.faults, node=ctx.node)
    sweep = dist.combine([report])
    floor = float(where.profile.get("busbw_floor_gbps") or 0.0)
    out = verdict_allreduce(sweep, floor, cfg.straggler_fraction)
    out.figures.update(where.figures(), backend=report["backend"])
    return out
