"""Helpers shared by unit and cluster tests."""

from __future__ import annotations

import os

from airlock import boot, config, nodestate


def prove_boot(cfg_or_path, node: str, verdict: str = "pass") -> dict:
    """Record a finished registration of this machine's current boot for node, as the suite
    would: the hooks then treat the boot as proven (or failed)."""
    cfg = cfg_or_path if hasattr(cfg_or_path, "state_dir") else config.load(cfg_or_path)
    state = nodestate.NodeState(cfg, node)
    state.start("test-run", boot.current(node), os.getpid(), "standard", "test")
    state.finish("test-run", verdict)
    return state.load()
