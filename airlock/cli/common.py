"""What every command shares: the config the root command was pointed at."""

from __future__ import annotations

import click

from airlock.config import loader as config_mod


def load_config(ctx: click.Context):
    path = (ctx.find_root().obj or {}).get("config_path")
    return config_mod.load(path)
