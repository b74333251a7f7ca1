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
import math
import os
import time
from pathlib import Path
from typing import Any

from airlock import fanout
from airlock.paths import (
    SafeDir,
    UnsafePath,
    local_node_name,
    node_dir,
    shared_node_dir,
    shared_node_parts,
    split_template,
    valid_node_name,
    valid_run_id,
)
from airlock.records.types import RunDoc

SCHEMA = 1
KEEP = 50
READ_TIMEOUT = 5.0
# "error": the run (or check) did not see the node: see checks.base.Verdict.ERROR
VERDICTS = ("pass", "warn", "fail", "error")
CHECK_VERDICTS = ("pass", "warn", "fail", "skip", "error")
# Deeper than any document Airlock writes (a run is 4 levels to a figure, figures a few more):
# 50,000 nested arrays in a figure made every view of the fleet a RecursionError (issue 26).
MAX_DEPTH = 32


class Unreadable(ValueError):
    """A document that is not data Airlock can use: why says what is wrong with it."""

    def __init__(self, why: str):
        super().__init__(why)
        self.why = why


def _no_constant(name: str) -> Any:
    raise Unreadable(f"{name} is not a finite number")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise Unreadable(f"{text[:20]} is not a finite number")
    return value


def parse_document(text: str) -> Any:
    """A stranger's JSON document, checked once for what breaks its readers: numbers that are
    not finite (NaN, Infinity, 1e400) and nesting deeper than MAX_DEPTH. Unreadable when it is
    one of those, ValueError when it is not JSON at all. Its size is bounded where it is read
    (SafeDir.read_text) and its fields by run_problem."""
    try:
        data = json.loads(text, parse_constant=_no_constant, parse_float=_finite_float)
    except RecursionError:
        raise Unreadable(f"nested deeper than {MAX_DEPTH} levels") from None
    stack = [(data, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, (dict, list)):
            if depth > MAX_DEPTH:
                raise Unreadable(f"nested deeper than {MAX_DEPTH} levels")
            items = value.values() if isinstance(value, dict) else value
            stack.extend((v, depth + 1) for v in items if isinstance(v, (dict, list)))
    return data


def load(d: SafeDir, name: str) -> Any:
    """The document `name` in d: read without following links, bounded in size, and parsed by
    parse_document. OSError when it cannot be read, ValueError (Unreadable) when it is not a
    document."""
    return parse_document(d.read_text(name))


def new_run_id(node: str) -> str:
    return time.strftime("%Y%m%dT%H%M%S", time.gmtime()) + f"-{os.getpid()}-{node}"


def run_problem(doc: Any, node: str | None = None) -> str:
    """Why doc is not a run document (of node, when given); "" when it is one.

    Documents in the shared directory are data from strangers (any node's root, or a user who
    got a file in): each is checked field by field before any of it is used, so a bad one is
    skipped and named instead of crashing whoever reads it.
    """
    if not isinstance(doc, dict):
        return "not a run document (not a JSON object)"
    if doc.get("schema", SCHEMA) != SCHEMA:
        return f"schema {doc.get('schema')!r}, expected {SCHEMA}"
    if not valid_node_name(doc.get("node")):
        return "no valid node name"
    if node is not None and doc["node"] != node:
        return f"written for node {doc['node']!r}, not {node!r}"
    if not valid_run_id(doc.get("run_id")):
        return "no valid run_id"
    if doc.get("verdict") not in VERDICTS:
        return f"verdict {doc.get('verdict')!r} is not one of {', '.join(VERDICTS)}"
    for key in ("level", "trigger", "detail", "profile"):
        if key in doc and not isinstance(doc[key], str):
            return f"{key} is not a string"
    if doc.get("failed_check") is not None and not isinstance(doc["failed_check"], str):
        return "failed_check is not a string"
    for key in ("started_at", "finished_at", "duration_s"):
        if doc.get(key) is not None and not _finite(doc[key]):
            return f"{key} is not a number"
    checks = doc.get("checks", [])
    if not isinstance(checks, list):
        return "checks is not a list"
    for i, rec in enumerate(checks):
        if not isinstance(rec, dict) or not isinstance(rec.get("check"), str):
            return f"checks[{i}] is not a check record"
        if rec.get("verdict") not in CHECK_VERDICTS:
            return f"checks[{i}] verdict {rec.get('verdict')!r} is not a verdict"
        if not isinstance(rec.get("figures", {}), dict):
            return f"checks[{i}] figures is not a table"
        for key in ("detail", "remediation"):
            if not isinstance(rec.get(key, ""), str):
                return f"checks[{i}] {key} is not a string"
        if rec.get("duration_s") is not None and not _finite(rec["duration_s"]):
            return f"checks[{i}] duration_s is not a number"
        attempts = rec.get("attempts", 1)
        if isinstance(attempts, bool) or not isinstance(attempts, int):
            return f"checks[{i}] attempts is not an integer"
    for key in ("observed", "unseen"):
        if doc.get(key) is not None and not isinstance(doc[key], list):
            return f"{key} is not a list"
    return ""


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) \
        and math.isfinite(value)


