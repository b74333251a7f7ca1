"""Record a finished registration of this machine's current boot, as the registration suite
does, for tests and benchmarks that need a proven (or failed) boot without running the suite."""

from __future__ import annotations

import os

from airlock import boot, config, nodestate


def prove_boot(cfg_or_path, node: str, verdict: str = "pass") -> dict:
    cfg = cfg_or_path if hasattr(cfg_or_path, "state_dir") else config.load(cfg_or_path)
    state = nodestate.NodeState(cfg, node)
    state.start("dev-proof", boot.current(node), os.getpid(), "standard", "test")
    state.finish("dev-proof", verdict)
    return state.load()
