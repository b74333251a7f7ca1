"""Airlock's own errors on a node, kept where `airlock status`, the metrics and `airlock doctor`
look.

When a hook fails open on a proven boot (a config typo, a full disk, a bug in Airlock), it must
not drain a healthy node, and it must not be silent either. It records the error here, one entry
per hook, and the next run of that hook that works clears it:

  <state_dir>/errors.json       {"healthcheck": {"message", "first_at", "last_at", "count"}, ...}
  <shared>/errors.json          a best-effort copy for the controller

Never raises: the caller is already handling an error.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from airlock.paths import atomic_write, node_dir, read_json, shared_node_dir

FILE = "errors.json"


def _places(state_dir: str, shared_dir: str, node: str) -> list[Path]:
    places = [node_dir(state_dir, node) / FILE]
    shared = shared_node_dir(shared_dir, node)
    if shared is not None:
        places.append(shared / FILE)
    return places


def read(path: Path) -> dict[str, dict[str, Any]]:
    data = read_json(path)
    if not isinstance(data, dict):
        return {}
    return {str(k): v for k, v in data.items() if isinstance(v, dict)}


def record(state_dir: str, shared_dir: str, node: str, hook: str, message: str) -> str:
    """Add one occurrence; return a problem ("" when written somewhere)."""
    now = time.time()
    problems = []
    for path in _places(state_dir, shared_dir, node):
        try:
            data = read(path)
            entry = data.get(hook) or {"first_at": now, "count": 0}
            entry.update(message=message[:500], last_at=now,
                         count=int(entry.get("count", 0)) + 1)
            data[hook] = entry
            atomic_write(path, data)
        except (OSError, ValueError, TypeError) as exc:
            problems.append(f"{path}: {getattr(exc, 'strerror', None) or exc}")
    return "; ".join(problems) if len(problems) == len(_places(state_dir, shared_dir, node)) \
        else ""


def clear(state_dir: str, shared_dir: str, node: str, hook: str) -> None:
    """Forget hook's error after a run that worked (a stat per place when there is none)."""
    for path in _places(state_dir, shared_dir, node):
        try:
            if not os.path.exists(path):
                continue
            data = read(path)
            if hook in data:
                del data[hook]
                atomic_write(path, data)
        except (OSError, ValueError, TypeError):
            pass
