"""`airlock metrics`: Prometheus textfile metrics for node_exporter (node or controller view)."""

from __future__ import annotations

import sys

import click

from airlock import paths
from airlock.cli.common import load_config
from airlock.errors import AirlockError
from airlock.records import node_metrics
from airlock.records.results import ResultStore
from airlock.status import collect as status
from airlock.status import metrics


@click.command("metrics")
@click.option("--node", "node", default=None,
              help="Write this node's file (default: this host).")
@click.option("--controller", is_flag=True,
              help="Write the controller's file (all nodes, recovery) instead.")
@click.option("--textfile-dir", default=None,
              help="Directory to write to (default: [metrics] textfile_dir).")
@click.option("--stdout", "to_stdout", is_flag=True, help="Print the metrics instead.")
@click.pass_context
def metrics_cmd(ctx: click.Context, node: str | None, controller: bool,
                textfile_dir: str | None, to_stdout: bool) -> None:
    """Write Prometheus textfile metrics for node_exporter (node or controller view)."""
    from prometheus_client import generate_latest  # only this command needs it at import

    cfg = load_config(ctx)
    if not (to_stdout or textfile_dir or cfg.metrics.textfile_dir):
        raise AirlockError("no [metrics] textfile_dir configured: "
                           "pass --textfile-dir or --stdout")
    if controller:
        data = status.collect(cfg)
        recovery = status.recovery_metrics(cfg)
        if to_stdout:
            sys.stdout.write(generate_latest(metrics.controller_registry(data, recovery)).decode())
            return
        click.echo(metrics.write_controller_textfile(cfg, data, recovery, textfile_dir))
        return
    node = node or paths.local_node_name()
    runs = ResultStore(cfg, node).latest_by_level()
    if to_stdout:
        sys.stdout.write(generate_latest(node_metrics.node_registry(node, runs)).decode())
        return
    folder = paths.expand(textfile_dir, node) if textfile_dir else None
    click.echo(node_metrics.write_node_textfile(cfg, node, runs, folder))
