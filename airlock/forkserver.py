"""A warm process for the isolated checks: it imports torch once, then forks each check from
itself, so that a suite pays torch's import (3.4 s of CPU on the 2-core CI machine, more with
CUDA's libraries) once instead of once per check: six times at the standard level.

A forked check is what `python -m MODULE ARGS` would be: a session of its own, stdin from
/dev/null, its stdout and stderr on pipes the caller reads, the caller's environment, the
module run as __main__, its exit code reported, its whole session killed at the caller's
deadline. The server starts no thread and initialises no device before it forks (CUDA does not
survive a fork; torch's import touches neither). A module it cannot preload is left to the
child, which imports it itself and fails, or not, as a fresh interpreter would.

The caller talks to it over a SEQPACKET socketpair (the server's stdin). A request carries the
module, its argv and environment, with the child's two pipe ends attached (SCM_RIGHTS); the
server answers {"pid": N} once the child is forked and {"pid": N, "exit": CODE} once it has
reaped it; {"kill": N} SIGKILLs that child's session first. Only the server reaps its
children, so a pid it is asked to kill is never another process's. When the caller goes away
(EOF: it exited or was killed), the server kills what it still runs and exits: nobody is left
to read those checks' outcomes.

The caller's side (ForkServer) keeps one server per environment, and says Unavailable when it
cannot start one or lost it: airlock.runner then starts the check as a program of its own."""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from typing import IO, Any

MAX_MSG = 1 << 20  # a request: the environment is most of it
POLL_S = 0.05  # how soon a finished child is reported


class Unavailable(Exception):
    """No server to fork from (it could not start, or died): start the child directly."""


# --- the server ----------------------------------------------------------------------------------
def _send(sock: socket.socket, msg: dict[str, Any]) -> None:
    try:
        sock.send(json.dumps(msg).encode())
    except OSError:  # the caller is gone: the next recv says so
        pass


