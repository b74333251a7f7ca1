"""airlock/proc.py: the one way Airlock runs a child, with real processes."""

from __future__ import annotations

import os
import sys
import time

import pytest

from airlock import proc


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_a_child_that_ends_gives_its_output_and_code():
    out = proc.run([sys.executable, "-c", "import sys; print('hi'); "
                    "print('err', file=sys.stderr); sys.exit(3)"], timeout=30)
    assert (out.returncode, out.stdout, out.stderr, out.timed_out) == (3, "hi\n", "err\n", False)


def test_the_deadline_kills_the_whole_session(tmp_path):
    pidfile = tmp_path / "grandchild"
    code = ("import subprocess, sys, time; "
            "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)']); "
            f"open({str(pidfile)!r}, 'w').write(str(p.pid)); print('started', flush=True); "
            "time.sleep(300)")
    out = proc.run([sys.executable, "-c", code], timeout=3)
    assert out.timed_out and out.returncode is None
    assert out.stdout == "started\n"
    grandchild = int(pidfile.read_text())
    deadline = time.monotonic() + 10
    while _alive(grandchild) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(grandchild), "a grandchild in the child's session outlived the kill"


def test_a_grandchild_that_left_the_session_cannot_hang_the_reap(tmp_path):
    """The drifted copies called communicate() without a timeout after the kill: a grandchild
    that left the session keeps the pipes open, and the caller hung for as long as it lived."""
    pidfile = tmp_path / "escaped"
    code = ("import subprocess, sys, time; "
            "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'], "
            "start_new_session=True); "
            f"open({str(pidfile)!r}, 'w').write(str(p.pid)); time.sleep(300)")
    started = time.monotonic()
    try:
        out = proc.run([sys.executable, "-c", code], timeout=2, reap_s=1)
        assert out.timed_out
        # 2 s to the deadline, at most 2 x 1 s to reap: never the grandchild's 120 s
        assert time.monotonic() - started < 60
    finally:
        os.kill(int(pidfile.read_text()), 9)


def test_an_interrupted_wait_kills_the_child(tmp_path, monkeypatch):
    pidfile = tmp_path / "child"
    real = proc.spawn

    def spawn_then_interrupt(*a, **kw):
        p = real(*a, **kw)
        pidfile.write_text(str(p.pid))

        calls = []
        first = p.communicate

        def communicate(timeout=None):  # the wait is interrupted once; the reap goes through
            calls.append(timeout)
            if len(calls) == 1:
                raise KeyboardInterrupt
            return first(timeout=timeout)
        monkeypatch.setattr(p, "communicate", communicate)
        return p
    monkeypatch.setattr(proc, "spawn", spawn_then_interrupt)
    with pytest.raises(KeyboardInterrupt):
        proc.run([sys.executable, "-c", "import time; time.sleep(300)"], timeout=60, reap_s=1)
    pid = int(pidfile.read_text())
    deadline = time.monotonic() + 10
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(pid)


def test_a_program_that_cannot_start_raises_oserror(tmp_path):
    with pytest.raises(OSError):
        proc.run([str(tmp_path / "no-such-program")], timeout=5)
