"""The node's proof of its current boot, kept in <state_dir>/node.json.

One record per node, rewritten atomically (readers never lock; writers that read, change and
write hold node.json.lock, so that the suite's verdict and a hook's view of the suite never
overwrite each other): which boot it is about (airlock.hw.boot), the
registration suite for that boot (run id, process, level, trigger, attempt), how it ended, and a
Slurm update the suite could not make (left to the next hook). judge() turns it into what the
hooks act on:

  proven    this boot's registration passed: jobs may run
  running   this boot's suite is running (or died: the hooks check the process)
  failed    this boot's suite failed (or could not run): no job may run
  adopted   Airlock first saw this boot while it ran jobs ([registration] adopt)
  none      no usable record for this boot: a new node, a new boot, or a record that is
            damaged, copied from another node or about another boot

A record that does not validate is never trusted: it counts as none, and the hook says why.
"""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NamedTuple

from airlock.hw import boot as boot_mod
from airlock.paths import atomic_write, node_dir
from airlock.records.types import ProofRecord

SCHEMA = 2
FILE = "node.json"
STATUSES = ("running", "done", "adopted")
VERDICTS = ("pass", "warn", "fail", "error")
PASSED = ("pass", "warn")
# A final Slurm update the suite could not make (slurmctld unreachable): the next hook makes it.
PENDING = ("", "resume", "fail")

PROVEN, RUNNING, FAILED, ADOPTED, NONE = "proven", "running", "failed", "adopted", "none"
# The phase of a run the hook has recorded but whose suite it has not started yet: its pid is
# the hook's own. Found with that process gone, the suite never ran (the hook was killed in
# between), and that attempt is started again rather than counted.
STARTING = "starting"

_TYPES: dict[str, tuple[type, ...]] = {
    "node": (str,), "run_id": (str,), "status": (str,), "level": (str,), "trigger": (str,),
    "pid": (int,), "attempt": (int,), "started_uptime": (int, float), "boot": (dict,),
}
_OPTIONAL: dict[str, tuple[type, ...]] = {
    "verdict": (str, type(None)), "pid_start": (int, type(None)), "error": (str,),
    "finished_uptime": (int, float, type(None)), "slurm_pending": (str,),
    "started_at": (int, float), "finished_at": (int, float, type(None)), "detail": (str,),
    "reason": (str,), "phase": (str,), "claim_checked_uptime": (int, float),
}


class Proof(NamedTuple):
    state: str
    why: str = ""  # for NONE: why there is no usable record for this boot
    record: ProofRecord | None = None  # a valid record (possibly of another boot)

    @property
    def passed(self) -> bool:
        return self.state == PROVEN


def validate(data: Any) -> str:
    """"" when data is a well-formed record, else the first problem."""
    if not isinstance(data, dict):
        return "not a JSON object"
    if data.get("schema") != SCHEMA:
        return f"schema {data.get('schema')!r}, expected {SCHEMA}"
    for key, types in _TYPES.items():
        value = data.get(key)
        if not isinstance(value, types) or isinstance(value, bool):
            return f"{key}: {value!r} is not a {'/'.join(t.__name__ for t in types)}"
    for key, types in _OPTIONAL.items():
        if key in data and (not isinstance(data[key], types) or isinstance(data[key], bool)):
            return f"{key}: {data[key]!r} is not a {'/'.join(t.__name__ for t in types)}"
    if data["status"] not in STATUSES:
        return f"status {data['status']!r} is not one of {', '.join(STATUSES)}"
    if data.get("verdict") not in (None, *VERDICTS):
        return f"verdict {data['verdict']!r} is not one of {', '.join(VERDICTS)}"
    if data.get("slurm_pending", "") not in PENDING:
        return f"slurm_pending {data['slurm_pending']!r} is not one of {PENDING}"
    return ""


def judge(record: ProofRecord | None, now: boot_mod.Boot, problem: str = "") -> Proof:
    """What the record proves about this boot (see the module docstring)."""
    if record is None:
        return Proof(NONE, problem or "no record")
    same, why = boot_mod.same_boot(record["boot"], now)
    if not same or record["node"] != now.node:
        return Proof(NONE, why or f"record is for node {record['node']!r}", record)
    if record["status"] == "adopted":
        return Proof(ADOPTED, "", record)
    if record["status"] == "running":
        return Proof(RUNNING, "", record)
    if record.get("verdict") in PASSED:
        return Proof(PROVEN, "", record)
    return Proof(FAILED, "", record)


