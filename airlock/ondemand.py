"""On-demand group checks: `airlock check --nodes EXPR | --partition P | --feature F`.

How it works, and why:
* A Slurm maintenance reservation over the targets is both the isolation and the lock. Creating
  it takes effect at once (no new job lands on a target; running jobs go on, IGNORE_JOBS) and
  slurmctld refuses a second reservation of the same name, so two on-demand runs can never
  interleave, whichever host they start from. Its Duration bounds the damage if we die.
* Targets still running a job are waited for up to --wait-jobs, then dropped from the
  reservation and reported as skipped (busy); their jobs are never touched.
* The checks run on the targets through Slurm's own launch path: `srun --reservation` starts one
  worker per node (`python -m airlock.ondemand node-worker`), in parallel, each running the level
  locally and printing its run as JSON.
* Then a multi-node all-reduce across the nodes that passed (torch.distributed: NCCL on GPUs,
  gloo on CPU; rendezvous on the first target). If it fails or is slow, airlock.groups.culprit
  splits
  the group and re-pairs suspects with known-good nodes, so only the bad node(s) are blamed.
* A node is drained (`airlock: FAIL <check> <detail>`) only on a verdict: its own worker's
  FAIL, or a culprit confirmed by the group search. A node that gave no verdict of its own
  (srun could not launch on it, a timeout, an srun error) is inconclusive and never drained:
  Airlock's or Slurm's trouble must not take a healthy node out of service.
* The reservation is deleted, which returns the passing nodes to service. Exit 0: all passed;
  1: some failed; 3: nothing failed but some nodes were skipped or inconclusive.

This module returns a GroupReport; airlock.cli.check prints it (table or JSON). The workers'
own entry point (`python -m airlock.ondemand node-worker|group-worker`) is plain argparse.
"""

from __future__ import annotations

import argparse
import getpass
import os
import random
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from airlock import finish, paths, protocol
from airlock import proc as proc_mod
from airlock.checks import groupcheck
from airlock.collective.rendezvous import SECRET_ENV, new_secret
from airlock.config import loader as config_mod
from airlock.errors import AirlockError, SlurmError
from airlock.groups.culprit import find_culprits
from airlock.groups.topology import cut, parse_topology
from airlock.runner import run_level
from airlock.slurm import reasons
from airlock.slurm.client import Node, Slurm, collect

EXIT_PASS, EXIT_FAIL, EXIT_PARTIAL = 0, 1, 3
GROUP_CHECK = "group_allreduce"  # --only name of the multi-node test


class Busy(AirlockError):
    exit_code = 4


@dataclass
class GroupTarget:
    """One node of an on-demand check and what became of it."""

    name: str
    addr: str
    status: str = "pending"  # pass | fail | skipped | inconclusive
    why: str = ""
    run: dict[str, Any] | None = None
    failed_check: str = ""
    detail: str = ""
    group: str = "n/a"
    figures: dict[str, Any] = field(default_factory=dict)
    duration_s: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"node": self.name, "status": self.status, "why": self.why,
                "failed_check": self.failed_check or None, "detail": self.detail,
                "group": self.group, "figures": self.figures, "duration_s": self.duration_s,
                "checks": (self.run or {}).get("checks", [])}


def select_targets(slurm: Slurm, nodes_expr: str | None, partition: str | None,
                   feature: str | None) -> list[Node]:
    if nodes_expr:
        nodes = slurm.nodes(nodes_expr)
    else:
        nodes = slurm.nodes_in(partition=partition, feature=feature)
    if partition and nodes_expr:
        nodes = [n for n in nodes if partition in n.partitions]
    if feature and nodes_expr:
        nodes = [n for n in nodes if feature in n.features]
    if not nodes:
        what = nodes_expr or (f"partition {partition}" if partition else f"feature {feature}")
        raise AirlockError(f"no nodes match {what}")
    return nodes


def unusable(node: Node) -> str:
    """Why a node cannot be checked now ("" when it can)."""
    if node.foreign_drain:
        return f"drained by someone else: {node.reason!r}"
    parsed = node.claim  # a reason left on a resumed node (Slurm 23.11+) is no claim
    if parsed is not None and parsed.state in ("pending", "checking"):
        return "registration check in progress"
    if parsed is not None:
        return f"already drained by airlock: {node.reason!r} (recovery handles it)"
    if not node.responding or node.state in ("DOWN", "FUTURE", "UNKNOWN"):
        return f"not responding ({node.state_text})"
    return ""


