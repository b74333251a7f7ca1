"""The OpenAPI document says what the server does (issue 26): schemathesis generates requests
from docs/openapi.json's own source (GET /api/v1/openapi.json) and runs every check it has
(`--checks all`: status codes, content types, headers, schemas, negative data rejected, positive
data accepted, auth ignored, ...) against the real server (uvicorn as `airlock serve` runs it,
over the recorded cluster of tests/unit/test_serve.py), bounded in examples and time; any
violation fails the test."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.unit.test_serve import CHECK, client, recorded  # noqa: F401 (a fixture)
from tests.unit.test_serve_connections import serving

CONFIG = Path(__file__).with_name("schemathesis.toml")
MAX_TIME = 40  # seconds of generated requests (the whole test stays under a minute)


def schemathesis() -> str:
    found = shutil.which("st", path=str(Path(sys.executable).parent)) or shutil.which("st")
    if found is None:
        pytest.fail("schemathesis is needed (pip install -e '.[test]')")
    return found


def test_schemathesis_finds_no_violation(recorded, tmp_path):  # noqa: F811
    api = client(recorded, tmp_path)  # the app as the tests build it (tokens: check only)
    app = api.app
    cfg = app.state.service.cfg
    with serving(app, cfg) as port:
        base = f"http://127.0.0.1:{port}"
        run = subprocess.run(
            [schemathesis(), "--config-file", str(CONFIG), "run", f"{base}/api/v1/openapi.json",
             "--checks", "all",
             "--max-examples", "15", "--max-time", str(MAX_TIME), "--seed", "26",
             "--workers", "1", "--generation-deterministic", "--no-color",
             "--suppress-health-check", "all",
             "-H", f"Authorization: Bearer {CHECK}"],
            capture_output=True, text=True, timeout=MAX_TIME + 60, cwd=tmp_path)
    out = run.stdout + run.stderr
    assert run.returncode == 0, out[-6000:]


def test_head_allow_and_errors_are_what_the_document_says(recorded, tmp_path):  # noqa: F811
    with client(recorded, tmp_path) as api:
        doc = api.get("/api/v1/openapi.json").json()
        get = api.get("/api/v1/nodes")
        head = api.head("/api/v1/nodes")
        assert head.status_code == 200 and head.content == b""
        assert head.headers["content-length"] == get.headers["content-length"]
        assert "head" in doc["paths"]["/api/v1/nodes"]
        options = api.options("/api/v1/checks")
        assert options.status_code == 405 and options.headers["allow"] == "GET, HEAD, POST"
        # who may comes before what was sent
        bad = api.post("/api/v1/checks", content=b"{not json",
                       headers={"Content-Type": "application/json"})
        assert bad.status_code == 401, bad.text
        for path, ops in doc["paths"].items():
            for method, op in ops.items():
                for code in ("400", "413", "421", "422", "500", "503"):
                    if code == "422" and not (op.get("parameters") or "requestBody" in op):
                        continue
                    body = op["responses"][code].get("content", {}).get("application/json")
                    if method != "head":
                        assert body == {"schema": {"$ref": "#/components/schemas/Error"}}, \
                            (path, method, code)
        assert "HTTPValidationError" not in doc["components"]["schemas"]
        check = doc["components"]["schemas"]["CheckRequest"]
        assert {"required": ["nodes"]} in check["anyOf"]
        name = doc["paths"]["/api/v1/nodes/{name}"]["get"]["parameters"][0]["schema"]
        assert name["pattern"].startswith("^[A-Za-z0-9]")
