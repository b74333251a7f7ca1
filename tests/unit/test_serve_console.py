"""The console in Debian's Chromium when Slurm is away (issue 26): the real server (uvicorn as
`airlock serve` runs it) over the recorded cluster of tests/unit/test_serve.py, whose fake
controller is made unreachable and healed. tests/cluster/test_serve.py drives the console over
real Slurm daemons."""

from __future__ import annotations

import os

import pytest

from tests.unit.test_serve import client, recorded  # noqa: F401 (a fixture)
from tests.unit.test_serve_connections import serving

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--headless", "--disable-gpu", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync"]
WAIT_MS = 30_000  # any one step on a loaded machine (never a measurement)


@pytest.fixture
def page():
    from playwright.sync_api import sync_playwright

    if not os.access(CHROMIUM, os.X_OK):
        pytest.fail(f"the console test needs Debian's chromium at {CHROMIUM} "
                    "(bash scripts/setup.sh installs it)")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield browser.new_page()
        finally:
            browser.close()


def test_views_that_failed_to_load_come_back_and_node_pages_answer_without_slurm(
        recorded, tmp_path, page):  # noqa: F811
    recorded.slurm.unreachable()  # from the start: no status has ever been read
    app = client(recorded, tmp_path, refresh=0.5).app
    from playwright.sync_api import expect

    with serving(app, app.state.service.cfg) as port:
        base = f"http://127.0.0.1:{port}/"
        page.goto(base)
        error = page.wait_for_selector("#load-error", timeout=WAIT_MS)
        assert "Trying again in" in error.text_content()
        assert "not loaded yet" in error.text_content()
        recorded.slurm.heal()
        # the console opened before the first status shows the table once Slurm is back
        page.wait_for_selector("tr[data-node='node2']", timeout=WAIT_MS)
        # Slurm away again: a node page still answers, from disk, marked stale
        recorded.slurm.unreachable()
        page.goto(base + "#/node/node2")
        stale = page.wait_for_selector("#slurm-stale", timeout=WAIT_MS)
        assert "Slurm did not answer" in stale.text_content()
        assert page.locator("#timeline li").count() >= 4
        assert page.locator("#timeline details summary").first.text_content() == "1 check"
        # the header keeps refreshing on the checks pages: a node failing meanwhile is counted
        recorded.slurm.heal()
        page.goto(base + "#/checks")
        page.wait_for_selector("#check-list", timeout=WAIT_MS)
        assert "1 failed" in page.text_content("#summary")
        recorded.slurm.set("node1", state="IDLE", flags=["DRAIN"],
                           reason="airlock: FAIL gpu_count 7 GPUs, expected 8")
        expect(page.locator("#summary")).to_contain_text("2 failed", timeout=WAIT_MS)


def fleet_of(r, count: int, slow: dict[str, float]) -> None:
    """count nodes in service with a passing burn-in of 0.012 TFLOPS (fp32) each, but those in
    slow, and node7 drained for a failed check."""
    from tests.unit.recorded import check, run_doc

    names = [f"gpu{i:05d}" for i in range(count)]
    r.add_nodes({n: {} for n in names})
    r.slurm.set(names[7], flags=["DRAIN"], reason="airlock: FAIL gpu_count 7 GPUs, expected 8")
    for i, n in enumerate(names):
        tf = slow.get(n, 0.012)
        r.add_run(run_doc(n, seq=i, checks=[
            check("burnin", min_tflops=tf, median_tflops={"fp32": tf}, profile="cpu")]))


def test_bad_nodes_first_and_a_fleet_view_readable_at_a_thousand_nodes(tmp_path, page):
    from playwright.sync_api import expect

    from airlock.config import loader as config_mod
    from airlock.serve.app import build
    from tests.unit.recorded import Recorded

    r = Recorded(tmp_path)
    slow = {"gpu00100": 0.006, "gpu00500": 0.009, "gpu00900": 0.00005}
    fleet_of(r, 1000, slow)
    cfg = config_mod.load(r.write(serve={"refresh": 60.0}))
    with serving(build(cfg), cfg) as port:
        page.set_viewport_size({"width": 1360, "height": 900})
        page.goto(f"http://127.0.0.1:{port}/")
        first = page.locator("table#nodes tbody tr").first
        expect(first).to_have_attribute("data-node", "gpu00007", timeout=WAIT_MS)
        page.goto(f"http://127.0.0.1:{port}/#/fleet")
        chart = page.locator("svg.histogram").first
        chart.wait_for(timeout=WAIT_MS)
        assert page.locator("svg.chart rect[data-node]").count() == 0  # not 1,000 slivers
        box = chart.bounding_box()
        assert box["width"] >= 700  # drawn at its own size: 11 px text stays 11 px
        counts = [int(c) for c in page.locator("svg.histogram rect").evaluate_all(
            "rects => rects.map(r => r.getAttribute('data-count'))")]
        assert sum(counts) == 1000
        listed = page.locator(".straggler-list tbody tr")
        assert [listed.nth(i).get_attribute("data-node") for i in range(listed.count())] == [
            "gpu00900", "gpu00100", "gpu00500"]  # slowest first: below the floor, then below
        assert "-50" in listed.nth(1).inner_text()  # 0.006 is 50 % below the median
