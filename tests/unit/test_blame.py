"""Blame by type, at the source (issue 25, item 2): a check's FAIL comes only from the node's
own measurement. What kept Airlock from measuring (its config, a secret, the rendezvous, a child
it could not start, Slurm) is inconclusive, typed where it happens (an exception class, an
Outcome field), never read back from message text."""

from __future__ import annotations

import itertools
import stat
import sys

import pytest

from airlock.checks import registry
from airlock.checks.base import Verdict, failed, passed
from airlock.config import loader as config
from airlock.errors import ConfigError, NodeNotFound, SlurmError
from airlock.runner import run_isolated, run_level
from airlock.slurm.client import Slurm

_COUNT = itertools.count()


def raises_config(ctx):
    raise ConfigError("config /etc/airlock/airlock.toml: [flaps] unknown key 'x'")


def raises_slurm(ctx):
    raise SlurmError("scontrol show node: slurm_load_node error: Unable to contact slurm "
                     "controller (connect failure)")


def needs_a_missing_module(ctx):
    import airlock_no_such_module  # noqa: F401  (Airlock's own dependency, not installed)


def timeout_word_then_pass(ctx):
    """A real measurement whose words happen to hold "timeout": a counter that moved once."""
    if ctx.attempt == 1:
        return failed("flappy", "PCIe replay timeout counter rose by 3")
    return passed("flappy", "no replay timeouts")


def fails_then_cannot_measure(ctx):
    if ctx.attempt == 1:
        return failed("unconfirmed", "gpu3 12 mismatches")
    raise SlurmError("scontrol show node: timed out after 3 s")


def _specs(monkeypatch, *specs):
    monkeypatch.setattr(registry, "for_level", lambda level, only=None: list(specs))


@pytest.fixture
def cfg(tmp_path):
    return config.from_dict({"state_dir": str(tmp_path / "state")})


@pytest.mark.parametrize("target", ["raises_config", "raises_slurm", "needs_a_missing_module"])
def test_airlock_s_own_trouble_inside_a_check_is_inconclusive_not_a_fail(cfg, monkeypatch,
                                                                         target):
    _specs(monkeypatch, registry.CheckSpec("own", registry.ALL, f"{__name__}:{target}",
                                           timeout=5))
    (record,), _ = run_level(cfg, "n1", "quick")
    assert record["verdict"] == Verdict.ERROR, record


def test_a_failure_whose_words_say_timeout_is_still_confirmed(cfg, monkeypatch):
    """main stopped confirming any failure whose detail held the word "timeout": a measured
    counter named after a timeout failed the node on one reading."""
    _specs(monkeypatch, registry.CheckSpec("flappy", registry.ALL,
                                           f"{__name__}:timeout_word_then_pass", timeout=5))
    (record,), _ = run_level(cfg, "n1", "quick")
    assert record["verdict"] == Verdict.WARN and record["attempts"] == 2, record


def test_a_failure_its_confirmation_could_not_measure_is_not_flaky(cfg, monkeypatch):
    """A confirmation that measured nothing neither confirms nor clears the first failure: the
    check is inconclusive naming it, never "flaky: failed then passed" (a warning, a pass)."""
    _specs(monkeypatch, registry.CheckSpec("unconfirmed", registry.ALL,
                                           f"{__name__}:fails_then_cannot_measure", timeout=5))
    (record,), _ = run_level(cfg, "n1", "quick")
    assert record["verdict"] == Verdict.ERROR, record
    assert "gpu3 12 mismatches" in record["detail"]


def test_a_child_that_cannot_load_its_config_is_inconclusive(tmp_path):
    """The isolated check's own process could not load the config (rewritten since the parent
    loaded it): Airlock's own error, not the check's FAIL ("died: airlock: config ...")."""
    path = tmp_path / "airlock.toml"
    path.write_text(f'state_dir = "{tmp_path}/state"\n')
    cfg = config.load(path)
    path.write_text("[slurm\n")
    from airlock.checks.context import Context

    ctx = Context.create(cfg, "n1", "standard")
    out = run_isolated(registry.by_name("cuda"), ctx, 60)
    assert out.verdict is Verdict.ERROR, out


def test_a_child_that_cannot_be_started_is_inconclusive(cfg, monkeypatch):
    from airlock.checks.context import Context

    monkeypatch.setattr(sys, "executable", "/nonexistent/python")
    out = run_isolated(registry.by_name("cuda"), Context.create(cfg, "n1", "standard"), 10)
    assert out.verdict is Verdict.ERROR, out


def test_a_runner_timeout_is_typed_not_read_from_the_detail(cfg, monkeypatch):
    _specs(monkeypatch, registry.CheckSpec("hangs", registry.ALL,
                                           "tests.unit.test_runner:hangs", timeout=0.3))
    (record,), _ = run_level(cfg, "n1", "quick")
    assert record["verdict"] == Verdict.FAIL and record.get("timed_out") is True, record
    assert record["attempts"] == 1  # a hang is not re-run to confirm


def _scontrol(tmp_path, body: str) -> Slurm:
    d = tmp_path / f"bin{next(_COUNT)}"
    d.mkdir()
    p = d / "scontrol"
    p.write_text("#!/bin/sh\n" + body + "\n")
    p.chmod(p.stat().st_mode | stat.S_IEXEC)
    return Slurm(bin_dir=str(d))


