"""One recovery poll: read every node with one Slurm call, move the cases, act within the rails.

Order within a poll, chosen so that a kill -9 anywhere is harmless:
  1. answer old intents (a previous process died between writing an intent and recording the
     provider's answer): ask whether the action happened; if it did not, re-decide it on
     Slurm's current view (machine.intent_unwanted) and send it only if that view still calls
     for it, else close it with a history row that says why;
  2. decide (pure) and write the result in one transaction: case moves, history, detections,
     the breaker, and an intent row per action about to start;
  3. send the actions; 4. record each answer in a transaction.
Every event is a JSON line on stdout and a history row.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple

from airlock.checks.drift import identity_keys
from airlock.errors import AirlockError
from airlock.hw import faults
from airlock.records.results import read_many
from airlock.recovery import machine
from airlock.recovery import policy as policy_mod
from airlock.recovery.journal import Journal
from airlock.recovery.providers import (
    ERROR,
    ISSUED,
    REFUSED,
    ActionTarget,
    Provider,
    Result,
    recover_reason,
)
from airlock.recovery.store import DONE, DROPPED, INTENT, RecoveryStore
from airlock.slurm import reasons


@dataclass
class PollReport:
    nodes: int = 0
    events: list[tuple[str, str, str]] = field(default_factory=list)
    started: list[tuple[str, str, str]] = field(default_factory=list)  # node, action, status
    held: list[tuple[str, str, str]] = field(default_factory=list)
    stuck: dict[str, tuple[str, float]] = field(default_factory=dict)  # node: (reason, since)
    breaker: str = ""
    error: str = ""


def crash_point(name: str, action: str = "") -> None:
    """Fault switch recover_crash=POINT[:ACTION]: SIGKILL this process there (tests prove that a
    kill at the worst moments neither loses nor repeats an action)."""
    want = faults.parse(os.environ.get(faults.ENV_VAR, "")).get("recover_crash", "")
    point, _, only = want.partition(":")
    if point == name and (not only or only == action):
        os.kill(os.getpid(), signal.SIGKILL)


class Service:
    """cfg: the whole config (its [recovery] section, and [registration] suite_timeout for
    stuck nodes). The providers and the journal are built first (the providers report
    through the journal) and passed in."""

    def __init__(self, cfg, slurm, store: RecoveryStore, rebooter: Provider,
                 replacer: Provider, journal: Journal, dry_run: bool = False,
                 clock: Callable[[], float] = time.time):
        self.cfg = cfg
        self.settings = cfg.recovery
        self.slurm = slurm
        self.store = store
        self.rebooter = rebooter
        self.replacer = replacer
        self.journal = journal
        self.policy = policy_mod.load(self.settings.policy)
        self.dry_run = dry_run or self.settings.dry_run
        self.clock = clock
        self.stuck_after = cfg.registration.suite_timeout + self.settings.stuck_grace
        self.started = clock()

    def provider(self, action: str) -> Provider:
        return self.rebooter if action == "reboot" else self.replacer

    def owns_reason(self, reason: str) -> bool:
        return self.replacer.owns_reason(reason) or self.rebooter.owns_reason(reason)

    # --- the poll ------------------------------------------------------------------------
    def poll(self) -> PollReport:
        report = PollReport()
        emit = self.journal.emit
        try:
            nodes = self.slurm.nodes()
        except AirlockError as exc:
            report.error = str(exc)
            emit(node="*", event="slurm_error", detail=str(exc))
            self.beat()
            return report
        obs = {n.name: machine.Obs.from_node(n) for n in nodes}
        report.nodes = len(obs)
        if not self.dry_run:
            self.answer_intents(obs)
        now = self.clock()
        # Nodes that need a person and get no action: stuck in a check, or drained for
        # Airlock's own trouble (the state machine never acts on those).
        report.stuck = {**machine.stuck_nodes(obs.values(), now, self.stuck_after),
                        **machine.own_error_nodes(obs.values(), now)}
        cases = self.store.cases()
        ledger = self.store.ledger(now, self.settings.rate_window, self.settings.breaker_window)
        obs, memory = self.documents(cases, obs, now)
        decision = machine.decide(cases, list(obs.values()), now, self.policy, self.settings,
                                  ledger, self.owns_reason, memory)
        report.events, report.held = decision.events, decision.held
        report.breaker = decision.trip or ledger.breaker_why
        if self.dry_run:
            later = self.show_dry_run(decision, obs, ledger, now, memory)
            for node, (reason, since) in sorted(report.stuck.items()):
                emit(node=node, event="stuck", detail=self.stuck_detail(reason, since, now),
                     dry_run=True)
            report.started = [(n, a, "dry-run") for n, a in later.starts]
            return report
        targets, tripped = self.commit_decision(cases, decision, now, ledger, report.stuck)
        for node, event, detail in decision.events:
            emit(node=node, event=event, detail=detail)
        if tripped:
            emit(node="*", event="breaker_open", detail=decision.trip)
        for node, action, why in decision.held:
            emit(node=node, event="held", detail=f"{action}: {why}")
        for case in decision.cases.values():
            if case.state == machine.REPLACE_REQUESTED \
                    and case.node not in [t.node for _, t in targets]:
                self.follow_up(case, obs.get(case.node))
        for action in sorted({a for a, _ in targets}):
            crash_point("after_intent", action)  # intents committed, nothing sent yet
        for action in ("reboot", "replace"):
            batch = [t for a, t in targets if a == action]
            if not batch:
                continue
            results = self.send(action, batch)
            crash_point("after_submit", action)
            for t in batch:
                result = results.get(t.node, Result(ERROR, "no answer from the provider"))
                self.apply_result(t, action, result)
                report.started.append((t.node, action, result.status))
        return report

    def documents(self, cases: dict[str, machine.Case], obs: dict[str, machine.Obs],
                  now: float) -> tuple[dict[str, machine.Obs], machine.Memory]:
        """What the nodes whose failure this poll decides say in their own documents (read
        from the shared directory only for those few: never a read per node per poll): the
        typed kind of their failure, set on their Obs, and their hardware identity for the
        escalation memory. A failure is decided when its node opens a case, or fails again
        after an action."""
        deciding = [n for n, o in obs.items() if o.failing and (
            n not in cases or cases[n].state in machine.CLOSED
            or cases[n].state in (*machine.AWAITING_VERDICT, machine.HEALTHY))]
        docs = node_documents(self.cfg, deciding) if deciding else {}
        obs = dict(obs)
        for node, doc in docs.items():
            if doc.kind and doc.check == obs[node].parsed.subject:
                obs[node] = obs[node]._replace(kind=doc.kind)
        identity = {n: d.identity for n, d in docs.items()
                    if d.identity and (n not in cases or cases[n].state in machine.CLOSED)}
        return obs, self.store.memory(now, self.policy.escalation.window, identity)

    def beat(self) -> None:
        """Count this poll in the database: proof for people and tests that the service is
        alive and polling, also while it has nothing to do."""
        if not self.dry_run:
            with self.store.tx() as db:
                self.store.beat(db, os.getpid(), self.started, self.clock())

    @staticmethod
    def stuck_detail(reason: str, since: float, now: float) -> str:
        parsed = reasons.parse(reason)
        what = ("Airlock's own error, no action: an operator fixes it" if parsed is not None
                and parsed.own_error else "the node's hook re-runs or fails it")
        return (f"{reason!r} for {now - since:.0f}s (since {machine.format_slurm_time(since)}); "
                f"{what}")

    def show_dry_run(self, decision: machine.Decision, obs: dict[str, machine.Obs],
                     ledger: machine.Ledger, now: float,
                     memory: machine.Memory | None = None) -> machine.Decision:
        """Print what this poll would do; returns the decision whose starts it printed."""
        emit = self.journal.emit
        for node, event, detail in decision.events:
            emit(node=node, event=event, detail=detail, dry_run=True)
        later = decision
        if decision.detections and not decision.trip:
            # New cases act on a later poll: show what that poll would start.
            seen = dataclasses.replace(ledger, detections=ledger.detections + decision.detections)
            later = machine.decide(decision.cases, list(obs.values()),
                                   now + self.settings.detect_grace, self.policy, self.settings,
                                   seen, self.owns_reason, memory)
        for node, action in later.starts:
            case = later.cases[node]
            emit(node=node, event="would_" + action, dry_run=True,
                 detail=f"class {case.failure_class}, rung {case.step + 1}/{len(case.ladder)}")
        for node, action, why in later.held:
            emit(node=node, event="held", detail=f"{action}: {why}", dry_run=True)
        if later.trip:
            emit(node="*", event="breaker_open", detail=later.trip, dry_run=True)
        return later

    def send(self, action: str, batch: list[ActionTarget]) -> dict[str, Result]:
        try:
            return self.provider(action).submit(action, batch)
        except AirlockError as exc:
            return {t.node: Result(ERROR, str(exc)) for t in batch}

    def commit_decision(self, before: dict[str, machine.Case], decision: machine.Decision,
                        now: float, ledger: machine.Ledger | None = None,
                        stuck: dict[str, tuple[str, float]] | None = None,
                        ) -> tuple[list[tuple[str, ActionTarget]], bool]:
        """Write the decision in one transaction; returns the actions to send now, and whether
        this poll opened the breaker."""
        targets = []
        starting = {n for n, _ in decision.starts}
        tripped = False
        notes: list[tuple[str, str, str]] = []
        with self.store.tx() as db:
            for node in sorted(decision.changed):
                case = decision.cases[node]
                prev = before.get(node)
                if prev and prev.state == machine.REBOOT_REQUESTED \
                        and case.state == machine.REBOOTED:
                    # remembered across cases: if this check comes back, this reboot did not
                    # clear it (policy [escalation])
                    self.store.remember(db, node, "reboot", case.check, case.hardware, now)
                elif prev and prev.state == machine.REPLACE_REQUESTED \
                        and case.state == machine.REPLACED:
                    self.store.remember(db, node, "replace", case.check, (), now)
                if prev and prev.state in machine.AWAITING_BOOT \
                        and case.state not in machine.AWAITING_BOOT:
                    msg = ("new boot seen" if case.state in machine.AWAITING_VERDICT
                           else case.note)
                    self.store.set_action(db, prev.action_id, DONE, msg or case.state, now)
                if node in starting:
                    via = self.provider(case.action).name
                    action_id, request_id = self.store.add_action(
                        db, node, case.action, via, case.boot_before, now)
                    case = decision.cases[node] = dataclasses.replace(case, action_id=action_id)
                    targets.append((case.action, ActionTarget(
                        node, request_id, recover_reason(case.action, request_id))))
                    self.store.add_event(db, node, "request",
                                         f"{case.action} via {via} request {request_id}", now,
                                         action_id)
                self.store.put_case(db, case, now)
            for node, event, detail in decision.events:
                self.store.add_event(db, node, event, detail, now)
            for node, check, ts in decision.detections:
                self.store.add_detection(db, node, check, ts)
            if decision.trip:
                reset_at = float(self.store.breaker()["reset_at"] or 0)
                if ledger is not None and reset_at > ledger.breaker_reset_at:
                    # An operator reset the breaker after this poll read it: the reset wins,
                    # and the next poll counts failures from the reset on.
                    notes.append(("*", "breaker_trip_dropped",
                                  f"{decision.trip}; reset by an operator during this poll"))
                else:
                    self.store.open_breaker(db, decision.trip, now)
                    self.store.add_event(db, "*", "breaker_open", decision.trip, now)
                    tripped = True
            if stuck is not None:
                notes += self.commit_stuck(db, stuck, now)
            for node, event, detail in notes:
                self.store.add_event(db, node, event, detail, now)
            self.store.beat(db, os.getpid(), self.started, now)
        for action, t in targets:
            self.journal.emit(node=t.node, event="request", detail=f"{action} {t.request_id}")
        for node, event, detail in notes:
            self.journal.emit(node=node, event=event, detail=detail)
        return targets, tripped

    def commit_stuck(self, db, stuck: dict[str, tuple[str, float]],
                     now: float) -> list[tuple[str, str, str]]:
        """Record which nodes are stuck in a check; an event when one becomes stuck (or stuck
        with another reason) and when it stops being stuck, not on every poll."""
        events = []
        known = self.store.stuck()
        for node, (reason, since) in sorted(stuck.items()):
            old = known.get(node)
            if old is None or old["reason"] != reason or old["since"] != since:
                events.append((node, "stuck", self.stuck_detail(reason, since, now)))
            self.store.put_stuck(db, node, reason, since, now)
        for node in sorted(set(known) - set(stuck)):
            self.store.drop_stuck(db, node)
            events.append((node, "unstuck", f"no longer stuck in {known[node]['reason']!r}"))
        return events

    def apply_result(self, target: ActionTarget, action: str, result: Result,
                     note: str = "") -> None:
        now = self.clock()
        action_id = int(target.request_id.split("-")[1])
        node, message = target.node, f"{action}: {result.message}{note}"
        with self.store.tx() as db:
            self.store.set_action(db, action_id, result.status, result.message, now)
            case = self.store.case(node)
            event = {ISSUED: "issued", REFUSED: "refused"}.get(result.status, "action_error")
            self.store.add_event(db, node, event, message, now, action_id)
            if case is not None and case.action_id == action_id \
                    and case.state in machine.AWAITING_BOOT:
                if result.status == REFUSED:
                    case = case.to(machine.MANUAL, now,
                                   note=f"{action} refused: {result.message}")
                    self.store.add_event(db, node, "manual",
                                         f"{action} refused by {self.provider(action).name}; "
                                         "left drained", now, action_id)
                elif result.status == ERROR:
                    case = case.to(machine.DETECTED, now,
                                   note=f"{action} failed: {result.message}")
                self.store.put_case(db, case, now)
        self.journal.emit(node=node, event=event, detail=message, action_id=action_id)

    def answer_intents(self, obs: dict[str, machine.Obs]) -> None:
        """Intents left by a process that died before recording the provider's answer."""
        for row in self.store.actions(status=INTENT):
            node, kind, request_id = row["node"], row["kind"], row["request_id"]
            seen = obs.get(node)
            target = ActionTarget(node, request_id, recover_reason(kind, request_id))
            booted = seen is not None and machine.is_new_boot(
                seen.boot_time, row["boot_before"], row["created"], self.settings)
            try:
                happened = booted or self.provider(kind).lookup(kind, target, seen)
            except AirlockError as exc:
                self.journal.log(node, "lookup_error", str(exc), row["id"])
                continue
            if happened:
                self.apply_result(target, kind, Result(ISSUED, "already done before a restart"),
                                  " (found after restart)")
                continue
            why = machine.intent_unwanted(self.store.case(node), seen, row["id"], kind,
                                          row["created"], self.clock(), self.settings)
            if why:
                self.drop_intent(row, f"{kind} {request_id} not sent after a restart: {why}")
                continue
            self.journal.log(node, "resend", f"{kind} {request_id} was not sent before a "
                                             "restart; sending it now", row["id"])
            result = self.send(kind, [target]).get(node, Result(ERROR, "no answer"))
            self.apply_result(target, kind, result, " (after restart)")

    def drop_intent(self, row: dict, why: str) -> None:
        """Close an intent that Slurm's current view no longer calls for; its case goes back to
        detected at the same rung, so that this poll decides it afresh (a node back in service
        or under a foreign drain is released, a busy one waits, a failed idle one is asked
        for again within the rails)."""
        now = self.clock()
        with self.store.tx() as db:
            self.store.set_action(db, row["id"], DROPPED, why, now)
            self.store.add_event(db, row["node"], "intent_dropped", why, now, row["id"])
            case = self.store.case(row["node"])
            if case is not None and case.action_id == row["id"] \
                    and case.state in machine.AWAITING_BOOT:
                self.store.put_case(db, case.to(machine.DETECTED, now, note=why), now)
        self.journal.emit(node=row["node"], event="intent_dropped", detail=why,
                          action_id=row["id"])

    def follow_up(self, case: machine.Case, seen: machine.Obs | None) -> None:
        try:
            done = self.replacer.progress(case, seen)
        except AirlockError as exc:
            self.journal.log(case.node, "follow_up_error", str(exc), case.action_id)
            return
        if done:
            self.journal.log(case.node, "follow_up", done, case.action_id)

    # --- the service loop ----------------------------------------------------------------
    def run(self, interval: float, stop: Callable[[], bool], once: bool = False) -> PollReport:
        while True:
            started = time.monotonic()
            report = self.poll()
            if once or stop():
                return report
            while not stop() and time.monotonic() - started < interval:
                time.sleep(min(0.2, interval))
            if stop():
                return report


