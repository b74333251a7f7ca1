"""The status document, read in the background: one Slurm call and the results store every
[serve] refresh seconds (airlock.status.collect, the code behind `airlock status`), kept in
memory with its JSON and gzip encodings, so that a request never waits for Slurm or a shared
filesystem. What is computed from it (metrics, the fleet) is computed once per read.

A read that fails keeps the last good document (the answer says how old it is and why it was not
refreshed); before the first good read, requests wait up to a timeout, then get 503."""

from __future__ import annotations

import gzip
import json
import sys
import threading
import time
from collections.abc import Callable
from typing import Any


class Unavailable(Exception):
    """No status document has been read yet (Slurm unreachable, or still reading)."""


class Snapshot:
    __slots__ = ("doc", "body", "gzip", "took_s", "read_at", "serial", "_derived", "_lock")

    def __init__(self, doc: dict[str, Any], took_s: float, serial: int):
        self.doc = doc
        self.body = encode(doc)
        # Pre-compressed once per read: 10,000 nodes are ~6 MB of JSON, ~0.3 MB gzipped, and
        # compressing on every request would cost more than the request itself.
        self.gzip = gzip.compress(self.body, compresslevel=5)
        self.took_s = took_s
        self.read_at = time.time()
        self.serial = serial
        self._derived: dict[str, Any] = {}
        self._lock = threading.Lock()

    def derived(self, key: str, fn: Callable[[Snapshot], Any]) -> Any:
        """fn(self), computed once per snapshot (the metrics exposition, the fleet view)."""
        with self._lock:
            if key not in self._derived:
                self._derived[key] = fn(self)
            return self._derived[key]


def encode(doc: Any) -> bytes:
    return json.dumps(doc, separators=(",", ":"), allow_nan=False).encode()


class Source:
    def __init__(self, collect: Callable[[], dict[str, Any]], refresh: float,
                 log: Callable[[str], None] | None = None):
        self.collect = collect
        self.refresh = refresh
        self.log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
        self.error = ""  # why the last read failed ("" when it worked)
        self.error_at: float | None = None
        self._snapshot: Snapshot | None = None
        self._serial = 0
        self._cond = threading.Condition()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> Source:
        self._thread = threading.Thread(target=self._loop, name="airlock-serve-source",
                                        daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()

    def poke(self) -> None:
        """Read again now (an on-demand check just ended)."""
        self._wake.set()

    def read_once(self) -> None:
        started = time.monotonic()
        try:
            doc = self.collect()
        except Exception as exc:  # Slurm away, a config error: named, the last read kept
            why = str(exc) or type(exc).__name__
            with self._cond:
                if why != self.error:
                    self.log(f"airlock serve: status not read: {why}")
                self.error, self.error_at = why, time.time()
                self._cond.notify_all()
            return
        snap = Snapshot(doc, time.monotonic() - started, self._serial + 1)
        with self._cond:
            self._serial = snap.serial
            self._snapshot = snap
            self.error, self.error_at = "", None
            self._cond.notify_all()

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.read_once()
            self._wake.wait(self.refresh)
            self._wake.clear()

    @property
    def latest(self) -> Snapshot | None:
        """The last good snapshot without waiting (None before the first read)."""
        return self._snapshot

    def current(self, timeout: float = 30.0) -> Snapshot:
        """The last good snapshot, waiting up to timeout for the first one."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._snapshot is None:
                left = deadline - time.monotonic()
                if left <= 0 or self.error:  # no good read yet: say why, do not hang
                    raise Unavailable(self.error or "status not read yet")
                self._cond.wait(min(left, 1.0))
            return self._snapshot
