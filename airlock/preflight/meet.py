"""The meeting: a job's members find each other in the shared directory, then run
airlock.groups.batch's
rounds (the all-reduce, and on a failure the culprit search) exactly as a registration batch.

    <shared root>/.batches/<batch_id>/                  0700, root only (airlock.groups.batch)
    <shared root>/.batches/<batch_id>/here-<node>.json  {node, addr, time}  each member
    <shared root>/.batches/<batch_id>/secret            0600, written by the leader
    <shared root>/.batches/<batch_id>/members.json      {batch, leader, members, addrs, time}
    <shared root>/.batches/<batch_id>/gemm-<node>.json  {node, detail, time}  a member whose own
                                                        GEMM failed ([preflight] level =
                                                        "collective+gemm"): it never announces
                                                        itself, and the others stop waiting
    then airlock.groups.batch's round-, result- and verdict documents

Unlike a registration batch, the members are not discovered: they are the job's allocation as
slurmd handed it to every prolog (airlock.preflight.plan), so no member asks Slurm who exists, and
a document naming anyone else is refused. The leader starts the rounds only once every member has
announced itself; a member missing at rendezvous_timeout leaves the preflight inconclusive for
everyone (nobody measured anything). The same job may meet again on the same nodes (requeued for
another reason): documents older than this meeting's start are stale and ignored, and the leader
clears the folder's old rounds before it writes the new members. Every qualifying job leaves a
folder, so each leader also removes the meeting folders nobody has touched for STALE_S.
"""

from __future__ import annotations

import math
import os
import re
import time
from collections.abc import Callable
from typing import Any

from airlock.groups import batch as batch_mod
from airlock.paths import SafeDir
from airlock.preflight.plan import Plan

POLL_S = 0.1
# A meeting folder untouched this long is over: a preflight ends within its budget.
STALE_S = 6 * 3600.0
MEETING_ID = re.compile(r"batch-[0-9]{1,12}-preflight\.r[0-9]{1,5}\.[0-9a-f]{8}")


def sweep(shared_root, now: float | None = None, keep_s: float = STALE_S) -> list[str]:
    """Remove the preflight meeting folders untouched for keep_s (their regular files, then the
    folder); registration batches, links and anything else are left alone."""
    now = time.time() if now is None else now
    gone = []
    with SafeDir.open(shared_root, [batch_mod.ROOT]) as root:
        for name in root.dirs():
            if not MEETING_ID.fullmatch(name):
                continue
            try:
                if now - os.stat(name, dir_fd=root.fd, follow_symlinks=False).st_mtime < keep_s:
                    continue
                with root.sub(name) as d:
                    for f in d.files():
                        d.unlink(f)
                os.rmdir(name, dir_fd=root.fd)
            except OSError:
                continue  # something else in it, or raced: left for the next sweep
            gone.append(name)
    return gone


def arrival_problem(doc: Any, node: str, since: float) -> str:
    why = batch_mod.arrival_problem(doc, node)
    if why:
        return why
    return "" if doc["time"] >= since else "an earlier meeting's"


def members_problem(doc: Any, plan: Plan, since: float) -> str:
    """Why doc is not this meeting's members document ("" when it is)."""
    why = batch_mod.members_problem(doc)
    if why:
        return why
    if doc["batch"] != plan.batch_id:
        return f"batch {doc['batch']!r} is not {plan.batch_id}"
    if doc["leader"] != plan.leader or doc["members"] != plan.members:
        return "its leader or members differ from the job's allocation"
    t = doc.get("time")
    if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t):
        return "time is not a number"
    return "" if t >= since else "an earlier meeting's"


def gemm_problem(doc: Any, node: str, since: float) -> str:
    """Why doc is not node's GEMM failure of this meeting ("" when it is)."""
    if not isinstance(doc, dict) or doc.get("node") != node:
        return "not this node's"
    if not isinstance(doc.get("detail"), str):
        return "no detail"
    t = doc.get("time")
    if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t):
        return "time is not a number"
    return "" if t >= since else "an earlier meeting's"


class Missed(Exception):
    """The meeting did not form: the preflight saw nothing (never anyone's failure)."""


