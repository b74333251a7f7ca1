"""The FastAPI application: /api/v1 (JSON), /metrics, /healthz and the console.

Every answer to a bad request is a 4xx whose body is {"error": "<one line>"}; nothing from a
request reaches a shell (an on-demand check is `airlock check` with an argument list), node
names and run ids are checked against the same patterns as everywhere in Airlock before they
touch Slurm or a path, and target expressions go through the very function `airlock check`
uses (airlock.ondemand.targets.select_targets). A failure of the service itself is a 500 with
one line; its traceback goes to the service's log, never to the client.
"""

from __future__ import annotations

import re
import sys
import time
import traceback
from importlib import resources
from typing import Annotated, Any, Literal

from fastapi import Depends, FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from starlette.exceptions import HTTPException

from airlock import __version__
from airlock.checks import registry
from airlock.errors import AirlockError, NodeNotFound, NotFound, SlurmError
from airlock.ondemand.report import GROUP_CHECK
from airlock.ondemand.targets import select_targets
from airlock.paths import NODE_NAME, valid_node_name
from airlock.records import results
from airlock.serve import ledger as ledger_routes
from airlock.serve import openapi as openapi_doc
from airlock.serve import schema, targets
from airlock.serve.checks import CheckRunner, Conflict, RateLimited
from airlock.serve.fleet import fleet_view
from airlock.serve.security import MAX_ACTIVE, Guard, Tokens, allowed_hosts
from airlock.serve.source import Snapshot, Source, Unavailable, encode
from airlock.slurm.client import Slurm
from airlock.status import collect as status

API = "/api/v1"
ASSETS = {"console.js": "text/javascript; charset=utf-8",
          "console.css": "text/css; charset=utf-8",
          "favicon.svg": "image/svg+xml"}
# What an on-demand check may run: every level's checks but the epilog's (they need a job).
CHECK_NAMES = sorted({c.name for c in registry.CHECKS if c.levels != (registry.EPILOG,)}
                     | {GROUP_CHECK})
# Anything a person or Slurm could call a node, partition or feature, and nothing that is not
# printable on one line (a NUL could not even become an argument of `airlock check`).
PRINTABLE = r"[^\x00-\x1f\x7f]*"
# What the server accepts in paths and queries, as the OpenAPI document states it (anchored:
# JSON Schema patterns search). Node names and run ids are airlock.paths' own patterns.
NODE_PATTERN = f"^{NODE_NAME.pattern}$"
RUN_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._]*-[0-9]+-" + NODE_NAME.pattern + "$"
CHECK_PATTERN = r"^[0-9]{8}T[0-9]{6}-[0-9a-f]{8}$"


class HttpError(Exception):
    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status, self.message, self.headers = status, message, headers or {}


def error_body(message: str) -> dict[str, str]:
    return {"error": " ".join(str(message).split())[:500]}


