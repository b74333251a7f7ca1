"""What every Slurm hook shares: one log line per run, on stderr (slurmd's log) and in the node's
log_dir, where operators look first."""

from __future__ import annotations

import os
import sys
import time

from airlock import paths


def log(cfg, node: str, hook: str, msg: str) -> None:
    line = f"{time.strftime('%Y-%m-%dT%H:%M:%S')} {node} {hook}: {msg}\n"
    sys.stderr.write(line)
    if cfg is None:
        return
    try:
        folder = paths.expand(cfg.log_dir, node)
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, f"{hook}.log"), "a") as fh:
            fh.write(line)
    except OSError:
        pass
