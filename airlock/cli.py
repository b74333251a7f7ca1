"""The `airlock` command.

Subcommands live in their own modules and are imported only when used, so `airlock check
--level quick` never pays for what `airlock recover` needs. Every AirlockError ends as one line on
stderr and exit code 2; a check that fails exits 1.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import sys

import click

from airlock import __version__, paths
from airlock import config as config_mod
from airlock.errors import AirlockError

LAZY = {
    "status": "airlock.status:status_cmd",
    "demo": "airlock.dev.demo:demo_cmd",
    "recover": "airlock.recovery.cli:recover_cmd",
    "render": "airlock.render:render_cmd",
    "doctor": "airlock.doctor:doctor_cmd",
    "metrics": "airlock.metrics:metrics_cmd",
}


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        present = [name for name, target in LAZY.items()
                   if importlib.util.find_spec(target.partition(":")[0]) is not None]
        return sorted([*super().list_commands(ctx), *present])

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name in LAZY:
            module, _, attr = LAZY[name].partition(":")
            try:
                return getattr(importlib.import_module(module), attr)
            except (ImportError, AttributeError) as exc:
                raise click.ClickException(f"command {name} unavailable: {exc}") from None
        return super().get_command(ctx, name)

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


def load_config(ctx: click.Context):
    path = (ctx.find_root().obj or {}).get("config_path")
    return config_mod.load(path)


@cli.command("check")
@click.option("--level", type=click.Choice(config_mod.LEVELS), default="quick", show_default=True)
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
        try:
            group = importlib.import_module("airlock.ondemand")
        except ImportError as exc:
            raise AirlockError(f"group checks unavailable: {exc}") from None
        sys.exit(group.run_group(cfg, nodes_expr=nodes_expr, partition=partition,
                                 feature=feature, level=level if level != "quick" else "standard",
                                 wait_jobs_min=wait_jobs, as_json=as_json, only=list(only)))
    if profile:
        cfg.section("profile").name = profile
    from airlock import report
    from airlock.results import Store
    from airlock.runner import run_level, summarize

    node = node or paths.local_node_name()
    import time

    started = time.time()
    progress = None if as_json or not sys.stderr.isatty() else report.terminal_progress
    records, rctx = run_level(cfg, node, level, only=list(only) or None, progress=progress)
    run = summarize(node, level, "manual", records, started, rctx)
    try:
        Store(cfg, node).write(run)
    except OSError as exc:
        click.echo(f"airlock: results not saved: {exc}", err=True)
    if as_json:
        click.echo(json.dumps(run, indent=1, sort_keys=True))
    else:
        click.echo(report.run_table(run))
    sys.exit(1 if run["verdict"] == "fail" else 0)


def main() -> None:
    cli(prog_name="airlock")


if __name__ == "__main__":
    main()
