"""`airlock status`: every node's Slurm state and Airlock verdict, from one Slurm call plus the
results store."""

from __future__ import annotations

import json
import time
from typing import Any

import click

from airlock import reasons
from airlock.report import table
from airlock.results import read_shared
from airlock.slurm import Node, Slurm

SCHEMA = 1


def classify(node: Node) -> str:
    parsed = reasons.parse(node.reason)
    if parsed is None:
        if node.foreign_drain:
            return "drained-other"
        if node.state in ("DOWN", "FUTURE", "UNKNOWN") or "NOT_RESPONDING" in node.flags:
            return node.state.lower() if node.state != "IDLE" else "down"
        return "healthy"
    if parsed.state in ("pending", "checking"):
        return "quarantined"
    if parsed.state == "recover":
        return "recovering"
    if parsed.state == "FAIL":
        return "failed"
    return "unknown"


def node_status(cfg, node: Node) -> dict[str, Any]:
    run, problem = read_shared(cfg, node.name)
    parsed = reasons.parse(node.reason)
    return {
        "node": node.name,
        "slurm_state": node.state_text,
        "reason": node.reason,
        "reason_owner": "airlock" if parsed else ("other" if node.reason else ""),
        "airlock": classify(node),
        "verdict": (run or {}).get("verdict"),
        "failed_check": (run or {}).get("failed_check") or (
            parsed.subject if parsed and parsed.is_failure else None),
        "detail": (run or {}).get("detail") or (parsed.detail if parsed else ""),
        "last_check_at": (run or {}).get("finished_at"),
        "last_level": (run or {}).get("level"),
        "duration_s": (run or {}).get("duration_s"),
        "results_problem": problem if run is None else "",
    }


def collect(cfg, names: str | None = None) -> dict[str, Any]:
    slurm = Slurm.from_config(cfg)
    nodes = slurm.nodes(names) if names else slurm.nodes()
    rows = [node_status(cfg, n) for n in nodes]
    summary: dict[str, int] = {}
    for r in rows:
        summary[r["airlock"]] = summary.get(r["airlock"], 0) + 1
    return {"schema": SCHEMA, "generated_at": time.time(), "nodes": rows, "summary": summary}


def render(data: dict[str, Any]) -> str:
    rows = []
    for r in data["nodes"]:
        when = (time.strftime("%H:%M:%S", time.localtime(r["last_check_at"]))
                if r["last_check_at"] else "")
        dur = f"{r['duration_s']:.1f}s" if r["duration_s"] is not None else ""
        rows.append((r["node"], r["slurm_state"], r["airlock"], r["failed_check"] or "",
                     r["reason"] or "", when, dur))
    out = table(("node", "slurm", "airlock", "check", "reason", "last", "took"), rows)
    summary = ", ".join(f"{v} {k}" for k, v in sorted(data["summary"].items()))
    return f"{out}\n{len(data['nodes'])} nodes: {summary}"


@click.command("status")
@click.argument("nodes", required=False)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output (schema 1).")
@click.pass_context
def status_cmd(ctx: click.Context, nodes: str | None, as_json: bool) -> None:
    """Show every node's Slurm state, Airlock verdict and reason."""
    from airlock.cli import load_config

    data = collect(load_config(ctx), nodes)
    click.echo(json.dumps(data, indent=1, sort_keys=True) if as_json else render(data))
