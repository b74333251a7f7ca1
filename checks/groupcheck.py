"""Multi-node all-reduce: one member per node, one rank per local GPU (one rank on CPU).

Used by the on-demand group check (launched on every target by srun) and by registration
batches (launched by each member's registration suite). Each member runs airlock.collective's
launcher for its node in a process of its own, with a hard timeout, so every rank of every
node joins one torch.distributed group (NCCL on GPUs, gloo on CPU) through the rendezvous store
hosted by the first node. The member judges its own node's report with the same verdict as the
intra-node all-reduce check.

Node-scoped fault switches (airlock/hw/faults.py), read on the faulty node itself, so the node's
intra-node checks stay clean and only the multi-node test can catch it:
  group_corrupt = 1       this node's first rank sends wrong data
  group_slow = SECONDS    this node's first rank sleeps before each collective
  group_hang = 1          this node's first rank never joins the collectives
"""

from __future__ import annotations

import os
import signal
from typing import Any

from airlock import collective as dist
from airlock import proc as proc_mod
from airlock.checks.allreduce_verdict import verdict_allreduce
from airlock.checks.base import Verdict
from airlock.collective.params import EXIT_UNMEASURED
from airlock.hw import faults as faults_mod
from airlock.hw import nvml
from airlock.hw.profiles import select

CHECK = "group_allreduce"


def fault_switches(node_faults: dict[str, str]) -> str:
    """Translate the node's group_* switches into airlock.collective's per-rank switches."""
    out = []
    if "group_corrupt" in node_faults:
        out.append("allreduce_corrupt=0")
    if "group_slow" in node_faults:
        out.append(f"allreduce_slow=0:{float(node_faults['group_slow'] or 1):g}")
    if "group_hang" in node_faults:
        out.append("allreduce_hang=0")
    return ",".join(out)


def local_ranks(cfg, node: str) -> int:
    """GPUs that real NVML sees here (without importing torch), else one CPU rank. Every member
    must agree on this, so a heterogeneous group fails its rendezvous rather than guess."""

    try:
        snap = nvml.gather(nvml.backend_for(cfg, node), cfg.nvml.timeout)
    except nvml.NvmlError:
        return 1
    return snap.count if snap.source == "nvml" and snap.count else 1


def group_floor(cfg, profile_floor: float) -> float:
    """[ondemand] group_busbw_floor_gbps when set, else the profile's group floor."""
    return cfg.ondemand.group_busbw_floor_gbps or profile_floor


# Progress steps (airlock.collective.rank) at which a rank waits for nobody: after it joined the
# group and before its first collective. A rank still there when the run timed out is stuck in
# its own node; a rank at any other step was waiting for the others (the rendezvous, a
# collective) or never reached the store, which says nothing about its node.
LOCAL_STEPS = frozenset({1})


def _own_stuck(sweep, own: range) -> list[int]:
    """Our ranks the timeout caught where the fault can only be ours: at a local step, or
    behind every other rank (the host's launcher sees everyone's progress)."""
    mine = [r for r in own if r in sweep.progress]
    local = [r for r in mine if sweep.progress[r][0] in LOCAL_STEPS]
    if local:
        return local
    others = [r for r in sweep.progress if r not in own]
    lag = sweep.laggards
    if others and lag and set(lag) <= set(own):
        return lag
    return []


def judge(report: dict[str, Any] | None, rc: int, stderr: str, floor_gbps: float,
          straggler_fraction: float, timeout: float) -> dict[str, Any]:
    """This member's answer {ok, detail, figures, inconclusive} from its node's launcher report.

    inconclusive: the run says nothing about this node (its rendezvous failed, its launcher
    never reported, or it timed out with this node's ranks waiting on the others: the round
    timed out as a whole). A group round with no failure but such answers has no verdict: it is
    retried smaller or later, never counted against its members."""

    def answer(ok: bool, detail: str, figures: dict | None = None, inconclusive: bool = False):
        return {"ok": ok, "detail": detail[:160], "figures": figures or {},
                "inconclusive": inconclusive}

    if report is None:
        if rc in (-signal.SIGKILL, 124):
            return answer(False, f"timeout after {timeout:g}s (the launcher never reported)",
                          inconclusive=True)
        tail = stderr.strip().splitlines()
        if rc == EXIT_UNMEASURED:  # it could not take part (the run's secret): no verdict
            return answer(False, f"not measured: {tail[-1] if tail else rc}", inconclusive=True)
        return answer(False, f"launcher failed: {tail[-1] if tail else rc}")
    sweep = dist.combine([report])
    # The other nodes' ranks report to their own members; only ours can be missing here.
    offset, local = int(report.get("rank_offset", 0)), int(report.get("local_ranks", 0))
    own = range(offset, offset + local)
    sweep.missing = [r for r in sweep.missing if r in own]
    outcome = verdict_allreduce(sweep, floor_gbps, straggler_fraction)
    if outcome.verdict is Verdict.ERROR:  # the group never met (typed by the launcher)
        return answer(False, outcome.detail, outcome.figures, inconclusive=True)
    if not outcome.failed:
        return answer(True, outcome.detail, outcome.figures)
    if sweep.timed_out and not sweep.leftover and not _own_stuck(sweep, own):
        return answer(False, outcome.detail, outcome.figures, inconclusive=True)
    return answer(False, outcome.detail, outcome.figures)


def run_member(cfg, node: str, nodes: list[str], master: str, port: int,
               level: str = "standard", timeout: float | None = None,
               secret_file: str = "") -> dict[str, Any]:

    timeout = timeout or cfg.ondemand.group_timeout
    idx = nodes.index(node)
    local = local_ranks(cfg, node)
    try:

        snap = nvml.gather(nvml.backend_for(cfg, node), cfg.nvml.timeout)
        profile = select(snap.models, snap.count, cfg.profile.name)
        profile_floor = float(profile.get("group_busbw_floor_gbps", 0.0) or 0.0)
    except Exception:  # no profile: no floor, correctness is still verified
        profile_floor = 0.0
    sizes = [int(mb * (1 << 20)) for mb in cfg.ondemand.group_sizes_mb]
    if level == "deep":
        sizes.append(4 * max(sizes))
    argv = dist.worker_argv(master, port, local * len(nodes), idx * local, local,
                            host_store=idx == 0, node=node, secret_file=secret_file,
                            level="deep" if level == "deep" else "standard", sizes=sizes,
                            timeout=timeout,
                            faults=fault_switches(faults_mod.active(cfg, node)))
    env = dict(os.environ)
    env.setdefault("PATH", "/usr/bin:/bin")
    done = proc_mod.run(argv, timeout + 30, env=env)  # the launcher's own timeout first
    # killed at our deadline: the exit a SIGKILL gives, as before the process helper
    rc = -signal.SIGKILL if done.returncode is None else done.returncode
    result = judge(dist.parse_report(done.stdout), rc, done.stderr,
                   group_floor(cfg, profile_floor), cfg.allreduce.straggler_fraction, timeout)
    result["node"] = node
    return result
