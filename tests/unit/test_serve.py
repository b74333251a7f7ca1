"""`airlock serve` without daemons: the application over a recorded cluster (the fake 22.05
controller of tests/unit/fakeslurm.py, run documents in a shared directory, a recovery database
written by the store itself; tests/unit/recorded.py), through Starlette's test client; the listen
rule, tokens, the Guard, the check runner, the OpenAPI document as committed, the systemd unit,
and the hooks' path free of any of it. tests/cluster/test_serve.py runs the same service
against real Slurm daemons and a real browser."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest

from airlock.admin import render
from airlock.config import loader as config_mod
from airlock.config.sections.serve import ServeSection, parse_listen
from airlock.errors import ConfigError
from airlock.recovery.machine import Case
from airlock.recovery.store import RecoveryStore
from airlock.serve import schema
from airlock.serve.checks import CheckRunner, Conflict, RateLimited
from airlock.serve.security import Guard, Tokens, check_listen, host_of, read_token
from airlock.slurm.client import Node
from airlock.status import collect as status
from tests.unit.procstate import alive
from tests.unit.recorded import Recorded, check, run_doc

with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # starlette's note about httpx's successor
    from fastapi.testclient import TestClient

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
READ = "read-token-0123456789abcdef"
CHECK = "check-token-0123456789abcdef"
NOW = time.time()


def token_file(path: Path, value: str, mode: int = 0o600) -> str:
    path.write_text(value + "\n")
    path.chmod(mode)
    return str(path)


@pytest.fixture
def recorded(tmp_path) -> Recorded:
    """node1 healthy, node2 failed (three runs), node3 an own-error drain, node4 an admin's
    drain, node5 in service with a hook's own error, node6 pending."""
    r = Recorded(tmp_path)
    r.add_node("node1", partitions=("main", "gpu"), features=("gpu", "nvl"))
    r.add_node("node2", state="IDLE+DRAIN", reason="airlock: FAIL gpu_count 7 GPUs, expected 8",
               partitions=("main", "gpu"))
    r.add_node("node3", state="IDLE+DRAIN", reason="airlock: FAIL suite not seen: burnin (no "
                                                    "time)")
    r.add_node("node4", state="IDLE+DRAIN", reason="disk swap", reason_user="admin",
               reason_at=NOW - 30)
    r.add_node("node5")
    r.add_node("node6", state="IDLE+DRAIN", reason="airlock: pending standard check boot")
    burn = check("burnin", min_tflops=0.012, median_tflops={"fp32": 0.012}, profile="cpu")
    r.add_run(run_doc("node1", finished_at=NOW - 500, checks=[check("gpu_count"), burn]))
    for i, verdict in enumerate(("pass", "fail", "fail")):
        bad = check("gpu_count", "fail", "7 GPUs, expected 8", found=7, expected=8)
        r.add_run(run_doc("node2", trigger="new" if i == 0 else "boot", verdict=verdict,
                          finished_at=NOW - 3000 + 1000 * i, seq=i,
                          checks=[bad if verdict == "fail" else check("gpu_count")]),
                  latest=i == 2)
    r.add_run(run_doc("node5", finished_at=NOW - 100))
    os.makedirs(tmp_path / "shared" / "node5", exist_ok=True)
    (tmp_path / "shared" / "node5" / "errors.json").write_text(json.dumps(
        {"prolog": {"message": "fail open: prolog RuntimeError", "at": NOW - 50}}))
    return r


def client(r: Recorded, tmp_path: Path, read: bool = False, check_token: bool = True,
           **serve) -> TestClient:
    extra = {"refresh": 60.0, **serve}
    if read:
        extra["token_file"] = token_file(tmp_path / "read-token", READ)
    if check_token:
        extra["check_token_file"] = token_file(tmp_path / "check-token", CHECK)
    cfg = config_mod.load(r.write(serve=extra))
    from airlock.serve.app import build

    return TestClient(build(cfg), base_url="http://127.0.0.1:9642")


@pytest.fixture
def api(recorded, tmp_path):
    with client(recorded, tmp_path) as c:
        yield c


def valid(c: TestClient, doc, name: str):
    errors = list(schema.validator(c.get("/api/v1/openapi.json").json(), name).iter_errors(doc))
    assert not errors, errors[0]
    return doc


# --- the node list and the conditions --------------------------------------------------------
def test_nodes_are_status_with_conditions(api):
    res = api.get("/api/v1/nodes")
    assert res.status_code == 200 and float(res.headers["x-airlock-status-age"]) >= 0
    doc = valid(api, res.json(), "StatusDocument")
    rows = {r["node"]: r for r in doc["nodes"]}
    assert {n: r["condition"] for n, r in rows.items()} == {
        "node1": "healthy", "node2": "failed", "node3": "error", "node4": "drained-other",
        "node5": "error", "node6": "pending"}
    assert rows["node3"]["airlock"] == "own-error"
    assert "own error (suite)" in rows["node3"]["message"]
    assert rows["node5"]["airlock"] == "healthy"
    assert rows["node5"]["message"].startswith("in service, but Airlock's own prolog failed")
    assert rows["node1"]["profile"] == "cpu" and rows["node1"]["features"] == ["gpu", "nvl"]
    assert doc["conditions"]["error"] == 2 and sum(doc["conditions"].values()) == 6
    gz = api.get("/api/v1/nodes", headers={"Accept-Encoding": "gzip"})
    assert gz.json() == res.json()  # the same snapshot, compressed once


