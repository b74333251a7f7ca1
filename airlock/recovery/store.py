"""The recovery database (SQLite): cases, actions, full history per node, and the breaker.

Every change of a poll is one transaction. An action is written as an *intent* in the same
transaction that moves its case to *_requested, before anything is sent; the provider's answer is
written afterwards. A restart finds intents without an answer and asks the provider (or Slurm)
whether the action happened before sending it again, with the same request id: a kill -9 at any
point neither loses nor repeats an action.

Only one service may act on a database (`lock`). An operator's breaker reset is one short
transaction that needs no lock: the service reads the breaker on every poll and, when it
commits a trip, first checks that no reset came in since it read it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import os
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from airlock.errors import AirlockError
from airlock.recovery.machine import Case, Ledger, Memory, Reboot

SCHEMA = """
CREATE TABLE IF NOT EXISTS cases (
    node TEXT PRIMARY KEY, state TEXT NOT NULL, data TEXT NOT NULL, updated REAL NOT NULL);
CREATE TABLE IF NOT EXISTS actions (
    id INTEGER PRIMARY KEY AUTOINCREMENT, node TEXT NOT NULL, kind TEXT NOT NULL,
    via TEXT NOT NULL, request_id TEXT UNIQUE, status TEXT NOT NULL, created REAL NOT NULL,
    updated REAL NOT NULL, boot_before TEXT NOT NULL DEFAULT '', message TEXT NOT NULL DEFAULT '');
CREATE INDEX IF NOT EXISTS actions_node ON actions(node, created);
CREATE TABLE IF NOT EXISTS history (
    id INTEGER PRIMARY KEY AUTOINCREMENT, ts REAL NOT NULL, node TEXT NOT NULL,
    event TEXT NOT NULL, detail TEXT NOT NULL DEFAULT '', action_id INTEGER);
