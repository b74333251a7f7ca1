"""The warm process the isolated checks are forked from (airlock/forkserver.py): a forked child
is what `python -m MODULE ARGS` would be, it is killed whole at the deadline, nothing outlives
the caller, and a lost server is never a check's verdict."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from airlock.checks import registry
from airlock.checks.base import Verdict
from airlock.checks.context import Context
from airlock.config import loader as config
from airlock.dev.cluster import _ppid  # the dev cluster's reading of /proc/PID/stat
from airlock.forkserver import ForkServer, Unavailable
from tests.unit.procstate import alive


@pytest.fixture
def mods(tmp_path, monkeypatch):
    """A folder of modules for the children to run, on the server's PYTHONPATH."""
    (tmp_path / "probe.py").write_text(textwrap.dedent("""\
        import os
        with open(os.environ["PROBE_LOG"], "a") as fh:  # one line per import of this module
            fh.write(f"{os.getpid()}\\n")
        """))
    (tmp_path / "child.py").write_text(textwrap.dedent("""\
        import json, os, sys
        import probe  # noqa: F401
        print(json.dumps({"argv": sys.argv[1:], "name": __name__, "env": os.environ.get("X"),
                          "sid": os.getsid(0), "pid": os.getpid(),
                          "stdin": sys.stdin.read(), "comm": open("/proc/self/comm").read()}))
        print("to stderr", file=sys.stderr)
        sys.exit(int(sys.argv[1]))
        """))
    (tmp_path / "forks_and_hangs.py").write_text(textwrap.dedent("""\
        import subprocess, sys, time
        kid = subprocess.Popen(["sleep", "300"])  # in the check's session
        print(kid.pid, flush=True)
        time.sleep(300)
        """))
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}:{os.environ.get('PYTHONPATH', '')}",
           "PROBE_LOG": str(tmp_path / "probe.log"), "X": "from the caller"}
    return tmp_path, env


def test_a_forked_child_is_python_dash_m_in_a_session_of_its_own(mods):
    import json

    path, env = mods
    server = ForkServer(sys.executable, env, ["probe"])
    try:
        kids = []
        for code in (0, 3):
            kid = server.spawn("child", [str(code), "two"], env, title="check burnin")
            out, err = kid.stdout.read(), kid.stderr.read()
            assert kid.wait(30) == code
            kids.append((json.loads(out), err))
        for got, err in kids:
            assert got["name"] == "__main__" and got["env"] == "from the caller"
            assert got["sid"] == got["pid"]  # its own session: killpg reaches all of it
            assert got["stdin"] == ""  # /dev/null, never the server's socket
            assert err == "to stderr\n"
            assert got["comm"] == "check burnin\n"  # what ps -o comm shows
        assert [k[0]["argv"] for k in kids] == [["0", "two"], ["3", "two"]]
        # the preloaded module was imported once, by the server, never by a child
        assert (path / "probe.log").read_text().split() == [str(server._proc.pid)]
    finally:
        server.close()
    assert server._proc.returncode == 0


def test_the_deadline_kills_the_child_s_whole_session(mods):
    _, env = mods
    server = ForkServer(sys.executable, env, [])
    try:
        kid = server.spawn("forks_and_hangs", [], env)
        grandchild = int(kid.stdout.readline())
        with pytest.raises(subprocess.TimeoutExpired):
            kid.wait(0.5)
        kid.kill_group()
        assert kid.returncode == -signal.SIGKILL
        deadline = time.monotonic() + 5
        while alive(grandchild) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not alive(kid.pid) and not alive(grandchild)
    finally:
        server.close()


def test_a_caller_that_dies_leaves_nothing_running(mods, tmp_path):
    """SIGKILL the caller while its check runs: the server reads EOF, kills the check's session
    and exits."""
    _, env = mods
    caller = tmp_path / "caller.py"
    caller.write_text(textwrap.dedent("""\
        import os, sys
        from airlock.forkserver import ForkServer
        s = ForkServer(sys.executable, dict(os.environ), [])
        kid = s.spawn("forks_and_hangs", [], dict(os.environ))
        print(s._proc.pid, kid.pid, kid.stdout.readline().strip(), flush=True)
        os.kill(os.getpid(), 9)
        """))
    out = subprocess.run([sys.executable, str(caller)], env=env, capture_output=True, text=True,
                         timeout=60)
    pids = [int(p) for p in out.stdout.split()]
    assert len(pids) == 3, out
    deadline = time.monotonic() + 10
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert [p for p in pids if alive(p)] == []