def test_node_filters_and_their_counts(api):
    doc = api.get("/api/v1/nodes", params={"partition": "gpu"}).json()
    assert [r["node"] for r in doc["nodes"]] == ["node1", "node2"]
    assert doc["summary"]["healthy"] == 1 and doc["summary"]["failed"] == 1
    assert [r["node"] for r in api.get("/api/v1/nodes?feature=nvl").json()["nodes"]] == ["node1"]
    both = api.get("/api/v1/nodes", params=[("state", "error"), ("state", "pending")]).json()
    assert [r["node"] for r in both["nodes"]] == ["node3", "node5", "node6"]
    coarse = api.get("/api/v1/nodes?state=quarantined,failed").json()
    assert [r["node"] for r in coarse["nodes"]] == ["node2", "node6"]
    bad = api.get("/api/v1/nodes?state=nope")
    assert bad.status_code == 400 and "unknown state 'nope'" in bad.json()["error"]


def test_condition_never_calls_airlock_trouble_a_pass_or_a_failure():
    def node(state="IDLE", flags=(), reason=""):
        return Node("n", state, frozenset(flags), reason)

    drained = ("DRAIN",)
    assert status.condition(node(flags=drained, reason="airlock: FAIL config x: bad"), None)[0] \
        == "error"
    assert status.condition(node(flags=drained, reason="airlock: FAIL gpu_count 7"), None)[0] \
        == "failed"
    run = {"verdict": "error", "level": "quick", "detail": "not seen: burnin (no time)"}
    cond, msg = status.condition(node(), run)
    assert cond == "error" and "did not see the node: not seen: burnin" in msg
    assert status.condition(node(), {"verdict": "pass"})[0] == "healthy"
    pending = node(flags=drained, reason="airlock: pending standard check boot")
    assert status.condition(pending, None)[0] == "pending"
    running = {"status": "running", "phase": "checking"}
    assert status.condition(pending, None, None, running)[0] == "checking"
    assert status.condition(node(), None, None, {"status": "adopted", "detail": "busy"})[0] \
        == "adopted"
    # a resumed node that kept its old reason (24.11 without accounting) is healthy
    assert status.condition(node(reason="airlock: FAIL gpu_count 7"), {"verdict": "pass"})[0] \
        == "healthy"
    # in service, but no readable result vouches for it: not seen, never healthy
    cond, msg = status.condition(node(), None, problem="shared results: latest.json: not JSON")
    assert cond == "not-seen" and msg.endswith("latest.json: not JSON")


# --- one node, its timeline and its runs ------------------------------------------------------
def test_node_timeline_and_pages(api):
    doc = valid(api, api.get("/api/v1/nodes/node2").json(), "NodeDetail")
    assert doc["runs_total"] == 3 and doc["next_before"] is None
    kinds = [e["kind"] for e in doc["timeline"]]
    assert kinds == ["registration", "isolated", "check", "resume",
                     "registration", "isolated", "check", "drain",
                     "registration", "isolated", "check", "drain"]
    assert [e["at"] for e in doc["timeline"]] == sorted(e["at"] for e in doc["timeline"])
    drain = doc["timeline"][7]
    assert drain["reason"] == "airlock: FAIL gpu_count 7 GPUs, expected 8"
    assert doc["timeline"][6]["checks"][0]["figures"] == {"found": 7, "expected": 8}
    page1 = api.get("/api/v1/nodes/node2?runs=2").json()
    assert len(page1["runs"]) == 2 and page1["next_before"] == page1["runs"][-1]["run_id"]
    page2 = api.get("/api/v1/nodes/node2", params={"runs": 2,
                                                   "before": page1["next_before"]}).json()
    assert [r["trigger"] for r in page2["runs"]] == ["new"] and page2["next_before"] is None
    assert [e["kind"] for e in page2["timeline"]] == ["registration", "isolated", "check",
                                                      "resume"]
    wrong = api.get("/api/v1/nodes/node2", params={"before": page1["runs"][0]["run_id"][:-1]
                                                   + "1"})
    # a run id of another node is a run this node does not have (a schema-valid id: 404)
    assert wrong.status_code == 404 and "no recorded run" in wrong.json()["error"]
    assert api.get("/api/v1/nodes/node2", params={"before": "x"}).status_code == 400
    gone = api.get("/api/v1/nodes/node2", params={"before": "20000101T000000-1-node2"})
    assert gone.status_code == 404 and "no recorded run" in gone.json()["error"]


