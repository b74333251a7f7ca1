"""`airlock check`: a level on this node, or (--nodes/--partition/--feature) an on-demand group
check across nodes."""

from __future__ import annotations

import json
import sys
import time

import click

from airlock import finish, paths
from airlock.cli.common import load_config
from airlock.config.sections import LEVELS
from airlock.ondemand.report import GroupReport
from airlock.ondemand.run import run_group
from airlock.records import report
from airlock.runner import run_level


@click.command("check")
@click.option("--level", type=click.Choice(LEVELS), default="quick", show_default=True)
@click.option("--only", multiple=True, help="Run only this check (repeatable).")
@click.option("--profile", default=None, help="SKU profile name (default: detected).")
@click.option("--node", default=None, help="Node name for records and simulation (default: host).")
@click.option("--nodes", "nodes_expr", default=None, help="On-demand group check of these nodes.")
@click.option("--partition", default=None, help="On-demand group check of a partition.")
@click.option("--feature", default=None, help="On-demand group check of nodes with a feature.")
@click.option("--wait-jobs", type=float, default=10.0, show_default=True,
              help="Minutes to wait for running jobs on a target before skipping it.")
@click.option("--json", "as_json", is_flag=True, help="Print the run as JSON.")
@click.pass_context
def check_cmd(ctx, level, only, profile, node, nodes_expr, partition, feature, wait_jobs,
              as_json):
    """Run a check level on this node (or, with --nodes/--partition/--feature, on a group)."""
    cfg = load_config(ctx)
    if nodes_expr or partition or feature:
        result = run_group(cfg, nodes_expr=nodes_expr, partition=partition, feature=feature,
                           level=level if level != "quick" else "standard",
                           wait_jobs_min=wait_jobs, only=list(only))
        _print_group(result, as_json)
        sys.exit(result.exit_code)
    if profile:
        cfg.section("profile").name = profile
    node = node or paths.local_node_name()
    started = time.time()
    progress = None if as_json or not sys.stderr.isatty() else report.terminal_progress
    records, rctx = run_level(cfg, node, level, only=list(only) or None, progress=progress)
    run = finish.summarize(node, level, "manual", records, started, rctx.profile_name)
    try:
        for problem in finish.record_run(cfg, node, run):
            click.echo(f"airlock: {problem}", err=True)
    except OSError as exc:
        click.echo(f"airlock: results not saved: {exc}", err=True)
    if as_json:
        click.echo(json.dumps(run, indent=1, sort_keys=True))
    else:
        click.echo(report.run_table(run))
    # A check that did not see the node (no time, a tool that hung) is not a pass either.
    sys.exit({"fail": 1, "error": 2}.get(run["verdict"], 0))


def _print_group(result: GroupReport, as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(result.to_dict(), indent=1, sort_keys=True))
        return
    rows = result.targets
    click.echo(report.table(("node", "result", "check", "detail", "group", "took"),
                            [(t.name, t.status.upper(), t.failed_check, t.detail or t.why,
                              t.group, f"{t.duration_s:.1f}s") for t in rows]))
    counts: dict[str, int] = {}
    for t in rows:
        counts[t.status] = counts.get(t.status, 0) + 1
    click.echo(", ".join(f"{v} {k}" for k, v in sorted(counts.items())))
