"""`airlock demo`: a real Slurm cluster on this machine shows the whole gate working."""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

import click

from airlock.dev.demo import run_demo


@click.command("demo")
@click.option("--dir", "workdir", type=click.Path(file_okay=False), default=None,
              help="Where the demo cluster lives (default: a temporary directory).")
@click.option("--keep", is_flag=True, help="Leave the cluster running afterwards.")
def demo_cmd(workdir: str | None, keep: bool) -> None:
    """Run a local demo cluster: nodes join, are isolated, checked, resumed or drained."""
    tmp = None
    if workdir is None:
        tmp = tempfile.mkdtemp(prefix="airlock-demo-")
        workdir = tmp
    try:
        rc = run_demo(Path(workdir), keep=keep)
    finally:
        if tmp and not keep:
            shutil.rmtree(tmp, ignore_errors=True)
    sys.exit(rc)