class NodeState:
    def __init__(self, cfg, node: str):
        self.node = node
        self.path: Path = node_dir(cfg.state_dir, node) / FILE

    def load(self) -> ProofRecord | None:
        """The record when it is well-formed, else None."""
        return self.load_checked()[0]

    def load_checked(self) -> tuple[ProofRecord | None, str]:
        """(record, "") or (None, why there is none usable; "" when there is no file)."""
        import json

        try:
            with open(self.path, "rb") as fh:
                data = json.loads(fh.read(1 << 20))
        except FileNotFoundError:
            return None, ""
        except (OSError, ValueError) as exc:
            return None, f"{self.path}: unreadable ({getattr(exc, 'strerror', None) or exc})"
        problem = validate(data)
        return (data, "") if not problem else (None, f"{self.path}: {problem}")

    def proof(self, now: boot_mod.Boot) -> Proof:
        record, problem = self.load_checked()
        return judge(record, now, problem)

    def save(self, data: ProofRecord) -> None:
        atomic_write(self.path, data)

    def start(self, run_id: str, now: boot_mod.Boot, pid: int, level: str, trigger: str,
              attempt: int = 1) -> ProofRecord:
        data: ProofRecord = {
                "schema": SCHEMA, "node": self.node, "boot": now.to_dict(), "run_id": run_id,
                "status": "running", "verdict": None, "pid": pid,
                "pid_start": boot_mod.process_start(pid), "level": level, "trigger": trigger,
                "attempt": attempt, "started_uptime": round(now.uptime, 3),
                "started_at": time.time(), "slurm_pending": "", "phase": STARTING}
        self.save(data)
        return data

    def adopt(self, now: boot_mod.Boot, run_id: str, why: str) -> ProofRecord:
        data: ProofRecord = {
                "schema": SCHEMA, "node": self.node, "boot": now.to_dict(), "run_id": run_id,
                "status": "adopted", "verdict": None, "pid": os.getpid(), "pid_start": None,
                "level": "quick", "trigger": "adopt", "attempt": 0,
                "started_uptime": round(now.uptime, 3), "started_at": time.time(),
                "detail": why}
        self.save(data)
        return data

    @contextmanager
    def _locked(self) -> Iterator[None]:
        """Exclusive against the node's other writers (the hooks and the suite), for one
        read-change-write. The lock file is opened without following a link."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path.with_name(FILE + ".lock"),
                     os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def finish(self, run_id: str, verdict: str, error: str = "", slurm_pending: str = "",
               detail: str = "", reason: str = "") -> bool:
        """Record how run_id ended; False (nothing written) when a newer run owns the record or
        run_id already has its verdict: a verdict is written once, so a hook that thought the
        suite dead or late never overwrites the verdict the suite wrote meanwhile."""
        with self._locked():
            data = self.load()
            if data is None or data["run_id"] != run_id or data["status"] != "running":
                return False
            data["status"] = "done"
            data["verdict"] = verdict  # type: ignore[typeddict-item]  # checked by the caller
            data["finished_uptime"] = round(boot_mod.uptime(), 3)
            data["finished_at"] = time.time()
            data["slurm_pending"] = slurm_pending  # type: ignore[typeddict-item]
            if data.get("phase") == STARTING:
                data.pop("phase")
            if error:
                data["error"] = error
            if detail:
                data["detail"] = detail
            if reason:
                data["reason"] = reason  # the drain reason the suite set, or could not set
            self.save(data)
            return True

    def set_process(self, run_id: str, pid: int) -> None:
        """The suite's process, once the hook that recorded the run has started it."""
        with self._locked():
            data = self.load()
            if data is not None and data["run_id"] == run_id and data["status"] == "running":
                data["pid"], data["pid_start"] = pid, boot_mod.process_start(pid)
                if data.get("phase") == STARTING:
                    data.pop("phase")  # (the suite may have written its own phase already)
                self.save(data)

    def phase(self, run_id: str, phase: str) -> None:
        """The suite is "waiting" for the node to be isolated and idle (no suite timeout runs),
        or "checking" (the suite timeout counts from now)."""
        with self._locked():
            data = self.load()
            if data is None or data["run_id"] != run_id or data["status"] != "running":
                return
            data["phase"] = phase
            if phase == "checking":
                data["started_uptime"] = round(boot_mod.uptime(), 3)
            self.save(data)

    def claim_checked(self, run_id: str, uptime: float) -> None:
        """A hook on this proven boot saw, after the proof had settled, that no claim of
        Airlock's was left in force: later hooks need not ask Slurm again."""
        with self._locked():
            data = self.load()
            if data is not None and data["run_id"] == run_id and data["status"] == "done":
                data["claim_checked_uptime"] = round(uptime, 3)
                self.save(data)

    def settle(self, run_id: str) -> None:
        """The Slurm update the suite left pending has been made."""
        with self._locked():
            data = self.load()
            if data is not None and data["run_id"] == run_id and data.get("slurm_pending"):
                data["slurm_pending"] = ""
                self.save(data)
