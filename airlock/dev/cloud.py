"""A cloud on loopback for the recovery tests and the demo: a real HTTP server (http.server in a
thread on 127.0.0.1, port 0) implementing docs/recovery-http.md against a DevCluster.

Its replace does what a cloud does to a node: the old instance goes away (slurmd stopped), and a
new one boots (the simulated fault is cleared, the node's local disk is fresh, slurmd starts
with a new boot time). Every request is logged; faults can be scripted per request.
"""

from __future__ import annotations

import json
import shutil
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from airlock.dev.cluster import healthy_gpus


class FakeCloud:
    def __init__(self, cluster=None, token: str = "s3cret-token-value"):
        self.cluster = cluster
        self.token = token
        self.log: list[dict] = []
        self.seen: dict[str, dict] = {}  # request_id -> answer
        self.nodes: dict[str, dict] = {}
        self.refuse: dict[str, str] = {}  # node -> message
        self.script: list = []  # next answers: int status, "timeout", or (status, headers)
        self.slow_s = 3.0
        self.lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def start(self) -> FakeCloud:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def posts(self, action: str | None = None, node: str | None = None) -> list[dict]:
        return [e for e in self.log if e["method"] == "POST"
                and (action is None or e["action"] == action)
                and (node is None or e["node"] == node)]

    # --- what a replacement does to the node ----------------------------------------------
    def replace_node(self, node: str) -> None:
        c = self.cluster
        c.stop_node(node)
        self.kill_instance_processes(node)
        c.set_node_sim(node, gpus=healthy_gpus(c.gpus_per_node), faults={}, cuda={"stand_in": True})
        state = Path(str(c.root / "airlock" / "state" / node))
        shutil.rmtree(state, ignore_errors=True)  # a new instance has a fresh local disk
        time.sleep(2.0)  # boot time of the new instance (must be after the old boot)
        c.start_node(node, wait=False, fresh_boot=True)
        with self.lock:
            self.nodes[node]["state"] = "running"

    def kill_instance_processes(self, node: str) -> None:
        """The old instance's processes die with it (here: its detached Airlock suites)."""
        self.cluster.kill_node_processes(node)

    def _handler(self):
        cloud = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep pytest output clean
                pass

            def _send(self, status: int, body: dict, headers: dict | None = None) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

            def _parts(self) -> list[str]:
                return [p for p in self.path.split("/") if p]

            def _auth_ok(self) -> bool:
                return self.headers.get("Authorization") == f"Bearer {cloud.token}"

            def do_GET(self):
                parts = self._parts()
                cloud.log.append({"method": "GET", "path": self.path, "node": parts[-1],
                                  "action": "", "ts": time.time(), "request_id": ""})
                if not self._auth_ok():
                    return self._send(401, {"error": "bad token"})
                if len(parts) != 3 or parts[:2] != ["v1", "nodes"]:
                    return self._send(404, {"error": "no such path"})
                with cloud.lock:
                    info = cloud.nodes.get(parts[2])
                if info is None:
                    return self._send(404, {"error": f"unknown node {parts[2]}"})
                return self._send(200, {"node": parts[2], **info})

            def do_POST(self):
                parts = self._parts()
                length = int(self.headers.get("Content-Length", "0"))
                body = json.loads(self.rfile.read(length) or b"{}")
                node, action = (parts[2], parts[3]) if len(parts) == 4 else ("", "")
                entry = {"method": "POST", "path": self.path, "node": node, "action": action,
                         "request_id": body.get("request_id", ""), "ts": time.time(),
                         "authorized": self._auth_ok()}
                with cloud.lock:
                    cloud.log.append(entry)
                    scripted = cloud.script.pop(0) if cloud.script else None
                if not self._auth_ok():
                    return self._send(401, {"error": "bad token"})
                if scripted == "timeout":
                    time.sleep(cloud.slow_s)
                    return self._send(504, {"error": "too late"})
                if isinstance(scripted, tuple):
                    return self._send(scripted[0], {"error": f"scripted {scripted[0]}"},
                                      scripted[1])
                if isinstance(scripted, int):
                    return self._send(scripted, {"error": f"scripted {scripted}"})
                if action not in ("reboot", "replace") or not body.get("request_id"):
                    return self._send(400, {"error": "need /v1/nodes/NODE/reboot|replace and "
                                                     "a request_id"})
                if node in cloud.refuse:
                    return self._send(409, {"error": cloud.refuse[node]})
                rid = body["request_id"]
                with cloud.lock:
                    if rid in cloud.seen:  # idempotent: the same request is not done twice
                        return self._send(202, cloud.seen[rid])
                    info = cloud.nodes.setdefault(node, {"state": "running", "request_ids": []})
                    info["request_ids"].append(rid)
                    info["state"] = "replacing" if action == "replace" else "rebooting"
                    answer = {"request_id": rid, "state": info["state"]}
                    cloud.seen[rid] = answer
                    entry["executed"] = True
                if action == "replace" and cloud.cluster is not None:
                    threading.Thread(target=cloud.replace_node, args=(node,), daemon=True).start()
                return self._send(202, answer)

        return Handler
