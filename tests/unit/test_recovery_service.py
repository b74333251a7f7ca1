"""The recovery service's writes against a real SQLite file, opened by two processes' worth of
connections, as the service and an operator's command are."""

from __future__ import annotations

import io
import json

from airlock import config
from airlock.recovery import machine as m
from airlock.recovery.journal import Journal
from airlock.recovery.providers import Provider
from airlock.recovery.service import Service
from airlock.recovery.store import RecoveryStore

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
