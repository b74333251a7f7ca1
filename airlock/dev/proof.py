"""Record a finished registration of this machine's current boot, as the registration suite
does, for tests and benchmarks that need a proven (or failed) boot without running the suite."""

from __future__ import annotations

import os

from airlock.config import loader as config
from airlock.hooks.healthcheck import SETTLE_S
from airlock.hw import boot
from airlock.records import proof as nodestate


def prove_boot(cfg_or_path, node: str, verdict: str = "pass", settled: bool = True) -> dict:
    """settled: the proof is an old one whose claim check is done (the steady state: the
    periodic hook's pass path makes no Slurm call); False: a proof just recorded, whose first
    periodic hooks still make sure no claim of Airlock's was left in force."""
    cfg = cfg_or_path if hasattr(cfg_or_path, "state_dir") else config.load(cfg_or_path)
    state = nodestate.NodeState(cfg, node)
    state.start("dev-proof", boot.current(node), os.getpid(), "standard", "test")
    state.finish("dev-proof", verdict)
    if settled:
        rec = state.load()
        rec["claim_checked_uptime"] = rec["finished_uptime"] + SETTLE_S
        state.save(rec)
    return state.load()
