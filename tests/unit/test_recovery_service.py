"""The recovery service's writes against a real SQLite file, opened by two processes' worth of
connections, as the service and an operator's command are."""

from __future__ import annotations

import io
import json

from airlock.config import loader as config
from airlock.recovery import machine as m
from airlock.recovery.journal import Journal
from airlock.recovery.providers import Provider
from airlock.recovery.providers.factory import make
from airlock.recovery.service import Service
from airlock.recovery.store import RecoveryStore
from airlock.slurm.client import Node

FAIL = "airlock: FAIL gpu_count 7 GPUs, profile h100 expects 8"


def service(tmp_path, **recovery):
    cfg = config.from_dict({"recovery": {"db": str(tmp_path / "recovery.db"), "detect_grace": 0,
                                         "breaker_min_nodes": 2, "breaker_share": 0.5,
                                         **recovery}})
    store = RecoveryStore(cfg.recovery.db)
    out = io.StringIO()
    svc = Service(cfg, None, store, Provider(), Provider(), Journal(store, out),
                  clock=lambda: 1000.0)
    return svc, store, out


def test_a_reset_during_a_poll_wins_over_that_polls_trip(tmp_path):
    svc, store, out = service(tmp_path)
    nodes = [m.Obs(f"n{i}", FAIL, True, False, "2026-01-01T00:00:00") for i in range(3)]
    ledger = store.ledger(1000.0, 3600, 600)  # the poll reads the breaker: closed
    d = m.decide({}, nodes, 1000.0, svc.policy, svc.settings, ledger)
    assert d.trip
    # An operator's `airlock recover --reset-breaker`, on its own connection, mid-poll:
    assert RecoveryStore(str(tmp_path / "recovery.db")).reset_breaker("alice", now=1000.5) is False
    _targets, tripped = svc.commit_decision({}, d, 1000.0, ledger, {})
    assert not tripped and store.breaker()["open"] == 0
    events = [json.loads(line)["event"] for line in out.getvalue().splitlines()]
    assert "breaker_trip_dropped" in events
    # Without a reset in between, the same decision opens it.
    svc2, store2, _ = service(tmp_path / "b")
    ledger = store2.ledger(1000.0, 3600, 600)
    d = m.decide({}, nodes, 1000.0, svc2.policy, svc2.settings, ledger)
    assert svc2.commit_decision({}, d, 1000.0, ledger, {})[1] is True
    assert store2.breaker()["open"] == 1


def test_stuck_nodes_get_one_event_each_way_and_a_row_while_stuck(tmp_path):
    svc, store, out = service(tmp_path)
    empty = m.decide({}, [], 1000.0, svc.policy, svc.settings, m.Ledger())
    stuck = {"n1": ("airlock: checking standard", 900.0)}
    for _ in range(3):  # three polls see it stuck: one event
        svc.commit_decision({}, empty, 1000.0, m.Ledger(), stuck)
    assert list(store.stuck()) == ["n1"] and store.stuck()["n1"]["since"] == 900.0
    svc.commit_decision({}, empty, 1000.0, m.Ledger(), {})
    assert store.stuck() == {}
    events = [(e["node"], e["event"]) for e in map(json.loads, out.getvalue().splitlines())]
    assert events == [("n1", "stuck"), ("n1", "unstuck")]
    history = [(r["node"], r["event"]) for r in store.history("n1")]
    assert history == events
    assert store.heartbeat()["polls"] == 4


# --- intents left by a killed service are re-decided, never resent blindly ------------------
class FakeSlurm:
    """Slurm's view of the nodes, as a person changes it; every write the service makes is
    recorded (scontrol argv lists and drains)."""

    def __init__(self, *nodes: Node):
        self.view = {n.name: n for n in nodes}
        self.writes: list[tuple[str, ...]] = []

    def nodes(self) -> list[Node]:
        return list(self.view.values())

    def node(self, name: str) -> Node:
        return self.view[name]

    def scontrol(self, *argv: str) -> str:
        self.writes.append(argv)
        return ""

    def drain(self, node: str, reason: str) -> None:
        self.writes.append(("drain", node, reason))


BOOT = m.format_slurm_time(1000.0 - 86400)
FAILED = Node("n1", "IDLE", frozenset({"DRAIN"}), FAIL, boot_time=BOOT)


def killed_after_intent(tmp_path, provider: str, **recovery):
    """A service that journalled a reboot intent for n1 and was SIGKILLed before sending it."""
    cfg = config.from_dict({"recovery": {"db": str(tmp_path / "recovery.db"), "detect_grace": 0,
                                         "provider": provider, "cooldown": 0, **recovery}})
    slurm = FakeSlurm(FAILED)
    store = RecoveryStore(cfg.recovery.db)
    rebooter, replacer = make(cfg, slurm)
    svc = Service(cfg, slurm, store, rebooter, replacer, Journal(store, io.StringIO()),
                  clock=lambda: 1000.0)
    cases, obs = store.cases(), [m.Obs.from_node(FAILED)]
    d = m.decide(cases, obs, 1000.0, svc.policy, svc.settings, store.ledger(1000.0, 3600, 600))
    d = m.decide(d.cases, obs, 1000.0, svc.policy, svc.settings, store.ledger(1000.0, 3600, 600))
    assert d.starts == [("n1", "reboot")]
    svc.commit_decision(cases, d, 1000.0)
    store.close()
    assert [a["status"] for a in RecoveryStore(cfg.recovery.db).actions()] == ["intent"]
    return cfg, slurm