def test_a_node_page_answers_from_disk_when_slurm_is_away(api, recorded):
    """On-call needs a node's story most when slurmctld does not answer: the page comes from
    the results store and the recovery database, the Slurm fields from the last read, marked
    stale with their age and why."""
    assert api.get("/api/v1/nodes").status_code == 200  # one good read
    recorded.slurm.unreachable()
    res = api.get("/api/v1/nodes/node2")
    assert res.status_code == 200, res.text
    doc = valid(api, res.json(), "NodeDetail")
    assert doc["runs_total"] == 3 and [r["verdict"] for r in doc["runs"]] == [
        "fail", "fail", "pass"]
    assert doc["node"]["slurm_state"] == "IDLE+DRAIN"  # as last read
    stale = doc["slurm_stale"]
    assert stale["age_s"] >= 0 and "Unable to contact slurm controller" in stale["error"]
    assert [e["kind"] for e in doc["timeline"]][-2:] == ["check", "drain"]
    # a node the last read did not list, with Slurm away, is still Slurm's to answer for
    assert api.get("/api/v1/nodes/node99").status_code == 502
    recorded.slurm.heal()
    fresh = api.get("/api/v1/nodes/node2").json()
    assert fresh["slurm_stale"] is None


def test_admin_drain_and_recovery_entries(recorded, tmp_path):
    store = RecoveryStore(str(tmp_path / "recovery.db"))
    case = Case("node2", "rebooted", "default", ("reboot", "replace"), 0, "gpu_count",
                "7 GPUs", NOW - 900, NOW - 800, action="reboot")
    with store.tx() as db:
        store.put_case(db, case, NOW - 800)
        aid, rid = store.add_action(db, "node2", "reboot", "slurm", "", NOW - 1900)
        store.add_event(db, "node2", "detected", "gpu_count 7 GPUs", NOW - 1950)
        store.add_event(db, "node2", "request", f"reboot via slurm request {rid}", NOW - 1900,
                        aid)
        store.add_event(db, "node2", "booted", "new boot X after replace", NOW - 1500)
        store.add_event(db, "node4", "released", "foreign reason 'disk swap': hands off",
                        NOW - 20)
    store.close()
    with client(recorded, tmp_path) as api:
        tl = api.get("/api/v1/nodes/node2").json()["timeline"]
        recov = [e for e in tl if e["kind"] == "recovery"]
        assert [e["action"] for e in recov] == ["detected", "request", "replaced"]
        assert recov[1]["recovery_action"] == "reboot"
        n4 = api.get("/api/v1/nodes/node4").json()["timeline"]
        assert [e["kind"] for e in n4] == ["admin-drain", "admin-drain"]
        assert n4[0]["source"] == "slurm" and "by admin: disk swap" in n4[0]["summary"]
        rec = valid(api, api.get("/api/v1/recovery").json(), "Recovery")
        assert rec["available"] and [c["node"] for c in rec["cases"]] == ["node2"]
        assert rec["cases"][0]["next_action"] == "reboot"
        assert rec["events"][0]["node"] == "node4"  # newest first


def test_refailed_reads_the_state_machines_own_words():
    from airlock.config.sections.recovery import RecoverySection
    from airlock.recovery import machine as m
    from airlock.recovery import policy as pol

    lim = RecoverySection(refail_window=3600)
    fail = "airlock: FAIL gpu_count 7 GPUs"
    obs = m.Obs("n1", fail, True, False, m.format_slurm_time(1000))
    case = m.plan(None, obs, 0, pol.load(), lim).case
    case = case.to(m.REBOOTED, 10, action="reboot")
    again = m.plan(case, obs, 20, pol.load(), lim).case
    assert status.refailed([again]) == [("n1", "gpu_count", "reboot")]
    other = m.plan(case, obs._replace(reason="airlock: FAIL xid 79 fell off"), 20, pol.load(),
                   lim).case
    assert status.refailed([other]) == []  # another check failed: not the same failure


def test_a_run_by_id_and_strangers_documents(api, recorded, tmp_path):
    node2 = api.get("/api/v1/nodes/node2").json()
    run_id = node2["runs"][0]["run_id"]
    run = valid(api, api.get(f"/api/v1/runs/{run_id}").json(), "Run")
    assert run["run_id"] == run_id and run["checks"][0]["figures"]["found"] == 7
    assert api.get("/api/v1/runs/garbage").status_code == 400
    missing = api.get("/api/v1/runs/20000101T000000-1-node1")
    assert missing.status_code == 404 and "run 20000101T000000-1-node1" in \
        missing.json()["error"]
    # a document in node1's folder written for node2 is not node1's run
    forged = run_doc("node2", finished_at=NOW - 10, seq=7)
    forged_id = forged["run_id"].replace("-node2", "-node1")
    (tmp_path / "shared" / "node1" / "results" / f"{forged_id}.json").write_text(
        json.dumps(forged))
    res = api.get(f"/api/v1/runs/{forged_id}")
    assert res.status_code == 404 and "written for node 'node2'" in res.json()["error"]
    # a link planted in a node's results folder is never followed
    (tmp_path / "shared" / "node1" / "results" / "20990101T000000-2-node1.json").symlink_to(
        "/etc/passwd")
    res = api.get("/api/v1/runs/20990101T000000-2-node1")
    assert res.status_code == 404 and "symbolic link" in res.json()["error"]