class CheckRequest(BaseModel):
    """Like StartClusterHealthCheck: targets (nodes, or a partition, the instance group, or a
    feature) and what to run. The same choices as `airlock check --nodes/--partition/
    --feature`; with nodes and a partition (or feature), the nodes in it."""

    # At least one of the targets (the document says so too: an empty body is not a check).
    model_config = ConfigDict(extra="forbid", json_schema_extra={"anyOf": [
        {"required": ["nodes"]}, {"required": ["partition"]}, {"required": ["feature"]}]})

    # Absent, never null: a target given is one line of text (so the type says str, and the
    # default None only marks "not given": mypy is told so on each line).
    nodes: str = Field(  # type: ignore[assignment]
        None, min_length=1, max_length=4096, pattern=f"^{PRINTABLE}$",
        description="a Slurm hostlist expression, e.g. node[1-4],gpu07")
    partition: str = Field(  # type: ignore[assignment]
        None, min_length=1, max_length=256, pattern=f"^{PRINTABLE}$")
    feature: str = Field(  # type: ignore[assignment]
        None, min_length=1, max_length=256, pattern=f"^{PRINTABLE}$")
    level: Literal["standard", "deep"] = Field(
        "standard", description="the level run on every target (the on-demand levels)")
    wait_jobs: float = Field(10.0, ge=0, le=1440, allow_inf_nan=False,
                             description="minutes to wait for running jobs before a target "
                                         "is skipped (its jobs are never touched)")
    only: list[Annotated[str, Field(max_length=64,
                                    json_schema_extra={"enum": CHECK_NAMES})]] = Field(
        default_factory=list, max_length=32,
        description=f"run only these checks: {', '.join(CHECK_NAMES)}")

    @field_validator("nodes", "partition", "feature", mode="before")
    @classmethod
    def _one_line(cls, value: Any) -> Any:
        if isinstance(value, str) and not re.fullmatch(PRINTABLE, value):
            raise ValueError("must be one line of printable text")
        return value

    @model_validator(mode="after")
    def _targets(self) -> CheckRequest:
        if not (self.nodes or self.partition or self.feature):
            raise ValueError("name the targets: nodes, partition or feature")
        unknown = [o for o in self.only if o not in CHECK_NAMES]
        if unknown:
            raise ValueError(f"unknown check {unknown[0]!r} in only (known: "
                             f"{', '.join(CHECK_NAMES)})")
        return self