def test_a_lost_server_is_unavailable_and_its_child_is_ended(mods):
    _, env = mods
    server = ForkServer(sys.executable, env, [])
    kid = server.spawn("forks_and_hangs", [], env)
    grandchild = int(kid.stdout.readline())
    os.kill(server._proc.pid, signal.SIGKILL)
    with pytest.raises(Unavailable, match="fork server lost"):
        kid.wait(10)
    with pytest.raises(Unavailable):
        server.spawn("child", ["0"], env)
    deadline = time.monotonic() + 5
    while alive(grandchild) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(grandchild)
    server.close()


@pytest.fixture
def cfg(tmp_path):
    path = tmp_path / "airlock.toml"
    path.write_text(f'state_dir = "{tmp_path}/state"\n')
    return config.load(path)


def test_isolated_checks_share_one_server_per_environment(cfg, monkeypatch):
    from airlock import runner

    runner._drop_server()
    ctx = Context.create(cfg, "n1", "standard")
    outs = [runner.run_isolated(registry.by_name("cuda"), ctx, 60) for _ in range(2)]
    server = runner._SERVER
    assert server is not None and server._proc.poll() is None
    assert [o.check for o in outs] == ["cuda", "cuda"]
    assert outs[0].verdict == outs[1].verdict
    runner._drop_server()
    assert server._proc.returncode == 0


def test_without_a_server_the_check_starts_on_its_own(cfg, monkeypatch, capsys):
    """The server cannot start: the check still runs, as a program of its own, and the log says
    why; the outcome is the check's, as it would be with the server."""
    from airlock import forkserver, runner

    def refuse(*a, **k):
        raise Unavailable("could not start: refused for the test")

    runner._drop_server()
    ctx = Context.create(cfg, "n1", "standard")
    warm = runner.run_isolated(registry.by_name("cuda"), ctx, 60)
    runner._drop_server()
    monkeypatch.setattr(forkserver, "ForkServer", refuse)
    cold = runner.run_isolated(registry.by_name("cuda"), ctx, 60)
    assert "isolated check started on its own: could not start: refused" in \
        capsys.readouterr().err
    assert (cold.check, cold.verdict, cold.detail) == (warm.check, warm.verdict, warm.detail)
    assert cold.verdict is not Verdict.PASS  # a CPU-only torch: no GPU proven here


def test_a_hung_check_is_killed_at_its_deadline_while_the_server_lives_on(cfg, monkeypatch):
    """The deadline kills the forked check itself, then and there: not later, when the suite
    exits and its server kills whatever is left."""
    from airlock import runner

    monkeypatch.setenv("AIRLOCK_FAULTS", "hang_check=cuda")
    runner._drop_server()
    ctx = Context.create(cfg, "n1", "standard")
    runner.run_isolated(registry.by_name("pcie_bw"), ctx, 60)  # the server, warm
    out = runner.run_isolated(registry.by_name("cuda"), ctx, 3)
    server = runner._SERVER
    try:
        assert out.timed_out and out.verdict is Verdict.FAIL, out
        assert server is not None and server._proc.poll() is None
        kids = [p for p in os.listdir("/proc") if p.isdigit() and _ppid(int(p)) ==
                server._proc.pid]
        assert kids == [], "the hung check outlived its deadline"
    finally:
        runner._drop_server()


def test_a_server_that_hangs_in_its_imports_is_the_check_s_timeout(cfg, monkeypatch, tmp_path):
    """torch's import hangs (a stuck shared filesystem): with the server, the check times out
    as it would have in an import of its own, the server is killed, and the suite goes on."""
    from airlock import runner

    (tmp_path / "hangs_on_import.py").write_text("import time\ntime.sleep(300)\n")
    monkeypatch.setenv("PYTHONPATH", f"{tmp_path}:{os.environ.get('PYTHONPATH', '')}")
    monkeypatch.setattr(runner, "PRELOAD", ("hangs_on_import",))
    runner._drop_server()
    ctx = Context.create(cfg, "n1", "standard")
    started = time.monotonic()
    out = runner.run_isolated(registry.by_name("cuda"), ctx, 2)
    assert out.timed_out and time.monotonic() - started < 10, out
    assert runner._SERVER is None
