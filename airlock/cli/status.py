"""`airlock status`: every node's Slurm state, Airlock verdict, last check and recovery state."""

from __future__ import annotations

import json

import click

from airlock.cli.common import load_config
from airlock.status import collect as status


@click.command("status")
@click.argument("nodes", required=False)
@click.option("--json", "as_json", is_flag=True,
              help="Machine-readable output (docs/status-schema.md).")
@click.option("--history", "history", type=click.IntRange(min=0), default=0,
              help="Also show the last N recorded runs of each node.")
@click.pass_context
def status_cmd(ctx: click.Context, nodes: str | None, as_json: bool, history: int) -> None:
    """Show every node's Slurm state, Airlock verdict, last check and recovery state."""
    data = status.collect(load_config(ctx), nodes, history)
    click.echo(json.dumps(data, indent=1, sort_keys=True) if as_json else status.render(data))