class ResultStore:
    def __init__(self, cfg, node: str):
        self.cfg = cfg
        self.node = node
        self.local = node_dir(cfg.state_dir, node)
        self.shared = shared_node_dir(cfg.shared_dir, node)

    def write(self, run: RunDoc, history: bool = True) -> list[str]:
        """Write a run everywhere it belongs; return problems with the copies (if any).

        The node-local write must succeed (OSError propagates); the shared copy is best effort,
        its problems are returned for the caller to log. Below the configured directories no
        link is ever followed: a link planted in place of a results folder is refused, and
        nothing is written or pruned through it.
        """
        run.setdefault("schema", SCHEMA)
        level = run.get("level", "quick")
        if not valid_run_id(run.get("run_id")):
            raise UnsafePath(self.local, f"run id {run.get('run_id')!r} is not a valid name")
        root, parts = split_template(self.cfg.state_dir, self.node)
        self._write_tree(root, parts, run, level, history)
        problems = []
        where = shared_node_parts(self.cfg.shared_dir, self.node)
        if where is not None:
            try:
                self._write_tree(where[0], where[1], run, level, history, shared=True)
            except OSError as exc:
                problems.append(f"shared results dir {self.shared}: {_why(exc)}")
        return problems

    @staticmethod
    def _write_tree(root: Path, parts: list[str], run: RunDoc, level: str,
                    history: bool, shared: bool = False) -> None:
        with SafeDir.open(root, parts, create=True) as d:
            if history:
                with d.sub("results", create=True) as folder:
                    folder.write_json(f"{run['run_id']}.json", run)
                    folder.prune(KEEP)
            if not shared:
                d.write_json(f"latest-{level}.json", run)
            d.write_json("latest.json", run)

    def latest(self, level: str | None = None) -> RunDoc | None:
        name = f"latest-{level}.json" if level else "latest.json"
        try:
            with self._local() as d:
                run = load(d, name)
        except (OSError, ValueError):
            return None
        return run if not run_problem(run) else None

    def latest_by_level(self) -> dict[str, RunDoc]:
        out: dict[str, RunDoc] = {}
        try:
            with self._local() as d:
                for name in d.files(".json"):
                    if not name.startswith("latest-"):
                        continue
                    try:
                        run = load(d, name)
                    except (OSError, ValueError):
                        continue
                    if not run_problem(run):
                        out[name[len("latest-"):-len(".json")]] = run
        except OSError:
            pass
        return out

    def history(self, limit: int = 10) -> list[RunDoc]:
        return read_history(self.local, limit)

    def _local(self) -> SafeDir:
        root, parts = split_template(self.cfg.state_dir, self.node)
        return SafeDir.open(root, parts)


def _why(exc: OSError) -> str:
    if isinstance(exc, UnsafePath):
        return str(exc)
    return exc.strerror or str(exc)


def read_history(folder: Path, limit: int, node: str | None = None) -> list[RunDoc]:
    """The last `limit` valid runs kept under folder/results, newest first."""
    if limit <= 0:
        return []
    try:
        with SafeDir.open(folder) as d:
            return _history(d, limit, node)
    except OSError:
        return []


def _history(d: SafeDir, limit: int, node: str | None) -> list[RunDoc]:
    """Runs under d/results: links are not followed, documents that fail the schema are left
    out."""
    if limit <= 0:
        return []
    runs: list[RunDoc] = []
    try:
        with d.sub("results") as folder:
            # Run ids start with a UTC timestamp: the newest names hold the newest runs.
            for name in folder.files(".json")[-4 * limit:]:
                try:
                    run = load(folder, name)
                except (OSError, ValueError):
                    continue
                if not run_problem(run, node):
                    runs.append(run)
    except OSError:
        return []
    runs.sort(key=lambda r: (r.get("finished_at") or 0, r.get("run_id", "")), reverse=True)
    return runs[:limit]


# --- the controller's view ---------------------------------------------------------------------
class NodeResults:
    def __init__(self, node: str, run: RunDoc | None = None, source: str = "slurm",
                 problem: str = "", history: list[RunDoc] | None = None):
        self.node = node
        self.run = run
        self.source = source  # "shared", "local", or "slurm" (only the reason is known)
        self.problem = problem  # why no run could be read ("" when one was)
        self.history: list[RunDoc] = history or []


def local_readable(cfg, node: str) -> bool:
    """Only per-node state dirs, or this host's own, hold *that* node's results."""
    return "{node}" in cfg.state_dir or node == local_node_name()


def _open(root: Path, parts: list[str]) -> tuple[SafeDir | None, str]:
    """(the folder, "") or (None, why not: "missing" when it does not exist)."""
    path = root.joinpath(*parts)
    try:
        return SafeDir.open(root, parts), ""
    except FileNotFoundError:
        return None, "missing"
    except UnsafePath as exc:
        return None, str(exc)
    except NotADirectoryError:
        return None, f"{path} unreachable: not a directory"
    except OSError as exc:
        return None, f"{path} unreachable: {exc.strerror or exc}"


