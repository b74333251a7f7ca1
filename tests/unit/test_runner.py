"""The runner's time budget: a check that did not get its time is not a hardware verdict.

Issue 17: a slow but passing check used up the hook's budget; the next check got max(left, 0.5)
seconds, timed out, and was drained as `airlock: FAIL mounts timeout (suite budget) after 0s`,
which recovery then rebooted. A check that got no time (or had its time cut by the budget and
ran out of it) is "error": Airlock's own trouble, named, never a FAIL.
"""

from __future__ import annotations

import time

import pytest

from airlock import config, finish
from airlock.checks import registry
from airlock.checks.base import Verdict, passed
from airlock.runner import run_level


def slow_pass(ctx):
    time.sleep(0.2)
    return passed("slow", "took its time")


def hangs(ctx):
    time.sleep(30)
    return passed("hangs", "never gets here in the budget")


def quick_pass(ctx):
    return passed("quick_one", "fine")


def _specs(monkeypatch, *specs):
    monkeypatch.setattr(registry, "for_level", lambda level, only=None: list(specs))


SLOW = registry.CheckSpec("slow", registry.ALL, f"{__name__}:slow_pass", timeout=5)
HANGS = registry.CheckSpec("hangs", registry.ALL, f"{__name__}:hangs", timeout=20)
QUICK = registry.CheckSpec("quick_one", registry.ALL, f"{__name__}:quick_pass", timeout=5)


@pytest.fixture
def cfg(tmp_path):
    return config.from_dict({"state_dir": str(tmp_path / "state")})


def test_a_check_left_without_time_is_not_run_and_not_a_failure(cfg, monkeypatch):
    _specs(monkeypatch, SLOW, QUICK)

    def slurm_was_slow(spec):  # the suite's isolation re-check before a check, say
        if spec.name == "quick_one":
            time.sleep(0.5)

    records, _ = run_level(cfg, "n1", "quick", deadline=time.monotonic() + 0.5,
                           before_check=slurm_was_slow)
    slow, starved = records
    assert slow["verdict"] == "pass"
    assert starved["verdict"] == "error", starved
    assert starved["detail"].startswith("not run: budget spent"), starved["detail"]
    assert starved["attempts"] == 0
    run = finish.summarize("n1", "quick", "periodic", records, time.time())
    assert run["verdict"] == "error" and run["failed_check"] is None
    assert run["unseen"] == ["quick_one"]
    assert "quick_one" in run["detail"]


def test_a_check_cut_short_by_the_budget_is_inconclusive(cfg, monkeypatch):
    _specs(monkeypatch, HANGS)
    records, _ = run_level(cfg, "n1", "quick", deadline=time.monotonic() + 1.5)
    (rec,) = records
    assert rec["verdict"] == "error", rec
    assert "budget" in rec["detail"] and "no verdict" in rec["detail"], rec["detail"]


def test_a_check_that_had_its_full_time_and_hung_still_fails(cfg, monkeypatch):
    hung = HANGS._replace(timeout=1)
    _specs(monkeypatch, hung)
    records, _ = run_level(cfg, "n1", "quick", deadline=time.monotonic() + 60)
    (rec,) = records
    assert rec["verdict"] == "fail" and rec["detail"] == "timeout after 1s", rec


def test_error_ranks_below_fail_and_above_warn():
    from airlock.checks.base import Outcome, worst

    def o(v):
        return Outcome("c", v)

    assert worst([o(Verdict.WARN), o(Verdict.ERROR)]) is Verdict.ERROR
    assert worst([o(Verdict.ERROR), o(Verdict.FAIL)]) is Verdict.FAIL
    assert worst([o(Verdict.PASS), o(Verdict.SKIP)]) is Verdict.PASS
