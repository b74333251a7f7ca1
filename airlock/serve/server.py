"""Run the application with uvicorn on the listen address: loopback by default, TLS when
[serve] tls_cert/tls_key are set, refused beyond loopback without TLS and a read token unless
[serve] allow_insecure (airlock.serve.security.check_listen)."""

from __future__ import annotations

import sys

from airlock.config.sections.serve import parse_listen
from airlock.errors import ConfigError
from airlock.serve.app import build
from airlock.serve.security import Tokens, check_listen


def prepare(cfg, listen: str | None = None):
    """(app, host, port) after every check that can refuse to start: the listen rule, the
    token files, the TLS files."""
    settings = cfg.serve
    try:
        host, port = parse_listen(listen or settings.listen)
    except ValueError as exc:
        raise ConfigError(f"[serve] {exc}") from None
    check_listen(settings, host)
    tokens = Tokens.from_settings(settings)
    return build(cfg, listen_host=host, tokens=tokens), host, port


def openapi_text(cfg) -> str:
    """The OpenAPI document as committed in docs/openapi.json (it does not depend on the
    config's values: no token is read for it)."""
    import json

    return json.dumps(build(cfg, tokens=Tokens()).openapi(), indent=1, sort_keys=True) + "\n"


def uvicorn_config(app, settings, host: str, port: int, log_level: str = "info", **bounds):
    """uvicorn's settings for the service: its own connection rules (airlock.serve.connections;
    bounds: head_timeout, per_client, max_connections) instead of uvicorn's limit_concurrency,
    whose plain-text 503 anyone could trigger with idle sockets."""
    import uvicorn

    from airlock.serve.connections import protocol

    tls = {"ssl_certfile": settings.tls_cert, "ssl_keyfile": settings.tls_key} \
        if settings.tls_cert else {}
    return uvicorn.Config(app, host=host, port=port, log_level=log_level, server_header=False,
                          proxy_headers=False, timeout_keep_alive=5, http=protocol(**bounds),
                          **tls)


def run(cfg, listen: str | None = None, log_level: str = "info") -> None:
    import uvicorn

    app, host, port = prepare(cfg, listen)
    settings = cfg.serve
    scheme = "https" if settings.tls_cert else "http"
    shown = f"[{host}]" if ":" in host else host
    print(f"airlock serve: {scheme}://{shown}:{port}/ (config {cfg.path})", file=sys.stderr,
          flush=True)
    uvicorn.Server(uvicorn_config(app, settings, host, port, log_level)).run()
