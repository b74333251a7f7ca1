"""GET /api/v1/ledger, its metrics and the /ledger page (airlock/serve/ledger.py), on a real
FastAPI app over a recorded history."""

from __future__ import annotations

import pytest
from fastapi import Depends, FastAPI, Request
from fastapi.responses import JSONResponse
from fastapi.testclient import TestClient

from airlock.config import loader as config
from airlock.config.sections.ledger import LedgerSection
from airlock.ledger import load, report
from airlock.ledger.history import Action, History, NodeView
from airlock.serve.ledger import LedgerCache, install

T0 = 1_800_000_000.0


def _history() -> History:
    def run(at, verdict, check="memtest"):
        return {"node": "n1", "run_id": "20270115T080000-1-n1", "level": "standard",
                "trigger": "boot", "started_at": at - 60, "finished_at": at, "duration_s": 60.0,
                "verdict": verdict, "failed_check": check if verdict == "fail" else None,
                "checks": [{"check": check, "verdict": verdict, "duration_s": 50.0}]}

    return History(T0, T0 + 86400, runs=[run(T0 + 100, "fail"), run(T0 + 900, "pass")],
                   actions=[Action("n1", "reboot", T0 + 300)], nodes={"n1": NodeView(8, True)})


class Denied(Exception):
    pass


@pytest.fixture
def client():
    calls = []

    def compute(seconds):
        calls.append(seconds)
        if seconds == 7 * 86400:
            raise load.HistoryGap("the history of n1 has a gap: use --since 1.00d or less")
        return report.compute(_history(), LedgerSection())

    def may_read(request: Request):
        if request.headers.get("authorization") != "Bearer t":
            raise Denied

    app = FastAPI()

    @app.exception_handler(Denied)
    async def _denied(_r, _e):
        return JSONResponse({"error": "token"}, 401)

    cfg = config.from_dict({})
    install(app, cfg, [Depends(may_read)], LedgerCache(cfg, compute))
    c = TestClient(app)
    c.headers["authorization"] = "Bearer t"
    c.calls = calls
    return c


def test_the_ledger_document_and_its_cache(client):
    r = client.get("/api/v1/ledger?since=1d")
    assert r.status_code == 200, r.text
    doc = r.json()
    assert doc["caught"]["outcomes"]["confirmed"] == 1
    assert doc["advice"]["advice"] == "standard"
    low, high = doc["value"]["balance_gpu_hours_per_month"]
    assert low < high
    client.get("/api/v1/ledger?since=1d")
    assert client.calls == [86400.0]  # the second answer came from the cache


@pytest.mark.parametrize("since, code, words", [
    # the window's form is the schema's (a 422 naming the parameter, as every request the
    # schema refuses); its range is the ledger's own (400)
    ("3x", 422, "since"),
    ("0m", 400, "must be more than 0 and at most 400d"),
    ("7d", 409, "the history of n1 has a gap"),
])
def test_bad_windows_are_one_line_errors(client, since, code, words):
    r = client.get(f"/api/v1/ledger?since={since}")
    # (a bare app here: the 422's one-line {"error": ...} body is the whole server's, held by
    # tests/unit/test_serve_schema.py; this one checks the code and the words)
    assert r.status_code == code and words in r.text, r.text
    if code != 422:
        assert "\n" not in r.json()["error"]


def test_metrics_and_page_and_the_read_token(client):
    m = client.get("/api/v1/ledger/metrics?since=1d")
    assert m.status_code == 200
    assert 'airlock_ledger_failures{check="memtest",outcome="confirmed"} 1.0' in m.text
    page = client.get("/ledger")
    assert page.status_code == 200 and '<script src="/ledger.js"' in page.text
    assert "<script>" not in page.text  # the CSP allows no inline script
    js = client.get("/ledger.js")
    assert js.status_code == 200 and "/ledger?since=" in js.text
    assert client.get("/api/v1/ledger", headers={"authorization": "Bearer x"}).status_code == 401
