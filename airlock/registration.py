"""The registration suite: `python -m airlock.registration --node N --run-id R --trigger T`,
started detached by the hooks (hooks.gate) for a boot that has no proof yet.

1. Isolation first. No check runs until Slurm shows the node drained (by Airlock or anyone)
   and running no job: a heavy check never runs over a job, whichever path started the suite
   (a boot, a node adopted while busy, a job refused by the prolog). While it waits, the record
   says so and the hooks' suite timeout does not run; slurmctld down means waiting too (no job
   can be scheduled meanwhile).
2. The registration level, with the node's drain put back before each check (a reboot with
   nextstate=resume, or a FUTURE node registering on 22.05, clears it).
3. With [registration] group_window, a multi-node all-reduce with the nodes that registered in
   the same window (airlock.groups.batch), within the same suite_timeout as the checks: the hooks
   count the suite's time from its first check, and the group rounds are part of it. A group
   test that cannot conclude for this node is inconclusive (Verdict.ERROR): no proof, never a
   failure of the node.
4. The verdict: the run is stored, then the node is resumed (pass, only while Airlock's pending
   claim is in force) or drained with the failure. A Slurm update that fails is retried for
   [registration] slurm_retry seconds, then left in the record for the next hook run.
   A suite that a newer boot superseded leaves Slurm alone.

Any exception ends as a verdict ("error", an own-error drain), never as a silent exit.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from airlock import finish, gate_machine, paths
from airlock.checks.base import failed, inconclusive, passed
from airlock.checks.context import Context
from airlock.config import loader as config_mod
from airlock.errors import AirlockError, where
from airlock.records import proof as nodestate
from airlock.runner import run_level
from airlock.slurm import drains, reasons
from airlock.slurm.client import Node, Slurm

# While the suite waits for isolation it asks Slurm again after POLL_S, then twice as long
# each time the answer is unchanged, up to POLL_MAX_S (a draining node's jobs may run for days;
# the checks starting 30 s after the last one ends costs nothing). Each ask is one node read,
# two RPCs for slurmctld (sdiag: the node table and the partition table).
POLL_S = 2.0
POLL_MAX_S = 30.0
# How often the drain is re-verified between checks. An unreachable slurmctld costs a client
# call about 10 s, and the drain is lost only by rare events (a reboot with nextstate=resume, an
# admin's resume; the prolog refuses jobs on this boot meanwhile), so once a minute is enough:
# two RPCs per node per minute while a long level runs.
RECHECK_S = 60.0
# How long a finished suite keeps trying a Slurm update it could not make (keep_trying).
LINGER_S = 24 * 3600.0


def log(msg: str) -> None:
    print(time.strftime("%Y-%m-%dT%H:%M:%S ") + msg, file=sys.stderr, flush=True)


class Suite:
    def __init__(self, cfg, node: str, run_id: str, trigger: str):
        self.cfg, self.node, self.run_id, self.trigger = cfg, node, run_id, trigger
        self.level = cfg.registration.level
        self.slurm = Slurm.from_config(cfg)
        self.state = nodestate.NodeState(cfg, node)
        self.verified = 0.0  # monotonic time the drain was last verified
        self.seen: Node | None = None  # the node's Slurm record when isolation was confirmed
        # monotonic time by which the checks and the group rounds end: suite_timeout from the
        # first check, the moment from which the hooks count the suite's time
        self.deadline = 0.0

    def superseded(self) -> bool:
        """A newer boot of this node started its own suite: this one must not touch Slurm."""
        record = self.state.load()
        return record is not None and record["run_id"] != self.run_id

    # --- isolation --------------------------------------------------------------------------
    def isolated_and_idle(self) -> str:
        """"" when Slurm shows the node drained and running no job, else why not (after putting
        Airlock's drain back if it is missing)."""
        current = self.slurm.node(self.node)
        step = gate_machine.isolation(current)
        if step == gate_machine.CLAIM:
            drains.isolate(self.slurm, self.node, self.level, self.trigger, current=current)
            # Even a node that was drained and idle, only its reason gone (a FUTURE node
            # registering on 22.05), is read again: the read is older than the claim just set,
            # and an admin's resume and a job may have come in between (the drain does not
            # stop a running job). The next poll, POLL_S later, confirms it.
            return "drain just set"
        if step == gate_machine.WAIT:
            return f"jobs still running ({current.state_text})"
        self.seen = current
        return ""

    def wait_for_isolation(self) -> None:
        """Until Slurm shows the node isolated and idle. Jobs still running are waited for as
        long as they run (the node is draining); Slurm unreachable for suite_timeout ends the
        suite with an own error, which the hooks retry once Slurm answers."""
        waiting, last, unreachable_since = False, None, None
        limit = self.cfg.registration.suite_timeout
        pause = POLL_S
        while True:
            if self.superseded():
                raise Superseded()
            try:
                why = self.isolated_and_idle()
                unreachable_since = None
            except AirlockError as exc:
                why = f"Slurm unreachable: {exc}"
                unreachable_since = unreachable_since or time.monotonic()
                if time.monotonic() - unreachable_since > limit:
                    raise NotIsolated(f"could not confirm isolation for {limit:g}s: {why}") \
                        from None
            if not why:
                self.verified = time.monotonic()
                self.deadline = self.verified + limit
                self.state.phase(self.run_id, "checking")
                if waiting:
                    log(f"{self.node}: isolated and idle; checks start")
                return
            if not waiting:
                self.state.phase(self.run_id, "waiting")
                waiting = True
            if why != last:
                log(f"{self.node}: waiting before any check: {why}")
                pause = POLL_S  # something changed: look again soon
            else:
                pause = min(pause * 2, POLL_MAX_S)
            last = why
            time.sleep(pause)

    def keep_isolated(self, _spec, force: bool = False) -> None:
        if self.superseded():
            raise Superseded()
        if not force and time.monotonic() - self.verified < RECHECK_S:
            return
        self.verified = time.monotonic()
        try:
            current = self.slurm.node(self.node)
            if drains.unclaimed(current):
                drains.isolate(self.slurm, self.node, self.level, self.trigger, current=current)
        except AirlockError as exc:
            log(f"could not verify isolation: {exc}")

    # --- the run ------------------------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        started = time.time()
        self.wait_for_isolation()
        records, ctx = self.check()
        if self.cfg.registration.group_window > 0 and self.cfg.shared_dir and \
                not any(r["verdict"] == "fail" and not r.get("observe") for r in records):
            group = self.batch_group()
            if group is not None:
                records.append(group)
        return finish.summarize(self.node, self.level, self.trigger, records, started,
                                ctx.profile_name, self.run_id)

    def check(self, only: list[str] | None = None) -> tuple[list[dict[str, Any]], Context]:
        """The level's checks on the isolated node (after wait_for_isolation)."""
        deadline = self.deadline or time.monotonic() + self.cfg.registration.suite_timeout
        ctx = Context.create(self.cfg, self.node, self.level)
        # What the checks need from Slurm (the GRES) as read a moment ago, when Slurm answered:
        # a controller that goes away during the checks is Airlock's trouble, not the node's.
        ctx.know_slurm_node(self.seen)
        return run_level(self.cfg, self.node, self.level, only=only, deadline=deadline,
                         ctx=ctx, before_check=self.keep_isolated)

    def batch_group(self) -> dict[str, Any] | None:
        """Join this registration window's batch; the group all-reduce's record, or None if
        alone. A batch that cannot say whether this node is good is inconclusive (no proof,
        never a failure of the node), and it ends by the suite's deadline."""
        from airlock.checks.groupcheck import run_member  # (the same)
        from airlock.groups.batch import Batch  # only with [registration] group_window
        from airlock.groups.topology import parse_topology  # (the same)

        reg = self.cfg.registration
        started = time.monotonic()
        # The address Slurm gave when isolation was confirmed: no extra call to the controller.
        addr = (self.seen.address if self.seen is not None else "") or "127.0.0.1"
        batch = Batch(paths.shared_root(self.cfg.shared_dir), self.node, addr,
                      reg.group_window, reg.group_timeout, tuple(self.cfg.ondemand.port_range),
                      confirm=self.cfg.checks.confirm_runs, known=self.slurm.known,
                      deadline=self.deadline or started + reg.suite_timeout,
                      group_max=reg.group_max, concurrency=reg.group_concurrency,
                      topology=lambda: parse_topology(self.slurm.topology()), report=log)
        batch.arrive(self.run_id)
        doc = batch.form()
        if doc is None:
            log(f"{self.node}: no other node registered within {reg.group_window:g}s; "
                "no batch test")
            return None

        def member(nodes: list[str], master: str, port: int, secret_file: str,
                   timeout: float) -> dict[str, Any]:
            return run_member(self.cfg, self.node, nodes, master, port, self.level,
                              timeout=timeout, secret_file=secret_file)

        verdict = batch.run(doc, member)
        members = ",".join(doc["members"])
        if self.node in verdict.get("good", []):
            outcome = passed("group_allreduce", f"batch {members}")
        elif self.node in verdict.get("bad", []):
            outcome = failed("group_allreduce", verdict["details"].get(self.node, "failed"),
                             members=members)
        else:
            why = verdict.get("details", {}).get(self.node, "")
            outcome = inconclusive("group_allreduce",
                                   f"inconclusive in batch {members}: {why}".strip()[:200])
        record = outcome.to_dict()
        record["duration_s"] = round(time.monotonic() - started, 3)
        record["attempts"] = 1
        return record

    # --- the verdict --------------------------------------------------------------------------
    def conclude(self, run: dict[str, Any]) -> int:
        verdict = run["verdict"]
        done = finish.finish_run(self.cfg, self.node, run)
        for problem in done.problems:
            log(problem)
        # A run that did not see every check of its level ("error") is no proof: the node
        # stays out with an own-error reason (FAIL suite ...), which the hooks retry and the
        # recovery service never acts on.
        failing = verdict in ("fail", "error")
        reason = finish.failure_reason(run).format() if failing else ""
        # The verdict is recorded before Slurm hears of it, its update marked pending: a hook or
        # prolog that sees the node resumed then also sees the pass (a suite still "running" on
        # a node in service is one it would isolate again), and a suite that dies before the
        # update leaves it to the next hook run.
        if not self.state.finish(self.run_id, verdict, detail=run["detail"] if failing else "",
                                 slurm_pending="fail" if failing else "resume", reason=reason):
            log(f"{self.node}: {verdict}, but a newer registration took over; Slurm left alone")
            return 0
        if not self.update_slurm(failing, reason):
            self.state.settle(self.run_id)
        else:
            self.keep_trying(failing, reason)
        return 1 if failing else 0

    def update_slurm(self, failing: bool, reason: str) -> str:
        """Resume or drain, retried for slurm_retry seconds; "" when done, else what is left
        for the next hook run ("resume" or "fail")."""
        give_up = time.monotonic() + self.cfg.registration.slurm_retry
        while True:
            try:
                if failing:
                    res = drains.fail(self.slurm, self.node, reasons.parse(reason))
                else:
                    res = drains.release(self.slurm, self.node, self.level, self.trigger)
                log(f"{self.node}: {'fail' if failing else 'pass'} -> "
                    f"{'changed' if res.changed else 'unchanged'} {res.why}")
                return ""
            except AirlockError as exc:
                if time.monotonic() >= give_up:
                    log(f"{self.node}: Slurm update failed ({exc}); left to the next hook run")
                    return "fail" if failing else "resume"
                time.sleep(POLL_S)


    def keep_trying(self, failing: bool, reason: str) -> None:
        """The update is left in the record for the next hook run, but with
        HealthCheckInterval=0 no hook runs again this boot (and a drained node gets no job, so
        no prolog either): keep trying in the background, less and less often, until it
        lands, a hook made it (the record is settled), or a newer registration took over."""
        wait, give_up = POLL_S, time.monotonic() + LINGER_S
        while time.monotonic() < give_up:
            time.sleep(wait)
            wait = min(wait * 2, 60.0)
            record = self.state.load()
            if record is None or record["run_id"] != self.run_id \
                    or not record.get("slurm_pending"):
                return
            try:
                if failing:
                    drains.fail(self.slurm, self.node, reasons.parse(reason))
                else:
                    drains.release(self.slurm, self.node, self.level, self.trigger)
            except AirlockError:
                continue
            self.state.settle(self.run_id)
            log(f"{self.node}: the Slurm update left pending is made")
            return


class Superseded(Exception):
    """A newer registration owns the node's record."""


class NotIsolated(Exception):
    """Slurm never confirmed that the node was isolated and idle."""


def registration(cfg, node: str, run_id: str, trigger: str) -> int:
    suite = Suite(cfg, node, run_id, trigger)
    try:
        return suite.conclude(suite.run())
    except Superseded:
        log(f"{node}: a newer registration took over; this one stops")
        return 0
    except BaseException as exc:  # every type ends as a verdict: an unproven boot stays closed
        return crashed(suite, exc)


def crashed(suite: Suite, exc: BaseException) -> int:
    if isinstance(exc, NotIsolated):
        detail = str(exc)
    else:
        detail = f"{type(exc).__name__} {where(exc)} {exc}".strip()
    log(f"{suite.node}: suite error: {detail}")
    reason = reasons.failure("suite", detail)
    try:
        if not suite.state.finish(suite.run_id, "error", error=detail, detail=detail,
                                  reason=reason.format(), slurm_pending="fail"):
            return 1  # superseded, or the verdict was written (its Slurm update is recorded)
        drains.fail(suite.slurm, suite.node, reason)
        suite.state.settle(suite.run_id)
    except BaseException as inner:  # the hooks re-assert the failure from the record
        log(f"{suite.node}: could not record or drain the suite error: {inner}")
    return 1


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m airlock.registration")
    p.add_argument("--node", required=True)
    p.add_argument("--run-id", required=True)
    p.add_argument("--trigger", default="boot")
    args = p.parse_args(argv)
    try:
        cfg = config_mod.load()
    except AirlockError as exc:
        # The hook that started us loaded this config a moment ago; it will see the record
        # still running, then the suite dead, and fail closed with the config error.
        print(f"airlock: {exc}", file=sys.stderr)
        return 2
    return registration(cfg, args.node, args.run_id, args.trigger)


if __name__ == "__main__":
    sys.exit(main())