IDENTITY_RUNS = 10  # a node's recent runs searched for its hardware identity (a registration's)


class NodeDocument(NamedTuple):
    """What recovery reads from a node's own run documents: the hardware identity of its
    latest run that carries one, and its latest run's failed check with that check's kind."""

    identity: frozenset[str] = frozenset()
    check: str = ""
    kind: str = ""


def failure_kind(run: dict) -> tuple[str, str]:
    """(failed check, its kind) of a run document: the kind is the failed check's record's
    "finding" field (policy.KINDS, e.g. "config" for a configuration finding:
    checks.base.CONFIG), set where the finding is classified. The document is the node's own,
    from the shared directory: input, so anything but a known kind is no kind (the failure is
    then the node's, as before)."""
    check = run.get("failed_check") if isinstance(run, dict) else None
    if not isinstance(check, str) or not check:
        return "", ""
    for rec in run.get("checks") or ():
        if isinstance(rec, dict) and rec.get("check") == check:
            kind = rec.get("finding")
            return check, kind if isinstance(kind, str) and kind in policy_mod.KINDS else ""
    return check, ""


def node_documents(cfg, nodes: list[str]) -> dict[str, NodeDocument]:
    """Each node's NodeDocument; nodes whose documents cannot be read are missing (the memory
    by name and the untyped failure still work)."""
    out = {}
    try:
        found = read_many(cfg, nodes, history=IDENTITY_RUNS)
    except Exception:
        return {}
    for node, res in found.items():
        keys: frozenset[str] = frozenset()
        for run in [res.run or {}, *res.history]:
            keys = identity_keys(run)
            if keys:
                break
        check, kind = failure_kind(res.run or {})
        if keys or check:
            out[node] = NodeDocument(keys, check, kind)
    return out


def hardware_of(cfg, nodes: list[str]) -> dict[str, frozenset[str]]:
    """Each node's hardware identity ("instance:..", "gpu:..") from the latest of its recorded
    runs that carries one (its drift check's, at registration); empty when none can be read.
    The documents are the nodes' own (shared directory, read as airlock status reads them)."""
    return {n: d.identity for n, d in node_documents(cfg, nodes).items() if d.identity}