def _read_run(d: SafeDir, node: str, name: str = "latest.json"
              ) -> tuple[RunDoc | None, str]:
    path = d.path / name
    try:
        data = load(d, name)
    except FileNotFoundError:
        return None, "missing"
    except UnsafePath as exc:
        return None, str(exc)
    except PermissionError:
        return None, f"{path}: permission denied"
    except OSError as exc:
        return None, f"{path}: {exc.strerror or exc}"
    except Unreadable as exc:
        return None, f"{path}: {exc.why}"
    except ValueError:
        return None, f"{path}: not valid JSON"
    why = run_problem(data, node)
    if why:
        return None, f"{path}: {why}"
    return data, ""


def read_node(cfg, node: str, history: int = 0) -> NodeResults:
    """The last run of a node (and its history), from the best source this host can see."""
    problems = []
    # The runs kept beside an unreadable latest.json are still the node's history to show.
    kept: list[RunDoc] = []
    try:
        where = shared_node_parts(cfg.shared_dir, node)
    except UnsafePath as exc:
        return NodeResults(node, None, "slurm", f"shared results: {exc}")
    if where is not None:
        root, parts = where
        top, why = _open(root, [])
        if top is None:
            problems.append(f"shared results dir {root} unreachable: missing" if why == "missing"
                            else f"shared results dir {why}")
        else:
            top.close()
            folder, why = _open(root, parts)
            run = None
            if folder is not None:
                with folder:
                    run, why = _read_run(folder, node)
                    if run is not None:
                        return NodeResults(node, run, "shared", "",
                                           _history(folder, history, node))
                    kept = _history(folder, history, node)
            problems.append("no results in the shared dir yet" if why == "missing"
                            else f"shared results: {why}")
    if local_readable(cfg, node):
        folder, why = _open(*split_template(cfg.state_dir, node))
        run = None
        if folder is not None:
            with folder:
                run, why = _read_run(folder, node)
                if run is not None:
                    # Still name a broken shared copy: the controller elsewhere cannot see it.
                    return NodeResults(node, run, "local", "; ".join(problems),
                                       _history(folder, history, node))
                kept = kept or _history(folder, history, node)
        if why != "missing":
            problems.append(f"local results: {why}")
        elif not problems:
            problems.append("no results yet")
    elif where is None:
        problems.append("no shared_dir configured and node-local results are not on this host")
    return NodeResults(node, None, "slurm", "; ".join(problems), kept)


def read_many(cfg, nodes: list[str], history: int = 0,
              timeout: float = READ_TIMEOUT) -> dict[str, NodeResults]:
    """read_node for many nodes; a read stuck on a hung filesystem is reported, not waited for
    (airlock.fanout)."""
    def one(n: str) -> NodeResults:
        try:
            return read_node(cfg, n, history)
        except Exception as exc:  # one node's bad data must not hide the rest
            return NodeResults(n, None, "slurm", f"results unreadable: {exc}")

    done = fanout.each(one, nodes, timeout, name="results-read")
    for n in nodes:
        if n not in done:
            done[n] = NodeResults(n, None, "slurm",
                                  f"results store did not answer within {timeout:g}s")
    return done


def run_node(run_id: str) -> str:
    """The node a run id names (`<UTC time>-<pid>-<node>`, new_run_id), or "" when run_id is
    not a valid run id of that shape."""
    if not valid_run_id(run_id):
        return ""
    parts = run_id.split("-", 2)
    if len(parts) != 3 or not parts[1].isdigit() or not valid_node_name(parts[2]):
        return ""
    return parts[2]


def read_run(cfg, run_id: str) -> tuple[RunDoc | None, str]:
    """One recorded run by its id: (the document, "") from the shared copy, else the node-local
    one when this host can see it; (None, why not) otherwise. The document must validate as a
    run of the node its id names, with that very id."""
    node = run_node(run_id)
    if not node:
        return None, f"{run_id!r} is not a run id"
    name = f"{run_id}.json"
    places = []
    where = shared_node_parts(cfg.shared_dir, node)
    if where is not None:
        places.append(("shared", where))
    if local_readable(cfg, node):
        places.append(("local", split_template(cfg.state_dir, node)))
    problems = []
    for source, (root, parts) in places:
        folder, why = _open(root, [*parts, "results"])
        if folder is None:
            problems.append(f"{source}: {why}")
            continue
        with folder:
            run, why = _read_run(folder, node, name)
        if run is not None and run.get("run_id") == run_id:
            return run, ""
        problems.append(f"{source}: {why or 'written for another run id'}")
    if not places:
        return None, f"no shared_dir configured and {node}'s results are not on this host"
    return None, "; ".join(problems)


def read_shared(cfg, node: str) -> tuple[RunDoc | None, str]:
    """The controller's view of a node's last run: (run or None, problem or "")."""
    res = read_node(cfg, node)
    return res.run, res.problem
