"""`airlock render slurm-conf|systemd|config`: the install files for this site's paths."""

from __future__ import annotations

import os

import click

from airlock.admin import render
from airlock.config import loader as config_mod
from airlock.errors import AirlockError

output = click.option("-o", "--output", default=None,
                      help="Write to this file (atomically) instead of stdout.")

@click.group("render")
def render_cmd() -> None:
    """Render install files: slurm.conf fragment, systemd units, example config."""

@render_cmd.command("slurm-conf")
@click.option("--bin-dir", default=render.DEFAULT_BIN_DIR, show_default=True,
              help="Where the airlock-healthcheck/-prolog/-epilog entry points are.")
@click.option("--healthcheck-program", default="", help="Override the HealthCheckProgram.")
@click.option("--prolog", default="", help="Override the Prolog path.")
@click.option("--epilog", default="", help="Override the Epilog path.")
@click.option("--slurm-version", default="",
              help="The Slurm release to render for (22.05, 24.11, 26.05, ...); default: the "
                   "running Slurm's (scontrol show config, else scontrol --version).")
@click.option("--interval", type=int, default=300, show_default=True,
              help="HealthCheckInterval in seconds (0 = only at slurmd start: Slurm 25.11+, "
                   "START_ONLY).")
@click.option("--node-state", default="",
              help=f"HealthCheckNodeState ({', '.join(render.NODE_STATES[:5])}); default ANY, "
                   "START_ONLY with --interval 0.")
@click.option("--prolog-epilog-timeout", type=int, default=60, show_default=True)
@click.option("--reboot-program", default="", help="RebootProgram (default: a comment).")
@click.option("--scheduler-parameters", default="",
              help="The site's own SchedulerParameters (nohold_on_prolog_fail is added).")
@click.option("--airlock-config", "config", default=config_mod.DEFAULT_PATH, show_default=True,
              help="The config path the hooks read.")
@output
def slurm_conf_cmd(output, slurm_version, **values) -> None:
    """The slurm.conf fragment for this install's paths and Slurm release."""
    if not slurm_version:
        slurm_version = render.running_release()
        click.echo(f"airlock render: for Slurm {slurm_version} (the running Slurm's; "
                   "--slurm-version to choose)", err=True)
    render.write_output(render.slurm_conf(slurm_version, preflight=_preflight(values["config"]),
                                          **values), output)


def _preflight(path: str) -> tuple[float, float] | None:
    """([prolog] budget, [preflight] budget) when the config the hooks read enables
    [preflight]; None when it does not, is not on this host, or cannot be read (said on
    stderr)."""
    if not os.path.exists(path):
        return None
    try:
        cfg = config_mod.load(path)
    except AirlockError as exc:
        click.echo(f"airlock render: no [preflight] lines ({exc})", err=True)
        return None
    if not cfg.preflight.enabled:
        return None
    return cfg.prolog.budget, cfg.preflight.budget

@render_cmd.command("systemd")
@click.option("--airlock-bin", default="", help="The airlock executable (default: found).")
@click.option("--airlock-config", "config", default=config_mod.DEFAULT_PATH, show_default=True)
@click.option("--serve", is_flag=True,
              help="The airlock-serve.service unit (console and API) instead.")
@click.option("--listen", default="", metavar="HOST:PORT",
              help="With --serve: the listen address (default [serve] listen).")
@output
def systemd_cmd(output, airlock_bin, config, serve, listen) -> None:
    """The airlock-recover.service unit for the controller (--serve: airlock-serve.service)."""
    if listen and not serve:
        raise click.UsageError("--listen goes with --serve")
    text = (render.serve_unit(airlock_bin, config, listen=listen) if serve
            else render.systemd_unit(airlock_bin, config))
    render.write_output(text, output)

@render_cmd.command("config")
@output
def config_cmd(output) -> None:
    """An example airlock.toml with every key, its default and what it does."""
    render.write_output(render.example_config(), output)
