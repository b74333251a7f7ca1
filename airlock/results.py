"""Where check results live.

Each run is one JSON document (schema below) written atomically to the node-local state
directory, and copied to the shared directory when one is configured, so the controller can read
every node's last verdict. The Slurm reason remains the always-available summary.

  <state_dir>/results/<run_id>.json    every deep/on-demand run (the last KEEP kept)
  <state_dir>/latest.json              the last run of any level
  <state_dir>/latest-<level>.json      the last run of that level
  <shared_dir>/<node>/latest.json      copy of latest.json (best effort; failures are recorded)
  <shared_dir>/<node>/results/<run_id>.json

Run document (schema 1): node, run_id, level, trigger, started_at, finished_at (epoch seconds),
duration_s, verdict (pass|warn|fail), failed_check, detail, profile, checks: [{check, verdict,
detail, figures, remediation, duration_s, attempts}].
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

SCHEMA = 1
KEEP = 50


def node_dir(template: str, node: str) -> Path:
    return Path(template.replace("{node}", node))


def atomic_write(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as fh:
            json.dump(data, fh, indent=1, sort_keys=True)
            fh.write("\n")
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def read_json(path: Path) -> Any | None:
    try:
        with open(path) as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return None


def new_run_id(node: str) -> str:
    return time.strftime("%Y%m%dT%H%M%S", time.gmtime()) + f"-{os.getpid()}-{node}"


class Store:
    def __init__(self, cfg, node: str):
        self.node = node
        self.local = node_dir(cfg.state_dir, node)
        self.shared = node_dir(cfg.shared_dir, node) / node if cfg.shared_dir else None

    def write(self, run: dict[str, Any], history: bool = True) -> list[str]:
        """Write a run everywhere it belongs; return problems with the shared copy (if any)."""
        run.setdefault("schema", SCHEMA)
        level = run.get("level", "quick")
        if history:
            atomic_write(self.local / "results" / f"{run['run_id']}.json", run)
            self._prune(self.local / "results")
        atomic_write(self.local / f"latest-{level}.json", run)
        atomic_write(self.local / "latest.json", run)
        problems = []
        if self.shared is not None:
            try:
                if history:
                    atomic_write(self.shared / "results" / f"{run['run_id']}.json", run)
                    self._prune(self.shared / "results")
                atomic_write(self.shared / "latest.json", run)
            except OSError as exc:
                problems.append(f"shared results dir {self.shared}: {exc.strerror or exc}")
        return problems

    def latest(self, level: str | None = None) -> dict[str, Any] | None:
        name = f"latest-{level}.json" if level else "latest.json"
        return read_json(self.local / name)

    def history(self, limit: int = 10) -> list[dict[str, Any]]:
        files = sorted((self.local / "results").glob("*.json"), reverse=True)[:limit]
        return [r for r in (read_json(f) for f in files) if r]

    @staticmethod
    def _prune(folder: Path) -> None:
        files = sorted(folder.glob("*.json"))
        for f in files[:-KEEP]:
            try:
                f.unlink()
            except OSError:
                pass


def read_shared(cfg, node: str) -> tuple[dict[str, Any] | None, str]:
    """The controller's view of a node's last run: (run or None, problem or "")."""
    if not cfg.shared_dir:
        return None, "no shared_dir configured"
    folder = node_dir(cfg.shared_dir, node) / node
    path = folder / "latest.json"
    try:
        with open(path) as fh:
            return json.load(fh), ""
    except FileNotFoundError:
        if not folder.parent.exists():
            return None, f"shared results dir {folder.parent} unreachable"
        return None, "no results yet"
    except PermissionError:
        return None, f"{path}: permission denied"
    except OSError as exc:
        return None, f"{path}: {exc.strerror}"
    except ValueError:
        return None, f"{path}: not valid JSON"