def _json(data: Any, status_code: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(encode(data), status_code=status_code, media_type="application/json",
                    headers={"cache-control": "no-store", **(headers or {})})


def _airlock_error(exc: AirlockError) -> HttpError:
    """An error from the code below as an HTTP answer."""
    if isinstance(exc, (NodeNotFound, NotFound)):
        return HttpError(404, str(exc))
    if isinstance(exc, SlurmError):
        return HttpError(502, f"Slurm: {exc}")
    return HttpError(500, str(exc))


class Service:
    """What the routes share: the config, the status source, the check runner, the tokens."""

    def __init__(self, cfg, source: Source, runner: CheckRunner, tokens: Tokens):
        self.cfg = cfg
        self.source = source
        self.runner = runner
        self.tokens = tokens
        self.started = time.time()

    def snapshot(self) -> Snapshot:
        try:
            return self.source.current()
        except Unavailable as exc:
            raise HttpError(503, f"status not available: {exc}",
                            {"retry-after": str(int(self.source.refresh) + 1)}) from None

    def age_headers(self, snap: Snapshot) -> dict[str, str]:
        headers = {"x-airlock-status-age": f"{time.time() - snap.read_at:.1f}"}
        if self.source.error:  # the last refresh failed: this is the one before it
            headers["x-airlock-status-error"] = " ".join(self.source.error.split())[:200]
        return headers


def build(cfg, *, listen_host: str = "127.0.0.1", source: Source | None = None,
          runner: CheckRunner | None = None, tokens: Tokens | None = None,
          max_active: int = MAX_ACTIVE) -> FastAPI:
    """The application for cfg ([serve] settings). source/runner/tokens: built from cfg unless
    given (tests); max_active: requests answered at once (the Guard's limit)."""
    settings = cfg.serve
    tokens = tokens or Tokens.from_settings(settings)
    source = source or Source(lambda: status.collect(cfg, timeout=max(settings.refresh, 30.0)),
                              settings.refresh)
    runner = runner or CheckRunner(cfg.path, settings.keep_checks, settings.checks_per_hour,
                                   on_done=source.poke)
    svc = Service(cfg, source, runner, tokens)
    console = resources.files("airlock.serve").joinpath("console")
    assets = {name: console.joinpath(name).read_bytes() for name in ASSETS}
    page = _page(console.joinpath("index.html").read_text(), settings, tokens)

    from contextlib import asynccontextmanager

    @asynccontextmanager
    async def lifespan(_app):
        source.start()
        yield
        source.stop()
        runner.stop()

    app = FastAPI(title="Airlock", version=__version__, lifespan=lifespan,
                  openapi_url=f"{API}/openapi.json", docs_url=None, redoc_url=None,
                  description="The console's API: every node's state, its timeline, runs, "
                              "recovery, the fleet's figures, on-demand checks. See "
                              "docs/console.md and docs/security.md.")
    app.state.service = svc

    # --- errors: one line, never a traceback ----------------------------------------------
    @app.exception_handler(HttpError)
    async def _http_error(_request, exc: HttpError):
        headers = {"cache-control": "no-store", **exc.headers}
        return JSONResponse(error_body(exc.message), exc.status, headers=headers)

    @app.exception_handler(HTTPException)
    async def _starlette_error(request, exc: HTTPException):
        message = exc.detail if exc.status_code != 404 else f"not found: {request.url.path}"
        headers = {k.lower(): v for k, v in (exc.headers or {}).items()}
        if exc.status_code == 405:  # every method of the path, not only the first route's
            headers["allow"] = ", ".join(allowed_methods(app, request.url.path))
        return JSONResponse(error_body(message), exc.status_code, headers=headers)

    @app.exception_handler(RequestValidationError)
    async def _validation_error(request, exc: RequestValidationError):
        # Who may comes before what was sent: a bad body without the check token is a 401.
        if request.method == "POST":
            try:
                may_check(request)
            except HttpError as refused:
                return await _http_error(request, refused)
        return JSONResponse(error_body(validation_message(exc)), 422)

    @app.exception_handler(AirlockError)
    async def _airlock(_request, exc: AirlockError):
        err = _airlock_error(exc)
        return JSONResponse(error_body(err.message), err.status)

    @app.exception_handler(Exception)
    async def _internal(request, exc: Exception):
        print(f"airlock serve: {request.method} {request.url.path}: "
              f"{type(exc).__name__}: {exc}", file=sys.stderr)
        traceback.print_exception(exc, file=sys.stderr)
        return JSONResponse(error_body(f"internal error ({type(exc).__name__}); the service's "
                                       "log has the details"), 500)

    # --- who may ------------------------------------------------------------------------------
    def may_read(request: Request) -> None:
        if not tokens.may_read(request.headers.get("authorization")):
            raise HttpError(401, "this service needs a bearer token to read "
                                 "(Authorization: Bearer <[serve] token_file>)",
                            {"www-authenticate": 'Bearer realm="airlock"'})

    def may_check(request: Request) -> None:
        if not tokens.check:
            raise HttpError(403, "on-demand checks through the API are off: set [serve] "
                                 "check_token_file")
        if not tokens.may_check(request.headers.get("authorization")):
            raise HttpError(401, "starting a check needs the check token "
                                 "(Authorization: Bearer <[serve] check_token_file>)",
                            {"www-authenticate": 'Bearer realm="airlock-checks"'})

    read = [Depends(may_read)]
    err = {"content": {"application/json": {"schema": schema.ref("Error")}}}

    def answers(name: str, *codes: int, media: str = "application/json") -> dict:
        out: dict[int | str, Any] = {200: {"content": {media: {"schema": schema.ref(name)}}}}
        for code in codes:
            out[code] = {"description": _REASONS.get(code, "error"), **err}
        return out

    # --- the API ------------------------------------------------------------------------------
    @app.get("/healthz", tags=["service"], responses=answers("Health", 503))
    def healthz():
        """Liveness: 200 once a status document has been read (even if the last refresh
        failed: then status_error says why), 503 before."""
        snap = svc.source.latest
        body = {"ok": snap is not None, "status_error": svc.source.error,
                "status_age_s": round(time.time() - snap.read_at, 1) if snap else None,
                "check_running": svc.runner.active}
        return _json(body, 200 if snap is not None else 503)

    @app.get("/metrics", tags=["service"], dependencies=read,
             responses={200: {"content": {"text/plain": {"schema": {"type": "string"}}},
                              "description": "Prometheus text exposition: the families of "
                                             "`airlock metrics --controller`"},
                        401: {"description": "token", **err}, 503: {"description": "", **err}})
    def metrics_():
        snap = svc.snapshot()
        body = snap.derived("metrics", lambda s: _metrics(cfg, s.doc))
        return Response(body, media_type="text/plain; version=0.0.4; charset=utf-8",
                        headers=svc.age_headers(snap))

    @app.get(f"{API}/nodes", tags=["nodes"], dependencies=read,
             responses=answers("StatusDocument", 400, 401, 503))
    def nodes(request: Request,
              partition: Annotated[str | None, Query(max_length=256)] = None,
              feature: Annotated[str | None, Query(max_length=256)] = None,
              state: Annotated[list[str] | None, Query(
                  description="an Airlock state or condition (repeatable, or comma-separated):"
                              f" {', '.join(STATE_WORDS)}")] = None):
        """Every node (like `airlock status --json`, docs/status-schema.json), as last read
        ([serve] refresh; X-Airlock-Status-Age says how long ago). Filters narrow the list, and
        the counts are over what is listed."""
        snap = svc.snapshot()
        headers = svc.age_headers(snap)
        words = [w for s in state or [] for w in s.split(",")]
        unknown = [w for w in words if w not in STATE_WORDS]
        if unknown:
            raise HttpError(400, f"unknown state {unknown[0]!r} (known: "
                                 f"{', '.join(STATE_WORDS)})")
        wanted = set(words)
        if not (partition or feature or wanted):
            if accepts_gzip(request.headers.get("accept-encoding", "")):
                return Response(snap.gzip, media_type="application/json",
                                headers={**headers, "content-encoding": "gzip",
                                         "vary": "accept-encoding", "cache-control": "no-store"})
            return Response(snap.body, media_type="application/json",
                            headers={**headers, "vary": "accept-encoding",
                                     "cache-control": "no-store"})
        rows = [r for r in snap.doc["nodes"]
                if (not partition or partition in r["partitions"])
                and (not feature or feature in r["features"])
                and (not wanted or r["airlock"] in wanted or r["condition"] in wanted)]
        return _json(status.document(rows, snap.doc["generated_at"]), headers=headers)

    @app.get(f"{API}/nodes/{{name}}", tags=["nodes"], dependencies=read,
             responses=answers("NodeDetail", 400, 401, 404, 502))
    def node(name: str,
             runs: Annotated[int, Query(ge=1, le=50, description="runs per page")] = 20,
             before: Annotated[str | None, Query(max_length=160, description=(
                 "the run id a page ends after (next_before of the newer page)"))] = None):
        """One node: its status row, its timeline (oldest first) and a page of its runs."""
        if not valid_node_name(name):
            raise HttpError(400, f"{name!r} is not a node name")
        if before is not None and not results.run_node(before):
            raise HttpError(400, f"before={before!r} is not a run id")
        if before is not None and results.run_node(before) != name:
            raise HttpError(404, f"no recorded run {before} of {name}")
        # Slurm away: the page from disk and the database, Slurm's fields from the last read
        snap = svc.source.latest
        last = next((r for r in snap.doc["nodes"] if r["node"] == name), None) if snap else None
        return _json(status.node_detail(cfg, name, runs, before, last,
                                        snap.read_at if snap else None))

    @app.get(f"{API}/runs/{{run_id}}", tags=["nodes"], dependencies=read,
             responses=answers("Run", 400, 401, 404))
    def run(run_id: str):
        """One recorded run's whole document: every check, its verdict, detail and figures."""
        if not results.run_node(run_id):
            raise HttpError(400, f"{run_id!r} is not a run id (<UTC time>-<pid>-<node>)")
        doc, why = results.read_run(cfg, run_id)
        if doc is None:
            raise HttpError(404, f"run {run_id}: {why}")
        return _json(doc)

    @app.get(f"{API}/recovery", tags=["recovery"], dependencies=read,
             responses=answers("Recovery", 401))
    def recovery():
        """Open cases, the breaker and why, the service's heartbeat, the last actions."""
        return _json(status.recovery_view(cfg))

    @app.get(f"{API}/fleet", tags=["fleet"], dependencies=read,
             responses=answers("Fleet", 401, 503))
    def fleet():
        """Burn-in TFLOPS and all-reduce bandwidth per node and profile, with the floors and
        the fleet median."""
        snap = svc.snapshot()
        doc = snap.derived("fleet", lambda s: fleet_view(cfg, [r["node"]
                                                              for r in s.doc["nodes"]]))
        return _json(doc, headers=svc.age_headers(snap))

    @app.post(f"{API}/checks", tags=["checks"], status_code=202,
              dependencies=[Depends(may_check)],
              responses={202: {"description": "started", "content": {
                  "application/json": {"schema": schema.ref("Check")}}},
                  **{c: {"description": _REASONS[c], **err}
                     for c in (400, 401, 403, 404, 409, 411, 413, 422, 429, 502)}})
    def start_check(body: CheckRequest):
        """Start an on-demand check (`airlock check --nodes/--partition/--feature`): isolate
        the targets with a maintenance reservation, run the level on each, the group
        all-reduce and the culprit search, drain only on a verdict. Answers at once with the
        check's id; GET /api/v1/checks/{id} follows it. One at a time (409), at most [serve]
        checks_per_hour (429)."""
        request = body.model_dump()
        if body.nodes:
            bound_targets(body.nodes, svc.source.latest)
        try:
            targets = select_targets(Slurm.from_config(cfg), body.nodes,
                                              body.partition, body.feature)
        except NodeNotFound as exc:
            raise HttpError(404, str(exc)) from None
        except SlurmError as exc:
            message = str(exc)
            raise HttpError(400 if message.startswith("bad node list") else 502,
                            message) from None
        except AirlockError as exc:  # "no nodes match ..."
            raise HttpError(404, str(exc)) from None
        try:
            record = runner.submit(request, [n.name for n in targets])
        except Conflict as exc:
            raise HttpError(409, str(exc)) from None
        except RateLimited as exc:
            raise HttpError(429, str(exc), {"retry-after": str(int(exc.retry_after) + 1)}) \
                from None
        return _json(record, 202, {"location": f"{API}/checks/{record['id']}"})

    @app.get(f"{API}/checks", tags=["checks"], dependencies=read,
             responses=answers("CheckList", 401))
    def checks():
        """The on-demand checks this service started (the last [serve] keep_checks), newest
        first."""
        return _json({"checks": runner.list(), "running": runner.active})

    @app.get(f"{API}/checks/{{check_id}}", tags=["checks"], dependencies=read,
             responses=answers("Check", 400, 401, 404))
    def check(check_id: str):
        """One on-demand check: its state, progress lines, and the verdict per node."""
        if not re.fullmatch(r"[0-9]{8}T[0-9]{6}-[0-9a-f]{8}", check_id):
            raise HttpError(400, f"{check_id!r} is not a check id")
        return _json(runner.get(check_id))

    ledger_routes.install(app, cfg, read)  # /api/v1/ledger, its metrics, the /ledger page

    # --- the console ----------------------------------------------------------------------------
    @app.get("/", include_in_schema=False)
    def index():
        return Response(page, media_type="text/html; charset=utf-8",
                        headers={"cache-control": "no-cache"})

    @app.get("/static/{name}", include_in_schema=False)
    def asset(name: str):
        if name not in assets:
            raise HttpError(404, f"not found: /static/{name}")
        return Response(assets[name], media_type=ASSETS[name],
                        headers={"cache-control": "no-cache"})

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            doc = get_openapi(title=app.title, version=app.version,
                              description=app.description, routes=app.routes)
            doc.setdefault("components", {}).setdefault("schemas", {}).update(
                schema.components())
            doc["components"]["securitySchemes"] = {
                "read": {"type": "http", "scheme": "bearer",
                         "description": "[serve] token_file; only when one is set"},
                "check": {"type": "http", "scheme": "bearer",
                          "description": "[serve] check_token_file; always, for POST checks"}}
            for path, ops in doc["paths"].items():
                for method, op in ops.items():
                    if path == "/healthz":
                        continue
                    op["security"] = [{"check": []}] if method == "post" else [{"read": []}, {}]
            app.openapi_schema = openapi_doc.exact(
                doc, {"name": {"pattern": NODE_PATTERN, "maxLength": 64},
                      "run_id": {"pattern": RUN_PATTERN, "maxLength": 160},
                      "before": {"pattern": RUN_PATTERN, "maxLength": 160},
                      "check_id": {"pattern": CHECK_PATTERN}}, {"state": STATE_PATTERN})
        return app.openapi_schema

    app.openapi = openapi
    hosts = allowed_hosts(settings, listen_host, tokens)
    app.add_middleware(Guard, max_body=settings.max_body, hosts=hosts, max_active=max_active)
    return app


STATE_WORDS = sorted(set(status.STATES) | set(status.CONDITIONS))
_WORD = "(?:" + "|".join(re.escape(w) for w in STATE_WORDS) + ")"
STATE_PATTERN = f"^{_WORD}(?:,{_WORD})*$"
# Names a target expression may hold before Slurm's node list has been read once.
MAX_TARGETS = 100_000


def bound_targets(expr: str, snap: Snapshot | None) -> None:
    """Refuse a node expression naming more nodes than Slurm lists (MAX_TARGETS before the
    first read), counted before anything expands it (airlock.serve.targets)."""
    limit = len(snap.doc["nodes"]) if snap is not None else MAX_TARGETS
    try:
        named = targets.count(expr, limit)
    except targets.BadHostlist as exc:
        raise HttpError(400, f"bad node list: {exc}") from None
    if named > limit:
        where = "Slurm lists" if snap is not None else "a check may name"
        raise HttpError(422, f"nodes: the expression names at least {named} nodes, more "
                             f"than the {limit} {where}")
_REASONS = {400: "bad request", 401: "no or wrong token", 403: "not allowed here",
            404: "not found", 409: "a check is already running", 411: "length required",
            413: "body too large", 422: "invalid body", 429: "rate limit",
            502: "Slurm did not answer", 503: "status not read yet"}


def accepts_gzip(header: str) -> bool:
    """Accept-Encoding names gzip (or *) with a q above 0: "gzip;q=0" refuses it."""
    for item in header.split(","):
        coding, _, params = item.strip().partition(";")
        if coding.strip().lower() not in ("gzip", "*"):
            continue
        q = params.strip().lower()
        try:
            return float(q[2:]) > 0 if q.startswith("q=") else True
        except ValueError:
            return False
    return False


def allowed_methods(app: FastAPI, path: str) -> list[str]:
    """The methods some route answers at path (HEAD wherever GET is: the Guard serves it)."""
    methods: set[str] = set()
    for route in app.routes:
        regex = getattr(route, "path_regex", None)
        if regex is not None and regex.match(path):
            methods |= set(getattr(route, "methods", None) or ())
    if "GET" in methods:
        methods.add("HEAD")
    return sorted(methods)


def validation_message(exc: RequestValidationError) -> str:
    """The first problem, one line: where, then what."""
    errors = exc.errors()
    if not errors:
        return "invalid request"
    first = errors[0]
    where = ".".join(str(p) for p in first.get("loc", ()) if p != "body" or len(
        first.get("loc", ())) == 1)
    msg = str(first.get("msg", "invalid")).removeprefix("Value error, ")
    if first.get("type") == "json_invalid":
        return "the body is not valid JSON"
    if first.get("type") == "missing" and where == "body":
        return "a JSON body is required"
    return f"{where}: {msg}" if where else msg


def _metrics(cfg, doc: dict[str, Any]) -> bytes:
    from prometheus_client import generate_latest

    from airlock.status import metrics

    return generate_latest(metrics.controller_registry(doc, status.recovery_metrics(cfg)))


def _page(template: str, settings, tokens: Tokens) -> bytes:
    """The console's one page (a jinja2 template): settings travel as data- attributes, since
    the Content-Security-Policy allows no inline script."""
    import jinja2

    env = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined)
    return env.from_string(template).render(
        version=__version__, api=API, refresh=settings.refresh,
        token_required="yes" if tokens.read else "no",
        checks_enabled="yes" if tokens.check else "no").encode()
