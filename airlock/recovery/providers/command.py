"""A site's own executable as the provider (see Command)."""

from __future__ import annotations

import os

from airlock import proc
from airlock.errors import ConfigError
from airlock.recovery.machine import Obs
from airlock.recovery.providers.base import ERROR, ISSUED, REFUSED, ActionTarget, Provider, Result


class Command(Provider):
    """An admin's executable: `PATH reboot|replace|status NODE --request-id ID`.

    Exit 0: accepted (status: the request is known). Exit 3: refused, the last line of stderr
    says why. Anything else: an error, tried again later with the same request id, so the
    command must treat a repeated request id as the same request.
    """

    name = "command"
    actions = ("reboot", "replace")
    REFUSED_EXIT = 3

    def __init__(self, path: str, timeout: float):
        if not os.access(path, os.X_OK):
            raise ConfigError(f"[recovery.command] path {path!r}: not an executable file")
        self.path = path
        self.timeout = timeout

    def _run(self, verb: str, t: ActionTarget) -> tuple[int, str]:
        argv = [self.path, verb, t.node, "--request-id", t.request_id]
        env = dict(os.environ, AIRLOCK_REASON=t.reason)
        try:
            # a site's script may start children (ssh, ipmitool): its whole session goes
            p = proc.run(argv, self.timeout, env=env)
        except OSError as exc:
            return -1, f"cannot run: {exc.strerror}"
        if p.timed_out:
            return -1, f"timed out after {self.timeout:g}s"
        lines = (p.stderr or p.stdout).strip().splitlines()
        return int(p.returncode or 0), (lines[-1] if lines else f"exit {p.returncode}")[:300]

    def submit(self, action: str, targets: list[ActionTarget]) -> dict[str, Result]:
        out = {}
        for t in targets:
            rc, msg = self._run(action, t)
            status = ISSUED if rc == 0 else REFUSED if rc == self.REFUSED_EXIT else ERROR
            out[t.node] = Result(status, msg if rc else f"{os.path.basename(self.path)} ok")
        return out

    def lookup(self, action: str, target: ActionTarget, obs: Obs | None) -> bool:
        return self._run("status", target)[0] == 0