def test_fleet_view_against_the_fleet_comparison(recorded, tmp_path):
    for i in range(2, 6):
        tf = 0.012 if i != 5 else 0.004
        recorded.add_run(run_doc(f"node{i}", finished_at=NOW - 200 + i, seq=20 + i, checks=[
            check("burnin", "pass" if i != 5 else "fail", "", min_tflops=tf,
                  median_tflops={"fp32": tf}, profile="cpu"),
            check("allreduce", busbw_gbps=0.5 + i / 10, profile="cpu")]),
            latest=i in (3, 4))  # node2's and node5's latest runs are other ones
    with client(recorded, tmp_path) as api:
        doc = valid(api, api.get("/api/v1/fleet").json(), "Fleet")
    (cpu,) = doc["profiles"]
    (fp32,) = cpu["burnin"]
    assert fp32["floor"] == 0.0001  # the cpu profile's own floor
    assert {n["node"]: n["verdict"] for n in fp32["nodes"]} == {
        "node1": "pass", "node2": "pass", "node3": "pass", "node4": "pass", "node5": "fail"}
    # the fleet comparison counts only passing burn-ins: node5's failure is not the reference
    assert fp32["fleet_median"] == pytest.approx(0.012) and fp32["fleet_nodes"] == 4
    ar = cpu["allreduce"]
    assert ar["floor"] == 0.001 and ar["median"] == pytest.approx(0.85)
    assert sorted(n["node"] for n in ar["nodes"]) == ["node2", "node3", "node4", "node5"]


def test_fleet_median_counts_only_the_nodes_slurm_lists(recorded, tmp_path):
    """Four live nodes were painted as stragglers against a median of retired ones: folders
    of nodes Slurm no longer lists stay in the shared directory, and are not the fleet (the
    burn-in check's own reference, checks/fleet.py fleet_members, leaves them out too)."""
    for i in range(2, 5):
        recorded.add_run(run_doc(f"node{i}", finished_at=NOW - 200 + i, seq=20 + i, checks=[
            check("burnin", min_tflops=0.010, median_tflops={"fp32": 0.010}, profile="cpu")]),
            latest=False)
    for i in range(6):  # retired: faster, more numerous, gone from Slurm
        recorded.add_run(run_doc(f"old{i}", finished_at=NOW - 9000, seq=40 + i, checks=[
            check("burnin", min_tflops=0.050, median_tflops={"fp32": 0.050}, profile="cpu")]))
    with client(recorded, tmp_path) as api:
        doc = valid(api, api.get("/api/v1/fleet").json(), "Fleet")
    (fp32,) = doc["profiles"][0]["burnin"]
    assert fp32["fleet_nodes"] == 4  # node1 (0.012) and node2-4 (0.010)
    assert fp32["fleet_median"] == pytest.approx(0.010)
    assert any("old0 is not a node Slurm lists" in why for why in doc["ignored"])


# --- metrics and health ----------------------------------------------------------------------
def test_metrics_are_the_controller_families(api):
    text = api.get("/metrics").text
    from prometheus_client.parser import text_string_to_metric_families

    families = {f.name for f in text_string_to_metric_families(text)}
    assert {"airlock_node_state", "airlock_nodes", "airlock_node_own_error",
            "airlock_condition_nodes", "airlock_node_errors"} <= families
    assert 'airlock_node_own_error{node="node3"} 1.0' in text
    assert 'airlock_condition_nodes{condition="pending"} 1.0' in text
    assert api.get("/healthz").json()["ok"] is True


def test_gzip_only_when_accepted_and_hsts_only_over_tls(recorded, tmp_path, api):
    refused = api.get("/api/v1/nodes", headers={"Accept-Encoding": "gzip;q=0, identity"})
    assert "content-encoding" not in refused.headers and refused.json()["nodes"]
    assert api.get("/api/v1/nodes", headers={"Accept-Encoding": "br, gzip;q=0.5"}).headers[
        "content-encoding"] == "gzip"
    assert "strict-transport-security" not in api.get("/healthz").headers
    from airlock.serve.app import build

    cfg = config_mod.load(recorded.write(serve={"refresh": 60.0}))
    with TestClient(build(cfg), base_url="https://127.0.0.1:9642") as tls:
        assert tls.get("/healthz").headers["strict-transport-security"] == "max-age=31536000"


def test_metrics_export_the_recovery_services_heartbeat(recorded, tmp_path):
    """The age of the recovery service's last poll is what tells a dead recovery service from a
    quiet one (deploy/: AirlockRecoveryHeartbeatStale)."""
    store = RecoveryStore(str(tmp_path / "recovery.db"))
    with store.tx() as db:
        store.beat(db, 4242, NOW - 3600, NOW - 1234.0)
    store.close()
    with client(recorded, tmp_path) as api:
        text = api.get("/metrics").text
    from prometheus_client.parser import text_string_to_metric_families

    samples = {s.name: s.value for f in text_string_to_metric_families(text)
               for s in f.samples}
    assert samples["airlock_recovery_heartbeat_timestamp_seconds"] == pytest.approx(NOW - 1234.0)


