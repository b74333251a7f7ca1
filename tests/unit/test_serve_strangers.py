"""`airlock serve` over documents a node's root wrote (docs/security.md: strangers' data): each is
validated once, where airlock.records.results reads it, so a bad one makes its node "unreadable"
with the
file and the reason named, and never a 5xx nor a change in another node's view (issue 26)."""

from __future__ import annotations

import json
import time
import warnings

import pytest

from airlock.config import loader as config_mod
from airlock.serve.app import build
from tests.unit.recorded import Recorded, check, run_doc

with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # starlette's note about httpx's successor
    from fastapi.testclient import TestClient

NOW = time.time()
DEEP = 50_000  # arrays nested in one figure: 100 KB of document


def bad_documents(node: str) -> dict[str, str]:
    """{node: the raw text of its latest.json}: each broken one way."""
    def doc(figures: str, **over) -> str:
        base = run_doc(node, finished_at=NOW - 60, seq=9)
        base.update(over)
        base["checks"] = [check("burnin", median_tflops={"fp32": 0.012}, profile="cpu")]
        text = json.dumps(base)
        return text.replace('"median_tflops": {"fp32": 0.012}', figures)

    return {
        "nan": doc('"median_tflops": {"fp32": NaN}'),
        "huge": doc('"median_tflops": {"fp32": 1e400}'),
        "deep": doc('"median_tflops": {"fp32": 0.012}, "x": ' + "[" * DEEP + "]" * DEEP),
        "types": doc('"median_tflops": {"fp32": 0.012}').replace('"attempts": 1',
                                                                '"attempts": "many"'),
        "garbage": "{not json",
    }


WHY = {"nan": "not a finite number", "huge": "not a finite number",
       "deep": "nested deeper than", "types": "attempts is not an integer",
       "garbage": "not valid JSON"}


@pytest.fixture
def api(tmp_path):
    """good1, good2 (readable runs with a burn-in each); nan, huge, deep, types, garbage: a
    readable older run each, and a latest.json (and its history copy) broken one way."""
    r = Recorded(tmp_path)
    r.add_node("absent")  # in service, no results at all
    for name in ("good1", "good2", *WHY):
        r.add_node(name)
        r.add_run(run_doc(name, finished_at=NOW - 600, seq=1, checks=[
            check("burnin", median_tflops={"fp32": 0.012}, profile="cpu")]))
    for name in WHY:
        text = bad_documents(name)[name]
        (tmp_path / "shared" / name / "latest.json").write_text(text)
        run_id = f"{time.strftime('%Y%m%dT%H%M%S', time.gmtime(NOW - 60))}-1009-{name}"
        (tmp_path / "shared" / name / "results" / f"{run_id}.json").write_text(text)
    cfg = config_mod.load(r.write(serve={"refresh": 60.0}))
    with TestClient(build(cfg), base_url="http://127.0.0.1:9642",
                    raise_server_exceptions=False) as c:
        yield c


def test_a_strangers_bad_document_is_its_nodes_unreadable_result_never_a_5xx(api):
    res = api.get("/api/v1/nodes")
    assert res.status_code == 200, res.text
    rows = {r["node"]: r for r in res.json()["nodes"]}
    for name, why in WHY.items():
        problem = rows[name]["results_problem"]
        assert "latest.json" in problem and why in problem, (name, problem)
        assert rows[name]["verdict"] is None  # nothing of the bad document is shown
    for name in ("good1", "good2"):  # another node's view is untouched
        assert rows[name]["results_problem"] == "" and rows[name]["verdict"] == "pass"
    for name in WHY:
        page = api.get(f"/api/v1/nodes/{name}")
        assert page.status_code == 200, (name, page.text)
        runs = page.json()["runs"]
        assert [r["verdict"] for r in runs] == ["pass"]  # the readable history is there
        bad_id = f"{time.strftime('%Y%m%dT%H%M%S', time.gmtime(NOW - 60))}-1009-{name}"
        run = api.get(f"/api/v1/runs/{bad_id}")
        assert run.status_code == 404 and WHY[name] in run.json()["error"], (name, run.text)
    fleet = api.get("/api/v1/fleet")
    assert fleet.status_code == 200, fleet.text
    (cpu,) = fleet.json()["profiles"]
    assert {"good1", "good2"} <= {n["node"] for n in cpu["burnin"][0]["nodes"]}
    assert api.get("/metrics").status_code == 200


def test_a_node_without_a_readable_latest_result_is_not_seen_not_healthy(api, tmp_path):
    """Slurm has them in service, but nothing says they passed: a broken latest.json, or no
    results at all (absent). Their own condition, filter and metric; good1/good2 stay
    healthy."""
    doc = api.get("/api/v1/nodes").json()
    rows = {r["node"]: r for r in doc["nodes"]}
    unseen = sorted([*WHY, "absent"])
    assert sorted(n for n, r in rows.items() if r["condition"] == "not-seen") == unseen
    assert {rows[n]["airlock"] for n in unseen} == {"healthy"}  # Slurm's view is unchanged
    assert "latest.json" in rows["nan"]["message"] and "not a finite number" in \
        rows["nan"]["message"]
    assert "no results in the shared dir yet" in rows["absent"]["message"]
    assert doc["conditions"]["not-seen"] == 6 and doc["conditions"]["healthy"] == 2
    listed = api.get("/api/v1/nodes?state=not-seen").json()
    assert sorted(r["node"] for r in listed["nodes"]) == unseen
    metrics = api.get("/metrics").text
    assert 'airlock_condition_nodes{condition="not-seen"} 6.0' in metrics
    assert 'airlock_condition_nodes{condition="healthy"} 2.0' in metrics