CREATE INDEX IF NOT EXISTS history_node ON history(node, id);
CREATE TABLE IF NOT EXISTS detections (
    id INTEGER PRIMARY KEY AUTOINCREMENT, ts REAL NOT NULL, node TEXT NOT NULL,
    check_name TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS breaker (
    id INTEGER PRIMARY KEY CHECK (id = 1), open INTEGER NOT NULL, why TEXT NOT NULL,
    changed REAL NOT NULL, reset_at REAL NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS stuck (
    node TEXT PRIMARY KEY, reason TEXT NOT NULL, since REAL NOT NULL, seen REAL NOT NULL);
CREATE TABLE IF NOT EXISTS memory (
    id INTEGER PRIMARY KEY AUTOINCREMENT, ts REAL NOT NULL, node TEXT NOT NULL,
    kind TEXT NOT NULL, check_name TEXT NOT NULL DEFAULT '', keys TEXT NOT NULL DEFAULT '[]');
CREATE INDEX IF NOT EXISTS memory_ts ON memory(ts);
CREATE TABLE IF NOT EXISTS heartbeat (
    id INTEGER PRIMARY KEY CHECK (id = 1), pid INTEGER NOT NULL, started REAL NOT NULL,
    polls INTEGER NOT NULL, last_poll REAL NOT NULL);
"""
INTENT, ISSUED, DONE, REFUSED, ERROR, DRY = "intent", "issued", "done", "refused", "error", "dry"
DROPPED = "dropped"  # an intent not sent after a restart: Slurm's view no longer called for it


class StoreError(AirlockError):
    """The recovery database cannot be opened or is locked by another service."""


class RecoveryStore:
    def __init__(self, path: str, readonly: bool = False):
        self.path = path
        if path != ":memory:":
            folder = Path(path).parent
            try:
                folder.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise StoreError(f"recovery db {path}: cannot create {folder}: "
                                 f"{exc.strerror}") from None
        try:
            if readonly and path != ":memory:":
                if not os.path.exists(path):
                    raise StoreError(f"recovery db {path}: does not exist yet")
                self.db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=10,
                                          isolation_level=None)
            else:
                self.db = sqlite3.connect(path, timeout=10, isolation_level=None)
                self.db.execute("PRAGMA journal_mode=WAL")
                self.db.execute("PRAGMA synchronous=FULL")
                self.db.executescript(SCHEMA)
        except sqlite3.Error as exc:
            raise StoreError(f"recovery db {path}: {exc}") from None
        self.db.row_factory = sqlite3.Row
        self._lock_fh = None

    def close(self) -> None:
        self.db.close()
        if self._lock_fh:
            self._lock_fh.close()

    def lock(self) -> None:
        """Only one service may act on a database: a second one would double every action."""
        if self.path == ":memory:":
            return
        fh = open(self.path + ".lock", "a+")  # noqa: SIM115 - held for the process's life
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.seek(0)
            holder = fh.read().strip() or "?"
            fh.close()
            raise StoreError(f"another airlock recover (pid {holder}) holds "
                             f"{self.path}.lock") from None
        fh.seek(0)
        fh.truncate()
        fh.write(str(os.getpid()))
        fh.flush()
        self._lock_fh = fh

    @contextlib.contextmanager
    def tx(self) -> Iterator[sqlite3.Connection]:
        self.db.execute("BEGIN IMMEDIATE")
        try:
            yield self.db
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        self.db.execute("COMMIT")

    # --- cases -----------------------------------------------------------------------------
    def cases(self) -> dict[str, Case]:
        out = {}
        for row in self.db.execute("SELECT data FROM cases"):
            case = _case(row["data"])
            out[case.node] = case
        return out

    def case(self, node: str) -> Case | None:
        row = self.db.execute("SELECT data FROM cases WHERE node=?", (node,)).fetchone()
        return None if row is None else _case(row["data"])

    @staticmethod
    def put_case(db: sqlite3.Connection, case: Case, now: float) -> None:
        db.execute("INSERT INTO cases(node, state, data, updated) VALUES (?,?,?,?) "
                   "ON CONFLICT(node) DO UPDATE SET state=excluded.state, data=excluded.data, "
                   "updated=excluded.updated",
                   (case.node, case.state, json.dumps(dataclasses.asdict(case)), now))

    # --- actions ---------------------------------------------------------------------------
    @staticmethod
    def add_action(db: sqlite3.Connection, node: str, kind: str, via: str, boot_before: str,
                   now: float) -> tuple[int, str]:
        cur = db.execute("INSERT INTO actions(node, kind, via, status, created, updated, "
                         "boot_before) VALUES (?,?,?,?,?,?,?)",
                         (node, kind, via, INTENT, now, now, boot_before))
        action_id = cur.lastrowid
        request_id = f"airlock-{action_id}-{kind}-{node}"
        db.execute("UPDATE actions SET request_id=? WHERE id=?", (request_id, action_id))
        return action_id, request_id

    @staticmethod
    def set_action(db: sqlite3.Connection, action_id: int, status: str, message: str,
                   now: float) -> None:
        db.execute("UPDATE actions SET status=?, message=?, updated=? WHERE id=?",
                   (status, message, now, action_id))

    def actions(self, node: str | None = None, status: str | None = None) -> list[dict[str, Any]]:
        sql, args = "SELECT * FROM actions WHERE 1=1", []
        if node:
            sql, args = sql + " AND node=?", [*args, node]
        if status:
            sql, args = sql + " AND status=?", [*args, status]
        return [dict(r) for r in self.db.execute(sql + " ORDER BY id", args)]

    # --- history ---------------------------------------------------------------------------
    @staticmethod
    def add_event(db: sqlite3.Connection, node: str, event: str, detail: str, now: float,
                  action_id: int | None = None) -> None:
        db.execute("INSERT INTO history(ts, node, event, detail, action_id) VALUES (?,?,?,?,?)",
                   (now, node, event, detail, action_id))

    def event(self, node: str, event: str, detail: str, action_id: int | None = None) -> None:
        with self.tx() as db:
            self.add_event(db, node, event, detail, time.time(), action_id)

    def history(self, node: str | None = None) -> list[dict[str, Any]]:
        if node:
            rows = self.db.execute("SELECT * FROM history WHERE node=? ORDER BY id", (node,))
        else:
            rows = self.db.execute("SELECT * FROM history ORDER BY id")
        return [dict(r) for r in rows]

    @staticmethod
    def add_detection(db: sqlite3.Connection, node: str, check: str, ts: float) -> None:
        db.execute("INSERT INTO detections(ts, node, check_name) VALUES (?,?,?)", (ts, node, check))

    # --- breaker ---------------------------------------------------------------------------
    def breaker(self) -> dict[str, Any]:
        row = self.db.execute("SELECT * FROM breaker WHERE id=1").fetchone()
        return dict(row) if row else {"open": 0, "why": "", "changed": 0.0, "reset_at": 0.0}

    @staticmethod
    def open_breaker(db: sqlite3.Connection, why: str, now: float) -> None:
        db.execute("INSERT INTO breaker(id, open, why, changed) VALUES (1, 1, ?, ?) "
                   "ON CONFLICT(id) DO UPDATE SET open=1, why=excluded.why, "
                   "changed=excluded.changed", (why, now))

    def reset_breaker(self, who: str, now: float | None = None) -> bool:
        """Close the breaker (True when it was open). Safe beside a running service."""
        now = time.time() if now is None else now
        with self.tx() as db:
            was = self.breaker()
            db.execute("INSERT INTO breaker(id, open, why, changed, reset_at) VALUES "
                       "(1, 0, '', ?, ?) ON CONFLICT(id) DO UPDATE SET open=0, why='', "
                       "changed=excluded.changed, reset_at=excluded.reset_at", (now, now))
            self.add_event(db, "*", "breaker_reset", f"by {who}; was: {was['why'] or 'closed'}",
                           now)
        return bool(was["open"])

    # --- nodes stuck in a check (reported, never acted on) ------------------------------------
    def stuck(self) -> dict[str, dict[str, Any]]:
        """{node: {reason, since, seen}}: the nodes the service last saw stuck in a check."""
        try:
            rows = self.db.execute("SELECT * FROM stuck ORDER BY node").fetchall()
        except sqlite3.OperationalError:  # read-only view of a database from before the table
            return {}
        return {r["node"]: dict(r) for r in rows}

    @staticmethod
    def put_stuck(db: sqlite3.Connection, node: str, reason: str, since: float,
                  now: float) -> None:
        db.execute("INSERT INTO stuck(node, reason, since, seen) VALUES (?,?,?,?) "
                   "ON CONFLICT(node) DO UPDATE SET reason=excluded.reason, "
                   "since=excluded.since, seen=excluded.seen", (node, reason, since, now))

    @staticmethod
    def drop_stuck(db: sqlite3.Connection, node: str) -> None:
        db.execute("DELETE FROM stuck WHERE node=?", (node,))

    # --- the service's heartbeat: proof that it keeps polling ------------------------------
    def heartbeat(self) -> dict[str, Any]:
        try:
            row = self.db.execute("SELECT * FROM heartbeat WHERE id=1").fetchone()
        except sqlite3.OperationalError:  # read-only view of a database from before the table
            row = None
        return dict(row) if row else {"pid": 0, "started": 0.0, "polls": 0, "last_poll": 0.0}

    @staticmethod
    def beat(db: sqlite3.Connection, pid: int, started: float, now: float) -> None:
        db.execute("INSERT INTO heartbeat(id, pid, started, polls, last_poll) "
                   "VALUES (1, ?, ?, 1, ?) ON CONFLICT(id) DO UPDATE SET "
                   "polls = CASE WHEN pid = excluded.pid AND started = excluded.started "
                   "THEN polls + 1 ELSE 1 END, pid=excluded.pid, started=excluded.started, "
                   "last_poll=excluded.last_poll", (pid, started, now))

    # --- the escalation memory: reboots and replacements done, across cases ---------------
    @staticmethod
    def remember(db: sqlite3.Connection, node: str, kind: str, check: str,
                 keys: tuple[str, ...] | frozenset[str], ts: float) -> None:
        db.execute("INSERT INTO memory(ts, node, kind, check_name, keys) VALUES (?,?,?,?,?)",
                   (ts, node, kind, check, json.dumps(sorted(keys))))

    def memory(self, now: float, window: float,
               identity: dict[str, frozenset[str]] | None = None) -> Memory:
        """The reboots within the window and each node's last replacement (machine.Memory)."""
        try:
            rows = self.db.execute("SELECT ts, node, kind, check_name, keys FROM memory "
                                   "WHERE ts >= ? OR kind = 'replace' ORDER BY id",
                                   (now - window,)).fetchall()
        except sqlite3.OperationalError:  # read-only view of a database from before the table
            rows = []
        reboots, replaced = [], {}
        for r in rows:
            if r["kind"] == "replace":
                replaced[r["node"]] = max(replaced.get(r["node"], 0.0), r["ts"])
            elif r["ts"] >= now - window:
                reboots.append(Reboot(r["node"], r["check_name"], r["ts"],
                                      frozenset(json.loads(r["keys"]))))
        return Memory.build(reboots, replaced, dict(identity or {}))

    # --- what the rails read ---------------------------------------------------------------
    def ledger(self, now: float, rate_window: float, breaker_window: float) -> Ledger:
        b = self.breaker()
        times = [r[0] for r in self.db.execute(
            "SELECT created FROM actions WHERE created > ? AND status != ?",
            (now - rate_window, DRY))]
        last = {r[0]: r[1] for r in self.db.execute(
            "SELECT node, MAX(created) FROM actions WHERE status != ? GROUP BY node", (DRY,))}
        since = max(now - breaker_window, float(b["reset_at"] or 0))
        dets = [(r[0], r[1], r[2]) for r in self.db.execute(
            "SELECT node, check_name, ts FROM detections WHERE ts >= ?", (since,))]
        return Ledger(times, last, dets, bool(b["open"]), b["why"], float(b["reset_at"] or 0))


def _case(data: str) -> Case:
    d = json.loads(data)
    d["ladder"] = tuple(d["ladder"])
    d["hardware"] = tuple(d.get("hardware", ()))
    return Case(**d)
