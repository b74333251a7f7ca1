"""Fault injection switches for tests and demos. All are off unless explicitly set.

Two sources, merged (the environment wins):
  * $AIRLOCK_FAULTS, e.g. "gemm_corrupt=1,slow_device=0:0.5" (for `airlock check` by hand);
  * the NVML simulation file, per node: {"nodes": {"node3": {"faults": {"hang_check": "burnin"}}}}
    (for the dev cluster, whose hooks run with an almost empty environment).

Switches (name = value: effect):
  hang_check = CHECK            the named check sleeps forever (its timeout must catch it)
  fail_check = CHECK            the named check raises an error
  gemm_corrupt = DEVICE         burn-in: one element of DEVICE's GEMM result goes wrong (scaled
                                as by a flipped exponent bit), at row 1, column 1
  gemm_slow = DEVICE[:FACTOR]   burn-in: DEVICE runs FACTOR (default 0.3) of its speed (it
                                sleeps on a GPU, spins on a CPU "device")
  alloc_fail = DEVICE           burn-in/memtest: allocation on DEVICE fails
  memtest_corrupt = DEVICE      memory test: bit 5 of word 1000 on DEVICE reads back flipped
  allreduce_slow = RANK[:SECONDS] all-reduce: RANK sleeps SECONDS (default 0.02) before each
                                collective
  allreduce_corrupt = RANK      all-reduce: RANK contributes a wrong value (one element + 1)
  allreduce_hang = RANK         all-reduce: RANK never joins the collective
  pcie_slow = DEVICE[:FACTOR]   pcie_bw: DEVICE's host<->device copies run at FACTOR (default
                                0.3) of their speed (it loses the time inside the timed copies)
  p2p_slow = A-B[:FACTOR]       p2p: copies from local device A to local device B run at FACTOR
                                (default 0.3) of their speed
  DEVICE is the index of a local device (cuda:N, or the CPU "device" cpuN); RANK is a local
  rank on the node whose switch it is (in a multi-node run, global rank = offset + RANK).
  flaky_check = CHECK           the named check fails on its first attempt only
  hook_crash = HOOK             the named hook (healthcheck, prolog, epilog) raises an error
                                right after loading its config, to prove the failure policy:
                                closed on an unproven boot, open (and visible) on a proven one
  recover_crash = POINT[:ACTION] airlock recover SIGKILLs itself at POINT: after_intent (intent
                                committed, nothing sent) or after_submit (sent, answer not saved),
                                only for ACTION (reboot|replace) when given

Hardware faults for the quick checks (ECC, row remap, XID, NVLink, lost GPU, hung NVML, ...) are
not switches: they are fields of the node's GPUs in the NVML simulation file (airlock/hw/nvml.py).
So is CUDA: a node entry's "cuda" says what torch could use of the simulated GPUs
(checks/device_plan.py): absent = ask the real torch (a CPU-only torch then sees none and the node
fails `cuda`); {"stand_in": true} = every simulated GPU, run on CPU stand-ins (the dev
cluster's default); "hide": [INDEX, ...] = those GPUs invisible to CUDA; "error": "TEXT" =
CUDA's error text (e.g. "CUDA error 802: system not yet initialized").
Nor are these, each injected through the real interface its check reads:
  a flapping RDMA port          the port's files under [system] sys_root: `state` and
                                `counters/link_downed`, bumped between runs (checks/flaps.py)
  a DCGM failure or hang        [dcgm] dcgmi pointing at tests/data/dcgm/fake-dcgmi, which
                                replays a recorded `dcgmi diag -j` output or hangs (FAKE_DCGMI)
"""

from __future__ import annotations

import os
from typing import Any

from airlock.hw.nvml import NvmlError, read_simulation

ENV_VAR = "AIRLOCK_FAULTS"


def parse(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        key, _, value = item.partition("=")
        out[key.strip()] = value.strip() or "1"
    return out


def active(cfg: Any = None, node: str = "") -> dict[str, str]:
    faults: dict[str, str] = {}
    if cfg is not None and node and getattr(cfg.nvml, "simulate", ""):

        try:
            sim = read_simulation(cfg.nvml.simulate, node).get("faults", {})
        except NvmlError:
            sim = {}
        if isinstance(sim, dict):
            faults.update({str(k): str(v) for k, v in sim.items()})
    faults.update(parse(os.environ.get(ENV_VAR, "")))
    return faults


def device_arg(value: str | None, default_factor: float) -> tuple[int, float] | None:
    """'2' -> (2, default); '2:0.5' -> (2, 0.5); None -> None."""
    if value is None:
        return None
    dev, _, factor = value.partition(":")
    return int(dev), float(factor) if factor else default_factor
