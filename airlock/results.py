"""Where check results live, and how the controller reads them back.

Each run is one JSON document (schema below) written atomically to the node-local state
directory, and copied to the shared directory when one is configured, so the controller can read
every node's last verdict. The Slurm reason remains the always-available summary: a node whose
results cannot be read still shows its state and reason, with the problem named.

Node side (ResultStore.write, through airlock.finish.record_run):

  <state_dir>/results/<run_id>.json    runs kept as history (the last KEEP); periodic and prolog
                                       passes are not kept, failures always are
  <state_dir>/latest.json              the last run of any level
  <state_dir>/latest-<level>.json      the last run of that level
  <shared>/latest.json                 copy of latest.json (best effort; problems are returned)
  <shared>/results/<run_id>.json       copy of the history entry

<shared> is <shared_dir>/<node>, or shared_dir itself with {node} replaced when it holds that
placeholder. state_dir may hold {node} too (the dev cluster runs every node on one host).

Controller side (read_node / read_many): the shared copy first, then the node-local copy when
this host can see it (state_dir holds {node}, or the node is this host), else nothing, with the
reason why in NodeResults.problem. Reads of a hung shared filesystem are abandoned after a
timeout instead of hanging `airlock status`.

Run document (schema 1): node, run_id, level, trigger, started_at, finished_at (epoch seconds),
duration_s, verdict (pass|warn|fail), failed_check, detail, profile, checks: [{check, verdict,
detail, figures, remediation, duration_s, attempts}].
"""

from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from airlock.paths import (
    atomic_write,
    local_node_name,
    node_dir,
    read_json,
    shared_node_dir,
)

SCHEMA = 1
KEEP = 50
READ_TIMEOUT = 5.0


def new_run_id(node: str) -> str:
    return time.strftime("%Y%m%dT%H%M%S", time.gmtime()) + f"-{os.getpid()}-{node}"


class ResultStore:
    def __init__(self, cfg, node: str):
        self.cfg = cfg
        self.node = node
        self.local = node_dir(cfg.state_dir, node)
        self.shared = shared_node_dir(cfg.shared_dir, node)

    def write(self, run: dict[str, Any], history: bool = True) -> list[str]:
        """Write a run everywhere it belongs; return problems with the copies (if any).

        The node-local write must succeed (OSError propagates); the shared copy is best effort,
        its problems are returned for the caller to log.
        """
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

    def latest_by_level(self) -> dict[str, dict[str, Any]]:
        out = {}
        for path in sorted(self.local.glob("latest-*.json")):
            run = read_json(path)
            if isinstance(run, dict):
                out[path.stem.removeprefix("latest-")] = run
        return out

    def history(self, limit: int = 10) -> list[dict[str, Any]]:
        return read_history(self.local, limit)

    @staticmethod
    def _prune(folder: Path) -> None:
        files = sorted(folder.glob("*.json"))
        for f in files[:-KEEP]:
            try:
                f.unlink()
            except OSError:
                pass


def read_history(folder: Path, limit: int) -> list[dict[str, Any]]:
    """The last `limit` runs kept under folder/results, newest first."""
    if limit <= 0:
        return []
    runs = [r for r in (read_json(f) for f in (folder / "results").glob("*.json"))
            if isinstance(r, dict)]
    runs.sort(key=lambda r: (r.get("finished_at") or 0, r.get("run_id", "")), reverse=True)
    return runs[:limit]


# --- the controller's view ---------------------------------------------------------------------
@dataclass
class NodeResults:
    node: str
    run: dict[str, Any] | None = None
    source: str = "slurm"  # "shared", "local", or "slurm" (only the reason is known)
    problem: str = ""  # why no run could be read ("" when one was)
    history: list[dict[str, Any]] = field(default_factory=list)


def local_readable(cfg, node: str) -> bool:
    """Only per-node state dirs, or this host's own, hold *that* node's results."""
    return "{node}" in cfg.state_dir or node == local_node_name()


