"""Where the recovery service and its providers report: one JSON line per event on stdout, and
the same event as a row in the node's history (unless this is a dry run).

Built before the providers and the service, so that both get it when they are built."""

from __future__ import annotations

import json
import sys
import time
from typing import TextIO


class Journal:
    def __init__(self, store, out: TextIO | None = None, dry_run: bool = False):
        self.store = store
        self.out = out or sys.stdout
        self.dry_run = dry_run

    def emit(self, **fields) -> None:
        """One JSON line on stdout, not recorded (the caller records in its own transaction)."""
        fields = {"ts": round(time.time(), 3), **fields}
        self.out.write(json.dumps(fields, sort_keys=False) + "\n")
        self.out.flush()

    def log(self, node: str, event: str, detail: str, action_id: int | None = None) -> None:
        """A JSON line and, unless dry, a history row in a transaction of its own."""
        self.emit(node=node, event=event, detail=detail,
                  **({"action_id": action_id} if action_id else {}))
        if not self.dry_run:
            self.store.event(node, event, detail, action_id)

    def record(self, node: str, event: str, detail: str) -> None:
        """The providers' Recorder: retries and API errors go to the node's history."""
        self.log(node, event, detail)
