"""Registration batches: nodes that register within a short window test together.

New capacity arrives in bursts; a multi-node all-reduce among the nodes of one burst tests the
network between them before any of them takes a job. The nodes are drained (quarantined) at this
point, so Slurm cannot launch anything on them: they coordinate through the shared directory
instead, which every node and the controller already use for results.

    <shared root>/.batches/arrivals/<node>.json           {node, addr, time, run_id}
    <shared root>/.batches/assign/<node>.json             {batch}          written by the leader
    <shared root>/.batches/<batch>/                       0700, root only
    <shared root>/.batches/<batch>/members.json           {batch, leader, members, addrs}
                                                          created once (O_EXCL)
    <shared root>/.batches/<batch>/secret                 0600: the run's rendezvous secret
    <shared root>/.batches/<batch>/round-<k>.json         {nodes, port}   the leader's k-th test
    <shared root>/.batches/<batch>/result-<k>-<node>.json {ok, detail, figures}
    <shared root>/.batches/<batch>/verdict.json           {bad, good, inconclusive, details}

The earliest arrival whose window has closed leads: it takes every unassigned arrival of the
window, then drives airlock.culprit's search round by round; every member runs the rounds that
name it. A member whose leader never assigns it proceeds alone (its local suite already passed).

Every document here was written by some node, and is read as data from a stranger (see
docs/security.md): the tree is walked without following links (airlock.paths.SafeDir), node
names and batch ids are checked against strict patterns before they become a path, and every
document is schema-checked; a bad one is skipped and reported, never a crash of the suite. The
all-reduce rendezvous carries the batch's secret, so a peer that cannot read the root-only batch
folder cannot join or poison it.
"""

from __future__ import annotations

import ipaddress
import json
import math
import random
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from airlock.culprit import find_culprits
from airlock.dist.rendezvous import RendezvousError, new_secret, resolve
from airlock.paths import SafeDir, UnsafePath, valid_batch_id, valid_node_name

# (nodes, master address, port, secret file) -> {ok, detail, figures}
Member = Callable[[list[str], str, int, str], dict[str, Any]]
Report = Callable[[str], None]
ROOT = ".batches"
SECRET = "secret"


def _stderr(msg: str) -> None:
    print(time.strftime("%Y-%m-%dT%H:%M:%S ") + f"batch: {msg}", file=sys.stderr, flush=True)


# --- what a valid document looks like ------------------------------------------------------
def _names(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(valid_node_name(n) for n in value) \
        and len(set(value)) == len(value)


def _addr(value: Any) -> bool:
    try:
        ipaddress.ip_address(value)
    except ValueError:
        return False
    return True


def arrival_problem(doc: Any, node: str) -> str:
    if not isinstance(doc, dict):
        return "not a table"
    if doc.get("node") != node:
        return f"node {doc.get('node')!r} does not match its file name"
    t = doc.get("time")
    if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t):
        return "time is not a number"
    if not isinstance(doc.get("addr"), str) or not _addr(doc["addr"]):
        return f"addr {doc.get('addr')!r} is not an IP address"
    return ""


def members_problem(doc: Any) -> str:
    if not isinstance(doc, dict):
        return "not a table"
    if not valid_batch_id(doc.get("batch")):
        return f"batch {doc.get('batch')!r} is not a batch id"
    if not _names(doc.get("members")) or len(doc["members"]) < 2:
        return "members is not a list of node names"
    if doc.get("leader") not in doc["members"]:
        return "the leader is not a member"
    addrs = doc.get("addrs")
    if not isinstance(addrs, dict) or set(addrs) != set(doc["members"]) \
            or not all(isinstance(a, str) and _addr(a) for a in addrs.values()):
        return "addrs is not one IP address per member"
    return ""


