"""`airlock serve`: the console and API on the controller (airlock/serve/, docs/console.md)."""

from __future__ import annotations

import click

from airlock.cli.common import load_config


@click.command("serve")
@click.option("--listen", default=None, metavar="HOST:PORT",
              help="Address to listen on (default [serve] listen, 127.0.0.1:9642).")
@click.option("--openapi", "print_openapi", is_flag=True,
              help="Print the OpenAPI document (docs/openapi.json) and exit.")
@click.option("--log-level", default="info", show_default=True,
              type=click.Choice(["critical", "error", "warning", "info", "debug"]))
@click.pass_context
def serve_cmd(ctx: click.Context, listen: str | None, print_openapi: bool,
              log_level: str) -> None:
    """Serve the console and the JSON API (nodes, timelines, recovery, fleet, checks)."""
    try:
        from airlock.serve import server
    except ImportError as exc:  # the optional extra is not installed
        raise click.ClickException(f"airlock serve needs the serve extra "
                                   f"(pip install 'slurm-airlock[serve]'): {exc}") from None
    cfg = load_config(ctx)
    if print_openapi:
        click.echo(server.openapi_text(cfg))
        return
    server.run(cfg, listen, log_level)
