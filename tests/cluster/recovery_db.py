"""Reading the recovery service's SQLite database from tests (read-only, as an operator would)."""

from __future__ import annotations

import sqlite3


def db_rows(path, sql, args=()):
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=10)
    try:
        return db.execute(sql, args).fetchall()
    finally:
        db.close()


def case_state(path, node):
    try:
        rows = db_rows(path, "SELECT state FROM cases WHERE node=?", (node,))
    except sqlite3.OperationalError:
        return None
    return rows[0][0] if rows else None
