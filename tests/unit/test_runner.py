"""The runner's time budget: a check that did not get its time is not a hardware verdict.

Issue 17: a slow but passing check used up the hook's budget; the next check got max(left, 0.5)
seconds, timed out, and was drained as `airlock: FAIL mounts timeout (suite budget) after 0s`,
which recovery then rebooted. A check that got no time (or had its time cut by the budget and
ran out of it) is "error": Airlock's own trouble, named, never a FAIL.
"""

from __future__ import annotations

import json
import time

import pytest

from airlock import finish
from airlock.checks import registry
from airlock.checks.base import Verdict, passed
from airlock.config import loader as config
from airlock.runner import run_level
from tests.unit.fakenode import wait_for


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


# --- what the hooks do with a run that did not see everything (docs/guide.md) -----------------
# The last quick check hangs; the hook's budget cuts its slice short, so it ends without a
# verdict: the run is "error", never a pass and never a hardware failure.
STARVED = {"hang_check": "memory"}


@pytest.mark.parametrize("hook, rc", [("healthcheck", 1), ("prolog", 0)])
def test_a_proven_node_is_never_drained_for_a_check_without_time(fake_node, hook, rc):
    """Proven boot: open. No drain, the job runs, the run is stored as "error", and the gap is
    the hook's own error (errors.json, from there status, metrics and doctor)."""
    node = fake_node(faults=STARVED)
    node.prove()
    node.write_config(f"[{hook}]\nbudget = 1.5\n")
    out = node.run(hook)
    assert out.returncode == rc, out.stderr
    assert node.slurm.updates() == [] and node.slurm.node("n1")["reason"] == ""
    errors = json.loads((node.root / "state" / "errors.json").read_text())
    # (memory, or on a machine slow enough, a check before it too: whatever had no time)
    message = errors[hook]["message"]
    assert message.startswith(f"fail open: {hook} not seen: ") and "memory (" in message, errors
    latest = json.loads((node.root / "state" / "latest.json").read_text())
    assert latest["verdict"] == "error" and "memory" in latest["unseen"], latest


def test_a_registration_without_time_for_a_check_is_no_proof(fake_node):
    """Unproven boot: closed. The registration run that did not see every check stays drained
    with an own-error reason (`airlock: FAIL suite not seen: ...`) and proves nothing: the
    prolog still refuses jobs."""
    node = fake_node(faults=STARVED)
    node.write_config('[registration]\nlevel = "quick"\nsuite_timeout = 3\n')
    out = node.run("healthcheck")
    assert out.returncode == 0, out.stderr
    wait_for(lambda: (node.record() or {}).get("status") == "done", 60, "the suite's verdict")
    record = node.record()
    assert record["verdict"] == "error", record
    wait_for(lambda: not node.record()["slurm_pending"], 30, "the suite's drain")
    n1 = node.slurm.node("n1")
    assert "DRAIN" in n1["flags"], n1
    reason = n1["reason"]
    assert reason.startswith("airlock: FAIL suite not seen: ") and "memory (" in reason, n1
    refused = node.run("prolog")
    assert refused.returncode == 1 and "refused, this boot is not proven" in refused.stderr
