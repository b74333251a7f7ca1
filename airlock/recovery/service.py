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
import json
import os
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from airlock import faults
from airlock.errors import AirlockError
from airlock.recovery import machine as m
from airlock.recovery import policy as policy_mod
from airlock.recovery import store as st
from airlock.recovery.providers import (
    ERROR,
    ISSUED,
    REFUSED,
    Provider,
    Result,
    Target,
    recover_reason,
)


@dataclass
class PollReport:
    nodes: int = 0
    events: list[tuple[str, str, str]] = field(default_factory=list)
    started: list[tuple[str, str, str]] = field(default_factory=list)  # node, action, status
    held: list[tuple[str, str, str]] = field(default_factory=list)
    breaker: str = ""
    error: str = ""


def emit(out, **fields) -> None:
    fields = {"ts": round(time.time(), 3), **fields}
    out.write(json.dumps(fields, sort_keys=False) + "\n")
    out.flush()


def crash_point(name: str, action: str = "") -> None:
    """Fault switch recover_crash=POINT[:ACTION]: SIGKILL this process there (tests prove that a
    kill at the worst moments neither loses nor repeats an action)."""
    want = faults.parse(os.environ.get(faults.ENV_VAR, "")).get("recover_crash", "")
    point, _, only = want.partition(":")
    if point == name and (not only or only == action):
        os.kill(os.getpid(), signal.SIGKILL)


class Service:
    def __init__(self, cfg, slurm, store: st.RecoveryStore, rebooter: Provider, replacer: Provider,
                 dry_run: bool = False, clock: Callable[[], float] = time.time, out=None):
        self.rc = cfg.recovery
        self.slurm = slurm
        self.store = store
        self.rebooter = rebooter
        self.replacer = replacer
        self.policy = policy_mod.load(self.rc.policy)
        self.dry_run = dry_run or self.rc.dry_run
        self.clock = clock
        self.out = out or sys.stdout

    def provider(self, action: str) -> Provider:
        return self.rebooter if action == "reboot" else self.replacer

    def owns_reason(self, reason: str) -> bool:
        return self.replacer.owns_reason(reason) or self.rebooter.owns_reason(reason)

    def log(self, node: str, event: str, detail: str, action_id: int | None = None,
            record: bool = True) -> None:
        emit(self.out, node=node, event=event, detail=detail,
             **({"action_id": action_id} if action_id else {}))
        if record and not self.dry_run:
            self.store.event(node, event, detail, action_id)

    def record(self, node: str, event: str, detail: str) -> None:
        """Providers report retries and API errors here (history + log line)."""
        self.log(node, event, detail)

    # --- the poll ------------------------------------------------------------------------
    def poll(self) -> PollReport:
        rep = PollReport()
        try:
            nodes = self.slurm.nodes()
        except AirlockError as exc:
            rep.error = str(exc)
            emit(self.out, node="*", event="slurm_error", detail=str(exc))
            return rep
        obs = {n.name: m.Obs.from_node(n) for n in nodes}
        rep.nodes = len(obs)
        if not self.dry_run:
            self.answer_intents(obs)
        now = self.clock()
        cases = self.store.cases()
        ledger = self.store.ledger(now, self.rc.rate_window, self.rc.breaker_window)
        d = m.decide(cases, list(obs.values()), now, self.policy, self.rc, ledger,
                     self.owns_reason)
        rep.events, rep.held, rep.breaker = d.events, d.held, d.trip or ledger.breaker_why
        if self.dry_run:
            for node, event, detail in d.events:
                emit(self.out, node=node, event=event, detail=detail, dry_run=True)
            if d.detections and not d.trip:
                # New cases act on a later poll: show what that poll would start.
                later = dataclasses.replace(ledger, detections=ledger.detections + d.detections)
                d = m.decide(d.cases, list(obs.values()), now + self.rc.detect_grace,
                             self.policy, self.rc, later, self.owns_reason)
            for node, action in d.starts:
                emit(self.out, node=node, event="would_" + action, dry_run=True,
                     detail=f"class {d.cases[node].failure_class}, rung "
                            f"{d.cases[node].step + 1}/{len(d.cases[node].ladder)}")
                rep.started.append((node, action, "dry-run"))
            for node, action, why in d.held:
                emit(self.out, node=node, event="held", detail=f"{action}: {why}", dry_run=True)
            if d.trip:
                emit(self.out, node="*", event="breaker_open", detail=d.trip, dry_run=True)
            return rep
        targets = self.commit_decision(cases, d, now)
        for node, event, detail in d.events:
            emit(self.out, node=node, event=event, detail=detail)
        if d.trip:
            emit(self.out, node="*", event="breaker_open", detail=d.trip)
        for node, action, why in d.held:
            emit(self.out, node=node, event="held", detail=f"{action}: {why}")
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

    def send(self, action: str, batch: list[Target]) -> dict[str, Result]:
        try:
            return self.provider(action).submit(action, batch)
        except AirlockError as exc:
            return {t.node: Result(ERROR, str(exc)) for t in batch}

    def commit_decision(self, before: dict[str, m.Case], d: m.Decision,
                        now: float) -> list[tuple[str, Target]]:
        targets = []
        starting = {n for n, _ in d.starts}
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
                    targets.append((case.action, Target(node, rid,
                                                        recover_reason(case.action, rid))))
                    self.store.add_event(db, node, "request",
                                         f"{case.action} via {via} request {rid}", now, aid)
                self.store.put_case(db, case, now)
            for node, event, detail in d.events:
                self.store.add_event(db, node, event, detail, now)
            for node, check, ts in d.detections:
                self.store.add_detection(db, node, check, ts)
            if d.trip:
                self.store.open_breaker(db, d.trip, now)
                self.store.add_event(db, "*", "breaker_open", d.trip, now)
        for action, t in targets:
            emit(self.out, node=t.node, event="request", detail=f"{action} {t.request_id}")
        return targets

    def apply_result(self, t: Target, action: str, res: Result, note: str = "") -> None:
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
        emit(self.out, node=t.node, event=event, detail=f"{action}: {res.message}{note}",
             action_id=aid)

    def answer_intents(self, obs: dict[str, m.Obs]) -> None:
        for a in self.store.actions(status=st.INTENT):
            o = obs.get(a["node"])
            t = Target(a["node"], a["request_id"], recover_reason(a["kind"], a["request_id"]))
            prov = self.provider(a["kind"])
            booted = o is not None and o.boot_time and o.boot_time != a["boot_before"]
            try:
                happened = booted or prov.lookup(a["kind"], t, o)
            except AirlockError as exc:
                self.log(a["node"], "lookup_error", str(exc), a["id"])
                continue
            if happened:
                self.apply_result(t, a["kind"], Result(ISSUED, "already done before a restart"),
                                  " (found after restart)")
                continue
            self.log(a["node"], "resend", f"{a['kind']} {a['request_id']} was not sent before "
                                          "a restart; sending it now", a["id"])
            res = self.send(a["kind"], [t]).get(t.node, Result(ERROR, "no answer"))
            self.apply_result(t, a["kind"], res, " (after restart)")

    def follow_up(self, case: m.Case, o: m.Obs | None) -> None:
        try:
            done = self.replacer.progress(case, o)
        except AirlockError as exc:
            self.log(case.node, "follow_up_error", str(exc), case.action_id)
            return
        if done:
            self.log(case.node, "follow_up", done, case.action_id)

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
