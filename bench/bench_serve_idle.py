"""`airlock serve` against 1,000 idle sockets from one address (issue 26): does GET /healthz from
another address still answer, and how fast, with the flood held open?

`airlock serve` runs as its own process over a small recorded cluster (tests/unit/recorded.py).
The flood: N connections from 127.0.0.1 that never send a byte (before the fix, 256 of them made
every request a plain-text 503 until they closed). Meanwhile GET /healthz from 127.0.0.2 (a
new connection each time), wall time from connect to last byte; and how many of the flood's
sockets the service still holds open at the end (its per-client bound closes the oldest idle
ones; its head timeout closes the rest after a few seconds).

    python bench/bench_serve_idle.py [--sockets 1000] [--repeat 50] [--json FILE]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import select
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.unit.recorded import Recorded, run_doc  # noqa: E402


def healthz(port: int, source: str) -> tuple[int, float]:
    started = time.perf_counter()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30, source_address=(source, 0))
    try:
        conn.request("GET", "/healthz")
        res = conn.getresponse()
        res.read()
        return res.status, time.perf_counter() - started
    finally:
        conn.close()


def still_open(socks: list[socket.socket]) -> int:
    """Sockets the server has not closed (no EOF readable)."""
    readable, _, _ = select.select(socks, [], [], 0.5) if socks else ([], [], [])
    closed = 0
    for s in readable:
        try:
            closed += s.recv(1, socket.MSG_PEEK) == b""
        except OSError:
            closed += 1
    return len(socks) - closed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sockets", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=50)
    ap.add_argument("--json", help="write the figures here too")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-serve-idle-") as tmp:
        r = Recorded(tmp)
        for i in range(40):
            r.add_node(f"node{i}")
            r.add_run(run_doc(f"node{i}"))
        path = r.write(serve={"refresh": 30.0})
        probe = socket.socket()
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
        probe.close()
        proc = subprocess.Popen([sys.executable, "-m", "airlock", "serve", "--listen",
                                 f"127.0.0.1:{port}", "--log-level", "warning"],
                                env={**os.environ, "AIRLOCK_CONFIG": str(path)},
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 60
            while True:
                try:
                    if healthz(port, "127.0.0.1")[0] == 200:
                        break
                except OSError:
                    pass
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise SystemExit("airlock serve did not come up")
                time.sleep(0.2)
            quiet = [healthz(port, "127.0.0.2")[1] for _ in range(args.repeat)]
            flood = [socket.create_connection(("127.0.0.1", port), timeout=30)
                     for _ in range(args.sockets)]
            answers = [healthz(port, "127.0.0.2") for _ in range(args.repeat)]
            held = still_open(flood)
            time.sleep(8)  # past the head timeout (5 s)
            held_later = still_open(flood)
            for s in flood:
                s.close()
        finally:
            proc.terminate()
            proc.wait(30)
    ok = sum(1 for status, _ in answers if status == 200)
    times = [t for _, t in answers]
    figures = {
        "sockets": args.sockets, "repeat": args.repeat, "healthz_200": ok,
        "healthz_ms_quiet_median": round(1000 * statistics.median(quiet), 2),
        "healthz_ms_flood_median": round(1000 * statistics.median(times), 2),
        "healthz_ms_flood_max": round(1000 * max(times), 2),
        "flood_open_after_requests": held, "flood_open_after_8s": held_later}
    print(f"airlock serve vs {args.sockets} idle sockets from 127.0.0.1 "
          "(python bench/bench_serve_idle.py)")
    print(f"  GET /healthz from 127.0.0.2: {ok}/{args.repeat} answered 200; median "
          f"{figures['healthz_ms_flood_median']} ms (max {figures['healthz_ms_flood_max']} ms), "
          f"{figures['healthz_ms_quiet_median']} ms without the flood")
    print(f"  flood sockets the service still held: {held} after the requests, "
          f"{held_later} 8 s later")
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=1) + "\n")
    if ok != args.repeat:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