def round_problem(doc: Any, members: list[str], ports: tuple[int, int]) -> str:
    if not isinstance(doc, dict):
        return "not a table"
    nodes = doc.get("nodes")
    if not _names(nodes) or not set(nodes) <= set(members):
        return "nodes is not a list of members"
    port = doc.get("port")
    if isinstance(port, bool) or not isinstance(port, int) or \
            not ports[0] <= port <= ports[1]:
        return f"port {port!r} is outside {ports[0]}-{ports[1]}"
    return ""


def result_problem(doc: Any) -> str:
    if not isinstance(doc, dict) or not isinstance(doc.get("ok"), bool):
        return "no ok: true|false"
    if not isinstance(doc.get("detail", ""), str) or \
            not isinstance(doc.get("figures", {}), dict):
        return "detail or figures of the wrong type"
    return ""


def verdict_problem(doc: Any, members: list[str]) -> str:
    if not isinstance(doc, dict):
        return "not a table"
    for key in ("bad", "good", "inconclusive"):
        v = doc.get(key, [])
        if not isinstance(v, list) or not set(v) <= set(members):
            return f"{key} is not a list of members"
    details = doc.get("details", {})
    if not isinstance(details, dict) or \
            not all(isinstance(k, str) and isinstance(v, str) for k, v in details.items()):
        return "details is not a table of text"
    return ""


