"""The fleet: how fast the same SKU runs on other nodes, as a second opinion on a burn-in.

Other nodes' documents in the shared directory are data from strangers: they are read without
following links, only when root wrote them, they validate as a run of the node whose folder
holds them, and that node is one Slurm lists (a folder anyone can create is not a node), one
node each, with the same profile; the reference is a robust median (outliers by median absolute
deviation dropped) over at least [burnin] fleet_min_nodes nodes. And fleet data alone never
drains: a node below the fleet's median only warns (verdict_burnin); only the node's own
profile floor fails it. Whoever can write the shared directory can lower no node's verdict.
"""

from __future__ import annotations

import math
import os
import re
import statistics
from collections.abc import Callable
from typing import Any

from airlock.errors import AirlockError
from airlock.paths import NODE, SafeDir, split_template, valid_node_name
from airlock.records.results import load, run_problem
from airlock.slurm.client import Slurm

CHECK = "burnin"


MAD_CUTOFF = 3.5  # modified z-score beyond which a fleet value is an outlier (Iglewicz-Hoaglin)


def fleet_reference(per_node: dict[str, dict[str, float]], dtype: str,
                    min_nodes: int) -> float | None:
    """Robust median over other nodes of their median device TFLOPS for dtype: values whose
    modified z-score (0.6745 |x - median| / MAD) exceeds MAD_CUTOFF are dropped first, so a few
    forged or broken documents cannot drag it. None with fewer than min_nodes values left."""
    vals = [v for figs in per_node.values()
            if isinstance(v := figs.get(dtype), (int, float)) and math.isfinite(v) and v > 0]
    if len(vals) < max(min_nodes, 1):
        return None
    med = statistics.median(vals)
    mad = statistics.median(abs(v - med) for v in vals)
    if mad > 0:
        vals = [v for v in vals if 0.6745 * abs(v - med) / mad <= MAD_CUTOFF]
    if len(vals) < max(min_nodes, 1):
        return None
    return statistics.median(vals)


def fleet_members(cfg, ignored: list[str] | None = None) -> set[str] | None:
    """The nodes Slurm lists (one call), or None when Slurm cannot say: then there is no fleet
    (a reference no one can vouch for is no reference), and why goes to `ignored`."""
    try:
        return {n.name for n in Slurm.from_config(cfg).nodes()}
    except AirlockError as exc:
        if ignored is not None:
            ignored.append(f"fleet: Slurm's node list unreadable ({exc})")
        return None


def read_fleet(shared_dir: str, node: str, profile: str, per_node: int = 5,
               ignored: list[str] | None = None,
               members: set[str] | None = None,
               extract: Callable[[dict[str, Any], str], Any] | None = None) -> dict[str, Any]:
    """{other node: {dtype: its median device TFLOPS}} from the latest passing burn-in with the
    same profile in each other node's `results/` folder (the layout of airlock/records/results.py:
    `<shared_dir>/<node>`, or shared_dir with {node} replaced).

    The folders are walked without following links and only documents that root wrote and that
    validate as a run of that very node count, one node per folder (airlock.paths.SafeDir,
    airlock.records.results.run_problem), and only for nodes in `members` (fleet_members: what
    Slurm lists; None only for callers that checked membership themselves); what was left out,
    and why, is appended to `ignored`. `extract(run, profile)` takes what a caller wants from
    a validated run (None: not in this run, try the node's previous one); the burn-in's
    figures by default (the fleet-drift check reads its own facts the same way)."""
    extract = extract or _burnin_figures_of

    ignored = ignored if ignored is not None else []
    if not shared_dir:
        return {}
    template = shared_dir if NODE in shared_dir else os.path.join(shared_dir, NODE)
    root, _ = split_template(template, "x")
    parts = list(os.path.normpath(template).split(os.sep)[len(root.parts):])
    head, rest = parts[0], parts[1:]
    pattern = re.compile(re.escape(head).replace(re.escape(NODE), "(?P<node>.+)"))
    out: dict[str, dict[str, float]] = {}
    try:
        with SafeDir.open(root) as top:
            names = top.dirs()
    except OSError:
        return {}
    for entry in names:
        m = pattern.fullmatch(entry)
        if not m or m.group("node") == node or not valid_node_name(m.group("node")):
            continue
        other = m.group("node")
        if members is not None and other not in members:
            ignored.append(f"{root / entry}: {other} is not a node Slurm lists")
            continue
        rest_parts = [p.replace(NODE, other) for p in rest]
        try:
            with SafeDir.open(root, [entry, *rest_parts, "results"]) as folder:
                files = folder.files(".json")
                for name in reversed(files[-per_node:]):  # run ids start with a timestamp
                    try:
                        run = load(folder, name)  # the one checked reader
                    except (OSError, ValueError) as exc:
                        ignored.append(f"{folder.path / name}: {exc}")
                        continue
                    why = run_problem(run, other)
                    if why:
                        ignored.append(f"{folder.path / name}: {why}")
                        continue
                    figs = extract(run, profile)
                    if figs:
                        out[other] = figs
                        break
        except FileNotFoundError:
            continue
        except OSError as exc:
            ignored.append(str(exc))
    return out


def _burnin_figures_of(run: dict[str, Any], profile: str) -> dict[str, float] | None:
    for rec in run.get("checks", []):
        if rec.get("check") != CHECK:
            continue
        figs = rec.get("figures") or {}
        if rec.get("verdict") in ("pass", "warn") and figs.get("profile") == profile:
            med = figs.get("median_tflops")
            if not isinstance(med, dict):
                return None
            return {str(k): float(v) for k, v in med.items()
                    if isinstance(v, (int, float)) and not isinstance(v, bool)
                    and math.isfinite(v)}
    return None