def test_polling_the_list_metrics_and_fleet_never_reaches_slurm(recorded, tmp_path):
    """docs/security.md: the node list, /metrics and the fleet are answered from memory (the
    status is read in the background every [serve] refresh seconds), so polling them never
    reaches Slurm."""
    with client(recorded, tmp_path) as api:
        assert api.get("/api/v1/nodes").status_code == 200  # the first read has been made
        recorded.slurm.clear_log()
        for _ in range(5):
            for path in ("/api/v1/nodes", "/api/v1/nodes?state=failed", "/metrics",
                         "/api/v1/fleet", "/healthz"):
                assert api.get(path).status_code == 200, path
        assert recorded.slurm.calls() == []


def test_the_console_writes_what_the_api_says_as_text_never_as_html():
    """docs/security.md: the console writes everything from the API as text (textContent),
    never as HTML: node reasons are whatever an admin or Slurm typed. (The browser test's
    reasons hold no markup, so it would not notice an HTML sink: this looks for one.)"""
    console = Path(__file__).resolve().parents[2] / "airlock" / "serve" / "console"
    sinks = re.compile(r"\.(inner|outer)HTML\b|insertAdjacentHTML|document\.write|"
                       r"createContextualFragment|DOMParser|srcdoc|\beval\(|new Function\(")
    script = (console / "console.js").read_text()
    found = [(n, line.strip()) for n, line in enumerate(script.splitlines(), 1)
             if sinks.search(line)]
    assert found == [], found
    assert 'if (k === "text") node.textContent = String(v);' in script  # el()'s text path
    assert "<script>" not in (console / "index.html").read_text()  # no inline script either


# --- tokens, the Guard, bad input -------------------------------------------------------------
def test_read_token_guards_data_not_the_page(recorded, tmp_path):
    with client(recorded, tmp_path, read=True) as c:
        assert c.get("/").status_code == 200 and 'data-token-required="yes"' in c.get("/").text
        for path in ("/api/v1/nodes", "/api/v1/nodes/node1", "/metrics", "/api/v1/recovery",
                     "/api/v1/fleet", "/api/v1/checks"):
            res = c.get(path)
            assert res.status_code == 401 and res.headers["www-authenticate"].startswith(
                "Bearer"), path
            assert c.get(path, headers={"Authorization": "Bearer wrong"}).status_code == 401
        ok = c.get("/api/v1/nodes", headers={"Authorization": f"Bearer {READ}"})
        assert ok.status_code == 200
        # the check token reads too (it is the stronger one)
        assert c.get("/metrics", headers={"Authorization": f"Bearer {CHECK}"}).status_code == 200
        # with reads behind a token, any Host is served (no DNS rebinding risk to guard)
        assert c.get("/api/v1/nodes", headers={"Authorization": f"Bearer {READ}",
                                               "Host": "controller.example:9642"}
                     ).status_code == 200
        assert c.get("/healthz").status_code == 200  # liveness stays open


def test_guard_headers_hosts_and_bodies(api):
    page = api.get("/")
    csp = page.headers["content-security-policy"]
    assert "script-src 'self'" in csp and "unsafe-inline" not in csp
    assert page.headers["x-frame-options"] == "DENY"
    assert 'src="/static/console.js"' in page.text and "<script>" not in page.text
    assert api.get("/static/console.js").headers["content-type"].startswith("text/javascript")
    assert api.get("/static/app.py").status_code == 404
    assert api.get("/api/v1/nodes", headers={"Host": "attacker.example"}).status_code == 421
    assert api.get("/api/v1/nodes", headers={"Host": "localhost:9642"}).status_code == 200
    auth = {"Authorization": f"Bearer {CHECK}", "Content-Type": "application/json"}
    big = api.post("/api/v1/checks", content=b"{" + b" " * 20000 + b"}", headers=auth)
    assert big.status_code == 413 and "[serve] max_body" in big.json()["error"]

    def chunks():
        yield b'{"nodes": "node1"}'

    chunked = api.post("/api/v1/checks", content=chunks(), headers=auth)
    assert chunked.status_code == 411