def test_only_slurm_s_own_unknown_node_lines_mean_an_unknown_node(tmp_path):
    """main took any failure whose last line held "not found" for an unknown node: a site's
    scontrol wrapper missing a tool read as "Slurm does not know this node"."""
    s = _scontrol(tmp_path, 'echo "/usr/local/bin/scontrol: line 3: munge: command not found" '
                            '>&2; exit 127')
    with pytest.raises(SlurmError) as exc:
        s.scontrol("show", "node", "n1")
    assert not isinstance(exc.value, NodeNotFound), exc.value
    s = _scontrol(tmp_path, 'echo "slurm_update error: Invalid node name specified" >&2; exit 1')
    with pytest.raises(NodeNotFound):
        s.scontrol("update", "nodename=zz", "state=resume")


# --- the group all-reduce: a member that cannot take part is not its node's failure -----------
def _member_without_secret(tmp_path, secret_file: str) -> dict:
    """A member's launcher, as groupcheck.run_member starts it, judged as run_member judges
    it."""
    import subprocess

    from airlock import collective as dist
    from airlock.checks import groupcheck

    argv = dist.worker_argv("127.0.0.1", 1, 2, 1, 1, node="bbb", secret_file=secret_file,
                            sizes=[4096], timeout=5, faults="")
    import os

    env = {**os.environ, "AIRLOCK_CONFIG": str(tmp_path / "none")}
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env)
    return groupcheck.judge(dist.parse_report(proc.stdout), proc.returncode, proc.stderr, 0,
                            0.5, 5)


def test_a_member_whose_leader_left_no_secret_is_inconclusive(tmp_path):
    """Issue 25 item 2: anyone who can write the shared directory can play leader and leave no
    secret file; main counted the member's launcher failing on it as a definite failure."""
    answer = _member_without_secret(tmp_path, str(tmp_path / "batch" / "secret"))
    assert answer["ok"] is False and answer["inconclusive"] is True, answer
    assert "secret" in answer["detail"]


def test_a_member_launcher_that_airlock_itself_misconfigured_is_inconclusive(tmp_path):
    """Arguments Airlock got wrong (here message sizes it cannot parse) measured nothing: the
    launcher says so by its exit code, and the member is inconclusive, not failed."""
    import os
    import subprocess

    from airlock import collective as dist
    from airlock.checks import groupcheck

    argv = dist.worker_argv("127.0.0.1", 1, 2, 1, 1, node="bbb", timeout=5,
                            faults="") + ["--sizes", "lots"]
    env = {**os.environ, "AIRLOCK_CONFIG": str(tmp_path / "none")}
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env)
    answer = groupcheck.judge(dist.parse_report(proc.stdout), proc.returncode, proc.stderr, 0,
                              0.5, 5)
    assert answer["inconclusive"] is True and "--sizes" in answer["detail"], (answer,
                                                                            proc.stderr)


@pytest.mark.parametrize("errno_", ["EACCES", "ESTALE", "ENOENT"])
def test_a_secret_that_cannot_be_read_is_typed_where_it_is_read(tmp_path, monkeypatch, errno_):
    """root_squash (EACCES) or a stale NFS handle (ESTALE) on the batch secret: the member could
    not take part, typed as such (SecretUnavailable), never a verdict on its node."""
    import errno
    import os

    from airlock.collective import rendezvous
    from airlock.errors import Unmeasured

    code = getattr(errno, errno_)

    def refuse(path, flags, *a, **kw):
        raise OSError(code, os.strerror(code), path)

    monkeypatch.setattr(rendezvous.os, "open", refuse)
    with pytest.raises(rendezvous.SecretUnavailable) as exc:
        rendezvous.read_secret_file(str(tmp_path / "secret"))
    assert isinstance(exc.value, Unmeasured)


def test_a_group_that_cannot_meet_is_inconclusive_for_every_member_by_type():
    """The launcher marks a failed rendezvous in a field of its report; the judge reads that
    field, not the words of the rank errors."""
    from airlock.checks import groupcheck

    base = {"rank_offset": 1, "local_ranks": 1, "world_size": 2, "backend": "gloo",
            "timeout": 2.0, "ranks": [], "timed_out": False, "progress": {}, "leftover": []}
    met_not = {**base, "node": "bbb", "errors": {"1": "the group's host never answered"},
               "unmeasured": "rendezvous: the group's host 10.0.0.1:29500 never answered"}
    answer = groupcheck.judge(met_not, 1, "", 0, 0.5, 2)
    assert answer["inconclusive"] is True and not answer["ok"], answer
    # a rank error that merely starts with the word is a rank's failure like any other
    crashed = {**base, "node": "bbb", "errors": {"1": "rendezvous: RuntimeError in a rank"}}
    answer = groupcheck.judge(crashed, 1, "", 0, 0.5, 2)
    assert answer["inconclusive"] is False and not answer["ok"], answer


def test_a_controller_that_does_not_answer_is_typed_where_slurm_s_output_is_read(tmp_path):
    """hooks/gate.py retried a drain while slurmctld did not answer by grepping the error's
    words; the Slurm client now says so by type (SlurmUnreachable), the one place that reads
    scontrol's output."""
    from airlock.errors import SlurmUnreachable

    down = _scontrol(tmp_path, 'echo "slurm_update error: Unable to contact slurm controller '
                               '(connect failure)" >&2; exit 1')
    with pytest.raises(SlurmUnreachable):
        down.scontrol("update", "nodename=n1", "state=drain", "reason=x")
    slow = _scontrol(tmp_path, "sleep 5")
    slow.timeout = 0.3
    with pytest.raises(SlurmUnreachable, match="timed out"):
        slow.scontrol("show", "node", "n1")
    refused = _scontrol(tmp_path, 'echo "slurm_update error: Invalid node state specified" >&2; '
                                  "exit 1")
    with pytest.raises(SlurmError) as exc:
        refused.scontrol("update", "nodename=n1", "state=resume")
    assert not isinstance(exc.value, SlurmUnreachable)
