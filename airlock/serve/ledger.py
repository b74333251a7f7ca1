"""The ledger over HTTP: GET /api/v1/ledger (the document of `airlock ledger --json`),
GET /api/v1/ledger/metrics (its Prometheus text) and the console's Ledger page (/ledger, with
/ledger.js drawing its charts as SVG from the API; no inline script, as the CSP demands).

The ledger reads every node's kept runs and the recovery database: one computation per window
is kept for CACHE_S and shared by every caller, so a dashboard that polls cannot turn it into a
load on the results store."""

from __future__ import annotations

import threading
import time
from importlib import resources
from typing import Annotated, Any

from fastapi import FastAPI, Query
from fastapi.responses import JSONResponse, Response

from airlock import __version__
from airlock.errors import AirlockError
from airlock.serve import schema
from airlock.serve.source import encode

CACHE_S = 30.0
API = "/api/v1"
# The window's form is in the schema; its range (more than 0, at most 400 days) is the one
# refusal (400) no pattern states, allowed for in tests/unit/schemathesis.toml.
Since = Annotated[str, Query(max_length=16, pattern=r"^[0-9]+(\.[0-9]+)?[mhdw]$",
                             description="the window: a number and m, h, d or w (30d, 12h, 90m, "
                                         "2w), more than 0 and at most 400 days")]


class LedgerCache:
    def __init__(self, cfg, compute=None):
        self.cfg = cfg
        self.compute = compute or self._compute
        self.lock = threading.Lock()
        self.kept: dict[str, tuple[float, dict[str, Any]]] = {}

    def _compute(self, seconds: float) -> dict[str, Any]:
        from airlock.ledger import load, report

        return report.compute(load.load(self.cfg, seconds), self.cfg.ledger)

    def get(self, since: str) -> dict[str, Any]:
        from airlock.ledger import window

        seconds = window.parse_since(since)
        with self.lock:  # one computation at a time; the others wait for its answer
            hit = self.kept.get(since)
            if hit is not None and time.monotonic() - hit[0] < CACHE_S:
                return hit[1]
            doc = self.compute(seconds)
            self.kept = {since: (time.monotonic(), doc)}
            return doc


_ERR = {"content": {"application/json": {"schema": schema.ref("Error")}}}
ERRORS = {400: {"description": "bad window", **_ERR},
          401: {"description": "no or wrong token", **_ERR},
          409: {"description": "the history cannot answer it: gaps, or no slurmdbd", **_ERR},
          502: {"description": "Slurm did not answer", **_ERR}}


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status, headers={"cache-control": "no-store"})


def _answer(cache: LedgerCache, since: str):
    """The document, or the one-line error: 400 for a bad window, 409 for a history that
    cannot answer it (gaps, no slurmdbd), 502 when Slurm did not answer."""
    from airlock.errors import SlurmError
    from airlock.ledger import load, window

    try:
        return cache.get(since), None
    except window.BadWindow as exc:
        return None, _error(400, str(exc))
    except (load.HistoryGap, load.NoSlurmdbd) as exc:
        return None, _error(409, str(exc))
    except SlurmError as exc:
        return None, _error(502, f"Slurm: {exc}")
    except AirlockError as exc:
        return None, _error(500, str(exc))


def install(app: FastAPI, cfg, read: list, cache: LedgerCache | None = None) -> None:
    """Add the ledger's routes to the console's app (read: the app's read-token dependency)."""
    cache = cache or LedgerCache(cfg)
    folder = resources.files("airlock.serve").joinpath("console")
    script = folder.joinpath("ledger.js").read_bytes()
    page = folder.joinpath("ledger.html").read_text().replace(
        "{{ version }}", __version__).encode()

    @app.get(f"{API}/ledger", tags=["ledger"], dependencies=read,
             responses={200: {"description": "the ledger (docs/ledger.md)"}, **ERRORS})
    def ledger(since: Since = "30d"):
        """What the gate cost and caught over the window (`airlock ledger --json`,
        docs/ledger.md): hours in checks, boot to service, failures and their outcomes, the
        value model's balance as a range, and the registration level advice."""
        doc, err = _answer(cache, since)
        if err is not None:
            return err
        return Response(encode(doc), media_type="application/json",
                        headers={"cache-control": "no-store"})

    @app.get(f"{API}/ledger/metrics", tags=["ledger"], dependencies=read,
             responses={200: {"content": {"text/plain": {"schema": {"type": "string"}}},
                              "description": "Prometheus text exposition"}, **ERRORS})
    def ledger_metrics(since: Since = "30d"):
        """The ledger's figures as Prometheus text (docs/ledger.md#metrics)."""
        from airlock.ledger import report

        doc, err = _answer(cache, since)
        if err is not None:
            return err
        return Response(report.metrics_text(doc),
                        media_type="text/plain; version=0.0.4; charset=utf-8")

    @app.get("/ledger", include_in_schema=False)
    def ledger_page():
        return Response(page, media_type="text/html; charset=utf-8",
                        headers={"cache-control": "no-cache"})

    @app.get("/ledger.js", include_in_schema=False)
    def ledger_script():
        return Response(script, media_type="text/javascript; charset=utf-8",
                        headers={"cache-control": "no-cache"})