class Reservation:
    def __init__(self, slurm: Slurm, name: str):
        self.slurm = slurm
        self.name = name
        self.active = False

    def create(self, nodes: list[str], minutes: int) -> None:
        try:
            self.slurm.scontrol(
                "create", "reservation", f"ReservationName={self.name}",
                f"Nodes={collect(nodes)}", "StartTime=now", f"Duration={max(minutes, 1)}",
                f"Users={getpass.getuser()}", "Flags=MAINT,IGNORE_JOBS")
        except SlurmError as exc:
            if "Duplicate reservation name" in str(exc):
                raise Busy(f"another on-demand check is running (Slurm reservation {self.name} "
                           "exists); wait for it, or `scontrol delete "
                           f"ReservationName={self.name}` if it is stale") from None
            raise
        self.active = True

    def shrink(self, nodes: list[str]) -> None:
        if nodes:
            self.slurm.scontrol("update", f"ReservationName={self.name}",
                                f"Nodes={collect(nodes)}")

    def delete(self) -> None:
        if self.active:
            try:
                self.slurm.scontrol("delete", f"ReservationName={self.name}")
            except SlurmError as exc:
                print(f"airlock: could not delete reservation {self.name}: {exc}",
                      file=sys.stderr)
            self.active = False


class Launcher:
    """Runs a worker on a set of nodes with srun inside the reservation."""

    def __init__(self, cfg, slurm: Slurm, reservation: str):
        self.cfg = cfg
        self.slurm = slurm
        self.reservation = reservation
        self.python = cfg.ondemand.python or sys.executable
        self.env: dict[str, str] = {}  # added to every srun's environment

    def srun(self, nodes: list[str], worker_args: list[str], timeout: float,
             name: str) -> tuple[int, str, str]:
        minutes = int(timeout // 60) + 2
        argv = [self.slurm.binary("srun"), f"--reservation={self.reservation}",
                f"--nodelist={collect(nodes)}", f"--nodes={len(nodes)}",
                "--ntasks-per-node=1", f"--job-name={name}", f"--time={minutes}",
                "--kill-on-bad-exit=0", "--quiet",
                self.python, "-m", "airlock.ondemand", *worker_args]
        env = self.slurm.env()
        env["AIRLOCK_CONFIG"] = self.cfg.path
        env.update(self.env)
        done = proc_mod.run(argv, timeout, env=env)
        if done.timed_out:
            self._cancel(name)  # srun's session is gone; the job's steps go with scancel
            return 124, done.stdout, done.stderr
        return done.returncode if done.returncode is not None else 124, done.stdout, done.stderr

    def _cancel(self, name: str) -> None:
        try:
            self.slurm.run("scancel", [f"--name={name}", f"--reservation={self.reservation}"])
        except SlurmError:
            pass


class GroupTester:
    """Multi-node all-reduce tests, each over a list of nodes: True when it passes, False when a
    member's own answer failed, None when there is no verdict: a member never reported (srun
    could not launch it, it timed out), or every failing member only timed out waiting on the
    others (the round timed out as a whole). The culprit search blames nobody for None.

    round() runs a round's tests (disjoint nodes) side by side, one srun each."""

    # The members' own time limit (the group timeout, plus 30 s to collect their launcher)
    # ends before srun's, so that a hung collective comes back as the members' verdict.
    SRUN_MARGIN_S = 60.0

    def __init__(self, cfg, launcher: Launcher, addrs: dict[str, str], level: str,
                 secret_file: str = ""):
        self.cfg = cfg
        self.launcher = launcher
        self.addrs = addrs
        self.level = level
        self.secret_file = secret_file  # "" = the secret travels in srun's environment
        self.runs: list[dict[str, Any]] = []
        self.count = 0
        self._lock = threading.Lock()
        self._ports: set[int] = set()

    def _port(self) -> int:
        """A port no test in flight uses (nodes may share a host address, as on a dev cluster)."""
        low, high = self.cfg.ondemand.port_range
        with self._lock:
            free = [p for p in range(low, high + 1) if p not in self._ports]
            port = random.choice(free) if free else random.randint(low, high)
            self._ports.add(port)
            self.count += 1
            return port

    def round(self, groups: list[list[str]]) -> list[bool | None]:
        if len(groups) == 1:
            return [self(groups[0])]
        out: list[bool | None] = [None] * len(groups)

        def one(i: int) -> None:
            out[i] = self(groups[i])

        threads = [threading.Thread(target=one, args=(i,), daemon=True)
                   for i in range(len(groups))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return out

    def __call__(self, nodes: list[str]) -> bool | None:
        port = self._port()
        with self._lock:
            name = f"airlock-group-{self.count}"
        master = self.addrs[nodes[0]]
        args = ["group-worker", "--master", master, "--port", str(port),
                "--nodes", ",".join(nodes), "--level", self.level]
        if self.secret_file:
            args += ["--secret-file", self.secret_file]
        try:
            rc, out, err = self.launcher.srun(
                nodes, args, self.cfg.ondemand.group_timeout + self.SRUN_MARGIN_S, name)
        finally:
            with self._lock:
                self._ports.discard(port)
        results = protocol.all_of(out, protocol.GROUP)
        silent = [n for n in nodes if n not in {r.get("node") for r in results}]
        failed = [r for r in results if not r["ok"]]
        definite = [r for r in failed if not r.get("inconclusive")]
        ok: bool | None
        if definite:
            ok, detail = False, definite[0]["detail"]
        elif silent:
            ok = None
            why = "timeout" if rc == 124 else f"srun: {_srun_error(err, out, silent[0], rc)}"
            detail = f"no verdict from {','.join(silent)} ({why})"
        elif failed:
            ok, detail = None, f"no verdict (timed out as a whole): {failed[0]['detail']}"
        else:
            ok = True if rc == 0 else None
            detail = "" if rc == 0 else f"srun exit {rc} after every member passed"
        figures = results[0].get("figures", {}) if results else {}
        own = {r.get("node"): r["detail"] for r in results if not r["ok"]}
        with self._lock:
            self.runs.append({"nodes": nodes, "ok": ok, "detail": detail, "figures": figures,
                              "own": own})
        return ok


def _srun_error(err: str, out: str, node: str, rc: int) -> str:
    """The line of srun's output that names this node (it says why the launch failed there),
    else its last line."""
    lines = [line.strip() for line in (err or out or "").splitlines() if line.strip()]
    mine = [line for line in lines if node in line]
    text = (mine or lines or [f"exit {rc}"])[-1]
    return text.removeprefix("srun: ").removeprefix("error: ")[:160]


@dataclass
class GroupReport:
    """What an on-demand check found, node by node (airlock.cli.check prints it)."""

    level: str
    started_at: float
    finished_at: float
    targets: list[GroupTarget]

    @property
    def exit_code(self) -> int:
        statuses = {t.status for t in self.targets}
        if "fail" in statuses:
            return EXIT_FAIL
        return EXIT_PARTIAL if statuses & {"skipped", "inconclusive"} else EXIT_PASS

    def to_dict(self) -> dict[str, Any]:
        return {"schema": 1, "level": self.level, "started_at": self.started_at,
                "finished_at": self.finished_at, "exit_code": self.exit_code,
                "nodes": [t.to_dict() for t in self.targets]}


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
            _group(cfg, launcher, targets, passed, level, echo)
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
                      else f"srun: {_srun_error(err, out, name, rc)}"))
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


