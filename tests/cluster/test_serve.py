"""`airlock serve` against a real Slurm cluster, through real HTTP and a real browser.

One cluster for the module (per Slurm variant), four nodes with a story each:
  node1  healthy
  node2  recovered: its registration fails (a pending row remap on gpu3), the recovery service
         reboots it (the reboot applies the remap), it passes and is resumed
  node3  failed: a GPU lost for good (gpu_count), left for a person by the recovery policy
  node4  an own error: its HealthCheckProgram crashes on an unproven boot (FAIL healthcheck)
Then `airlock serve` runs as a process of its own, as on a controller, and the tests read it,
refuse bad input (and see that nothing changed in Slurm), start on-demand checks, and drive
the console in Debian's Chromium (docs/console.md's screenshots come from this run:
AIRLOCK_SCREENSHOTS=docs/img).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import requests

from airlock.dev.cluster import free_port, healthy_gpus
from airlock.dev.demo import fast_recovery
from airlock.serve import schema
from tests.cluster.conftest import running_cluster
from tests.cluster.recovery_db import case_state

pytestmark = pytest.mark.cluster

NODES = ["node1", "node2", "node3", "node4"]
TOKEN = "check-token-0123456789abcdef0123456789abcdef"
# A pending row remap is rebooted; everything else is left to a person, so that node3 stays
# failed for the whole module (the shipped policy would reboot and replace it).
POLICY = """version = 1
[[class]]
name = "row-remap-pending"
checks = ["*"]
detail = '(?i)row.?remap\\S*\\s+pending'
ladder = ["reboot"]

