"""`airlock doctor`: check this node's install item by item, one line each."""

from __future__ import annotations

import sys

import click

from airlock import paths
from airlock.admin import doctor


@click.command("doctor")
@click.option("--node", default=None, help="Node name (default: this host).")
@click.option("--no-torch", is_flag=True, help="Skip the torch/CUDA probe (it takes seconds).")
@click.pass_context
def doctor_cmd(ctx: click.Context, node: str | None, no_torch: bool) -> None:
    """Check this node's Airlock install: config, Slurm, hooks, NVML, torch."""
    path = (ctx.find_root().obj or {}).get("config_path")
    items = doctor.run(path, node or paths.local_node_name(), torch_check=not no_torch)
    for item in items:
        click.echo(item.line())
    fails = sum(i.status == doctor.FAIL for i in items)
    warns = sum(i.status == doctor.WARN for i in items)
    click.echo(f"{len(items)} items: {fails} failed, {warns} warnings")
    sys.exit(1 if fails else 0)
