"""The on-demand check's multi-node all-reduce: the tests (one srun of group workers each),
the run's rendezvous secret, groups cut along the topology, and the culprit search when a
group fails (airlock.groups.culprit), written into the targets."""

from __future__ import annotations

import os
import random
import threading
import time
from typing import Any

from airlock import paths, protocol
from airlock.collective.rendezvous import SECRET_ENV, new_secret
from airlock.groups.culprit import find_culprits
from airlock.groups.topology import cut, parse_topology
from airlock.ondemand.launch import Launcher, srun_error
from airlock.ondemand.report import GROUP_CHECK, GroupTarget
from airlock.slurm.client import collect


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
            why = "timeout" if rc == 124 else f"srun: {srun_error(err, out, silent[0], rc)}"
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


def run_groups(cfg, launcher: Launcher, targets: dict[str, GroupTarget], passed: list[str],
               level: str, echo) -> None:
    """The group all-reduce over the nodes that passed their level, its verdicts written into
    targets (group, and status for a culprit or a node without a verdict)."""
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
            one_group(cfg, tester, targets, group, echo)

    threads = [threading.Thread(target=one, args=(g,), daemon=True) for g in groups]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def one_group(cfg, tester: GroupTester, targets: dict[str, GroupTarget], group: list[str],
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