[[class]]
name = "left-for-a-person"
checks = ["*"]
detail = ''
ladder = []
"""
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--headless", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]


class Lab:
    def __init__(self, cluster, url: str, db: Path, tmp: Path, log: Path):
        self.cluster, self.url, self.db, self.tmp, self.log = cluster, url, db, tmp, log
        self._openapi = None

    def get(self, path: str, **kw) -> requests.Response:
        return requests.get(self.url + path, timeout=30, **kw)

    def post(self, path: str, token: str | None = TOKEN, **kw) -> requests.Response:
        headers = dict(kw.pop("headers", {}))
        if token:
            headers["Authorization"] = f"Bearer {token}"
        return requests.post(self.url + path, headers=headers, timeout=60, **kw)

    @property
    def openapi(self) -> dict:
        if self._openapi is None:
            self._openapi = self.get("/api/v1/openapi.json").json()
        return self._openapi

    def valid(self, doc: dict, name: str) -> dict:
        errors = sorted(schema.validator(self.openapi, name).iter_errors(doc), key=str)
        assert not errors, f"{name}: {errors[0]}"
        return doc

    def slurm_view(self) -> dict:
        """What bad requests must leave alone: every node's state and reason, reservations,
        jobs."""
        nodes = {n.name: (n.state_text, n.reason) for n in self.cluster.slurm.nodes()}
        return {"nodes": nodes,
                "reservations": self.cluster.run(["scontrol", "show", "reservation"]),
                "jobs": self.cluster.run(["squeue", "-h", "-o", "%i %T"])}

    def wait_check(self, check_id: str, timeout: float = 240) -> dict:
        return self.cluster.wait(
            lambda: (d := self.get(f"/api/v1/checks/{check_id}").json())["state"] != "running"
            and d, timeout, f"on-demand check {check_id}")


def _verdicts_in(c) -> bool:
    nodes = {n.name: n for n in c.slurm.nodes()}
    return (not nodes["node1"].drained and nodes["node1"].responding
            and not nodes["node1"].reason_in_force
            and nodes["node2"].reason_in_force.startswith("airlock: FAIL row_remap")
            and nodes["node3"].reason_in_force.startswith("airlock: FAIL gpu_count")
            and nodes["node4"].reason_in_force.startswith("airlock: FAIL healthcheck"))


def _recovered(c, db) -> bool:
    n = c.node("node2")
    return case_state(db, "node2") == "healthy" and not n.drained \
        and not n.reason_in_force and n.state == "IDLE"


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="module")
def lab(slurm_variant, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("serve")
    (tmp / "policy.toml").write_text(POLICY)
    token = tmp / "check-token"
    token.write_text(TOKEN + "\n")
    token.chmod(0o600)
    db = tmp / "recovery.db"
    airlock = {
        "registration": {"level": "quick"},
        "recovery": fast_recovery(db, policy=str(tmp / "policy.toml"), refail_window=3600.0),
        "burnin": {"cpu_size": 64, "cpu_iterations": 2},
        "ondemand": {"poll_interval": 0.5, "group_timeout": 60},
        "serve": {"check_token_file": str(token), "refresh": 1.0},
    }

    def prepare(c):
        remap = healthy_gpus()
        remap[3]["remap_pending"] = True
        c.set_node_sim("node2", gpus=remap)
        c.set_node_sim("node3", gpus=healthy_gpus(7))
        c.set_node_sim("node4", faults={"hook_crash": "healthcheck"})

    with running_cluster(slurm_variant, nodes=NODES, health_interval=3600, airlock=airlock,
                         partitions={"gpu": ["node1", "node2", "node3"]},
                         features={"node1": ["gpu", "nvl"], "node2": ["gpu", "nvl"]},
                         prepare=prepare) as c:
        c.wait(lambda: _verdicts_in(c), 120, "registration verdicts")
        # The reboot applies the pending remap (as a GPU reset does): node2's next boot passes.
        c.set_node_sim("node2", gpus=healthy_gpus())
        with open(tmp / "recover.log", "wb") as out:
            recover = subprocess.Popen([sys.executable, "-m", "airlock", "recover",
                                        "--interval", "0.5"], env=c.env(), stdout=out,
                                       stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
            try:
                c.wait(lambda: _recovered(c, db), 150, "node2 rebooted, re-checked, resumed")
                c.wait(lambda: case_state(db, "node3") == "manual", 30, "node3 left for a person")
            finally:
                _stop(recover)
        port = free_port()
        log = tmp / "serve.log"
        with open(log, "wb") as out:
            serve = subprocess.Popen([sys.executable, "-m", "airlock", "serve", "--listen",
                                      f"127.0.0.1:{port}"], env=c.env(), stdout=out,
                                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
            url = f"http://127.0.0.1:{port}"
            try:
                c.wait(lambda: requests.get(url + "/healthz", timeout=5).status_code == 200,
                       60, "airlock serve answering")
                yield Lab(c, url, db, tmp, log)
            finally:
                _stop(serve)
                # uvicorn ends a clean shutdown by re-raising the SIGTERM it handled
                assert serve.returncode in (0, -signal.SIGTERM), log.read_text()[-3000:]
                assert "Traceback" not in log.read_text()


# --- reading -------------------------------------------------------------------------------------
def test_nodes_list_is_status_with_conditions_and_filters(lab):
    res = lab.get("/api/v1/nodes", headers={"Accept-Encoding": "gzip"})
    assert res.status_code == 200 and res.headers["content-encoding"] == "gzip"
    doc = lab.valid(res.json(), "StatusDocument")
    rows = {r["node"]: r for r in doc["nodes"]}
    assert set(rows) == set(NODES)

    def agrees() -> bool:
        # The list is the last read ([serve] refresh 1 s): a node passing through a transient
        # state (COMPLETING after a check's job) may differ from scontrol for a moment.
        listed = {r["node"]: r for r in lab.get("/api/v1/nodes").json()["nodes"]}
        real = {n.name: n for n in lab.cluster.slurm.nodes()}
        return all(r["slurm_state"] == real[n].state_text and r["reason"] == real[n].reason
                   for n, r in listed.items())

    lab.cluster.wait(agrees, 30, "the node list agreeing with scontrol")
    assert rows["node1"]["condition"] == "healthy"
    assert rows["node2"]["condition"] == "healthy" and rows["node2"]["recovery"] == "healthy"
    assert rows["node3"]["condition"] == "failed" and rows["node3"]["failed_check"] == "gpu_count"
    assert rows["node3"]["recovery"] == "manual"
    # Airlock's own trouble is its own state: not a pass, not the node's failure.
    n4 = rows["node4"]
    assert n4["condition"] == "error" and n4["airlock"] == "own-error"
    assert "own error (healthcheck)" in n4["message"] and "needs an operator" in n4["message"]
    assert doc["conditions"]["error"] == 1 and doc["conditions"]["failed"] == 1
    assert rows["node1"]["partitions"] == ["main", "gpu"] and "nvl" in rows["node1"]["features"]
    # filters, with the counts over what is listed
    part = lab.valid(lab.get("/api/v1/nodes?partition=gpu").json(), "StatusDocument")
    assert [r["node"] for r in part["nodes"]] == ["node1", "node2", "node3"]
    feat = lab.get("/api/v1/nodes", params={"feature": "nvl", "state": "healthy"}).json()
    assert [r["node"] for r in feat["nodes"]] == ["node1", "node2"]
    bad = lab.get("/api/v1/nodes", params={"state": "failed,error"}).json()
    assert [r["node"] for r in bad["nodes"]] == ["node3", "node4"]
    assert bad["summary"]["failed"] == 1 and bad["summary"]["own-error"] == 1
    assert bad["conditions"]["failed"] == 1 and bad["conditions"]["error"] == 1
    # `airlock status --json` is the same document (one code path)
    out = subprocess.run([sys.executable, "-m", "airlock", "status", "--json"],
                         env=lab.cluster.env(), capture_output=True, text=True, timeout=60)
    cli = {r["node"]: r for r in json.loads(out.stdout)["nodes"]}
    for name in NODES:
        for key in ("condition", "message", "airlock", "failed_check", "recovery"):
            assert cli[name][key] == rows[name][key], (name, key)


def test_recovered_node_timeline_tells_its_story_in_order(lab):
    doc = lab.valid(lab.get("/api/v1/nodes/node2").json(), "NodeDetail")
    steps = [(e["kind"], e.get("action") or e.get("verdict") or "") for e in doc["timeline"]]
    want = [("registration", ""), ("isolated", ""), ("check", "fail"), ("drain", ""),
            ("recovery", "detected"), ("recovery", "request"), ("recovery", "issued"),
            ("check", "pass"), ("resume", ""), ("recovery", "healthy")]
    it = iter(steps)
    assert all(s in it for s in want), steps  # in this order
    # The new boot's registration starts as slurmd starts, before the pass; the recovery
    # service sees the new boot at its next poll, which may come after the (quick) pass.
    issued, passed = steps.index(("recovery", "issued")), steps.index(("check", "pass"))
    assert ("registration", "") in steps[issued + 1:passed], steps
    assert ("recovery", "booted") in steps[issued + 1:steps.index(("recovery", "healthy"))]
    times = [e["at"] for e in doc["timeline"]]
    assert times == sorted(times)
    fail = next(e for e in doc["timeline"] if e["kind"] == "check")
    assert fail["failed_check"] == "row_remap" and "row remap pending" in fail["detail"]
    assert any(c["check"] == "row_remap" and c["verdict"] == "fail" for c in fail["checks"])
    drain = next(e for e in doc["timeline"] if e["kind"] == "drain")
    assert drain["reason"].startswith("airlock: FAIL row_remap gpu3 row remap pending")
    request = next(e for e in doc["timeline"] if e.get("action") == "request")
    assert request["recovery_action"] == "reboot"
    assert [r["trigger"] for r in doc["runs"]] == ["boot", "new"]  # newest first
    # paged: one run per page, each page's timeline holds that run
    first = lab.get("/api/v1/nodes/node2?runs=1").json()
    assert first["runs_total"] == 2 and first["next_before"] == first["runs"][0]["run_id"]
    older = lab.get("/api/v1/nodes/node2", params={"runs": 1,
                                                    "before": first["next_before"]}).json()
    assert older["next_before"] is None and older["runs"][0]["trigger"] == "new"
    kinds = [e["kind"] for e in older["timeline"]]
    assert kinds[:4] == ["registration", "isolated", "check", "drain"]
    assert "resume" not in kinds and "resume" in [e["kind"] for e in first["timeline"]]


def test_failed_and_own_error_nodes_and_a_run_by_id(lab):
    n3 = lab.valid(lab.get("/api/v1/nodes/node3").json(), "NodeDetail")
    assert n3["node"]["condition"] == "failed"
    kinds = [(e["kind"], e.get("action", "")) for e in n3["timeline"]]
    assert ("drain", "") in kinds and ("recovery", "manual") in kinds
    run_id = n3["runs"][0]["run_id"]
    run = lab.valid(lab.get(f"/api/v1/runs/{run_id}").json(), "Run")
    assert run["node"] == "node3" and run["verdict"] == "fail"
    gpu = next(c for c in run["checks"] if c["check"] == "gpu_count")
    assert gpu["verdict"] == "fail" and gpu["figures"]["found"] == 7
    n4 = lab.get("/api/v1/nodes/node4").json()
    assert n4["node"]["condition"] == "error" and n4["node"]["errors"]["healthcheck"]
    recovery = lab.valid(lab.get("/api/v1/recovery").json(), "Recovery")
    assert recovery["available"] and recovery["breaker"]["open"] is False
    cases = {c["node"]: c for c in recovery["cases"]}
    assert cases["node2"]["state"] == "healthy" and cases["node3"]["state"] == "manual"
    assert "node4" not in cases  # an own error is never a recovery case
    assert [(a["node"], a["kind"], a["status"]) for a in recovery["actions"]] == \
        [("node2", "reboot", "done")]
    metrics = lab.get("/metrics").text
    assert 'airlock_node_own_error{node="node4"} 1.0' in metrics
    assert 'airlock_node_own_error{node="node3"} 0.0' in metrics
    assert 'airlock_nodes{state="failed"} 1.0' in metrics
    assert 'airlock_nodes{state="own-error"} 1.0' in metrics
    assert 'airlock_condition_nodes{condition="error"} 1.0' in metrics
    assert "airlock_recovery_breaker_open 0.0" in metrics
    health = lab.get("/healthz").json()
    assert health["ok"] and health["status_error"] == ""


# --- bad input -----------------------------------------------------------------------------------
def test_bad_requests_get_one_line_4xx_and_change_nothing(lab):
    before = lab.slurm_view()
    marker = lab.tmp / "pwned"
    cases = [
        (lab.get("/api/v1/nodes/node9"), 404, "node9"),
        (lab.get("/api/v1/nodes/node1;id"), 400, "not a node name"),
        (lab.get("/api/v1/runs/../../etc/passwd"), 404, "not found"),
        (lab.get("/api/v1/runs/20990101T000000-1-node1"), 404, "run 20990101T000000-1-node1"),
        (lab.get("/api/v1/runs/nonsense"), 400, "not a run id"),
        (lab.get("/api/v1/nodes?state=bogus"), 400, "unknown state 'bogus'"),
        (lab.post("/api/v1/checks", token=None, json={"nodes": "node1"}), 401, "check token"),
        (lab.post("/api/v1/checks", token="wrong-token-wrong-token", json={"nodes": "node1"}),
         401, "check token"),
        (lab.post("/api/v1/checks", json={"nodes": f"node1,$(touch {marker})"}), 404,
         "not found"),
        (lab.post("/api/v1/checks", json={"nodes": "node[1-"}), 400, "bad node list"),
        (lab.post("/api/v1/checks", json={"nodes": "node1\n--partition"}), 422,
         "nodes: must be one line of printable text"),
        (lab.post("/api/v1/checks", json={"partition": "nosuch"}), 404,
         "no nodes match partition nosuch"),
        (lab.post("/api/v1/checks", json={"nodes": "node1", "level": "quick"}), 422, "level"),
        (lab.post("/api/v1/checks", json={"nodes": "node1", "only": ["rm -rf"]}), 422,
         "unknown check"),
        (lab.post("/api/v1/checks", json={"nodes": "node1", "extra": 1}), 422, "extra"),
        (lab.post("/api/v1/checks", json={}), 422, "name the targets"),
        (lab.post("/api/v1/checks", data="{not json", headers={
            "Content-Type": "application/json"}), 422, "not valid JSON"),
        (lab.post("/api/v1/checks", data=json.dumps({"nodes": "n" * 20000}), headers={
            "Content-Type": "application/json"}), 413, "over the limit"),
        (lab.get("/api/v1/nodes", headers={"Host": "evil.example"}), 421, "not served here"),
    ]
    for res, code, words in cases:
        assert res.status_code == code, (res.request.url, res.status_code, res.text)
        body = res.json()
        assert list(body) == ["error"] and words in body["error"], (res.request.url, body)
        assert "\n" not in body["error"] and "Traceback" not in body["error"]
    assert not marker.exists()
    assert lab.get("/api/v1/checks").json() == {"checks": [], "running": None}
    assert lab.slurm_view() == before
    assert "Traceback" not in lab.log.read_text()


# --- on-demand checks ----------------------------------------------------------------------------
def test_check_conflict_busy_target_and_the_cluster_wide_lock(lab):
    c = lab.cluster
    job = c.sbatch("sleep 60", "-w", "node1")
    c.wait(lambda: c.job(job)["JobState"] == "RUNNING", 30, "job on node1")
    try:
        first = lab.post("/api/v1/checks", json={"nodes": "node1", "only": ["gpu_count"],
                                                 "wait_jobs": 0.2})
        assert first.status_code == 202, first.text
        record = lab.valid(first.json(), "Check")
        assert record["state"] == "running" and record["targets"] == ["node1"]
        assert first.headers["location"] == f"/api/v1/checks/{record['id']}"
        second = lab.post("/api/v1/checks", json={"nodes": "node2"})
        assert second.status_code == 409 and record["id"] in second.json()["error"]
        done = lab.valid(lab.wait_check(record["id"]), "Check")
        assert done["state"] == "done" and done["exit_code"] == 3
        (r1,) = done["result"]["nodes"]
        assert r1["status"] == "skipped" and "busy" in r1["why"]
        assert any("waiting up to" in p["line"] for p in done["progress"])
        assert c.job(job)["JobState"] == "RUNNING"  # its job untouched
    finally:
        c.run(["scancel", str(job)])
    # Another on-demand check elsewhere holds the reservation: this one is refused in its words.
    c.run(["scontrol", "create", "reservation", "ReservationName=airlock_ondemand",
           "Nodes=node4", "StartTime=now", "Duration=5", "Users=root", "Flags=MAINT,IGNORE_JOBS"])
    try:
        res = lab.post("/api/v1/checks", json={"nodes": "node1", "only": ["gpu_count"]})
        assert res.status_code == 202, res.text
        refused = lab.wait_check(res.json()["id"], 120)
        assert refused["state"] == "refused" and refused["exit_code"] == 4
        assert "another on-demand check is running" in refused["error"]
    finally:
        c.run(["scontrol", "delete", "ReservationName=airlock_ondemand"])
    assert not c.node("node1").drained


# --- the console in a real browser ---------------------------------------------------------------
@pytest.fixture
def browser():
    from playwright.sync_api import sync_playwright

    if not os.access(CHROMIUM, os.X_OK):
        pytest.fail(f"the console test needs Debian's chromium at {CHROMIUM} "
                    "(bash scripts/setup.sh installs it)")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            b.close()


def test_console_in_chromium(lab, browser, tmp_path):
    shots = Path(os.environ.get("AIRLOCK_SCREENSHOTS") or tmp_path)
    shots.mkdir(parents=True, exist_ok=True)
    page = browser.new_page(viewport={"width": 1360, "height": 820})
    problems: list[str] = []
    page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
    page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
    page.set_default_timeout(30_000)

    # The node table: the failed node and its reason in Slurm's words.
    page.goto(lab.url + "/")
    row = page.locator('table#nodes tr[data-node="node3"]')
    try:
        row.wait_for()
    except Exception as exc:  # say why the page never drew, not only that it did not
        pytest.fail(f"the console drew no node table ({exc}); the page said: {problems}")
    assert row.locator(".badge").inner_text() == "failed"
    reason = lab.cluster.node("node3").reason
    assert row.locator("td.reason").inner_text() == reason
    own = page.locator('table#nodes tr[data-node="node4"] .badge').inner_text()
    assert own == "own error / needs operator"
    page.screenshot(path=str(shots / "console-nodes.png"))
    # bad nodes first by default: own errors, then failures; then filtering
    first = page.locator("table#nodes tbody tr").first.get_attribute("data-node")
    assert first == "node4"
    page.fill("input[type=search]", "gpu_count")
    assert page.locator("table#nodes tbody tr").count() == 1
    page.fill("input[type=search]", "")

    # node3's timeline
    row.get_by_role("link", name="node3").click()
    page.locator("#timeline").wait_for()
    items = page.locator("#timeline > li")
    kinds = [items.nth(i).get_attribute("data-kind") for i in range(items.count())]
    assert kinds[:4] == ["registration", "isolated", "check", "drain"], kinds
    assert reason in page.locator("#timeline").inner_text()

    # node2's story, recovery included (the screenshot for the docs)
    page.goto(lab.url + "/#/node/node2")
    page.locator("#timeline li[data-kind=resume]").wait_for()
    page.locator("#timeline li[data-kind=check] details summary").first.click()
    page.screenshot(path=str(shots / "console-node.png"), full_page=True)

    page.goto(lab.url + "/#/recovery")
    page.locator("#cases").wait_for()
    assert "Circuit breaker closed" in page.locator("#breaker").inner_text()
    page.screenshot(path=str(shots / "console-recovery.png"), full_page=True)

    # An on-demand check from the form, followed to its verdict.
    page.goto(lab.url + "/#/checks")
    page.select_option("#check-kind", "nodes")
    page.fill("#check-target", "node[1-2]")
    page.select_option("#check-level", "standard")
    page.fill("#check-wait", "1")
    page.fill("#check-only", "gpu_count, burnin, allreduce")
    page.fill("#check-token", TOKEN)
    page.click("#check-submit")
    page.wait_for_url("**/#/checks/*")
    page.locator("#check-verdict").wait_for(timeout=300_000)
    assert page.locator("#check-verdict").inner_text() == "Verdict: all passed", \
        json.dumps((lab.get("/api/v1/checks").json()["checks"][0].get("result") or {}).get(
            "nodes"))[:3000]
    result = page.locator("#check-result tbody tr")
    assert result.count() == 2
    for i in range(2):
        assert result.nth(i).locator(".badge").inner_text() == "pass"
    page.screenshot(path=str(shots / "console-check.png"), full_page=True)

    # The fleet view now holds both nodes' burn-in and all-reduce.
    page.goto(lab.url + "/#/fleet")
    page.locator("svg.chart").first.wait_for()
    bars = page.locator("svg.chart rect[data-node]")
    assert {bars.nth(i).get_attribute("data-node") for i in range(bars.count())} == \
        {"node1", "node2"}
    page.screenshot(path=str(shots / "console-fleet.png"), full_page=True)
    assert not problems, problems