@pytest.mark.parametrize("body, code, words", [
    ({"nodes": "node9"}, 404, "node9 not found"),
    ({"nodes": "node[1-"}, 400, "bad node list"),
    ({"partition": "nosuch"}, 404, "no nodes match partition nosuch"),
    ({"nodes": "node1", "level": "quick"}, 422, "level: Input should be 'standard' or 'deep'"),
    ({"nodes": "node1", "wait_jobs": -1}, 422, "wait_jobs"),
    ({"nodes": "node1", "wait_jobs": "NaN"}, 422, "wait_jobs"),
    ({"nodes": "node1", "only": ["gpu_count; reboot"]}, 422, "unknown check"),
    ({"nodes": "node1\x00"}, 422, "one line of printable text"),
    ({"nodes": "x" * 5000}, 422, "nodes: String should have at most 4096 characters"),
    ({"nodes": "node1", "shell": "id"}, 422, "shell: Extra inputs are not permitted"),
    ({}, 422, "name the targets"),
    ([], 422, "Input should be a valid dictionary"),
])
def test_bad_check_requests_are_one_line_4xx(api, body, code, words):
    res = api.post("/api/v1/checks", json=body, headers={"Authorization": f"Bearer {CHECK}"})
    assert res.status_code == code, res.text
    assert list(res.json()) == ["error"] and words in res.json()["error"], res.json()
    assert api.get("/api/v1/checks").json()["checks"] == []


def test_checks_need_their_token_and_are_off_without_one(recorded, tmp_path, api):
    res = api.post("/api/v1/checks", json={"nodes": "node1"})
    assert res.status_code == 401 and "check token" in res.json()["error"]
    # the read token is not the check token
    with client(recorded, tmp_path, read=True) as c:
        res = c.post("/api/v1/checks", json={"nodes": "node1"},
                     headers={"Authorization": f"Bearer {READ}"})
        assert res.status_code == 401
    with client(recorded, tmp_path, check_token=False) as c:
        res = c.post("/api/v1/checks", json={"nodes": "node1"},
                     headers={"Authorization": f"Bearer {CHECK}"})
        assert res.status_code == 403 and "check_token_file" in res.json()["error"]
        assert 'data-checks-enabled="no"' in c.get("/").text


def test_a_target_expression_is_counted_before_it_is_expanded(api, recorded):
    """379 bytes naming three million nodes once cost 16 s and 1.5 GB: an expression naming
    more nodes than Slurm lists (6 here) is refused with the limit named, before anything
    expands it or asks Slurm."""
    import tracemalloc

    auth = {"Authorization": f"Bearer {CHECK}"}
    assert api.get("/api/v1/nodes").status_code == 200  # Slurm's list has been read
    recorded.slurm.clear_log()
    huge = ",".join(f"x{i}[0-99999]" for i in range(30))
    tracemalloc.start()
    try:
        res = api.post("/api/v1/checks", json={"nodes": huge}, headers=auth)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert res.status_code == 422, res.text
    assert res.json()["error"].startswith("nodes: the expression names at least ")
    assert res.json()["error"].endswith("nodes, more than the 6 Slurm lists")
    assert peak < 20 << 20, peak  # three million names would be hundreds of MB
    assert recorded.slurm.calls() == []
    seven = api.post("/api/v1/checks", json={"nodes": "node[1-6],node[1-1]"}, headers=auth)
    assert seven.status_code == 422 and "at least 7 nodes" in seven.json()["error"]
    bad = api.post("/api/v1/checks", json={"nodes": "node[3-1]"}, headers=auth)
    assert bad.status_code == 400 and "bad node list" in bad.json()["error"]


@pytest.mark.parametrize("expr", ["node1", "node[1-4],gpu07", "a[1-3]b[01-02],c", "x[1,3-5]",
                                  "a[1-2],a[1-2]", "r[1-2]n[1-3]s[7]", "plain,names,only"])
def test_the_count_is_python_hostlists_expansion(expr):
    import hostlist

    from airlock.serve import targets

    assert targets.count(expr, 10**9) == len(hostlist.expand_hostlist(expr,
                                                                      allow_duplicates=True))
    for bad in ("a[1-", "a]1[", "a[[1]]", "a[x]", "a[3-1]"):
        with pytest.raises(targets.BadHostlist):
            targets.count(bad, 10)


def test_a_check_runs_airlock_check_itself(api):
    """Against the fake controller, `airlock check` makes its reservation but has no srun to
    launch its workers with (the fake is scontrol only): the check ends as an error in the
    command's own words, through the same process a real one runs in
    (tests/cluster/test_serve.py runs real ones)."""
    res = api.post("/api/v1/checks", json={"nodes": "node1", "only": ["gpu_count"],
                                           "wait_jobs": 0.5},
                   headers={"Authorization": f"Bearer {CHECK}"})
    assert res.status_code == 202, res.text
    record = valid(api, res.json(), "Check")
    assert record["targets"] == ["node1"] and record["state"] == "running"
    deadline = time.monotonic() + 60
    while (done := api.get(f"/api/v1/checks/{record['id']}").json())["state"] == "running":
        assert time.monotonic() < deadline
        time.sleep(0.2)
    assert done["state"] == "error" and done["exit_code"] == 2
    assert "srun not found in slurm.bin_dir" in done["error"], done["error"]
    assert api.get("/api/v1/checks/20990101T000000-deadbeef").status_code == 404
    assert api.get("/api/v1/checks/..").status_code in (400, 404)


