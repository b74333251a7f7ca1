"""`airlock recover`: the recovery service (loop), one pass (--once), a dry run, the breaker
reset, and the recorded state (--show, --history NODE)."""

from __future__ import annotations

import getpass
import json
import os
import signal
import sys
import time

import click

from airlock.cli.common import load_config
from airlock.errors import AirlockError
from airlock.recovery import providers
from airlock.recovery.journal import Journal
from airlock.recovery.service import Service
from airlock.recovery.store import RecoveryStore
from airlock.slurm import reasons
from airlock.slurm.client import Slurm


@click.command("recover")
@click.option("--once", is_flag=True, help="One poll, then exit.")
@click.option("--dry-run", is_flag=True, help="Print what would be done; change nothing.")
@click.option("--interval", type=float, default=None,
              help="Seconds between polls (default [recovery] poll_interval).")
@click.option("--reset-breaker", is_flag=True, help="Close the circuit breaker, then exit.")
@click.option("--show", is_flag=True, help="Print the cases and the breaker, then exit.")
@click.option("--history", "history_node", default=None, metavar="NODE",
              help="Print one node's recovery history, then exit.")
@click.option("--json", "as_json", is_flag=True, help="With --show/--history: JSON output.")
@click.pass_context
def recover_cmd(ctx, once, dry_run, interval, reset_breaker, show, history_node, as_json):
    """Reboot, re-check and replace failed nodes, within the safety rails."""

    if history_node is not None and not history_node.strip():
        raise AirlockError("--history: needs a node name")
    cfg = load_config(ctx)
    settings = cfg.recovery
    if reset_breaker:
        # One short transaction beside a running service (which holds the lock): the service
        # reads the breaker on its next poll.
        store = RecoveryStore(settings.db)
        was = store.reset_breaker(getpass.getuser())
        click.echo("breaker reset" + ("" if was else " (it was closed)"))
        return
    if show or history_node is not None:
        store = RecoveryStore(settings.db, readonly=True)
        _print_state(store, history_node, as_json)
        return
    if not settings.enabled and not dry_run:
        raise AirlockError("recovery is disabled ([recovery] enabled = false)")
    dry_run = dry_run or settings.dry_run
    if dry_run:
        store = (RecoveryStore(settings.db, readonly=True) if os.path.exists(settings.db)
                 else RecoveryStore(":memory:"))
    else:
        store = RecoveryStore(settings.db)
        store.lock()
    slurm = Slurm.from_config(cfg)
    journal = Journal(store, sys.stdout, dry_run=dry_run)
    rebooter, replacer = providers.make(cfg, slurm, journal.record)
    svc = Service(cfg, slurm, store, rebooter, replacer, journal, dry_run=dry_run)
    stopping = {"now": False}

    def stop(_sig, _frame):
        stopping["now"] = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    svc.run(interval or settings.poll_interval, lambda: stopping["now"], once=once)


def _print_state(store, node: str | None, as_json: bool) -> None:
    if node:
        rows = store.history(node)
        if as_json:
            click.echo(json.dumps(rows, indent=1))
            return
        for r in rows:
            stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(r["ts"]))
            click.echo(f"{stamp} {r['event']:<14} {r['detail']}")
        if not rows:
            click.echo(f"no recovery history for {node}")
        return
    cases = store.cases()
    breaker = store.breaker()
    stuck = store.stuck()
    beat = store.heartbeat()
    if as_json:
        click.echo(json.dumps({"breaker": breaker, "heartbeat": beat, "stuck": stuck,
                               "cases": {n: c.__dict__ for n, c in cases.items()}}, indent=1))
        return
    click.echo("breaker: " + (f"OPEN ({breaker['why']})" if breaker["open"] else "closed"))
    if beat["polls"]:
        click.echo(f"service: pid {beat['pid']}, {beat['polls']} polls, last "
                   f"{time.time() - beat['last_poll']:.0f}s ago")
    for name in sorted(cases):
        c = cases[name]
        click.echo(f"{name:<16} {c.state:<18} {c.failure_class:<24} "
                   f"rung {c.step + 1}/{len(c.ladder)} {c.note}")
    for name, row in stuck.items():
        since = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(row["since"]))
        parsed = reasons.parse(row["reason"])
        kind = "needs operator" if parsed is not None and parsed.own_error else "stuck"
        click.echo(f"{name:<16} {kind:<18} {row['reason']} (since {since})")