def restarted(cfg, slurm, now: float) -> tuple[Service, RecoveryStore]:
    store = RecoveryStore(cfg.recovery.db)
    rebooter, replacer = make(cfg, slurm)
    return Service(cfg, slurm, store, rebooter, replacer, Journal(store, io.StringIO()),
                   clock=lambda: now), store


def dropped(store) -> list[str]:
    return [h["detail"] for h in store.history("n1") if h["event"] == "intent_dropped"]


def test_hyperpod_intent_is_not_resent_to_a_node_a_person_resumed_that_runs_a_job(tmp_path):
    cfg, slurm = killed_after_intent(tmp_path, "hyperpod-slurm", reboot_via="provider")
    slurm.view["n1"] = Node("n1", "ALLOCATED", boot_time=BOOT, cpu_alloc=8)  # resumed, a job
    svc, store = restarted(cfg, slurm, 1030.0)
    svc.poll()
    assert slurm.writes == []  # no state=fail reason=Action:Reboot
    assert dropped(store) == ["reboot airlock-1-reboot-n1 not sent after a restart: Airlock's "
                              "failure is no longer in force (the node is in service)"]
    assert store.actions()[0]["status"] == "dropped"
    assert store.case("n1").state == m.RELEASED


def test_default_intent_is_not_resent_to_a_node_a_person_returned_to_service(tmp_path):
    cfg, slurm = killed_after_intent(tmp_path, "none")  # reboots via scontrol reboot
    slurm.view["n1"] = Node("n1", "IDLE", boot_time=BOOT)  # scontrol update state=resume
    svc, store = restarted(cfg, slurm, 1030.0)
    for _ in range(2):
        svc.poll()
    assert slurm.writes == []  # neither drained nor rebooted
    assert len(dropped(store)) == 1 and "no longer in force" in dropped(store)[0]
    assert store.case("n1").state == m.RELEASED


def test_an_intent_for_a_node_still_failed_and_idle_is_sent_after_a_restart(tmp_path):
    cfg, slurm = killed_after_intent(tmp_path, "none")
    svc, store = restarted(cfg, slurm, 1030.0)
    svc.poll()
    assert slurm.writes == [("drain", "n1", "airlock: recover reboot airlock-1-reboot-n1"),
                            ("reboot", "reason=airlock: recover reboot airlock-1-reboot-n1",
                             "n1")]
    assert store.actions()[0]["status"] == "issued" and dropped(store) == []


def test_an_intent_is_re_decided_when_stale_busy_foreign_or_gone(tmp_path):
    busy = Node("n1", "MIXED", frozenset({"DRAIN"}), FAIL, boot_time=BOOT, cpu_alloc=2)
    foreign = Node("n1", "IDLE", frozenset({"DRAIN"}), "admin: fan", boot_time=BOOT)
    cases = [(busy, 1030.0, "the node runs a job"),
             (foreign, 1030.0, "Airlock's failure is no longer in force (drained for "
                               "'admin: fan')"),
             (None, 1030.0, "the node is not in Slurm's list"),
             (FAILED, 1000.0 + 1201, "the intent is 1201s old (reboot_timeout 1200s)")]
    for i, (node, now, why) in enumerate(cases):
        cfg, slurm = killed_after_intent(tmp_path / str(i), "hyperpod-slurm",
                                         reboot_via="provider")
        if node is None:
            del slurm.view["n1"]
        else:
            slurm.view["n1"] = node
        svc, store = restarted(cfg, slurm, now)
        svc.answer_intents({o.name: m.Obs.from_node(o) for o in slurm.nodes()})
        assert slurm.writes == [], why
        assert dropped(store) == [f"reboot airlock-1-reboot-n1 not sent after a restart: {why}"]
        # the case is decided afresh by the next poll: back to detected, at the same rung
        assert store.case("n1").state == m.DETECTED and store.case("n1").step == 0


def test_slurm_providers_send_nothing_to_a_node_no_longer_failed_or_idle():
    """The same rule at the moment of sending, in the providers that act through Slurm (they
    read the node right before the request): a person's resume or a job that arrived between
    the poll and the request stops it."""
    from airlock.recovery.providers import ActionTarget
    from airlock.recovery.providers.slurm import HyperpodSlurm, SlurmPower, SlurmReboot

    mark = "airlock: recover reboot airlock-2-reboot-n1"
    target = ActionTarget("n1", "airlock-2-reboot-n1", mark)
    resumed = Node("n1", "IDLE", frozenset({"CLOUD"}), boot_time=BOOT)
    busy = Node("n1", "MIXED", frozenset({"DRAIN", "CLOUD"}), FAIL, boot_time=BOOT, cpu_alloc=4)
    for provider, action in ((SlurmReboot, "reboot"), (HyperpodSlurm, "reboot"),
                             (SlurmPower, "replace")):
        for node, why in ((resumed, "Airlock's failure is no longer in force (the node is in "
                                    "service)"), (busy, "the node runs a job")):
            slurm = FakeSlurm(node)
            result = provider(slurm).submit(action, [target])["n1"]
            assert slurm.writes == [], (provider.name, why)
            assert (result.status, result.message) == ("error", f"not sent: {why}")
        # still failed, or still marked by an earlier action (one that ended in an error): sent
        for reason in (FAIL, "airlock: recover reboot airlock-1-reboot-n1", mark):
            failed = Node("n1", "IDLE", frozenset({"DRAIN", "CLOUD"}), reason, boot_time=BOOT)
            slurm = FakeSlurm(failed)
            assert provider(slurm).submit(action, [target])["n1"].status == "issued"
            assert slurm.writes
