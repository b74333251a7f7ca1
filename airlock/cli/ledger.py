"""`airlock ledger`: what the gate cost this cluster and what it caught (docs/ledger.md)."""

from __future__ import annotations

import json

import click

from airlock.cli.common import load_config


@click.command("ledger")
@click.option("--since", default="30d", show_default=True,
              help="The window: a number and m, h, d or w (30d, 12h, 90m, 2w).")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output (docs/ledger.md).")
@click.option("--metrics", "as_metrics", is_flag=True,
              help="Prometheus text exposition of the ledger's figures.")
@click.pass_context
def ledger_cmd(ctx: click.Context, since: str, as_json: bool, as_metrics: bool) -> None:
    """Cost (hours in checks, boot to service, hours held out), caught failures and what became
    of them, the value model's balance as a range, and which registration level to run."""
    from airlock.ledger import load, report, window

    seconds = window.parse_since(since)  # a bad --since fails before anything is read
    cfg = load_config(ctx)
    doc = report.compute(load.load(cfg, seconds), cfg.ledger)
    if as_metrics:
        click.echo(report.metrics_text(doc).decode(), nl=False)
    elif as_json:
        click.echo(json.dumps(doc, indent=1, sort_keys=True))
    else:
        click.echo(report.render(doc), nl=False)
