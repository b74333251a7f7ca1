"""Registration batches: nodes that register within a short window test together.

New capacity arrives in bursts; a multi-node all-reduce among the nodes of one burst tests the
network between them before any of them takes a job. The nodes are drained (quarantined) at this
point, so Slurm cannot launch anything on them: they coordinate through the shared directory
instead, which every node and the controller already use for results.

    <root>/arrivals/<node>.json           {node, addr, time, run_id}    written on arrival
    <root>/assign/<node>.json             {batch}                       written by the leader
    <root>/<batch>/members.json           {leader, members, addrs}      created once (O_EXCL)
    <root>/<batch>/round-<k>.json         {nodes, port}                 the leader's k-th test
    <root>/<batch>/result-<k>-<node>.json {ok, detail, figures}          each participant's answer
    <root>/<batch>/verdict.json           {bad, good, inconclusive, details}

The earliest arrival whose window has closed leads: it takes every unassigned arrival of the
window, then drives airlock.culprit's search round by round; every member runs the rounds that
name it. A member whose leader never assigns it proceeds alone (its local suite already passed).
"""

from __future__ import annotations

import json
import os
import random
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from airlock.culprit import find_culprits
from airlock.paths import atomic_write, read_json

Member = Callable[[list[str], str, int], dict[str, Any]]  # (nodes, master, port) -> result


class Batch:
    def __init__(self, root: Path, node: str, addr: str, window: float, round_timeout: float,
                 port_range: tuple[int, int] = (29500, 29999), max_tests: int = 16,
                 confirm: int = 1):
        self.root = Path(root)
        self.node = node
        self.addr = addr
        self.window = window
        self.round_timeout = round_timeout
        self.port_range = port_range
        self.max_tests = max_tests
        self.confirm = confirm
        self.arrived = 0.0

    # --- arrival and leadership -------------------------------------------------------------
    def arrive(self, run_id: str) -> None:
        self.arrived = time.time()
        try:
            os.unlink(self.root / "assign" / f"{self.node}.json")
        except FileNotFoundError:
            pass
        atomic_write(self.root / "arrivals" / f"{self.node}.json",
                     {"node": self.node, "addr": self.addr, "time": self.arrived,
                      "run_id": run_id})

    def _arrivals(self) -> list[dict[str, Any]]:
        out = []
        for f in (self.root / "arrivals").glob("*.json"):
            a = read_json(f)
            recent = isinstance(a, dict) and a.get("time", 0) >= self.arrived - self.window
            if recent and not (self.root / "assign" / f"{a['node']}.json").exists():
                out.append(a)
        return sorted(out, key=lambda a: (a["time"], a["node"]))

    def form(self) -> dict[str, Any] | None:
        """Wait out the window, then lead or be assigned. None: no batch, go on alone."""
        time.sleep(max(0.0, self.arrived + self.window - time.time()))
        arrivals = self._arrivals()
        if arrivals and arrivals[0]["node"] == self.node:
            return self._lead(arrivals)
        deadline = time.time() + self.window + 15
        while time.time() < deadline:
            assign = read_json(self.root / "assign" / f"{self.node}.json")
            if isinstance(assign, dict):
                members = read_json(self.root / assign["batch"] / "members.json")
                if isinstance(members, dict):
                    return members
            # The would-be leader may have died before assigning anyone: take over.
            arrivals = self._arrivals()
            if arrivals and arrivals[0]["node"] == self.node:
                return self._lead(arrivals)
            time.sleep(0.3)
        return None

    def _lead(self, arrivals: list[dict[str, Any]]) -> dict[str, Any] | None:
        members = [a["node"] for a in arrivals]
        if len(members) < 2:
            return None
        batch_id = f"batch-{int(self.arrived)}-{self.node}"
        folder = self.root / batch_id
        folder.mkdir(parents=True, exist_ok=True)
        doc = {"batch": batch_id, "leader": self.node, "members": members,
               "addrs": {a["node"]: a["addr"] for a in arrivals}}
        try:
            fd = os.open(folder / "members.json", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            return read_json(folder / "members.json")
        with os.fdopen(fd, "w") as fh:
            json.dump(doc, fh)
        for m in members:
            atomic_write(self.root / "assign" / f"{m}.json", {"batch": batch_id})
        return doc

    # --- rounds --------------------------------------------------------------------------
    def run(self, batch: dict[str, Any], member: Member) -> dict[str, Any]:
        """Take part in the batch's rounds; return the verdict document."""
        folder = self.root / batch["batch"]
        if batch["leader"] == self.node:
            return self._drive(batch, folder, member)
        return self._follow(folder, member)

    def _drive(self, batch: dict[str, Any], folder: Path, member: Member) -> dict[str, Any]:
        rounds = {"k": 0}
        details: dict[str, str] = {}

        def test(nodes: list[str]) -> bool:
            k = rounds["k"] = rounds["k"] + 1
            port = random.randint(*self.port_range)
            atomic_write(folder / f"round-{k}.json", {"nodes": nodes, "port": port})
            if self.node in nodes:
                threading.Thread(target=self._answer, args=(folder, k, nodes, port, member),
                                 daemon=True).start()
            deadline = time.time() + self.round_timeout + 30
            results = {}
            while time.time() < deadline and len(results) < len(nodes):
                for n in nodes:
                    r = read_json(folder / f"result-{k}-{n}.json")
                    if isinstance(r, dict):
                        results[n] = r
                time.sleep(0.2)
            ok = len(results) == len(nodes) and all(r["ok"] for r in results.values())
            if not ok:
                why = next((r["detail"] for r in results.values() if not r["ok"]), "")
                why = why or f"no answer from {sorted(set(nodes) - set(results))}"
                for n in nodes:
                    details.setdefault(n, why)
            return ok

        search = find_culprits(batch["members"], test, max_tests=self.max_tests,
                               confirm=self.confirm)
        verdict = {"bad": search.bad, "good": search.good, "inconclusive": search.inconclusive,
                   "details": details, "tests": len(search.tests)}
        atomic_write(folder / "verdict.json", verdict)
        return verdict

    def _answer(self, folder: Path, k: int, nodes: list[str], port: int,
                member: Member) -> None:
        addrs = (read_json(folder / "members.json") or {}).get("addrs", {})
        try:
            result = member(nodes, addrs.get(nodes[0], "127.0.0.1"), port)
        except Exception as exc:  # noqa: BLE001 - a crashed member is a failed round
            result = {"ok": False, "detail": f"error {type(exc).__name__}: {exc}"[:160]}
        atomic_write(folder / f"result-{k}-{self.node}.json", result)

    def _follow(self, folder: Path, member: Member) -> dict[str, Any]:
        done: set[int] = set()
        deadline = time.time() + (self.max_tests + 2) * (self.round_timeout + 40)
        while time.time() < deadline:
            verdict = read_json(folder / "verdict.json")
            if isinstance(verdict, dict):
                return verdict
            for f in sorted(folder.glob("round-*.json"), key=lambda p: int(p.stem[6:])):
                k = int(f.stem[6:])
                r = read_json(f)
                if k in done or not isinstance(r, dict):
                    continue
                done.add(k)
                if self.node in r["nodes"]:
                    self._answer(folder, k, r["nodes"], r["port"], member)
            time.sleep(0.2)
        return {"bad": [], "good": [], "inconclusive": [self.node],
                "details": {self.node: "batch leader never finished"}}