def _group_secret(cfg, launcher: Launcher) -> tuple[str, str]:
    """The run's rendezvous secret (airlock.collective.rendezvous): (its file, root-only, in a 0700
    folder under the shared directory, "" without one; the folder to remove afterwards). With
    no shared directory it travels in srun's environment instead."""

    secret = new_secret()
    if not cfg.shared_dir:
        launcher.env[SECRET_ENV] = secret
        return "", ""
    name = f"{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}"
    root = paths.shared_root(cfg.shared_dir)
    with paths.SafeDir.open(root, [".ondemand", name], create=True, mode=0o700) as d:
        d.chmod(0o700)
        path = d.write_text("secret", secret + "\n", mode=0o600)
    return str(path), name


def _group(cfg, launcher: Launcher, targets: dict[str, GroupTarget], passed: list[str],
           level: str, echo) -> None:
    try:
        secret_file, folder = _group_secret(cfg, launcher)
    except OSError as exc:
        for n in passed:
            targets[n].group, targets[n].status = "inconclusive", "inconclusive"
            targets[n].why = f"group all-reduce not run: no place for its secret: {exc}"
        return
    try:
        _group_run(cfg, launcher, targets, passed, level, echo, secret_file)
    finally:
        if folder:
            try:
                with paths.SafeDir.open(paths.shared_root(cfg.shared_dir), [".ondemand"]) as d:
                    with d.sub(folder) as f:
                        f.unlink("secret")
                    os.rmdir(folder, dir_fd=d.fd)
            except OSError:
                pass