def test_check_runner_one_at_a_time_rate_limit_and_keep(tmp_path):
    gate = tmp_path / "go"
    waiter = [sys.executable, "-c",
              "import os, sys, time\n"
              f"while not os.path.exists({str(gate)!r}): time.sleep(0.05)\n"
              "print('{\"schema\": 1, \"level\": \"standard\", \"exit_code\": 0, "
              "\"nodes\": []}')"]
    done = []
    runner = CheckRunner("/dev/null", keep=2, per_hour=3, on_done=lambda: done.append(1))
    runner.command = waiter  # the process under test is the runner, not `airlock check`
    runner.argv = lambda request: list(waiter)
    req = {"nodes": "n1", "level": "standard", "wait_jobs": 1.0, "only": []}
    first = runner.submit(req, ["n1"])
    with pytest.raises(Conflict, match=first["id"]):
        runner.submit(req, ["n1"])
    gate.write_text("")
    for _ in range(3):
        deadline = time.monotonic() + 30
        while runner.active:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        if len(done) < 3:
            runner.submit(req, ["n1"])
    assert done == [1, 1, 1]
    with pytest.raises(RateLimited) as limited:
        runner.submit(req, ["n1"])
    assert 3500 < limited.value.retry_after <= 3600
    kept = runner.list()
    assert len(kept) == 2 and all(c["state"] == "done" for c in kept)


def test_check_argv_is_a_list_of_options():
    runner = CheckRunner("/etc/airlock/airlock.toml")
    argv = runner.argv({"nodes": "-rf", "partition": None, "feature": None, "level": "deep",
                        "wait_jobs": 0.25, "only": ["gpu_count"]})
    assert argv[-6:] == ["check", "--json", "--nodes=-rf", "--level=deep", "--wait-jobs=0.25",
                         "--only=gpu_count"]
    assert argv[argv.index("--config") + 1] == "/etc/airlock/airlock.toml"


# --- the listen rule and the token files -----------------------------------------------------
def test_listen_addresses_and_exposure(tmp_path):
    assert parse_listen("127.0.0.1:9642") == ("127.0.0.1", 9642)
    assert parse_listen("[::1]:80") == ("::1", 80)
    for bad in ("9642", "host.example:9642", "127.0.0.1:0", "127.0.0.1:x", ":9642"):
        with pytest.raises(ValueError):
            parse_listen(bad)
    s = ServeSection()
    check_listen(s, "127.0.0.1")
    with pytest.raises(ConfigError, match="without TLS"):
        check_listen(s, "0.0.0.0")
    tls = ServeSection(tls_cert="/c.pem", tls_key="/k.pem")
    with pytest.raises(ConfigError, match="set token_file"):
        check_listen(tls, "10.0.0.5")
    check_listen(ServeSection(tls_cert="/c.pem", tls_key="/k.pem", token_file="/t"), "10.0.0.5")
    check_listen(ServeSection(allow_insecure=True), "0.0.0.0")
    with pytest.raises(ConfigError, match="beyond loopback"):
        config_mod.from_dict({"serve": {"listen": "0.0.0.0:9642"}})
    with pytest.raises(ConfigError, match="tls_cert and tls_key"):
        config_mod.from_dict({"serve": {"tls_cert": "/c.pem"}})


def test_token_files_must_be_roots_and_private(tmp_path):
    good = token_file(tmp_path / "good", READ)
    assert read_token(good, "token_file", False) == READ
    loose = token_file(tmp_path / "loose", READ, 0o644)
    with pytest.raises(ConfigError, match="chmod 600"):
        read_token(loose, "token_file", False)
    assert read_token(loose, "token_file", True) == READ  # allow_insecure
    short = token_file(tmp_path / "short", "abc")
    with pytest.raises(ConfigError, match="at least 16 characters"):
        read_token(short, "token_file", False)
    with pytest.raises(ConfigError, match="No such file"):
        read_token(str(tmp_path / "missing"), "check_token_file", False)
    with pytest.raises(ConfigError, match="absolute path"):
        read_token("token", "token_file", False)
    tokens = Tokens(read=READ, check=CHECK)
    assert tokens.may_read(f"Bearer {READ}") and tokens.may_read(f"bearer {CHECK}")
    assert not tokens.may_read(f"Basic {READ}") and not tokens.may_read(None)
    assert tokens.may_check(f"Bearer {CHECK}") and not tokens.may_check(f"Bearer {READ}")
    assert not Tokens().may_check(f"Bearer {CHECK}")
    assert host_of("[::1]:9642") == "::1" and host_of("Example.org:80") == "example.org"
    assert isinstance(Guard(None, 1024, None), Guard)