class Batch:
    def __init__(self, shared_root: Path, node: str, addr: str, window: float,
                 round_timeout: float, port_range: tuple[int, int] = (29500, 29999),
                 max_tests: int = 16, confirm: int = 1, report: Report = _stderr):
        if not valid_node_name(node):
            raise UnsafePath(shared_root, f"{node!r} is not a valid node name")
        self.shared_root = Path(shared_root)
        self.root = self.shared_root / ROOT
        self.node = node
        try:
            self.addr = resolve(addr)  # peers accept IP addresses only
        except RendezvousError as exc:
            report(f"{exc}; this node cannot be reached by a batch")
            self.addr = addr
        self.window = window
        self.round_timeout = round_timeout
        self.port_range = (int(port_range[0]), int(port_range[1]))
        self.max_tests = max_tests
        self.confirm = confirm
        self.report = report
        self.arrived = 0.0
        self._reported: set[str] = set()

    # --- the tree ----------------------------------------------------------------------------
    def _dir(self, *parts: str, create: bool = False, mode: int = 0o755) -> SafeDir:
        return SafeDir.open(self.shared_root, [ROOT, *parts], create=create, mode=mode)

    def _bad(self, where: str, why: str) -> None:
        key = f"{where}: {why}"
        if key not in self._reported:  # once per document, not once per poll
            self._reported.add(key)
            self.report(f"ignored {key}")

    def _read(self, d: SafeDir, name: str, check: Callable[[Any], str]) -> dict[str, Any] | None:
        """The document if it is there and valid; a bad one is reported and skipped."""
        try:
            doc = d.read_json(name)
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            self._bad(str(d.path / name), str(exc) if isinstance(exc, UnsafePath)
                      else getattr(exc, "strerror", None) or "not valid JSON")
            return None
        why = check(doc)
        if why:
            self._bad(str(d.path / name), why)
            return None
        return doc

    # --- arrival and leadership -------------------------------------------------------------
    def arrive(self, run_id: str) -> bool:
        """Announce this node; False (reported) when the batch tree cannot be written."""
        self.arrived = time.time()
        try:
            with self._dir("assign", create=True) as d:
                d.unlink(f"{self.node}.json")
            with self._dir("arrivals", create=True) as d:
                d.write_json(f"{self.node}.json", {"node": self.node, "addr": self.addr,
                                                   "time": self.arrived, "run_id": run_id})
        except OSError as exc:
            self.report(f"cannot announce {self.node}: {exc}")
            self.arrived = 0.0
            return False
        return True

    def _arrivals(self) -> list[dict[str, Any]]:
        out = []
        try:
            with self._dir("arrivals") as arrivals, self._dir("assign", create=True) as assign:
                assigned = set(assign.files(".json"))
                for name in arrivals.files(".json"):
                    node = name[:-len(".json")]
                    if not valid_node_name(node):
                        self._bad(str(arrivals.path / name), "not a node name")
                        continue
                    a = self._read(arrivals, name, lambda doc, n=node: arrival_problem(doc, n))
                    if a is not None and a["time"] >= self.arrived - self.window \
                            and name not in assigned:
                        out.append(a)
        except OSError as exc:
            self._bad(str(self.root), str(exc))
            return []
        return sorted(out, key=lambda a: (a["time"], a["node"]))

    def form(self) -> dict[str, Any] | None:
        """Wait out the window, then lead or be assigned. None: no batch, go on alone."""
        if not self.arrived:
            return None
        time.sleep(max(0.0, self.arrived + self.window - time.time()))
        arrivals = self._arrivals()
        if arrivals and arrivals[0]["node"] == self.node:
            return self._lead(arrivals)
        deadline = time.time() + self.window + 15
        while time.time() < deadline:
            members = self._assigned()
            if members is not None:
                return members
            # The would-be leader may have died before assigning anyone: take over.
            arrivals = self._arrivals()
            if arrivals and arrivals[0]["node"] == self.node:
                return self._lead(arrivals)
            time.sleep(0.3)
        return None

    def _assigned(self) -> dict[str, Any] | None:
        """The batch this node was assigned to, once its members document is readable."""
        try:
            with self._dir("assign", create=True) as d:
                assign = self._read(d, f"{self.node}.json", lambda doc: "" if isinstance(
                    doc, dict) and valid_batch_id(doc.get("batch")) else "batch is not a batch id")
            if assign is None:
                return None
            with self._dir(assign["batch"]) as d:
                members = self._read(d, "members.json", members_problem)
        except FileNotFoundError:
            return None
        except OSError as exc:
            self._bad(str(self.root), str(exc))
            return None
        if members is None or members["batch"] != assign["batch"]:
            return None
        if self.node not in members["members"]:
            self._bad(f"{members['batch']}/members.json", f"does not list {self.node}")
            return None
        return members

    def _lead(self, arrivals: list[dict[str, Any]]) -> dict[str, Any] | None:
        try:
            return self._lead_or_raise(arrivals)
        except OSError as exc:
            self.report(f"cannot lead a batch: {exc}")
            return None

    def _lead_or_raise(self, arrivals: list[dict[str, Any]]) -> dict[str, Any] | None:
        members = [a["node"] for a in arrivals]
        if len(members) < 2:
            return None
        batch_id = f"batch-{int(self.arrived)}-{self.node}"
        doc = {"batch": batch_id, "leader": self.node, "members": members,
               "addrs": {a["node"]: a["addr"] for a in arrivals}}
        with self._dir(batch_id, create=True, mode=0o700) as folder:
            folder.chmod(0o700)  # only root may read the secret's folder
            folder.write_text(SECRET, new_secret() + "\n", mode=0o600)
            if not folder.create_exclusive("members.json", json.dumps(doc)):
                return self._read(folder, "members.json", members_problem)
        with self._dir("assign", create=True) as d:
            # The others first, the leader last: a member that polls in between still sees the
            # leader's unassigned arrival ahead of its own, so it waits instead of leading alone.
            for m in [*(m for m in members if m != self.node), self.node]:
                d.write_json(f"{m}.json", {"batch": batch_id})
        return doc

    # --- rounds --------------------------------------------------------------------------
    def run(self, batch: dict[str, Any], member: Member) -> dict[str, Any]:
        """Take part in the batch's rounds; return the verdict document."""
        if members_problem(batch):
            return self._alone(f"bad batch document: {members_problem(batch)}")
        if batch["leader"] == self.node:
            return self._drive(batch, member)
        return self._follow(batch, member)

    def _alone(self, why: str) -> dict[str, Any]:
        return {"bad": [], "good": [], "inconclusive": [self.node], "details": {self.node: why}}

    def _drive(self, batch: dict[str, Any], member: Member) -> dict[str, Any]:
        rounds = {"k": 0}
        details: dict[str, str] = {}
        bid = batch["batch"]

        def test(nodes: list[str]) -> bool:
            k = rounds["k"] = rounds["k"] + 1
            port = random.randint(*self.port_range)
            try:
                with self._dir(bid) as folder:
                    folder.write_json(f"round-{k}.json", {"nodes": nodes, "port": port})
            except OSError as exc:
                for n in nodes:
                    details.setdefault(n, f"round {k} not announced: {exc}"[:160])
                return False
            if self.node in nodes:
                threading.Thread(target=self._answer, args=(batch, k, nodes, port, member),
                                 daemon=True).start()
            deadline = time.time() + self.round_timeout + 30
            results: dict[str, dict[str, Any]] = {}
            while time.time() < deadline and len(results) < len(nodes):
                try:
                    with self._dir(bid) as folder:
                        for n in nodes:
                            if n not in results:
                                r = self._read(folder, f"result-{k}-{n}.json", result_problem)
                                if r is not None:
                                    results[n] = r
                except OSError as exc:
                    self._bad(str(self.root / bid), str(exc))
                time.sleep(0.2)
            ok = len(results) == len(nodes) and all(r["ok"] for r in results.values())
            if not ok:
                why = next((r.get("detail", "") for r in results.values() if not r["ok"]), "")
                why = why or f"no answer from {sorted(set(nodes) - set(results))}"
                for n in nodes:
                    details.setdefault(n, why)
            return ok

        search = find_culprits(batch["members"], test, max_tests=self.max_tests,
                               confirm=self.confirm)
        verdict = {"bad": search.bad, "good": search.good, "inconclusive": search.inconclusive,
                   "details": details, "tests": len(search.tests)}
        try:
            with self._dir(bid) as folder:
                folder.write_json("verdict.json", verdict)
        except OSError as exc:
            self.report(f"verdict not shared: {exc}")  # followers time out as inconclusive
        return verdict

    def _answer(self, batch: dict[str, Any], k: int, nodes: list[str], port: int,
                member: Member) -> None:
        bid = batch["batch"]
        secret = str(self.root / bid / SECRET)
        try:
            result = member(nodes, batch["addrs"][nodes[0]], port, secret)
        except Exception as exc:  # a crashed member is a failed round
            result = {"ok": False, "detail": f"error {type(exc).__name__}: {exc}"[:160]}
        try:
            with self._dir(bid) as folder:
                folder.write_json(f"result-{k}-{self.node}.json", result)
        except OSError as exc:
            self.report(f"round {k}: answer not shared: {exc}")

    def _follow(self, batch: dict[str, Any], member: Member) -> dict[str, Any]:
        done: set[int] = set()
        bid = batch["batch"]
        deadline = time.time() + (self.max_tests + 2) * (self.round_timeout + 40)
        while time.time() < deadline:
            try:
                with self._dir(bid) as folder:
                    verdict = self._read(folder, "verdict.json",
                                         lambda d: verdict_problem(d, batch["members"]))
                    if verdict is not None:
                        return verdict
                    todo = []
                    for name in folder.files(".json"):
                        k = name[len("round-"):-len(".json")]
                        if not name.startswith("round-") or not k.isdigit() or int(k) in done:
                            continue
                        r = self._read(folder, name, lambda d: round_problem(
                            d, batch["members"], self.port_range))
                        if r is not None:
                            todo.append((int(k), r))
            except OSError as exc:
                self._bad(str(self.root / bid), str(exc))
                todo = []
            for k, r in sorted(todo, key=lambda kr: kr[0]):
                done.add(k)
                if self.node in r["nodes"]:
                    self._answer(batch, k, r["nodes"], r["port"], member)
            time.sleep(0.2)
        return self._alone("batch leader never finished")