class Meeting:
    def __init__(self, shared_root, plan: Plan, addr: str, started: float,
                 rendezvous_by: float, report: Callable[[str], None]):
        """started: time.time() of this member's start; rendezvous_by: time.monotonic() by
        which the members must have met."""
        self.shared_root = shared_root
        self.plan = plan
        self.addr = addr
        # A member's prolog may start up to rendezvous_timeout before another's: what is older
        # than that belongs to an earlier meeting.
        self.since = started - max(0.0, rendezvous_by - time.monotonic())
        self.started = started
        self.rendezvous_by = rendezvous_by
        self.report = report

    def _dir(self, create: bool = False) -> SafeDir:
        d = SafeDir.open(self.shared_root, [batch_mod.ROOT, self.plan.batch_id], create=create,
                         mode=0o700)
        if create:
            d.chmod(0o700)  # the secret's folder: root only
        return d

    def gather(self) -> dict[str, Any]:
        """Announce this member and wait for the meeting: the members document, or Missed."""
        try:
            with self._dir(create=True) as d:
                d.write_json(f"here-{self.plan.me}.json",
                             {"node": self.plan.me, "addr": self.addr, "time": time.time()})
        except OSError as exc:
            raise Missed(f"cannot announce {self.plan.me}: {exc}") from None
        return self._lead() if self.plan.leading else self._follow()

    def report_gemm(self, detail: str) -> None:
        """Tell the others this member's own GEMM failed (so they stop waiting for it and keep
        the job off this set); OSError when the folder cannot be written."""
        with self._dir(create=True) as d:
            d.write_json(f"gemm-{self.plan.me}.json",
                         {"node": self.plan.me, "detail": detail[:200], "time": time.time()})

    def gemm_failed(self) -> list[str]:
        """The other members whose own GEMM failed in this meeting ([] when none said so)."""
        out = []
        try:
            with self._dir() as d:
                names = set(d.files())
                for n in self.plan.members:
                    if n == self.plan.me or f"gemm-{n}.json" not in names:
                        continue
                    try:
                        doc = d.read_json(f"gemm-{n}.json")
                    except (OSError, ValueError):
                        continue
                    if not gemm_problem(doc, n, self.since):
                        out.append(n)
        except OSError:
            return []
        return out

    def _lead(self) -> dict[str, Any]:
        try:
            sweep(self.shared_root)
        except OSError as exc:  # housekeeping: never a reason to miss the meeting
            self.report(f"old meeting folders not swept: {exc}")
        addrs: dict[str, str] = {}
        while True:
            try:
                with self._dir() as d:
                    for n in self.plan.members:
                        if n in addrs:
                            continue
                        try:
                            doc = d.read_json(f"here-{n}.json")
                        except (OSError, ValueError):
                            continue
                        if not arrival_problem(doc, n, self.since):
                            addrs[n] = doc["addr"]
            except OSError as exc:
                raise Missed(f"meeting folder unreadable: {exc}") from None
            if len(addrs) == len(self.plan.members):
                break
            gone = self.gemm_failed()
            if gone:
                raise Missed(f"{', '.join(gone[:5])} failed its GEMM")
            if time.monotonic() >= self.rendezvous_by:
                late = [n for n in self.plan.members if n not in addrs]
                raise Missed(f"{len(late)} member(s) never arrived: {', '.join(late[:5])}")
            time.sleep(POLL_S)
        doc = {"batch": self.plan.batch_id, "leader": self.plan.leader,
               "members": self.plan.members, "addrs": addrs, "time": time.time()}
        try:
            with self._dir() as d:
                for name in d.files():
                    if not name.startswith("here-"):
                        d.unlink(name)  # an earlier meeting's secret, rounds and verdict
                d.write_text(batch_mod.SECRET, batch_mod.new_secret() + "\n", mode=0o600)
                d.write_json("members.json", doc)
        except OSError as exc:
            raise Missed(f"cannot write the meeting: {exc}") from None
        return doc

    def culprits(self) -> list[str]:
        """The members the leader's verdict blames (airlock.groups.batch's verdict.json); [] when
        there
        is none or it is not a valid verdict of this meeting."""
        try:
            with self._dir() as d:
                doc = d.read_json("verdict.json")
        except (OSError, ValueError):
            return []
        if batch_mod.verdict_problem(doc, self.plan.members):
            return []
        return list(doc.get("bad", []))

    def _follow(self) -> dict[str, Any]:
        seen = ""
        while True:
            try:
                with self._dir() as d:
                    doc = d.read_json("members.json")
                why = members_problem(doc, self.plan, self.since)
                if not why:
                    return doc
                seen = why
            except FileNotFoundError:
                pass
            except (OSError, ValueError) as exc:
                seen = str(exc)
            gone = self.gemm_failed()
            if gone:
                raise Missed(f"{', '.join(gone[:5])} failed its GEMM")
            if time.monotonic() >= self.rendezvous_by:
                extra = f" (last seen: {seen})" if seen else ""
                raise Missed(f"the leader {self.plan.leader} never formed the meeting{extra}")
            time.sleep(POLL_S)
