"""`airlock serve`: the console and API on the controller, beside `airlock recover`.

It answers from the same code as `airlock status` (airlock.status.collect), `airlock recover --show`
(the recovery database, read-only) and `airlock check --nodes/--partition/--feature`
(airlock.ondemand, run as that very command), never from a copy of it.

  source    the status document, read every [serve] refresh seconds in a thread of its own, so
            that GET /api/v1/nodes answers from memory (10,000 nodes well under a second)
  checks    on-demand checks: one at a time, each `airlock check ... --json` in a process of
            its own; the Slurm maintenance reservation stays the cluster-wide lock
  fleet     burn-in and all-reduce figures per profile, as the fleet comparison sees them
  security  tokens, the listen rule, the rate limit, body limits, headers
  schema    the response schemas; the OpenAPI document embeds docs/status-schema.json
  app       the FastAPI application: /api/v1, /metrics, /healthz, the console
  server    uvicorn on the listen address (TLS when configured)
  console/  the one-page console: HTML (a jinja2 template), JavaScript and CSS, committed as
            they run (no build step, no CDN)

Nothing here is imported on the hooks' path: FastAPI, uvicorn and jinja2 come with the optional
extra `slurm-airlock[serve]`.
"""
