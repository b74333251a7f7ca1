"""On-demand checks started through the API (POST /api/v1/checks), like HyperPod's
StartClusterHealthCheck.

Each check is `airlock check --nodes/--partition/--feature ... --json` itself, run as a process
of the service: the same code as on the command line (reservation, isolation, the level on every
target through srun, the group all-reduce, the culprit search, drains only on verdicts), with
its arguments passed as a list (no shell) after the API validated them. One runs at a time in
this service; the Slurm maintenance reservation it creates stays the cluster-wide lock, so a
check started elsewhere (another service, a person's `airlock check`) makes this one end
"refused" with the command's own words, and no two ever interleave.

A check's record lives in memory (the last [serve] keep_checks): its state (running, done,
refused, error), the progress lines the command prints, and at the end its JSON report with the
verdict per node. The runs themselves are recorded on the nodes like every other run.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from airlock.errors import AirlockError, NotFound
from airlock.proc import REAP_S, spawn

FINAL = ("done", "refused", "error")
EXIT_BUSY = 4  # airlock.ondemand.reservation.Busy: another on-demand check holds it
MAX_PROGRESS = 200
MAX_LINE = 400


class Conflict(AirlockError):
    """A check is already running in this service."""


class RateLimited(AirlockError):
    def __init__(self, message: str, retry_after: float):
        super().__init__(message)
        self.retry_after = retry_after


class CheckRunner:
    def __init__(self, config_path: str, keep: int = 50, per_hour: int = 12,
                 on_done: Callable[[], None] | None = None,
                 command: list[str] | None = None, window: float = 3600.0):
        self.config_path = config_path
        self.keep = keep
        self.per_hour = per_hour
        self.window = window
        self.on_done = on_done or (lambda: None)
        # the `airlock` command as this interpreter runs it (tests may point it elsewhere)
        self.command = command or [sys.executable, "-m", "airlock"]
        self._lock = threading.Lock()
        self._checks: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self._active: str | None = None
        self._started: list[float] = []  # accepted starts within the window (rate limit)
        self._proc: subprocess.Popen | None = None

    # --- what the API calls ----------------------------------------------------------------
    def submit(self, request: dict[str, Any], targets: list[str]) -> dict[str, Any]:
        """Start a check (request already validated: nodes|partition|feature, level,
        wait_jobs, only); its record. Conflict while one runs; RateLimited past the limit."""
        now = time.time()
        with self._lock:
            if self._active is not None:
                raise Conflict(f"on-demand check {self._active} is still running; one at a "
                               "time (GET /api/v1/checks/" + self._active + ")")
            self._started = [t for t in self._started if now - t < self.window]
            if len(self._started) >= self.per_hour:
                wait = self.window - (now - self._started[0])
                raise RateLimited(f"rate limit: {len(self._started)} on-demand checks within "
                                  f"{self.window / 3600:g} h ([serve] checks_per_hour)", wait)
            check_id = f"{time.strftime('%Y%m%dT%H%M%S', time.gmtime(now))}-" \
                       f"{secrets.token_hex(4)}"
            record = {"id": check_id, "state": "running", "request": dict(request),
                      "targets": list(targets), "submitted_at": now, "finished_at": None,
                      "exit_code": None, "error": "", "progress": [], "result": None}
            self._checks[check_id] = record
            self._active = check_id
            self._started.append(now)
            while len(self._checks) > self.keep:
                oldest = next(iter(self._checks))
                if oldest == self._active:
                    break
                self._checks.pop(oldest)
        threading.Thread(target=self._run, args=(check_id, self.argv(request)),
                         name=f"airlock-check-{check_id}", daemon=True).start()
        return self.get(check_id)

    def get(self, check_id: str) -> dict[str, Any]:
        with self._lock:
            record = self._checks.get(check_id)
            if record is None:
                raise NotFound(f"no on-demand check {check_id} (this service keeps the last "
                               f"{self.keep})")
            return json.loads(json.dumps(record))  # a copy the thread cannot change

    def list(self) -> list[dict[str, Any]]:
        with self._lock:
            ids = list(reversed(self._checks))
        return [self.get(i) for i in ids]

    @property
    def active(self) -> str | None:
        return self._active

    def stop(self, timeout: float = 60.0) -> None:
        """The service is stopping: interrupt a running check as Ctrl-C would (SIGINT), so
        that `airlock check` deletes its reservation on the way out; kill it after timeout."""
        proc = self._proc
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            try:  # the whole session: `airlock check` and the srun steps it started
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            try:
                proc.wait(REAP_S)
            except subprocess.TimeoutExpired:  # stuck in the kernel: nothing more to do
                pass

    # --- the command ---------------------------------------------------------------------------
    def argv(self, request: dict[str, Any]) -> list[str]:
        """`airlock check` with the request's values, each as one --option=value argument (a
        value that starts with "-" can never be read as an option)."""
        argv = [*self.command, "--config", self.config_path, "check", "--json"]
        for key in ("nodes", "partition", "feature"):
            if request.get(key):
                argv.append(f"--{key}={request[key]}")
        argv += [f"--level={request['level']}", f"--wait-jobs={request['wait_jobs']:g}"]
        argv += [f"--only={name}" for name in request.get("only") or []]
        return argv

    def _progress(self, check_id: str, line: str) -> None:
        line = line.rstrip()
        if not line:
            return
        with self._lock:
            progress = self._checks[check_id]["progress"]
            if len(progress) < MAX_PROGRESS:
                progress.append({"at": time.time(), "line": line[:MAX_LINE]})

    def _run(self, check_id: str, argv: list[str]) -> None:
        rc, out, last = None, "", ""
        try:
            # in a session of its own (airlock/proc.py), so stop() can end all of it; its
            # pipes are read here as they come, so kill_group's reap is not used
            proc = self._proc = spawn(argv, env=os.environ)
            out_parts: list[str] = []
            reader = threading.Thread(target=lambda: out_parts.append(proc.stdout.read()),
                                      daemon=True)
            reader.start()
            for line in proc.stderr:
                self._progress(check_id, line)
                if line.strip():
                    last = line.strip()
            rc = proc.wait()
            reader.join()
            out = "".join(out_parts)
        except Exception as exc:  # could not run the command at all
            last = f"cannot run airlock check: {exc}"
        result, error, state = None, "", "error"
        if rc in (0, 1, 3):
            try:
                result = json.loads(out)
                state = "done"
            except ValueError:
                error = "airlock check printed no report"
        elif rc == EXIT_BUSY:
            state, error = "refused", last.removeprefix("airlock: ")
        else:
            error = last.removeprefix("airlock: ") or f"airlock check exited {rc}"
        with self._lock:
            record = self._checks[check_id]
            record.update(state=state, exit_code=rc, error=error, result=result,
                          finished_at=time.time())
            self._active = None
        self.on_done()
