"""`airlock serve` at 10,000 nodes of recorded status (issue 18's goals: GET /api/v1/nodes
answers in <= 0.3 s; the console's node table renders 10,000 rows usably).

A recorded cluster (tests/unit/recorded.py): the fake 22.05 controller of tests/unit/fakeslurm.py
answering `scontrol -o show node` for 10,000 nodes in 22.05's recorded line format (5 % failed,
1 % own errors, 1 % pending, 1 % an admin's drain) and a latest.json run document per node in
the shared directory. `airlock serve` runs as
its own process, as on a controller. Measured side by side in one run:

  * the background read of the whole status (status.collect: one Slurm call, 10,000 result
    documents), which the service does every [serve] refresh seconds, off the request path,
    and the fake controller's share of it (its `scontrol show node` alone);
  * GET /healthz (the floor: HTTP and the framework) against GET /api/v1/nodes, plain and
    gzip, and filtered (?state=failed), and one node's page (GET /api/v1/nodes/NODE), over a
    kept-alive connection, wall time from request to last byte;
  * in Debian's Chromium (when present): the console loaded until the first page of the table
    is on screen, then a sort over all rows, a filter, and a page turn, each until drawn.

    python bench/bench_serve.py [--nodes 10000] [--repeat 20] [--no-browser] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import requests

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from airlock.config import loader as config_mod  # noqa: E402
from airlock.dev.cluster import free_port  # noqa: E402
from airlock.slurm.client import Slurm  # noqa: E402
from airlock.status import collect as status  # noqa: E402
from tests.unit.recorded import Recorded, check, run_doc  # noqa: E402

GOAL_NODES_S = 0.3
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--headless", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]


def build(root: Path, n: int, seed: int = 1) -> Path:
    rnd = random.Random(seed)
    r = Recorded(root)
    now = time.time()
    nodes: dict[str, dict] = {}
    for i in range(n):
        name = f"gpu{i:05d}"
        x = rnd.random()
        part = ("main", f"rack{i // 500:02d}")
        if x < 0.05:
            nodes[name] = dict(state="IDLE+DRAIN", partitions=part,
                       reason=f"airlock: FAIL gpu_count 7 GPUs, expected 8 ({i})")
            verdict, checks = "fail", [check("gpu_count", "fail", "7 GPUs, expected 8",
                                             found=7, expected=8)]
        elif x < 0.06:
            nodes[name] = dict(state="IDLE+DRAIN", partitions=part,
                       reason="airlock: FAIL suite not seen: burnin (no time)")
            verdict, checks = "error", [check("burnin", "error", "no time")]
        elif x < 0.07:
            nodes[name] = dict(state="IDLE+DRAIN", partitions=part,
                       reason="airlock: pending standard check boot")
            verdict, checks = "pass", [check("gpu_count", found=8, expected=8)]
        elif x < 0.08:
            nodes[name] = dict(state="IDLE+DRAIN", partitions=part, reason="disk swap",
                       reason_user="admin")
            verdict, checks = "pass", [check("gpu_count", found=8, expected=8)]
        else:
            nodes[name] = dict(partitions=part, busy=x > 0.5)
            verdict, checks = "pass", [check("gpu_count", found=8, expected=8)]
        r.add_run(run_doc(name, level="quick", trigger="periodic", verdict=verdict,
                          finished_at=now - rnd.uniform(0, 600), checks=checks, seq=i))
    r.add_nodes(nodes)
    return r.write(serve={"refresh": 30.0})


def timed(session: requests.Session, url: str, repeat: int, **kw) -> dict:
    times, size = [], 0
    for _ in range(repeat):
        t = time.perf_counter()
        res = session.get(url, timeout=60, **kw)
        body = res.content
        times.append(time.perf_counter() - t)
        assert res.status_code == 200, (url, res.status_code, body[:200])
        size = int(res.headers.get("content-length") or len(body))
    times.sort()
    return {"median_s": statistics.median(times), "p90_s": times[int(0.9 * (len(times) - 1))],
            "max_s": times[-1], "bytes": size}


def browser(url: str, n: int) -> dict:
    from playwright.sync_api import sync_playwright

    out = {}
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = b.new_page(viewport={"width": 1360, "height": 900})
        t = time.perf_counter()
        page.goto(url + "/")
        page.locator("table#nodes tbody tr").first.wait_for(timeout=60_000)
        out["load_to_table_s"] = time.perf_counter() - t
        info = page.locator("#page-info").inner_text()
        assert f"of {n} nodes" in info, info
        out["rows_in_dom"] = page.locator("table#nodes tbody tr").count()

        def until_drawn(action, what: str) -> float:
            page.evaluate("window.__mark = document.querySelector('table#nodes tbody')")
            t0 = time.perf_counter()
            action()
            page.wait_for_function(
                "document.querySelector('table#nodes tbody') !== window.__mark", timeout=60_000)
            took = time.perf_counter() - t0
            out[what] = took
            return took

        until_drawn(lambda: page.get_by_role("button", name="condition").click(),
                    "sort_all_rows_s")
        until_drawn(lambda: page.fill("input[type=search]", "gpu_count"), "filter_s")
        until_drawn(lambda: page.fill("input[type=search]", ""), "clear_filter_s")
        until_drawn(lambda: page.get_by_role("button", name="next ›").click(), "next_page_s")
        heap = page.evaluate("performance.memory ? performance.memory.usedJSHeapSize : 0")
        out["js_heap_mib"] = round(heap / 2**20, 1)
        b.close()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=10_000)
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--no-browser", action="store_true")
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    report: dict = {"nodes": args.nodes}
    with tempfile.TemporaryDirectory(prefix="bench-serve-") as tmp:
        t = time.perf_counter()
        conf = build(Path(tmp), args.nodes)
        report["build_s"] = time.perf_counter() - t
        cfg = config_mod.load(conf)
        reads = []
        for _ in range(3):
            t = time.perf_counter()
            doc = status.collect(cfg, timeout=120)
            reads.append(time.perf_counter() - t)
        assert len(doc["nodes"]) == args.nodes
        assert not any(r["results_problem"] for r in doc["nodes"][:50])
        report["status_read_s"] = statistics.median(reads)
        slurm = Slurm.from_config(cfg)
        calls = []
        for _ in range(3):
            t = time.perf_counter()
            slurm.nodes()
            calls.append(time.perf_counter() - t)
        report["slurm_call_s"] = statistics.median(calls)
        port = free_port()
        env = {**os.environ, "AIRLOCK_CONFIG": str(conf)}
        proc = subprocess.Popen([sys.executable, "-m", "airlock", "serve", "--listen",
                                 f"127.0.0.1:{port}", "--log-level", "warning"], env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 180
            while True:
                try:
                    if requests.get(url + "/healthz", timeout=5).status_code == 200:
                        break
                except requests.ConnectionError:
                    pass
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise SystemExit("airlock serve did not come up: "
                                     + proc.stderr.read().decode()[-2000:])
                time.sleep(0.2)
            s = requests.Session()
            plain = {"Accept-Encoding": "identity"}
            report["healthz"] = timed(s, url + "/healthz", args.repeat, headers=plain)
            report["nodes_plain"] = timed(s, url + "/api/v1/nodes", args.repeat, headers=plain)
            report["nodes_gzip"] = timed(s, url + "/api/v1/nodes", args.repeat,
                                         headers={"Accept-Encoding": "gzip"})
            report["nodes_failed"] = timed(s, url + "/api/v1/nodes?state=failed", args.repeat,
                                           headers=plain)
            report["node_page"] = timed(s, url + "/api/v1/nodes/gpu00042", args.repeat,
                                        headers=plain)
            if not args.no_browser and os.access(CHROMIUM, os.X_OK):
                report["console"] = browser(url, args.nodes)
        finally:
            proc.terminate()
            proc.wait(30)
    ms = lambda s: f"{s * 1000:7.1f} ms"  # noqa: E731
    print(f"airlock serve, {args.nodes} nodes of recorded status (python bench/bench_serve.py)")
    print(f"  background status read (status.collect)   {ms(report['status_read_s'])}  "
          f"(of which the fake controller's scontrol call {ms(report['slurm_call_s'])})")
    for key, label in (("healthz", "GET /healthz (floor)"),
                       ("nodes_plain", "GET /api/v1/nodes"),
                       ("nodes_gzip", "GET /api/v1/nodes, gzip"),
                       ("nodes_failed", "GET /api/v1/nodes?state=failed"),
                       ("node_page", "GET /api/v1/nodes/gpu00042")):
        r = report[key]
        print(f"  {label:<40} median {ms(r['median_s'])}  p90 {ms(r['p90_s'])}  "
              f"{r['bytes'] / 1024:8.0f} KiB")
    goal = report["nodes_plain"]["p90_s"]
    print(f"  goal GET /api/v1/nodes <= {GOAL_NODES_S:g} s: p90 {goal:.3f} s "
          f"({'met' if goal <= GOAL_NODES_S else 'NOT met'}); "
          f"{goal / report['healthz']['median_s']:.0f}x /healthz")
    if "console" in report:
        c = report["console"]
        print(f"  console: table on screen {ms(c['load_to_table_s'])} after navigation "
              f"({c['rows_in_dom']} rows in the DOM, paged)")
        print(f"           sort all rows {ms(c['sort_all_rows_s'])}, filter {ms(c['filter_s'])},"
              f" clear {ms(c['clear_filter_s'])}, next page {ms(c['next_page_s'])}, "
              f"JS heap {c['js_heap_mib']} MiB")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
