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
    <shared root>/.batches/<batch>/secret                 0600: the group's rendezvous secret
    <shared root>/.batches/<batch>/round-<k>.json         {nodes, port}   the leader's k-th test
    <shared root>/.batches/<batch>/result-<k>-<node>.json {ok, detail, figures, inconclusive}
    <shared root>/.batches/<batch>/verdict.json           {bad, good, inconclusive, details,
                                                           tests, rounds}

The earliest arrival whose window has closed leads (one that died before assigning anyone is
passed over once overdue: live()): it takes every unassigned arrival of the window that Slurm
lists, cuts them into groups of at most group_max (along the network's leaf switches or blocks
when Slurm knows them: airlock.groups.topology), one batch folder per group, and drives
airlock.groups.culprit's search in every group, round by round; a round's tests are disjoint and
run side by side. Every member runs the rounds that name it. A member whose leader never assigns
it proceeds alone (its local suite already passed).

Time: everything here ends by the suite's own deadline (the registration's suite_timeout counts
from its first check; the hooks kill a suite that overstays it). A round starts only while a
whole round_timeout is left; who is undecided when time runs out is inconclusive.

No verdict is evidence: a round whose members all time out waiting on each other (the round
timed out as a whole) or never answer tells nothing about anyone; it is retried smaller or later
(airlock.groups.culprit), and a member it leaves undecided is inconclusive (Verdict.ERROR in the
suite:
Airlock's own trouble, never a FAIL of the node).

Every document here was written by some node, and is read as data from a stranger (see
docs/security.md): the tree is walked without following links (airlock.paths.SafeDir), node
names and batch ids are checked against strict patterns before they become a path, and every
document is schema-checked; a bad one is skipped and reported, never a crash of the suite. The
all-reduce rendezvous carries the group's secret, so a peer that cannot read the root-only batch
folder cannot join or poison it. And a leader's verdict is a claim, not a verdict: a member takes
part only in a batch whose members Slurm lists, fails only when the verdict blames it and its own
result in one of its rounds failed, passes only when it passed a round itself, and is otherwise
inconclusive (verify_own).
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

from airlock.collective.rendezvous import RendezvousError, new_secret, resolve
from airlock.groups.culprit import find_culprits
from airlock.groups.topology import cut
from airlock.paths import SafeDir, UnsafePath, valid_batch_id, valid_node_name

# (nodes, master address, port, secret file, timeout) -> {ok, detail, figures, inconclusive}
Member = Callable[..., dict[str, Any]]
Report = Callable[[str], None]
# Which of these node names Slurm lists (airlock.slurm.client.Slurm.known).
Known = Callable[[list[str]], set[str]]
ROOT = ".batches"
SECRET = "secret"
# Past round_timeout, how long the leader waits for a round's answers: a member's launcher
# starts (imports torch) before its own timeout runs, and writes its answer after.
ROUND_MARGIN_S = 30.0
POLL_S = 0.2
# How long past its window the first arrival has to assign the others (a leader does it in
# milliseconds); the i-th arrival has until the first's window plus i + 1 of these, so a dead
# leader is passed over by the next arrival, and a live one is never raced.
LEAD_GRACE_S = 5.0


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
    # The leader drives every group of its window, its own and the others.
    if not valid_node_name(doc.get("leader")):
        return "the leader is not a node name"
    addrs = doc.get("addrs")
    if not isinstance(addrs, dict) or set(addrs) != set(doc["members"]) \
            or not all(isinstance(a, str) and _addr(a) for a in addrs.values()):
        return "addrs is not one IP address per member"
    return ""


def round_problem(doc: Any, members: list[str], ports: tuple[int, int]) -> str:
    if not isinstance(doc, dict):
        return "not a table"
    nodes = doc.get("nodes")
    if not _names(nodes) or not set(nodes) <= set(members) or len(nodes) < 2:
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
            not isinstance(doc.get("figures", {}), dict) or \
            not isinstance(doc.get("inconclusive", False), bool):
        return "detail, figures or inconclusive of the wrong type"
    return ""


def verdict_problem(doc: Any, members: list[str]) -> str:
    if not isinstance(doc, dict):
        return "not a table"
    for key in ("bad", "good", "inconclusive"):
        v = doc.get(key, [])
        if not isinstance(v, list) or not all(isinstance(n, str) for n in v):
            return f"{key} is not a list of node names"
        strangers = sorted(set(v) - set(members))
        if strangers:
            return f"{key} names {', '.join(strangers[:3])}, not members of the batch"
    details = doc.get("details", {})
    if not isinstance(details, dict) or \
            not all(isinstance(k, str) and isinstance(v, str) for k, v in details.items()):
        return "details is not a table of text"
    return ""


def live(arrivals: list[dict[str, Any]], node: str, window: float,
         now: float) -> list[dict[str, Any]]:
    """The unassigned arrivals (in order) less those ahead of node that are overdue as its
    leader: the i-th had until the first's arrival, the window and (i + 1) LEAD_GRACE_S to
    assign the others. An arrival still unassigned past that died before it could lead (a
    live leader assigns itself with the rest), and leading past it is the take-over."""
    if not arrivals:
        return []
    first = arrivals[0]["time"]
    out = []
    ahead = True
    for i, a in enumerate(arrivals):
        if a["node"] == node:
            ahead = False
        elif ahead and now > first + window + (i + 1) * LEAD_GRACE_S:
            continue
        out.append(a)
    return out


def definite_failure(result: dict[str, Any]) -> bool:
    """A member's answer that fails its own node (not a round that said nothing)."""
    return not result["ok"] and not result.get("inconclusive", False)


def round_verdict(nodes: list[str], results: dict[str, dict[str, Any]]) -> bool | None:
    """A round passes when every member passed; fails when a member's own answer failed;
    otherwise (a member silent, or every failure a timeout of the whole round) has no verdict."""
    if any(definite_failure(r) for r in results.values()):
        return False
    if len(results) == len(nodes) and all(r["ok"] for r in results.values()):
        return True
    return None


class Batch:
    def __init__(self, shared_root: Path, node: str, addr: str, window: float,
                 round_timeout: float, port_range: tuple[int, int] = (29500, 29999),
                 max_tests: int = 64, confirm: int = 1, report: Report = _stderr,
                 known: Known | None = None, deadline: float = 0.0, group_max: int = 0,
                 concurrency: int = 0, topology: Callable[[], list[list[str]]] | None = None):
        """deadline: time.monotonic() by which everything here ends (0: none but the rounds').
        known: what Slurm lists; without it no other node can be vouched for, and no batch
        forms. topology: the leaf switches or blocks, read only by a leader
        (airlock.groups.topology).
        """
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
        self.known = known
        self.deadline = deadline
        self.group_max = group_max
        self.concurrency = concurrency
        self.topology = topology
        self.arrived = 0.0
        self.groups: list[dict[str, Any]] = []  # a leader's batches, its own among them
        self._reported: set[str] = set()
        self._mine: dict[str, dict[int, tuple[list[str], dict[str, Any]]]] = {}
        self._ports: set[int] = set()
        self._lock = threading.Lock()

    # --- time ---------------------------------------------------------------------------------
    def left(self) -> float:
        """Seconds to the deadline (a day when there is none)."""
        return self.deadline - time.monotonic() if self.deadline else 86400.0

    def _sleep_until(self, wall: float) -> None:
        time.sleep(max(0.0, min(wall - time.time(), self.left())))

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

    def _unknown(self, names: list[str]) -> list[str]:
        """Those of names Slurm does not list (all of them when Slurm cannot be asked)."""
        if self.known is None:
            return list(names)
        try:
            known = self.known(list(names))
        except Exception as exc:  # Slurm unreachable: nobody can be vouched for
            self.report(f"cannot ask Slurm which nodes exist: {exc}")
            return list(names)
        return [n for n in names if n not in known]

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
        self._sleep_until(self.arrived + self.window)
        arrivals = self._arrivals()
        if arrivals and arrivals[0]["node"] == self.node:
            return self._lead(arrivals)
        wait = self.window + 15 + LEAD_GRACE_S * (len(arrivals) + 1)
        end = time.monotonic() + min(wait, self.left())
        while time.monotonic() < end:
            members = self._assigned()
            if members is not None:
                return members
            # The would-be leader may have died before assigning anyone: once every arrival
            # ahead of this node is overdue, this node leads the rest, without them.
            arrivals = live(self._arrivals(), self.node, self.window, time.time())
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
        names = [a["node"] for a in arrivals]
        ghosts = [n for n in self._unknown(names) if n != self.node]
        for n in ghosts:
            self._bad(f"arrivals/{n}.json", "Slurm does not list this node")
        addrs = {a["node"]: a["addr"] for a in arrivals if a["node"] not in ghosts}
        if len(addrs) < 2:
            return None
        domains: list[list[str]] = []
        if self.topology is not None and self.group_max and len(addrs) > self.group_max:
            try:
                domains = self.topology()
            except Exception as exc:  # the topology orders groups; it decides nothing
                self.report(f"topology unknown ({exc}); groups follow node names")
        groups = cut(list(addrs), self.group_max, domains)
        own = None
        for i, members in enumerate(groups):
            suffix = f".g{i + 1}" if len(groups) > 1 else ""
            batch_id = f"batch-{int(self.arrived)}-{self.node}{suffix}"
            doc = {"batch": batch_id, "leader": self.node, "members": members,
                   "addrs": {m: addrs[m] for m in members}}
            with self._dir(batch_id, create=True, mode=0o700) as folder:
                folder.chmod(0o700)  # only root may read the secret's folder
                folder.write_text(SECRET, new_secret() + "\n", mode=0o600)
                if not folder.create_exclusive("members.json", json.dumps(doc)):
                    return self._read(folder, "members.json", members_problem)
            self.groups.append(doc)
            if self.node in members:
                own = doc
        with self._dir("assign", create=True) as d:
            # The others first, the leader last: a member that polls in between still sees the
            # leader's unassigned arrival ahead of its own, so it waits instead of leading alone.
            for doc in self.groups:
                for m in doc["members"]:
                    if m != self.node:
                        d.write_json(f"{m}.json", {"batch": doc["batch"]})
            if own is not None:
                d.write_json(f"{self.node}.json", {"batch": own["batch"]})
        if len(groups) > 1:
            self.report(f"{len(addrs)} nodes in {len(groups)} groups of at most "
                        f"{self.group_max}: {', '.join(str(len(g)) for g in groups)}")
        return own

    # --- rounds --------------------------------------------------------------------------
    def run(self, batch: dict[str, Any], member: Member) -> dict[str, Any]:
        """Take part in the batch's rounds (and, as the leader, drive every group's); return
        this node's verdict: {bad, good, inconclusive, details}, self in exactly one list."""
        if members_problem(batch):
            return self._alone(f"bad batch document: {members_problem(batch)}")
        ghosts = self._unknown([m for m in batch["members"] if m != self.node])
        if ghosts:
            why = f"batch {batch['batch']} names nodes Slurm does not list: {', '.join(ghosts)}"
            self.report(f"ignored {why}")
            return self._alone(why)
        if batch["leader"] == self.node:
            verdict = self._drive_all(batch, member)
        else:
            verdict = self._follow(batch, member)
        return self.verify_own(batch, verdict)

    def _alone(self, why: str) -> dict[str, Any]:
        return {"bad": [], "good": [], "inconclusive": [self.node], "details": {self.node: why}}

    def verify_own(self, batch: dict[str, Any], verdict: dict[str, Any] | None
                   ) -> dict[str, Any]:
        """This node's part of a verdict, taken only as far as its own answers bear it out."""
        if verdict is None:
            return self._alone("the batch's leader never finished")
        why = verdict_problem(verdict, batch["members"])
        if why:
            self.report(f"ignored {batch['batch']}/verdict.json: {why}")
            return self._alone(f"verdict ignored: {why}")
        mine = self._mine.get(batch["batch"], {})
        details = verdict.get("details", {})
        if self.node in verdict.get("bad", []):
            failing = [r for nodes, r in mine.values() if definite_failure(r) and len(nodes) >= 2]
            if failing:
                return {"bad": [self.node], "good": [], "inconclusive": [],
                        "details": {self.node: failing[-1].get("detail") or "failed"}}
            why = f"the verdict blames {self.node}, which has no failing result of its own"
            self.report(f"ignored {batch['batch']}/verdict.json: {why}")
            return self._alone(why)
        if self.node in verdict.get("good", []):
            if any(r["ok"] for _nodes, r in mine.values()):
                return {"bad": [], "good": [self.node], "inconclusive": [], "details": {}}
            return self._alone(f"the verdict clears {self.node}, which passed no round itself")
        return self._alone(details.get(self.node, "") or "no verdict on this node")

    def _drive_all(self, own: dict[str, Any], member: Member) -> dict[str, Any] | None:
        """Drive every group of this window (self.groups; own alone when this node took over a
        batch formed elsewhere), concurrency at a time; own's verdict."""
        groups = self.groups or [own]
        slots = threading.Semaphore(self.concurrency or len(groups))
        verdicts: dict[str, dict[str, Any]] = {}

        def one(doc: dict[str, Any]) -> None:
            with slots:
                verdicts[doc["batch"]] = self._drive(doc, member)

        threads = [threading.Thread(target=one, args=(doc,), daemon=True) for doc in groups]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return verdicts.get(own["batch"])

    def _drive(self, batch: dict[str, Any], member: Member) -> dict[str, Any]:
        counter = {"k": 0}
        details: dict[str, str] = {}
        bid = batch["batch"]

        def test_round(tests: list[list[str]]) -> list[bool | None]:
            k0 = counter["k"]
            counter["k"] += len(tests)
            ports = self._take_ports(len(tests))
            announced: dict[int, list[str]] = {}
            try:
                with self._dir(bid) as folder:
                    for i, nodes in enumerate(tests):
                        folder.write_json(f"round-{k0 + i + 1}.json",
                                          {"nodes": nodes, "port": ports[i]})
                        announced[k0 + i + 1] = nodes
            except OSError as exc:
                self.report(f"{bid}: round not announced: {exc}")
            for k, nodes in announced.items():
                if self.node in nodes:
                    threading.Thread(target=self._answer, args=(batch, k, nodes,
                                                                ports[k - k0 - 1], member),
                                     daemon=True).start()
            wait = min(self.round_timeout + ROUND_MARGIN_S, self.left())
            results = self._collect(bid, announced, time.monotonic() + wait)
            self._give_ports(ports)
            out: list[bool | None] = []
            for i, nodes in enumerate(tests):
                got = results.get(k0 + i + 1, {})
                ok = round_verdict(nodes, got) if k0 + i + 1 in announced else None
                out.append(ok)
                if ok:
                    continue
                silent = sorted(set(nodes) - set(got))
                for n in nodes:
                    r = got.get(n)
                    why = (r or {}).get("detail", "") if r is not None and not r["ok"] else ""
                    details[n] = (why or next((x["detail"] for x in got.values()
                                              if not x["ok"] and x.get("detail")), "")
                                  or f"no answer from {', '.join(silent)}")[:200]
            return out

        search = find_culprits(batch["members"], test_round=test_round,
                               max_tests=self.max_tests, confirm=self.confirm,
                               stop=lambda: self.left() < self.round_timeout)
        if self.left() < self.round_timeout:
            for n in search.inconclusive:
                details.setdefault(n, f"no time left for another round "
                                      f"(round_timeout {self.round_timeout:g}s)")
        for n in search.good:
            details.pop(n, None)
        verdict = {"bad": search.bad, "good": [n for n in search.good
                                               if n in batch["members"]],
                   "inconclusive": search.inconclusive, "details": details,
                   "tests": len(search.tests), "rounds": search.rounds}
        try:
            with self._dir(bid) as folder:
                folder.write_json("verdict.json", verdict)
        except OSError as exc:
            self.report(f"verdict not shared: {exc}")  # followers time out as inconclusive
        return verdict

    def _collect(self, bid: str, rounds: dict[int, list[str]], end: float
                 ) -> dict[int, dict[str, dict[str, Any]]]:
        """The answers to rounds ({k: nodes}) until all are in or end (monotonic)."""
        results: dict[int, dict[str, dict[str, Any]]] = {k: {} for k in rounds}
        while True:
            try:
                with self._dir(bid) as folder:
                    for k, nodes in rounds.items():
                        for n in nodes:
                            if n not in results[k]:
                                r = self._read(folder, f"result-{k}-{n}.json", result_problem)
                                if r is not None:
                                    results[k][n] = r
            except OSError as exc:
                self._bad(str(self.root / bid), str(exc))
            done = all(len(results[k]) == len(nodes) for k, nodes in rounds.items())
            if done or time.monotonic() >= end:
                return results
            time.sleep(POLL_S)

    def _take_ports(self, n: int) -> list[int]:
        """n distinct ports, distinct from those of rounds in flight (on one host address,
        as in a dev cluster, two relays cannot share one)."""
        low, high = self.port_range
        with self._lock:
            free = [p for p in range(low, high + 1) if p not in self._ports]
            picked = random.sample(free, min(n, len(free)))
            while len(picked) < n:
                picked.append(random.randint(low, high))
            self._ports.update(picked)
        return picked

    def _give_ports(self, ports: list[int]) -> None:
        with self._lock:
            self._ports.difference_update(ports)

    def _answer(self, batch: dict[str, Any], k: int, nodes: list[str], port: int,
                member: Member) -> None:
        bid = batch["batch"]
        secret = str(self.root / bid / SECRET)
        timeout = max(1.0, min(self.round_timeout, self.left()))
        try:
            result = member(nodes, batch["addrs"][nodes[0]], port, secret, timeout)
            if result_problem(result):
                result = {"ok": False, "detail": f"member answer {result_problem(result)}"}
        except Exception as exc:  # a crashed member is no verdict on its node
            result = {"ok": False, "inconclusive": True,
                      "detail": f"error {type(exc).__name__}: {exc}"[:160]}
        with self._lock:
            self._mine.setdefault(bid, {})[k] = (list(nodes), result)
        try:
            with self._dir(bid) as folder:
                folder.write_json(f"result-{k}-{self.node}.json", result)
        except OSError as exc:
            self.report(f"round {k}: answer not shared: {exc}")

    def _follow(self, batch: dict[str, Any], member: Member) -> dict[str, Any] | None:
        done: set[int] = set()
        bid = batch["batch"]
        end = time.monotonic() + min(self.left(), (self.max_tests + 2) *
                                     (self.round_timeout + ROUND_MARGIN_S + 10))
        while time.monotonic() < end:
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
                if self.node in r["nodes"] and self.left() > 1.0:
                    self._answer(batch, k, r["nodes"], r["port"], member)
            time.sleep(POLL_S)
        return None
