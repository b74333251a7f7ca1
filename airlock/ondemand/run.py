"""The orchestration of an on-demand check (airlock/ondemand/__init__.py says how and why):
targets, the reservation, the level on every target, the group all-reduce, the drains. It
returns a GroupReport; airlock.cli.check prints it (table or JSON)."""

from __future__ import annotations

import sys
import time

from airlock import protocol
from airlock.errors import AirlockError
from airlock.ondemand.group import GroupTester, run_groups
from airlock.ondemand.launch import Launcher, srun_error
from airlock.ondemand.report import GROUP_CHECK, GroupReport, GroupTarget
from airlock.ondemand.reservation import Reservation
from airlock.ondemand.targets import select_targets, unusable
from airlock.slurm import drains, reasons
from airlock.slurm.client import Slurm, collect


def run_group(cfg, nodes_expr: str | None = None, partition: str | None = None,
              feature: str | None = None, level: str = "standard", wait_jobs_min: float = 10.0,
              only: list[str] | None = None, echo=None) -> GroupReport:
    echo = echo or (lambda msg: print(msg, file=sys.stderr, flush=True))
    slurm = Slurm.from_config(cfg)
    settings = cfg.ondemand
    started = time.time()
    nodes = select_targets(slurm, nodes_expr, partition, feature)
    targets = {n.name: GroupTarget(n.name, n.address or n.hostname or n.name) for n in nodes}

    def report() -> GroupReport:
        return GroupReport(level, started, time.time(), list(targets.values()))

    for n in nodes:
        why = unusable(n)
        if why:
            targets[n.name].status, targets[n.name].why = "skipped", why
    usable = [n.name for n in nodes if targets[n.name].status == "pending"]
    if not usable:
        return report()
    group_s = settings.group_timeout + GroupTester.SRUN_MARGIN_S
    budget_min = int(wait_jobs_min + (settings.level_timeout + 4 * group_s) / 60) + 5
    reservation = Reservation(slurm, settings.reservation)
    reservation.create(usable, budget_min)
    echo(f"airlock: isolated {collect(usable)} (reservation {settings.reservation})")
    try:
        ready = _wait_idle(slurm, usable, wait_jobs_min * 60, settings.poll_interval, echo)
        for name in usable:
            if name not in ready:
                targets[name].status = "skipped"
                targets[name].why = f"busy: job still running after {wait_jobs_min:g} min"
        if not ready:
            return report()
        reservation.shrink(ready)
        launcher = Launcher(cfg, slurm, settings.reservation)
        local_only = [o for o in only or [] if o != GROUP_CHECK]
        passed = _local_level(cfg, launcher, targets, ready, level, local_only, echo)
        want_group = not only or GROUP_CHECK in only
        if settings.group and want_group and len(passed) >= 2:
            run_groups(cfg, launcher, targets, passed, level, echo)
        _apply(slurm, targets, echo)
    finally:
        reservation.delete()
    return report()


def _wait_idle(slurm: Slurm, names: list[str], timeout: float, interval: float,
               echo) -> list[str]:
    deadline = time.monotonic() + timeout
    announced = False
    while True:
        nodes = slurm.nodes(names)
        busy = [n.name for n in nodes if n.busy]
        if not busy or time.monotonic() >= deadline:
            return [n.name for n in nodes if not n.busy]
        if not announced:
            echo(f"airlock: waiting up to {timeout / 60:g} min for jobs on {collect(busy)}")
            announced = True
        time.sleep(interval)


def _local_level(cfg, launcher: Launcher, targets: dict[str, GroupTarget], ready: list[str],
                 level: str, only: list[str] | None, echo) -> list[str]:
    echo(f"airlock: running level {level} on {collect(ready)}")
    args = ["node-worker", "--level", level]
    for o in only or []:
        args += ["--only", o]
    rc, out, err = launcher.srun(ready, args, cfg.ondemand.level_timeout, "airlock-check")
    runs = {r["node"]: r for r in protocol.all_of(out, protocol.NODE)}
    passed = []
    for name in ready:
        t = targets[name]
        run = runs.get(name)
        if run is None:
            # No verdict of the node's own: inconclusive, never drained.
            t.status = "inconclusive"
            t.why = ("no result from node: " +
                     (f"timeout after {cfg.ondemand.level_timeout:g}s" if rc == 124
                      else f"srun: {srun_error(err, out, name, rc)}"))
            echo(f"airlock: {name}: {t.why}")
            continue
        t.run = run
        t.duration_s = run.get("duration_s", 0.0)
        if run["verdict"] == "fail":
            t.status, t.failed_check, t.detail = "fail", run["failed_check"], run["detail"]
        elif run["verdict"] == "error":  # the level did not see all of the node: no verdict
            t.status, t.why = "inconclusive", run["detail"]
            echo(f"airlock: {name}: {t.why}")
        else:
            t.status = "pass"
            passed.append(name)
    return passed


def _apply(slurm: Slurm, targets: dict[str, GroupTarget], echo) -> None:
    """Drain each failed target by the drain policy (airlock.slurm.drains.fail): an earlier
    failure of the node's hardware or a recovery in force stays; a foreign drain is kept."""
    for t in targets.values():
        if t.status != "fail":
            continue
        try:
            r = drains.fail(slurm, t.name, reasons.failure(t.failed_check, t.detail))
            if not r.changed and r.why:
                t.why = r.why
        except AirlockError as exc:
            t.why = f"drain failed: {exc}"
            echo(f"airlock: {t.name}: {t.why}")
