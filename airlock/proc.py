"""One way to run a child: in a session of its own, waited for with a deadline, its whole
session killed at the deadline (or when the caller is interrupted), and reaped with a timeout
of its own, so that nothing it started outlives it and nothing it leaves behind can hang the
caller. Every place in Airlock that starts a child and waits for it goes through here (the
copies this replaced had drifted: `kill` against `killpg`, and a `communicate()` with no timeout
after the kill, which hangs for as long as a grandchild holds the pipes open)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

REAP_S = 5.0  # how long a killed session may take to let go of its pipes


@dataclass(frozen=True)
class Finished:
    """What a child left: its exit code (None when it was killed at the deadline), its output,
    and how long it ran."""

    returncode: int | None
    stdout: str
    stderr: str
    timed_out: bool
    seconds: float


def spawn(argv: Sequence[str], env: Mapping[str, str] | None = None,
          merge_stderr: bool = False, cwd: str | None = None,
          raw_newlines: bool = False) -> subprocess.Popen[Any]:
    """argv in a session of its own, stdin from /dev/null, text pipes (bytes with raw_newlines,
    which run() decodes). OSError (no such program, no permission) reaches the caller, who says
    what could not be started."""
    child: subprocess.Popen[Any] = subprocess.Popen(
        list(argv), stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT if merge_stderr else subprocess.PIPE,
        stdin=subprocess.DEVNULL, text=not raw_newlines,
        errors=None if raw_newlines else "replace",
        env=dict(env) if env is not None else None, cwd=cwd, start_new_session=True)
    return child


def _text(data: str | bytes | None) -> str:
    # Decoded, not newline-translated: what someone typed (a carriage return in a Slurm
    # reason, bytes that are not UTF-8) must neither raise nor become a line break.
    if isinstance(data, bytes):
        return data.decode("utf-8", "replace")
    return data or ""


def kill_group(proc: subprocess.Popen[Any], reap_s: float = REAP_S) -> tuple[str, str]:
    """SIGKILL proc's whole session and reap it within reap_s; what it had written (empty when
    something it started still holds the pipes after the kill)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        out, err = proc.communicate(timeout=reap_s)
        return _text(out), _text(err)
    except subprocess.TimeoutExpired:  # a child that left the session holds the pipes
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                try:
                    pipe.close()
                except OSError:
                    pass
        try:
            proc.wait(timeout=reap_s)
        except subprocess.TimeoutExpired:
            pass
        return "", ""


def run(argv: Sequence[str], timeout: float, env: Mapping[str, str] | None = None,
        merge_stderr: bool = False, reap_s: float = REAP_S, cwd: str | None = None,
        raw_newlines: bool = False) -> Finished:
    """Run argv to its end or to timeout seconds, whichever comes first (see the module).
    raw_newlines: output decoded as UTF-8 (bad bytes replaced) with \r kept as it came."""
    started = time.monotonic()
    proc = spawn(argv, env, merge_stderr, cwd, raw_newlines)
    try:
        out, err = proc.communicate(timeout=max(0.0, timeout))
    except subprocess.TimeoutExpired:
        out, err = kill_group(proc, reap_s)
        return Finished(None, out, err, True, time.monotonic() - started)
    except BaseException:
        kill_group(proc, reap_s)
        raise
    return Finished(proc.returncode, _text(out), _text(err), False, time.monotonic() - started)
