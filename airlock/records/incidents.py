"""Airlock's own errors on a node, kept where `airlock status`, the metrics and `airlock doctor`
look.

When a hook fails open on a proven boot (a config typo, a full disk, a bug in Airlock), it must
not drain a healthy node, and it must not be silent either. It records the error here, one entry
per hook, and the next run of that hook that works clears it:

  <state_dir>/errors.json       {"healthcheck": {"message", "first_at", "last_at", "count"}, ...}
  <shared>/<node>/errors.json   a best-effort copy for the controller

Both are reached through airlock.paths.SafeDir, as the results store reaches its files: below
the configured roots no link is followed and every directory must be root's (or the root's
owner's), so a link planted in the shared tree never becomes a place root writes to or reads
from. Never raises: the caller is already handling an error.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from airlock.paths import SafeDir, shared_node_parts, split_template

FILE = "errors.json"


def _places(state_dir: str, shared_dir: str, node: str) -> list[tuple[Path, list[str]]]:
    """(configured root, components below it) of each copy: node-local first, then shared."""
    places = []
    if state_dir:
        places.append(split_template(state_dir, node))
    shared = shared_node_parts(shared_dir, node)
    if shared is not None:
        places.append(shared)
    return places


def _clean(data: Any) -> dict[str, dict[str, Any]]:
    if not isinstance(data, dict):
        return {}
    return {str(k): v for k, v in data.items() if isinstance(v, dict)}


def _read_in(d: SafeDir) -> dict[str, dict[str, Any]]:
    try:
        return _clean(d.read_json(FILE))
    except FileNotFoundError:
        return {}


def read_at(root: Path, parts: list[str]) -> dict[str, dict[str, Any]]:
    """The errors recorded in root/parts/errors.json ({} when none, or not safely readable)."""
    try:
        with SafeDir.open(root, parts) as d:
            return _read_in(d)
    except (OSError, ValueError):
        return {}


def read_node(state_dir: str, shared_dir: str, node: str) -> dict[str, dict[str, Any]]:
    """A node's recorded errors: the shared copy when a shared_dir is given and has one, else
    the node-local copy (the controller passes only what it can see)."""
    try:
        places = _places(state_dir, shared_dir, node)
    except OSError:  # a node name that cannot be a folder: nothing recorded under it
        return {}
    for root, parts in reversed(places):
        found = read_at(root, parts)
        if found:
            return found
    return {}


def record(state_dir: str, shared_dir: str, node: str, hook: str, message: str) -> str:
    """Add one occurrence; return a problem ("" when written somewhere)."""
    now = time.time()
    problems = []
    try:
        places = _places(state_dir, shared_dir, node)
    except OSError as exc:
        return str(exc)
    for root, parts in places:
        try:
            with SafeDir.open(root, parts, create=True) as d:
                data = _read_in(d)
                entry = data.get(hook) or {"first_at": now, "count": 0}
                entry.update(message=message[:500], last_at=now,
                             count=int(entry.get("count", 0)) + 1)
                data[hook] = entry
                d.write_json(FILE, data)
        except (OSError, ValueError, TypeError) as exc:
            where = Path(root, *parts) / FILE
            problems.append(f"{where}: {getattr(exc, 'strerror', None) or exc}")
    return "; ".join(problems) if len(problems) == len(places) else ""


def clear(state_dir: str, shared_dir: str, node: str, hook: str) -> None:
    """Forget hook's error after a run that worked (a directory open per place when there is
    none)."""
    try:
        places = _places(state_dir, shared_dir, node)
    except OSError:
        return
    for root, parts in places:
        if not os.path.lexists(Path(root, *parts) / FILE):
            continue  # the usual case, on every hook run that works: one stat, nothing to do
        try:
            with SafeDir.open(root, parts) as d:
                data = _read_in(d)
                if hook in data:
                    del data[hook]
                    d.write_json(FILE, data)
        except (OSError, ValueError, TypeError):
            pass
