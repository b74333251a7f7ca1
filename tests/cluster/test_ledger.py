"""The ledger read back from a real cluster's short history, through the CLI, the API and the
console in a real browser (docs/ledger.md).

Three nodes, each with a story:
  node1  a join: registers and passes
  node2  a fault: its registration fails (a pending row remap on gpu3, through the NVML
         simulation's fields), the recovery service reboots it (the reboot applies the remap),
         it passes: a *confirmed* failure
  node3  an admin resume: its registration fails (a GPU lost), the policy leaves it for a
         person, who resumes it without a reboot: an *overturned* failure
The dev cluster has no slurmdbd: the ledger says so and uses the configured job inputs.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys

import pytest
import requests

from airlock.dev.cluster import free_port, healthy_gpus
from airlock.dev.demo import fast_recovery
from tests.cluster.conftest import running_cluster
from tests.cluster.recovery_db import case_state
from tests.cluster.test_serve import CHROMIUM_ARGS, POLICY, browser  # noqa: F401 - a fixture

pytestmark = [pytest.mark.cluster, pytest.mark.slurm_variants("22.05")]
NODES = ["node1", "node2", "node3"]


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _ledger(c, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "airlock", "ledger", *args], env=c.env(),
                          capture_output=True, text=True, timeout=60)


@pytest.fixture(scope="module")
def story(slurm_variant, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ledger")
    (tmp / "policy.toml").write_text(POLICY)
    db = tmp / "recovery.db"
    airlock = {"registration": {"level": "quick"},
               "recovery": fast_recovery(db, policy=str(tmp / "policy.toml"))}

    def prepare(c):
        remap = healthy_gpus()
        remap[3]["remap_pending"] = True
        c.set_node_sim("node2", gpus=remap)
        c.set_node_sim("node3", gpus=healthy_gpus(7))

    with running_cluster(slurm_variant, nodes=NODES, health_interval=3600, airlock=airlock,
                         prepare=prepare) as c:
        c.wait(lambda: c.node("node2").reason_in_force.startswith("airlock: FAIL row_remap")
               and c.node("node3").reason_in_force.startswith("airlock: FAIL gpu_count")
               and not c.node("node1").drained, 120, "registration verdicts")
        c.set_node_sim("node2", gpus=healthy_gpus())  # the reboot applies the pending remap
        with open(tmp / "recover.log", "wb") as out:
            recover = subprocess.Popen([sys.executable, "-m", "airlock", "recover",
                                        "--interval", "0.5"], env=c.env(), stdout=out,
                                       stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
            try:
                c.wait(lambda: case_state(db, "node2") == "healthy"
                       and not c.node("node2").drained, 150, "node2 rebooted and resumed")
                c.wait(lambda: case_state(db, "node3") == "manual", 30, "node3 left for a person")
                c.run(["scontrol", "update", "nodename=node3", "state=resume"])  # the admin
                c.wait(lambda: case_state(db, "node3") == "released", 30,
                       "the recovery service saw the person's resume")
            finally:
                _stop(recover)
        yield c


def _check_doc(doc: dict) -> None:
    by_check = doc["caught"]["by_check"]
    assert by_check["row_remap"]["confirmed"] == 1, by_check
    assert by_check["gpu_count"]["overturned"] == 1, by_check
    assert doc["caught"]["outcomes"] == {"confirmed": 1, "recurred": 0, "overturned": 1,
                                         "open": 0}
    how = {e["check"]: e["how"] for e in doc["caught"]["episodes"]}
    assert how["row_remap"] == "rebooted; the fault did not return"
    assert how["gpu_count"] == "a person resumed the node without a reboot or replacement"
    assert doc["sources"]["jobs"].startswith("no slurmdbd")
    reg = [r for r in doc["cost"]["in_checks"] if r["stage"] == "registration"]
    assert [r["level"] for r in reg] == ["quick"] and reg[0]["runs"] >= 4
    assert doc["cost"]["boot_to_service"]["runs"] >= 2
    low, high = doc["value"]["balance_gpu_hours_per_month"]
    assert low < high
    assert doc["advice"]["advice"] == "quick"


def test_ledger_through_cli_api_and_console(story, browser, tmp_path):  # noqa: F811
    c = story
    out = _ledger(c, "--since", "1h", "--json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    _check_doc(doc)
    text = _ledger(c, "--since", "1h")
    assert "CAUGHT  2 failures" in text.stdout and "ADVICE  quick" in text.stdout
    bad = _ledger(c, "--since", "3x")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "--since" in bad.stderr

    port = free_port()
    log = tmp_path / "serve.log"
    with open(log, "wb") as fh:
        serve = subprocess.Popen([sys.executable, "-m", "airlock", "serve", "--listen",
                                  f"127.0.0.1:{port}"], env=c.env(), stdout=fh,
                                 stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        c.wait(lambda: requests.get(url + "/healthz", timeout=5).status_code == 200, 60,
               "airlock serve answering")
        api = requests.get(url + "/api/v1/ledger", params={"since": "1h"}, timeout=60)
        assert api.status_code == 200, api.text
        _check_doc(api.json())
        metrics = requests.get(url + "/api/v1/ledger/metrics", params={"since": "1h"}, timeout=60)
        assert 'airlock_ledger_failures{check="row_remap",outcome="confirmed"} 1.0' \
            in metrics.text
        bad = requests.get(url + "/api/v1/ledger", params={"since": "3x"}, timeout=30)
        assert bad.status_code == 422 and "since" in bad.json()["error"], bad.text

        page = browser.new_page(viewport={"width": 1200, "height": 900})
        problems: list[str] = []
        page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
        page.set_default_timeout(30_000)
        page.goto(url + "/")
        page.get_by_role("link", name="Ledger").click()
        page.locator("#ledger-caught").wait_for()
        caught = page.locator("#ledger-caught").inner_text()
        assert "2 failures: 1 confirmed, 0 recurred, 1 overturned, 0 open" in caught, problems
        chart = page.locator("#chart-caught")
        assert chart.locator('rect[data-name="confirmed"][data-value="1"]').count() == 1
        assert chart.locator('rect[data-name="overturned"][data-value="1"]').count() == 1
        assert page.locator("#chart-balance rect").count() == 3
        assert page.locator("#ledger-advice").inner_text().startswith("quick:")
        page.screenshot(path=str(tmp_path / "ledger.png"), full_page=True)
        assert not problems, problems
    finally:
        _stop(serve)
    assert "Traceback" not in log.read_text()