def test_serve_refuses_to_start_exposed_and_says_why(recorded, tmp_path):
    conf = recorded.write()
    out = subprocess.run([sys.executable, "-m", "airlock", "--config", str(conf), "serve",
                          "--listen", "0.0.0.0:9642"], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 2 and out.stderr.count("\n") == 1, out.stderr
    assert "beyond loopback without TLS" in out.stderr and "Traceback" not in out.stderr
    loose = token_file(tmp_path / "loose", CHECK, 0o644)
    conf = recorded.write(serve={"check_token_file": loose})
    out = subprocess.run([sys.executable, "-m", "airlock", "--config", str(conf), "serve"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "lets group or others read it" in out.stderr


# --- the committed documents -------------------------------------------------------------------
def test_openapi_document_is_committed_and_embeds_the_status_schema(api, recorded):
    served = api.get("/api/v1/openapi.json").json()
    committed = json.loads((DOCS / "openapi.json").read_text())
    assert served == committed, "docs/openapi.json is stale: airlock serve --openapi > " \
                                "docs/openapi.json"
    cli = subprocess.run([sys.executable, "-m", "airlock", "--config", str(recorded.write()),
                          "serve", "--openapi"], capture_output=True, text=True, timeout=60)
    assert cli.returncode == 0 and json.loads(cli.stdout) == committed
    status_schema = json.loads((DOCS / "status-schema.json").read_text())
    node = served["components"]["schemas"]["StatusNode"]
    assert node["required"] == status_schema["$defs"]["node"]["required"]
    assert served["components"]["schemas"]["StatusDocument"]["properties"]["nodes"] == \
        {"type": "array", "items": {"$ref": "#/components/schemas/StatusNode"}}
    paths = set(served["paths"])
    assert {"/api/v1/nodes", "/api/v1/nodes/{name}", "/api/v1/runs/{run_id}",
            "/api/v1/recovery", "/api/v1/fleet", "/api/v1/checks", "/api/v1/checks/{check_id}",
            "/metrics", "/healthz", "/api/v1/ledger", "/api/v1/ledger/metrics"} == paths
    # the package's schema is the docs' file, not a copy
    packaged = ROOT / "airlock" / "serve" / "status-schema.json"
    assert packaged.is_symlink() and packaged.resolve() == (DOCS / "status-schema.json")


def test_systemd_serve_unit(tmp_path):
    import configparser
    import shutil

    text = render.serve_unit("/usr/bin/airlock", "/etc/airlock/airlock.toml",
                             listen="127.0.0.1:9700")
    unit = configparser.ConfigParser(strict=False, interpolation=None, delimiters=("=",))
    unit.optionxform = str
    unit.read_string(text)
    service = unit["Service"]
    assert service["ExecStart"] == "/usr/bin/airlock serve --listen 127.0.0.1:9700"
    assert service["Environment"] == "AIRLOCK_CONFIG=/etc/airlock/airlock.toml"
    assert service["KillMode"] == "mixed" and service["NoNewPrivileges"] == "yes"
    with pytest.raises(Exception, match="HOST:PORT"):
        render.serve_unit("/usr/bin/airlock", listen="9700")
    airlock_bin = shutil.which("airlock") or str(Path(sys.executable).with_name("airlock"))
    path = tmp_path / "airlock-serve.service"
    out = subprocess.run([sys.executable, "-m", "airlock", "render", "systemd", "--serve",
                          "--airlock-bin", airlock_bin, "-o", str(path)], capture_output=True,
                         text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.fail("systemd-analyze is needed (scripts/setup.sh installs systemd)")
    verify = subprocess.run([analyze, "verify", str(path)], capture_output=True, text=True,
                            timeout=60)
    assert verify.returncode == 0 and not verify.stderr.strip(), verify.stderr


def test_hooks_import_nothing_of_the_service():
    code = ("import sys, airlock.hooks.healthcheck, airlock.hooks.prolog, airlock.hooks.epilog,"
            " airlock.status.collect\n"
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in "
            "('fastapi', 'starlette', 'uvicorn', 'pydantic', 'anyio', 'airlock.serve'))\n"
            "bad += sorted(m for m in sys.modules if m.startswith('airlock.serve'))\n"
            "print(','.join(bad))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "", out.stdout + out.stderr


def test_stopping_the_service_leaves_no_part_of_a_check_behind(tmp_path):
    """A check that ignores the service's SIGINT is killed at the timeout with everything it
    started (its srun steps), not only the `airlock check` process (issue 24: one helper for
    every child, the session killed whole)."""
    import time as _time

    from airlock.serve.checks import CheckRunner

    pidfile = tmp_path / "child.pid"
    script = tmp_path / "check.sh"
    script.write_text(f"trap '' INT\nsleep 60 & echo $! > {pidfile}\nwait\n")
    runner = CheckRunner(str(tmp_path / "airlock.toml"), command=["sh", str(script)])
    runner.submit({"level": "quick", "wait_jobs": 0}, ["node1"])
    deadline = _time.monotonic() + 10
    while not (pidfile.exists() and pidfile.read_text().strip()):
        assert _time.monotonic() < deadline, "the check never started"
        _time.sleep(0.05)
    pid = int(pidfile.read_text())
    runner.stop(timeout=0.5)
    deadline = _time.monotonic() + 5
    while _time.monotonic() < deadline and alive(pid):
        _time.sleep(0.05)
    assert not alive(pid), "the check's child outlived the service's stop"
