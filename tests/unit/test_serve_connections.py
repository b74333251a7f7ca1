"""`airlock serve` under clients that hold connections without asking (issue 26): the real
uvicorn server with the service's own connection rules (airlock.serve.connections) and the
Guard's request limit, driven over real sockets. bench/bench_serve_idle.py measures the same
with 1,000 idle sockets."""

from __future__ import annotations

import http.client
import json
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from airlock.config import loader as config_mod
from airlock.serve.app import build
from airlock.serve.security import Guard
from airlock.serve.server import uvicorn_config
from airlock.serve.source import Source
from tests.unit.recorded import Recorded, run_doc

WAIT = 30.0  # seconds any one step may take on a loaded machine (never a measurement)


@pytest.fixture
def cfg(tmp_path):
    r = Recorded(tmp_path)
    r.add_node("node1")
    r.add_run(run_doc("node1"))
    return config_mod.load(r.write(serve={"refresh": 60.0}))


@contextmanager
def serving(app, cfg, **bounds) -> Iterator[int]:
    """The app behind uvicorn as `airlock serve` runs it, on a free loopback port."""
    import uvicorn

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(4096)
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn_config(app, cfg.serve, "127.0.0.1", port,
                                           log_level="warning", **bounds))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        for _ in range(int(WAIT / 0.05)):
            if server.started:
                break
            threading.Event().wait(0.05)
        assert server.started, "uvicorn did not start"
        yield port
    finally:
        server.should_exit = True
        thread.join(WAIT)
        sock.close()


def get(port: int, path: str, source: str = "127.0.0.1") -> tuple[int, dict, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=WAIT,
                                      source_address=(source, 0))
    try:
        conn.request("GET", path)
        res = conn.getresponse()
        return res.status, {k.lower(): v for k, v in res.getheaders()}, res.read()
    finally:
        conn.close()


def wait_ready(port: int) -> None:
    for _ in range(int(WAIT / 0.1)):
        if get(port, "/healthz")[0] == 200:
            return
        threading.Event().wait(0.1)
    raise AssertionError("the first status was never read")


def closed_by_server(sock: socket.socket) -> bool:
    """True when the server closes the connection (EOF or reset) within WAIT."""
    sock.settimeout(WAIT)
    try:
        return sock.recv(1024) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def test_idle_sockets_from_one_address_do_not_lock_out_another(cfg):
    """300 connections that never send a byte, all from 127.0.0.1 (uvicorn's limit_concurrency
    was 256): /healthz from 127.0.0.2 still answers 200, and the flood's own oldest sockets are
    the ones closed."""
    with serving(build(cfg), cfg, head_timeout=600.0) as port:
        wait_ready(port)
        idle = [socket.create_connection(("127.0.0.1", port), timeout=WAIT) for _ in range(300)]
        try:
            status, _, body = get(port, "/healthz", source="127.0.0.2")
            assert status == 200, body
            assert json.loads(body)["ok"] is True
            # beyond the per-client bound, the flood's oldest idle socket was closed (the head
            # timeout is 10 minutes here: nothing else closes it)
            assert closed_by_server(idle[0])
        finally:
            for s in idle:
                s.close()


def test_a_connection_without_a_complete_request_head_is_closed(cfg):
    with serving(build(cfg), cfg, head_timeout=0.5) as port:
        wait_ready(port)
        slow = socket.create_connection(("127.0.0.1", port), timeout=WAIT)
        silent = socket.create_connection(("127.0.0.1", port), timeout=WAIT)
        try:
            slow.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # never the blank line
            assert closed_by_server(slow)
            assert closed_by_server(silent)
            # an answered request is not cut: the timer restarts after each answer
            assert get(port, "/healthz")[0] == 200
        finally:
            slow.close()
            silent.close()


def test_the_request_limit_answers_with_the_services_json_error_and_headers(cfg):
    """One request held (the status list waits for a first read that has not come), the limit
    1: the next request gets the service's 503, JSON with its security headers, not uvicorn's
    plain text."""
    release = threading.Event()

    def collect():
        release.wait(WAIT)
        raise RuntimeError("not read in this test")

    app = build(cfg, source=Source(collect, 60.0), max_active=1)
    with serving(app, cfg) as port:
        guard = app.middleware_stack
        while not isinstance(guard, Guard):
            guard = guard.app
        held = threading.Thread(target=get, args=(port, "/api/v1/nodes"), daemon=True)
        held.start()
        try:
            for _ in range(int(WAIT / 0.05)):  # until the held request is in progress
                if guard.active:
                    break
                threading.Event().wait(0.05)
            status, headers, body = get(port, "/api/v1/checks")
            assert status == 503, body
            assert headers["content-type"] == "application/json"
            assert "default-src 'none'" in headers["content-security-policy"]
            assert headers["retry-after"] == "1"
            assert json.loads(body) == {"error": "busy: 1 requests in progress; try again"}
        finally:
            release.set()
            held.join(WAIT)