def _read_run(path: Path) -> tuple[dict[str, Any] | None, str]:
    try:
        with open(path) as fh:
            data = json.load(fh)
    except FileNotFoundError:
        return None, "missing"
    except PermissionError:
        return None, f"{path}: permission denied"
    except IsADirectoryError:
        return None, f"{path}: is a directory"
    except OSError as exc:
        return None, f"{path}: {exc.strerror or exc}"
    except ValueError:
        return None, f"{path}: not valid JSON"
    if not isinstance(data, dict) or "verdict" not in data:
        return None, f"{path}: not a run document"
    return data, ""


def _probe_dir(folder: Path) -> str:
    """Name the reason a results folder cannot be read ("" when it can)."""
    try:
        if folder.is_dir():
            os.listdir(folder)
            return ""
    except OSError as exc:
        return f"{folder} unreachable: {exc.strerror or exc}"
    if folder.exists() or folder.is_symlink():
        return f"{folder} unreachable: not a directory"
    return ""


def read_node(cfg, node: str, history: int = 0) -> NodeResults:
    """The last run of a node (and its history), from the best source this host can see."""
    problems = []
    shared = shared_node_dir(cfg.shared_dir, node)
    if shared is not None:
        root = Path(cfg.shared_dir.split("{node}")[0] or "/")
        bad_root = _probe_dir(root) or ("" if root.exists() else f"{root} unreachable: missing")
        if bad_root:
            problems.append(f"shared results dir {bad_root}")
        else:
            bad = _probe_dir(shared)
            run, why = (None, bad) if bad else _read_run(shared / "latest.json")
            if run is not None:
                return NodeResults(node, run, "shared", "", read_history(shared, history))
            problems.append("no results in the shared dir yet" if why == "missing"
                            else f"shared results: {why}")
    if local_readable(cfg, node):
        local = node_dir(cfg.state_dir, node)
        run, why = _read_run(local / "latest.json")
        if run is not None:
            # Still name a broken shared copy: the controller elsewhere cannot see this run.
            return NodeResults(node, run, "local", "; ".join(problems),
                               read_history(local, history))
        if why != "missing":
            problems.append(f"local results: {why}")
        elif not problems:
            problems.append("no results yet")
    elif shared is None:
        problems.append("no shared_dir configured and node-local results are not on this host")
    return NodeResults(node, None, "slurm", "; ".join(problems))


def read_many(cfg, nodes: list[str], history: int = 0,
              timeout: float = READ_TIMEOUT) -> dict[str, NodeResults]:
    """read_node for many nodes; a read stuck on a hung filesystem is reported, not waited for.

    Plain daemon threads (not an executor) so a read blocked in the kernel cannot hold up the
    interpreter's exit either.
    """
    out: dict[str, NodeResults] = {}
    lock = threading.Lock()

    def work(chunk: list[str]) -> None:
        for n in chunk:
            try:
                res = read_node(cfg, n, history)
            except Exception as exc:  # noqa: BLE001 - one node's bad data must not hide the rest
                res = NodeResults(n, None, "slurm", f"results unreadable: {exc}")
            with lock:
                out[n] = res

    workers = min(8, max(1, len(nodes)))
    chunks = [nodes[i::workers] for i in range(workers)]
    threads = [threading.Thread(target=work, args=(c,), daemon=True, name="results-read")
               for c in chunks if c]
    deadline = time.monotonic() + timeout
    for t in threads:
        t.start()
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    with lock:
        done = dict(out)
    for n in nodes:
        if n not in done:
            done[n] = NodeResults(n, None, "slurm",
                                  f"results store did not answer within {timeout:g}s")
    return done


def read_shared(cfg, node: str) -> tuple[dict[str, Any] | None, str]:
    """The controller's view of a node's last run: (run or None, problem or "")."""
    res = read_node(cfg, node)
    return res.run, res.problem
