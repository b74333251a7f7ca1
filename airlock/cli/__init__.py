"""The `airlock` command: one module per command, loaded only when that command runs, so that
`airlock check --level quick` never pays for what `airlock recover` needs. Every AirlockError
ends as one line on stderr and its exit code (2 unless it says otherwise); a check that fails
exits 1."""

from __future__ import annotations

import importlib
import sys

import click

from airlock import __version__
from airlock.config import loader as config_mod
from airlock.errors import AirlockError

COMMANDS = {
    "check": "airlock.cli.check:check_cmd",
    "status": "airlock.cli.status:status_cmd",
    "recover": "airlock.cli.recover:recover_cmd",
    "serve": "airlock.cli.serve:serve_cmd",
    "render": "airlock.cli.render:render_cmd",
    "doctor": "airlock.cli.doctor:doctor_cmd",
    "metrics": "airlock.cli.metrics:metrics_cmd",
    "demo": "airlock.cli.demo:demo_cmd",
    "ledger": "airlock.cli.ledger:ledger_cmd",
}


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in COMMANDS:
            return None
        module, _, attr = COMMANDS[name].partition(":")
        try:
            return getattr(importlib.import_module(module), attr)
        except ImportError as exc:  # e.g. an optional dependency missing on this host
            raise click.ClickException(f"command {name} unavailable: {exc}") from None

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except AirlockError as exc:
            click.echo(f"airlock: {exc}", err=True)
            sys.exit(exc.exit_code)


@click.group(cls=LazyGroup)
@click.version_option(__version__, prog_name="airlock")
@click.option("--config", "config_path", envvar=config_mod.ENV_VAR, default=None,
              help=f"Config file (default ${config_mod.ENV_VAR} or {config_mod.DEFAULT_PATH}).")
@click.pass_context
def cli(ctx: click.Context, config_path: str | None) -> None:
    """Airlock: a health gate for Slurm GPU clusters."""
    ctx.ensure_object(dict)
    ctx.obj["config_path"] = config_path


def main() -> None:
    cli(prog_name="airlock")
