"""One recovery poll: read every node with one Slurm call, move the cases, act within the rails.

Order within a poll, chosen so that a kill -9 anywhere is harmless:
  1. answer old intents (a previous process died between writing an intent and recording the
     provider's answer): ask whether the action happened; send it again only if it did not;
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

from airlock import faults
from airlock.errors import AirlockError
from airlock.recovery import machine as m
from airlock.recovery import policy as policy_mod
from airlock.recovery import store as st
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

    def __init__(self, cfg, slurm, store: st.RecoveryStore, rebooter: Provider,
                 replacer: Provider, journal: Journal, dry_run: bool = False,
                 clock: Callable[[], float] = time.time):
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
        rep = PollReport()
        emit = self.journal.emit
        try:
            nodes = self.slurm.nodes()
        except AirlockError as exc:
            rep.error = str(exc)
            emit(node="*", event="slurm_error", detail=str(exc))
            self.beat()
            return rep
        obs = {n.name: m.Obs.from_node(n) for n in nodes}
        rep.nodes = len(obs)
        if not self.dry_run:
            self.answer_intents(obs)
        now = self.clock()
        rep.stuck = m.stuck_nodes(obs.values(), now, self.stuck_after)
        cases = self.store.cases()
        ledger = self.store.ledger(now, self.settings.rate_window, self.settings.breaker_window)
        d = m.decide(cases, list(obs.values()), now, self.policy, self.settings, ledger,
                     self.owns_reason)
        rep.events, rep.held, rep.breaker = d.events, d.held, d.trip or ledger.breaker_why
        if self.dry_run:
            later = self.show_dry_run(d, obs, ledger, now)
            for node, (reason, since) in sorted(rep.stuck.items()):
                emit(node=node, event="stuck", detail=self.stuck_detail(reason, since, now),
                     dry_run=True)
            rep.started = [(n, a, "dry-run") for n, a in later.starts]
            return rep
        targets, tripped = self.commit_decision(cases, d, now, ledger, rep.stuck)
        for node, event, detail in d.events:
            emit(node=node, event=event, detail=detail)
        if tripped:
            emit(node="*", event="breaker_open", detail=d.trip)
        for node, action, why in d.held:
            emit(node=node, event="held", detail=f"{action}: {why}")
        for case in d.cases.values():
            if case.state == m.REPLACE_REQUESTED and case.node not in [t.node for _, t in targets]:
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
                res = results.get(t.node, Result(ERROR, "no answer from the provider"))
                self.apply_result(t, action, res)
                rep.started.append((t.node, action, res.status))
        return rep

    def beat(self) -> None:
        """Count this poll in the database: proof for people and tests that the service is
        alive and polling, also while it has nothing to do."""
        if not self.dry_run:
            with self.store.tx() as db:
                self.store.beat(db, os.getpid(), self.started, self.clock())

    @staticmethod
    def stuck_detail(reason: str, since: float, now: float) -> str:
        return (f"{reason!r} for {now - since:.0f}s (since {m.format_slurm_time(since)}); "
                "the node's hook re-runs or fails it")

    def show_dry_run(self, d: m.Decision, obs: dict[str, m.Obs], ledger: m.Ledger,
                     now: float) -> m.Decision:
        """Print what this poll would do; returns the decision whose starts it printed."""
        emit = self.journal.emit
        for node, event, detail in d.events:
            emit(node=node, event=event, detail=detail, dry_run=True)
        later = d
        if d.detections and not d.trip:
            # New cases act on a later poll: show what that poll would start.
            seen = dataclasses.replace(ledger, detections=ledger.detections + d.detections)
            later = m.decide(d.cases, list(obs.values()), now + self.settings.detect_grace,
                             self.policy, self.settings, seen, self.owns_reason)
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

    def commit_decision(self, before: dict[str, m.Case], d: m.Decision, now: float,
                        ledger: m.Ledger | None = None,
                        stuck: dict[str, tuple[str, float]] | None = None,
                        ) -> tuple[list[tuple[str, ActionTarget]], bool]:
        """Write the decision in one transaction; returns the actions to send now, and whether
        this poll opened the breaker."""
        targets = []
        starting = {n for n, _ in d.starts}
        tripped = False
        notes: list[tuple[str, str, str]] = []
        with self.store.tx() as db:
            for node in sorted(d.changed):
                case = d.cases[node]
                prev = before.get(node)
                if prev and prev.state in m.AWAITING_BOOT and case.state not in m.AWAITING_BOOT:
                    msg = "new boot seen" if case.state in m.AWAITING_VERDICT else case.note
                    self.store.set_action(db, prev.action_id, st.DONE, msg or case.state, now)
                if node in starting:
                    via = self.provider(case.action).name
                    aid, rid = self.store.add_action(db, node, case.action, via,
                                                     case.boot_before, now)
                    case = d.cases[node] = dataclasses.replace(case, action_id=aid)
                    targets.append((case.action, ActionTarget(
                        node, rid, recover_reason(case.action, rid))))
                    self.store.add_event(db, node, "request",
                                         f"{case.action} via {via} request {rid}", now, aid)
                self.store.put_case(db, case, now)
            for node, event, detail in d.events:
                self.store.add_event(db, node, event, detail, now)
            for node, check, ts in d.detections:
                self.store.add_detection(db, node, check, ts)
            if d.trip:
                reset_at = float(self.store.breaker()["reset_at"] or 0)
                if ledger is not None and reset_at > ledger.breaker_reset_at:
                    # An operator reset the breaker after this poll read it: the reset wins,
                    # and the next poll counts failures from the reset on.
                    notes.append(("*", "breaker_trip_dropped",
                                  f"{d.trip}; reset by an operator during this poll"))
                else:
                    self.store.open_breaker(db, d.trip, now)
                    self.store.add_event(db, "*", "breaker_open", d.trip, now)
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

    def apply_result(self, t: ActionTarget, action: str, res: Result, note: str = "") -> None:
        now = self.clock()
        aid = int(t.request_id.split("-")[1])
        with self.store.tx() as db:
            self.store.set_action(db, aid, res.status, res.message, now)
            case = self.store.case(t.node)
            event = {ISSUED: "issued", REFUSED: "refused"}.get(res.status, "action_error")
            self.store.add_event(db, t.node, event, f"{action}: {res.message}{note}", now, aid)
            if case is not None and case.action_id == aid and case.state in m.AWAITING_BOOT:
                if res.status == REFUSED:
                    case = case.to(m.MANUAL, now, note=f"{action} refused: {res.message}")
                    self.store.add_event(db, t.node, "manual",
                                         f"{action} refused by {self.provider(action).name}; "
                                         "left drained", now, aid)
                elif res.status == ERROR:
                    case = case.to(m.DETECTED, now, note=f"{action} failed: {res.message}")
                self.store.put_case(db, case, now)
        self.journal.emit(node=t.node, event=event, detail=f"{action}: {res.message}{note}",
                          action_id=aid)

    def answer_intents(self, obs: dict[str, m.Obs]) -> None:
        for a in self.store.actions(status=st.INTENT):
            o = obs.get(a["node"])
            t = ActionTarget(a["node"], a["request_id"],
                             recover_reason(a["kind"], a["request_id"]))
            prov = self.provider(a["kind"])
            booted = o is not None and m.is_new_boot(o.boot_time, a["boot_before"],
                                                     a["created"], self.settings)
            try:
                happened = booted or prov.lookup(a["kind"], t, o)
            except AirlockError as exc:
                self.journal.log(a["node"], "lookup_error", str(exc), a["id"])
                continue
            if happened:
                self.apply_result(t, a["kind"], Result(ISSUED, "already done before a restart"),
                                  " (found after restart)")
                continue
            self.journal.log(a["node"], "resend", f"{a['kind']} {a['request_id']} was not sent "
                                                  "before a restart; sending it now", a["id"])
            res = self.send(a["kind"], [t]).get(t.node, Result(ERROR, "no answer"))
            self.apply_result(t, a["kind"], res, " (after restart)")

    def follow_up(self, case: m.Case, o: m.Obs | None) -> None:
        try:
            done = self.replacer.progress(case, o)
        except AirlockError as exc:
            self.journal.log(case.node, "follow_up_error", str(exc), case.action_id)
            return
        if done:
            self.journal.log(case.node, "follow_up", done, case.action_id)

    # --- the service loop ----------------------------------------------------------------
    def run(self, interval: float, stop: Callable[[], bool], once: bool = False) -> PollReport:
        while True:
            started = time.monotonic()
            rep = self.poll()
            if once or stop():
                return rep
            while not stop() and time.monotonic() - started < interval:
                time.sleep(min(0.2, interval))
            if stop():
                return rep