def _group_run(cfg, launcher: Launcher, targets: dict[str, GroupTarget], passed: list[str],
               level: str, echo, secret_file: str) -> None:
    settings = cfg.ondemand
    tester = GroupTester(cfg, launcher, {n: targets[n].addr for n in passed}, level,
                         secret_file)
    domains: list[list[str]] = []
    if settings.group_max and len(passed) > settings.group_max:
        domains = parse_topology(launcher.slurm.topology())
    groups = cut(passed, settings.group_max, domains)
    if len(groups) > 1:
        echo(f"airlock: {len(passed)} nodes in {len(groups)} groups of at most "
             f"{settings.group_max}: {', '.join(collect(g) for g in groups)}")
    slots = threading.Semaphore(settings.group_concurrency or len(groups))

    def one(group: list[str]) -> None:
        with slots:
            _one_group(cfg, tester, targets, group, echo)

    threads = [threading.Thread(target=one, args=(g,), daemon=True) for g in groups]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def _one_group(cfg, tester: GroupTester, targets: dict[str, GroupTarget], group: list[str],
               echo) -> None:
    echo(f"airlock: group all-reduce over {collect(group)}")
    verdict = tester(group)
    first = next(r for r in reversed(tester.runs) if r["nodes"] == group)
    if verdict:
        for n in group:
            targets[n].group = "pass"
            targets[n].figures.update({f"group.{k}": v for k, v in first["figures"].items()})
        return
    if verdict is None:
        echo(f"airlock: group test over {collect(group)} gave no verdict ({first['detail']}); "
             "retrying smaller")
    else:
        echo(f"airlock: group test over {collect(group)} failed ({first['detail']}); "
             "looking for the culprit")
    search = find_culprits(group, test_round=tester.round, whole=verdict,
                           max_tests=cfg.ondemand.max_group_tests,
                           confirm=cfg.checks.confirm_runs)
    mine = [r for r in tester.runs if set(r["nodes"]) <= set(group)]
    for n in search.good:
        targets[n].group = "pass"
    for n in search.bad:
        t = targets[n]
        t.group, t.status, t.failed_check = "fail", "fail", GROUP_CHECK
        pair = next((r for r in reversed(mine) if n in r["nodes"] and r["ok"] is False), first)
        # The node's own member sees its own fault best ("rank 0 (node3) sent wrong data").
        why = pair["own"].get(n) or pair["detail"] or "failed"
        t.detail = f"{why} (isolated in {len(mine)} tests, {search.rounds} rounds)"
    for n in search.inconclusive:
        t = targets[n]
        t.group, t.status = "inconclusive", "inconclusive"
        last = next((r for r in reversed(mine) if r["ok"] is None and n in r["nodes"]), None)
        t.why = f"group all-reduce: {first['detail'] or 'failed'}" + (
            f"; then {last['detail']}" if last is not None and last is not first
            else "; no known-good node to pair with" if verdict is False else "")


def _apply(slurm: Slurm, targets: dict[str, GroupTarget], echo) -> None:
    for t in targets.values():
        if t.status != "fail":
            continue
        try:
            r = slurm.drain(t.name, reasons.failure(t.failed_check, t.detail))
            if not r.changed and r.why:
                t.why = r.why
        except AirlockError as exc:
            t.why = f"drain failed: {exc}"
            echo(f"airlock: {t.name}: {t.why}")


# --- workers, run on the nodes by srun ------------------------------------------------------
def node_worker(level: str, only: list[str]) -> int:

    cfg = config_mod.load()
    node = paths.local_node_name()
    started = time.time()
    records, ctx = run_level(cfg, node, level, only=only or None)
    run = finish.summarize(node, level, "ondemand", records, started, ctx.profile_name)
    try:
        finish.record_run(cfg, node, run)
    except OSError as exc:
        print(f"airlock: {node}: results not saved: {exc}", file=sys.stderr)
    protocol.emit(protocol.NODE, run)
    return 0


def group_worker(master: str, port: int, nodes: list[str], level: str,
                 secret_file: str = "") -> int:

    cfg = config_mod.load()
    node = paths.local_node_name()
    result = groupcheck.run_member(cfg, node, nodes, master, port, level,
                                   secret_file=secret_file)
    protocol.emit(protocol.GROUP, result)
    return 0


def worker_main(argv: list[str] | None = None) -> int:
    """`python -m airlock.ondemand node-worker|group-worker ...`: what srun starts on the nodes
    (not for people)."""
    ap = argparse.ArgumentParser(prog="python -m airlock.ondemand")
    sub = ap.add_subparsers(dest="worker", required=True)
    nw = sub.add_parser("node-worker")
    nw.add_argument("--level", default="standard")
    nw.add_argument("--only", action="append", default=[])
    gw = sub.add_parser("group-worker")
    gw.add_argument("--master", required=True)
    gw.add_argument("--port", type=int, required=True)
    gw.add_argument("--nodes", required=True)
    gw.add_argument("--level", default="standard")
    gw.add_argument("--secret-file", default="")
    args = ap.parse_args(argv)
    try:
        if args.worker == "node-worker":
            return node_worker(args.level, args.only)
        return group_worker(args.master, args.port, args.nodes.split(","), args.level,
                            args.secret_file)
    except AirlockError as exc:
        print(f"airlock: {exc}", file=sys.stderr)
        return exc.exit_code


if __name__ == "__main__":
    sys.exit(worker_main())
