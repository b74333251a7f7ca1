"""The `http` provider: a small REST contract any cloud or inventory system can implement.

See docs/recovery-http.md. Requests carry a bearer token read from a file or an environment
variable (never logged, never in an error message), verify TLS by default, time out, and are
retried with exponential backoff on 408, 429, 5xx, timeouts and connection errors, honouring
Retry-After. Every failed attempt is recorded in the node's history.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from urllib.parse import quote

import requests

from airlock.errors import ConfigError
from airlock.paths import read_secret_file
from airlock.recovery.machine import Obs
from airlock.recovery.providers.base import (
    ERROR,
    ISSUED,
    REFUSED,
    ActionTarget,
    Provider,
    Recorder,
    Result,
)

RETRY_STATUS = frozenset({408, 425, 429, 500, 502, 503, 504})


def token_file_problem(path: str) -> str:
    """Why a token file must not be trusted with a bearer token ("" when it may), judged on
    the open file (paths.read_secret_file)."""
    try:
        return read_secret_file(path)[1]
    except OSError as exc:
        return exc.strerror or str(exc)
    except ValueError:
        return "not UTF-8 text"


def read_token(settings) -> str:
    if settings.token_file:
        where = f"[recovery.http] token_file {settings.token_file}"
        try:
            token, problem = read_secret_file(settings.token_file)
        except OSError as exc:
            raise ConfigError(f"{where}: {exc.strerror}") from None
        except ValueError:
            raise ConfigError(f"{where}: not UTF-8 text") from None
        if problem and not settings.allow_insecure:
            raise ConfigError(f"{where}: {problem} (or set allow_insecure = true)")
        if not token:
            raise ConfigError(f"{where}: empty")
        return token
    if settings.token_env:
        token = os.environ.get(settings.token_env, "").strip()
        if not token:
            raise ConfigError(f"[recovery.http] token_env: ${settings.token_env} is not set")
        return token
    return ""


class HttpProvider(Provider):
    name = "http"
    actions = ("reboot", "replace")

    def __init__(self, settings, record: Recorder, sleep: Callable[[float], None] = time.sleep):
        self.s = settings
        self.base = settings.url.rstrip("/")
        self.record = record
        self.sleep = sleep
        self.session = requests.Session()
        self.session.verify = settings.ca_bundle or settings.verify
        self.session.headers["User-Agent"] = "airlock-recover"
        token = read_token(settings)
        if token:
            self.session.headers["Authorization"] = f"Bearer {token}"

    def __repr__(self) -> str:  # never show the session's headers
        return f"HttpProvider({self.base!r})"

    def _url(self, node: str, action: str = "") -> str:
        url = f"{self.base}/v1/nodes/{quote(node, safe='')}"
        return f"{url}/{action}" if action else url

    def request(self, method: str, url: str, node: str, what: str,
                body: dict | None = None) -> tuple[int, dict, str]:
        """(status, JSON body, error text); status 0 when every attempt failed to connect."""
        attempts = self.s.retries + 1
        last = (0, {}, "no attempt")
        for attempt in range(1, attempts + 1):
            wait = min(self.s.backoff * 2 ** (attempt - 1), self.s.backoff_max)
            try:
                resp = self.session.request(method, url, json=body, timeout=self.s.timeout,
                                            allow_redirects=False)
            except requests.Timeout:
                last = (0, {}, f"timeout after {self.s.timeout:g}s")
            except requests.exceptions.SSLError:
                last = (0, {}, "TLS verification failed")
                attempts = attempt  # a certificate problem does not fix itself
            except requests.RequestException as exc:
                last = (0, {}, f"connection error: {type(exc).__name__}")
            else:
                data = _json(resp)
                if resp.status_code not in RETRY_STATUS:
                    return resp.status_code, data, _message(resp, data)
                last = (resp.status_code, data, f"HTTP {resp.status_code} {_message(resp, data)}")
                wait = min(max(wait, _retry_after(resp)), self.s.backoff_max)
            if attempt < attempts:
                self.record(node, "api_retry", f"{what} attempt {attempt}/{attempts}: {last[2]}; "
                                               f"retrying in {wait:.2f}s")
                self.sleep(wait)
            else:
                self.record(node, "api_error", f"{what} attempt {attempt}/{attempts}: {last[2]}; "
                                               "giving up for now")
        return last

    def submit(self, action: str, targets: list[ActionTarget]) -> dict[str, Result]:
        out = {}
        for t in targets:
            status, data, msg = self.request(
                "POST", self._url(t.node, action), t.node, f"POST {action}",
                {"request_id": t.request_id, "reason": t.reason})
            if 200 <= status < 300:
                out[t.node] = Result(ISSUED, f"HTTP {status} {data.get('state', '')}".strip())
            elif 400 <= status < 500 and status not in RETRY_STATUS:
                out[t.node] = Result(REFUSED, f"HTTP {status}: {msg}")
            else:
                out[t.node] = Result(ERROR, msg)
        return out

    def lookup(self, action: str, target: ActionTarget, obs: Obs | None) -> bool:
        status, data, _ = self.request("GET", self._url(target.node), target.node, "GET status")
        if status != 200:
            return False
        ids = data.get("request_ids") or []
        return target.request_id in ids or data.get("request_id") == target.request_id


def _json(resp: requests.Response) -> dict:
    try:
        data = resp.json()
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def _message(resp: requests.Response, data: dict) -> str:
    msg = data.get("error") or data.get("message")
    if not isinstance(msg, str) or not msg:
        msg = (resp.text or resp.reason or "").strip().splitlines()
        msg = msg[0] if msg else ""
    return msg.strip()[:300]


def _retry_after(resp: requests.Response) -> float:
    try:
        return max(0.0, float(resp.headers.get("Retry-After", "0")))
    except ValueError:
        return 0.0
