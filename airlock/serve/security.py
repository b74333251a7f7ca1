"""What stands between a request and the service (docs/security.md, "The console and API").

* Listening: loopback by default; beyond it only with TLS and a read token, unless
  [serve] allow_insecure (the same rule as the HTTP recovery provider's).
* Tokens: read from files that root owns and nobody else may read (the recovery provider's
  rule, airlock.recovery.providers.http.token_file_problem), compared in constant time, never
  logged. Reads need the read token when one is set; POST /api/v1/checks always needs the check
  token, and is off without one.
* Guard, an ASGI middleware in front of everything: a body larger than [serve] max_body is
  refused before it is read (413), a POST without Content-Length too (411); while reads are
  open, a Host header that is not a loopback name, the listen host or [serve] allowed_hosts is
  refused (a web page cannot rebind a DNS name to 127.0.0.1 and read the API through the
  operator's browser); at most `max_active` requests are answered at once, any beyond get a
  503 with the service's JSON error (uvicorn's own limit would answer in plain text, without
  these headers); every answer carries a strict Content-Security-Policy and no-sniff, no-frame,
  no-referrer headers.
"""

from __future__ import annotations

import hmac
import json
import os

from airlock.errors import ConfigError
from airlock.recovery.providers.http import token_file_problem

CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
       "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'")
HEADERS = [
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
    (b"cross-origin-resource-policy", b"same-origin"),
]
HSTS = (b"strict-transport-security", b"max-age=31536000")
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")
MAX_ACTIVE = 256  # requests answered at once


def read_token(path: str, key: str, allow_insecure: bool) -> str:
    """The token in path's first line; ConfigError naming [serve] key and the problem."""
    where = f"[serve] {key} {path}"
    if not os.path.isabs(path):
        raise ConfigError(f"{where}: must be an absolute path")
    problem = token_file_problem(path)
    if problem and not allow_insecure and os.path.exists(path):
        raise ConfigError(f"{where}: {problem} (or set allow_insecure = true)")
    try:
        with open(path, encoding="utf-8") as fh:
            token = fh.readline(4096).strip()
    except OSError as exc:
        raise ConfigError(f"{where}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{where}: not UTF-8 text") from None
    if len(token) < 16:
        raise ConfigError(f"{where}: the token must be at least 16 characters "
                          "(e.g. `openssl rand -hex 32`)")
    return token


class Tokens:
    """The read token ("" = reads open) and the check token ("" = POST checks off)."""

    def __init__(self, read: str = "", check: str = ""):
        self.read = read
        self.check = check

    @classmethod
    def from_settings(cls, s) -> Tokens:
        read = read_token(s.token_file, "token_file", s.allow_insecure) if s.token_file else ""
        check = (read_token(s.check_token_file, "check_token_file", s.allow_insecure)
                 if s.check_token_file else "")
        return cls(read, check)

    @staticmethod
    def bearer(header: str | None) -> str:
        scheme, _, value = (header or "").partition(" ")
        return value.strip() if scheme.lower() == "bearer" else ""

    def may_read(self, header: str | None) -> bool:
        if not self.read:
            return True
        given = self.bearer(header)
        return bool(given) and any(hmac.compare_digest(given.encode(), t.encode())
                                   for t in (self.read, self.check) if t)

    def may_check(self, header: str | None) -> bool:
        given = self.bearer(header)
        return bool(self.check and given) and hmac.compare_digest(given.encode(),
                                                                  self.check.encode())


def check_listen(settings, host: str) -> None:
    """The listen rule for the address actually used (`--listen` may override the file)."""
    problems = settings.exposure(host)
    if problems:
        raise ConfigError(f"[serve] {problems[0]}; or set allow_insecure = true")
    if settings.tls_key and not settings.allow_insecure:
        problem = token_file_problem(settings.tls_key)
        if problem and os.path.exists(settings.tls_key):
            raise ConfigError(f"[serve] tls_key {settings.tls_key}: {problem}")


def allowed_hosts(settings, host: str, tokens: Tokens) -> frozenset[str] | None:
    """The Host header values accepted, or None (any) when reads need a token anyway."""
    if tokens.read or "*" in settings.allowed_hosts:
        return None
    names = set(LOOPBACK_NAMES) | {h.lower() for h in settings.allowed_hosts}
    if host not in ("0.0.0.0", "::"):
        names.add(host.lower())
    return frozenset(names)


def host_of(header: str) -> str:
    """The host part of a Host header: "[::1]:9642" -> "::1", "a.b:80" -> "a.b"."""
    header = header.strip().lower()
    if header.startswith("["):
        return header[1:].partition("]")[0]
    if header.count(":") == 1:
        return header.partition(":")[0]
    return header


def _json(status: int, message: str) -> tuple[int, bytes]:
    return status, json.dumps({"error": message}).encode()


class Guard:
    """ASGI middleware: body limits, the Host check, security headers (see the module doc)."""

    def __init__(self, app, max_body: int, hosts: frozenset[str] | None,
                 max_active: int = MAX_ACTIVE):
        self.app = app
        self.max_body = max_body
        self.hosts = hosts
        self.max_active = max_active
        self.active = 0  # requests in progress (one event loop: no lock needed)

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = {k.decode("latin-1").lower(): v.decode("latin-1")
                   for k, v in scope.get("headers", [])}
        refusal = self.refuse(scope["method"], headers)
        if refusal is not None:
            return await self.answer(send, *refusal)
        if self.active >= self.max_active:
            return await self.answer(send, *_json(503, f"busy: {self.max_active} requests in "
                                                       "progress; try again"),
                                     [(b"retry-after", b"1")])

        head = scope["method"] == "HEAD"
        if head:  # a GET without its body (FastAPI's routes answer GET only)
            scope = {**scope, "method": "GET"}

        # Over TLS, browsers are told to keep to it (never on plain HTTP, where it is ignored).
        extra = HEADERS + [HSTS] if scope.get("scheme") == "https" else HEADERS

        async def send_with_headers(message):
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), *extra]}
            elif head and message["type"] == "http.response.body":
                message = {**message, "body": b""}
            await send(message)

        self.active += 1
        try:
            await self.app(scope, receive, send_with_headers)
        finally:
            self.active -= 1

    def refuse(self, method: str, headers: dict[str, str]) -> tuple[int, bytes] | None:
        if self.hosts is not None:
            host = host_of(headers.get("host", ""))
            if host not in self.hosts:
                return _json(421, f"host {host or '(none)'!r} is not served here; reads are "
                                  "open only for loopback names and [serve] allowed_hosts")
        length = headers.get("content-length")
        if method in ("POST", "PUT", "PATCH") and length is None:
            return _json(411, "a request body needs a Content-Length header")
        if length is not None:
            if not length.isdigit():
                return _json(400, "Content-Length is not a number")
            if int(length) > self.max_body:
                return _json(413, f"request body of {int(length)} bytes is over the limit of "
                                  f"{self.max_body} ([serve] max_body)")
        if "transfer-encoding" in headers and method not in ("GET", "HEAD"):
            return _json(411, "chunked request bodies are not accepted; send Content-Length")
        return None

    @staticmethod
    async def answer(send, status: int, body: bytes,
                     extra: list[tuple[bytes, bytes]] | None = None) -> None:
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"application/json"),
                                (b"content-length", str(len(body)).encode()), *(extra or []),
                                *HEADERS]})
        await send({"type": "http.response.body", "body": body})