def _killpg(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _set_title(title: str) -> None:
    """The child's name in `ps -o comm`, `top` and /proc/PID/comm (its command line stays the
    server's): which check this process is, at a glance."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(15, title.encode()[:15], 0, 0, 0)  # PR_SET_NAME: 15 bytes and a NUL
    except (OSError, AttributeError):  # no prctl: the name stays the interpreter's
        pass


def _child(req: dict[str, Any], fds: list[int], sock: socket.socket) -> None:
    """In the forked child: become `python -m MODULE ARGV` and never return."""
    code = 1
    try:
        os.setsid()
        if req.get("title"):
            _set_title(str(req["title"]))
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(fds[0], 1)
        os.dup2(fds[1], 2)
        for fd in {null, *fds} - {0, 1, 2}:
            os.close(fd)
        sock.close()
        os.environ.clear()
        os.environ.update(req["env"])
        sys.argv = [str(req["module"]), *map(str, req["argv"])]
        import runpy

        code = 0
        try:
            runpy.run_module(str(req["module"]), run_name="__main__", alter_sys=True)
        except SystemExit as exc:
            if exc.code is None or isinstance(exc.code, int):
                code = exc.code or 0
            else:  # sys.exit("message"), as the interpreter prints it
                print(exc.code, file=sys.stderr)
                code = 1
        except BaseException:
            import traceback

            traceback.print_exc()
            code = 1
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except BaseException:
                pass
    finally:
        os._exit(code)


def serve(sock: socket.socket, preload: Sequence[str]) -> int:
    import importlib

    for name in preload:
        try:
            importlib.import_module(name)
        except BaseException:  # the child imports it itself, as a fresh interpreter would
            pass
    live: set[int] = set()
    while True:
        ready, _, _ = select.select([sock], [], [], POLL_S if live else None)
        if ready:
            try:
                msg, fds, _flags, _addr = socket.recv_fds(sock, MAX_MSG, 2)
            except OSError:
                msg, fds = b"", []
            if not msg:  # the caller is gone
                for pid in live:
                    _killpg(pid)
                for pid in live:
                    try:
                        os.waitpid(pid, 0)
                    except ChildProcessError:
                        pass
                return 0
            try:
                req = json.loads(msg)
            except ValueError:
                req = {}
            if "kill" in req:
                if req["kill"] in live:  # not yet reaped: still this server's child
                    _killpg(int(req["kill"]))
            elif len(fds) == 2 and "module" in req:
                try:
                    pid = os.fork()
                except OSError as exc:
                    _send(sock, {"pid": -1, "error": exc.strerror or str(exc)})
                else:
                    if pid == 0:
                        _child(req, fds, sock)
                    live.add(pid)
                    _send(sock, {"pid": pid})
            else:
                _send(sock, {"pid": -1, "error": "malformed request"})
            for fd in fds:
                os.close(fd)
        for pid in list(live):
            try:
                done, status = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:  # reaped elsewhere: cannot happen, but never hang on it
                done, status = pid, 0
            if done:
                live.discard(pid)
                _send(sock, {"pid": pid, "exit": os.waitstatus_to_exitcode(status)})


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    sock = socket.socket(fileno=os.dup(0))
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)  # the socket lives on as sock; a child's stdin is /dev/null anyway
    os.close(null)
    return serve(sock, [a for a in args if a])


# --- the caller's side ---------------------------------------------------------------------------
class Forked:
    """A child forked by the server, with the part of Popen's interface airlock.runner uses."""

    def __init__(self, server: ForkServer, pid: int, stdout: IO[str], stderr: IO[str]):
        self._server = server
        self.pid = pid
        self.stdout = stdout
        self.stderr = stderr
        self.returncode: int | None = None

    def wait(self, timeout: float | None = None) -> int:
        """Its exit code; subprocess.TimeoutExpired at timeout; Unavailable when the server
        died first (the child is killed then: nobody could report its end)."""
        if self.returncode is None:
            self.returncode = self._server._exit_of(self, timeout)
        return self.returncode

    def kill_group(self, reap_s: float = 5.0) -> None:
        """SIGKILL its session (through the server, which has not reaped it yet) and wait up to
        reap_s for the server to reap it."""
        if self.returncode is not None:
            return
        try:
            self._server._ask({"kill": self.pid})
            self.wait(reap_s)
        except (Unavailable, subprocess.TimeoutExpired):
            _killpg(self.pid)


class ForkServer:
    """One server, started with env and kept for the requests that carry the same env."""

    def __init__(self, python: str, env: Mapping[str, str], preload: Sequence[str]):
        self.env = dict(env)
        self._lock = threading.Lock()
        self._exits: dict[int, int] = {}
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self._proc: subprocess.Popen[bytes] = subprocess.Popen(
                [python, "-m", "airlock.forkserver", *preload], stdin=theirs.fileno(),
                stdout=subprocess.DEVNULL, env=self.env, start_new_session=True)
        except OSError as exc:
            ours.close()
            raise Unavailable(f"could not start: {exc.strerror or exc}") from exc
        finally:
            theirs.close()
        self._sock = ours
        self.lost = ""

    def spawn(self, module: str, argv: Sequence[str], env: Mapping[str, str],
              title: str = "", timeout: float | None = None) -> Forked:
        """`python -m module argv` with env, forked; title names it in /proc/PID/comm.

        The server answers once it has preloaded (torch's import: what a child started on its
        own spends inside its own time), so timeout bounds that too: a server that has not
        answered by then is killed and subprocess.TimeoutExpired raised, as for a check that
        hung in its imports."""
        deadline = None if timeout is None else time.monotonic() + timeout
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        try:
            with self._lock:
                self._check()
                try:
                    request = {"module": module, "argv": list(argv), "env": dict(env),
                               "title": title}
                    socket.send_fds(self._sock, [json.dumps(request).encode()], [out_w, err_w])
                except OSError as exc:
                    self._lose(f"send: {exc.strerror or exc}")
                try:
                    reply = self._recv(deadline, want_pid=True)
                except subprocess.TimeoutExpired:
                    self.lost = "fork server lost (no answer in time)"
                    _killpg(self._proc.pid)
                    raise
        except BaseException:
            os.close(out_r)
            os.close(err_r)
            raise
        finally:
            os.close(out_w)
            os.close(err_w)
        pid = int(reply.get("pid", -1))
        if pid <= 0:
            os.close(out_r)
            os.close(err_r)
            raise Unavailable(f"could not fork: {reply.get('error', 'no pid')}")
        return Forked(self, pid, open(out_r, errors="replace"), open(err_r, errors="replace"))

    def close(self) -> None:
        """EOF to the server, which exits (killing what it still runs); reaped here."""
        self._sock.close()
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait(timeout=10)

    # internals: one conversation at a time
    def _check(self) -> None:
        if self.lost:
            raise Unavailable(self.lost)

    def _lose(self, why: str) -> None:
        self.lost = f"fork server lost ({why})"
        raise Unavailable(self.lost)

    def _recv(self, deadline: float | None, want_pid: bool = False,
              exit_of: int = 0) -> dict[str, Any]:
        while True:
            if exit_of and exit_of in self._exits:
                return {"pid": exit_of, "exit": self._exits.pop(exit_of)}
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise subprocess.TimeoutExpired("forked check", 0)
            self._sock.settimeout(left)
            try:
                data = self._sock.recv(MAX_MSG)
            except TimeoutError:
                raise subprocess.TimeoutExpired("forked check", left or 0) from None
            except OSError as exc:
                self._lose(f"recv: {exc.strerror or exc}")
            if not data:
                self._lose(f"it exited: {self._proc.poll()}")
            msg: dict[str, Any] = json.loads(data)
            if "exit" in msg:
                self._exits[int(msg["pid"])] = int(msg["exit"])
            elif want_pid:
                return msg

    def _ask(self, msg: dict[str, Any]) -> None:
        with self._lock:
            self._check()
            try:
                self._sock.send(json.dumps(msg).encode())
            except OSError as exc:
                self._lose(f"send: {exc.strerror or exc}")

    def _exit_of(self, child: Forked, timeout: float | None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            try:
                self._check()
                return int(self._recv(deadline, exit_of=child.pid)["exit"])
            except Unavailable:
                _killpg(child.pid)  # no server to report or reap it: end it, unreported
                raise


if __name__ == "__main__":
    sys.exit(main())
