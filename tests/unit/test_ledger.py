"""The ledger computed from recorded histories with known answers (airlock/ledger)."""

from __future__ import annotations

import pytest

from airlock.config.sections.ledger import LedgerSection
from airlock.errors import AirlockError
from airlock.ledger import caught, cost, report, value, window
from airlock.ledger.history import Action, History, NodeView, Release

H = 3600.0
T0 = 1_700_000_000.0


def run(node, at, verdict="pass", trigger="boot", level="standard", check="burnin",
        checks=None, duration=None):
    recs = checks if checks is not None else [{"check": check, "verdict": verdict,
                                               "duration_s": 60.0}]
    return {"node": node, "run_id": f"20231114T221320-1-{node}", "level": level,
            "trigger": trigger, "started_at": at - (duration or 60.0), "finished_at": at,
            "duration_s": duration or 60.0, "verdict": verdict,
            "failed_check": check if verdict == "fail" else None, "checks": recs}


def history(runs, actions=(), releases=(), nodes=None, **kw):
    nodes = nodes or {n: NodeView(8, True) for n in {r["node"] for r in runs}}
    return History(T0, T0 + 30 * 86400, runs=list(runs), actions=list(actions),
                   releases=list(releases), nodes=nodes, **kw)


def only(h, settings=None):
    eps = caught.episodes(h, (settings or LedgerSection()).recur_window_hours * H)
    assert len(eps) == 1, eps
    return eps[0]


# --- what became of a failure -----------------------------------------------------------------
def test_a_failure_whose_next_check_passes_with_no_action_is_overturned():
    h = history([run("n1", T0 + H, "fail", trigger="periodic", level="quick", check="nvml"),
                 run("n1", T0 + 3 * H)])
    e = only(h)
    assert (e.outcome, e.check, e.stage) == (caught.OVERTURNED, "nvml", "periodic")
    assert caught.held_hours(e, h.end) == (2.0, 0.0)


def test_a_person_resuming_without_a_reboot_overturns_the_failure():
    h = history([run("n1", T0 + H, "fail")], releases=[Release("n1", T0 + 1.5 * H)])
    assert only(h).outcome == caught.OVERTURNED


def test_a_reboot_then_a_pass_confirms_and_a_recurrence_within_the_window_reverts_it():
    h = history([run("n1", T0 + H, "fail", check="memtest"), run("n1", T0 + 3 * H)],
                actions=[Action("n1", "reboot", T0 + 2 * H)], nodes={"n1": NodeView(8, False)})
    e = only(h)
    assert e.outcome == caught.CONFIRMED
    assert caught.held_hours(e, h.end) == (1.0, 1.0)
    h.runs.append(run("n1", T0 + 50 * H, "fail", check="memtest"))
    eps = caught.episodes(h, LedgerSection().recur_window_hours * H)
    assert [x.outcome for x in eps] == [caught.RECURRED, caught.OPEN]


def test_the_same_check_failing_after_a_reboot_is_a_recurrence():
    h = history([run("n1", T0 + H, "fail", check="gemm"),
                 run("n1", T0 + 2.5 * H, "fail", check="gemm"),
                 run("n1", T0 + 5 * H)],
                actions=[Action("n1", "reboot", T0 + 2 * H), Action("n1", "replace", T0 + 3 * H)])
    eps = caught.episodes(h, 168 * H)
    assert [(x.outcome, x.actions) for x in eps] == [
        (caught.RECURRED, [("reboot", T0 + 2 * H)]),
        (caught.CONFIRMED, [("replace", T0 + 3 * H)])]


def test_a_replacement_confirms_and_repeats_before_any_action_are_one_fault():
    h = history([run("n1", T0 + H, "fail", trigger="periodic", level="quick", check="ecc"),
                 run("n1", T0 + 1.2 * H, "fail", trigger="periodic", level="quick", check="ecc"),
                 run("n1", T0 + 4 * H)],
                actions=[Action("n1", "replace", T0 + 2 * H)])
    e = only(h)
    assert (e.outcome, e.repeats, e.how) == (caught.CONFIRMED, 1, "replaced; the replacement "
                                                                   "passed")
    assert caught.held_hours(e, h.end) == pytest.approx((1.0, 2.0))


def test_an_own_error_is_counted_apart_and_never_a_failure():
    h = history([run("n1", T0 + H, "error"), run("n1", T0 + 2 * H)])
    found = caught.summary(caught.episodes(h, H), h)
    assert found["failures"] == 0 and found["own_errors"] == {"registration": 1}


def test_an_unanswered_failure_on_a_drained_node_stays_open_and_holds_it_to_the_end():
    h = history([run("n1", T0 + H, "fail")], nodes={"n1": NodeView(4, False)})
    e = only(h)
    assert e.outcome == caught.OPEN
    assert caught.held_hours(e, h.end) == (30 * 24 - 1.0, 0.0)
    assert cost.held_out([e], h)["by_failed_checks_gpu_hours"] == pytest.approx(4 * 719.0)


def test_slurm_showing_the_node_back_without_a_reboot_overturns():
    h = history([run("n1", T0 + H, "fail")], nodes={"n1": NodeView(8, True, boot=T0)})
    assert only(h).outcome == caught.OVERTURNED
    h = history([run("n1", T0 + H, "fail")], nodes={"n1": NodeView(8, True, boot=T0 + 2 * H)})
    assert only(h).outcome == caught.CONFIRMED


def test_false_positive_estimate_per_check_has_its_interval():
    runs = []
    for node in ("a", "b", "c", "d"):
        runs += [run(node, T0 + H, "fail", check="nvml"), run(node, T0 + 3 * H)]
    h = history(runs, actions=[Action("a", "reboot", T0 + 2 * H)])
    fp = caught.summary(caught.episodes(h, H), h)["false_positive"]["nvml"]
    assert (fp["overturned"], fp["resolved"], fp["estimate"]) == (3, 4, 0.75)
    assert fp["low"] < 0.75 < fp["high"]


# --- cost ---------------------------------------------------------------------------------------
def test_hours_in_checks_by_stage_and_level_count_check_time_not_the_wait():
    recs = [{"check": "burnin", "verdict": "pass", "duration_s": 1800.0},
            {"check": "group_allreduce", "verdict": "pass", "duration_s": 1800.0}]
    h = history([run("n1", T0 + 2 * H, checks=recs, duration=2 * 3600.0),
                 run("n2", T0 + H, "fail", trigger="periodic", level="quick", check="nvml")],
                nodes={"n1": NodeView(8, True), "n2": NodeView(4, True)})
    rows = {(r["stage"], r["level"]): r for r in cost.in_checks(h)}
    assert rows[("registration", "standard")]["node_hours"] == 1.0
    assert rows[("registration", "standard")]["gpu_hours"] == 8.0
    assert rows[("periodic", "quick")]["gpu_hours"] == pytest.approx(4 * 60 / 3600, abs=1e-4)
    b = cost.boot_to_service(h)
    assert (b["isolation_wait"]["median"], b["checks"]["median"],
            b["group_tests"]["median"]) == (3600.0, 1800.0, 1800.0)


def test_unkept_periodic_passes_are_estimated_and_say_so():
    latest = {"n1": run("n1", T0, trigger="periodic", level="quick", check="nvml",
                        checks=[{"check": "nvml", "verdict": "pass", "duration_s": 0.5}])}
    h = history([run("n1", T0 + H)], latest=latest, health_check_interval=300.0)
    est = [r for r in cost.in_checks(h) if r["estimated"]]
    assert len(est) == 1 and est[0]["runs"] == 30 * 24 * 12
    assert est[0]["node_hours"] == pytest.approx(8640 * 0.5 / 3600, abs=1e-3)


# --- value --------------------------------------------------------------------------------------
def test_balance_is_a_range_from_the_inputs():
    s = LedgerSection(job_gpus=[8.0, 64.0], job_hours=[10.0, 10.0],
                      checkpoint_minutes=[60.0, 120.0], restart_minutes=[0.0, 0.0],
                      utilization=[0.5, 1.0])
    h = history([run("n1", T0 + H, "fail"), run("n1", T0 + 3 * H)],
                actions=[Action("n1", "replace", T0 + 2 * H)])
    doc = report.compute(h, s)
    v = doc["value"]
    assert v["loss_per_interruption_gpu_hours"] == [4.0, 64.0]  # 8x0.5h, 64x1h
    assert v["caught_per_month"] == [1.0, 1.0]
    assert v["saved_gpu_hours_per_month"] == [2.0, 64.0]
    low, high = v["balance_gpu_hours_per_month"]
    assert low < high
    assert "llama 3" in v["expected"]["source"].lower()
    assert "cost:" in report.summary_lines(doc)[0]
    assert "ADVICE  standard" in report.render(doc)
    assert b"airlock_ledger_failures{check=\"burnin\",outcome=\"confirmed\"} 1.0" \
        in report.metrics_text(doc)


def test_public_rates_sum_to_the_llama3_count():
    from airlock.ledger import sources

    total = sum(c for c, _n, _g in sources.LLAMA3.values())
    assert total == 419
    rates = value.rates(LedgerSection(failure_rates={"gpu": 1.0}))[0]
    assert rates["gpu"] == 1.0 and rates["hbm"] == pytest.approx(72 / 21.233664, rel=1e-6)


# --- bad input: one line --------------------------------------------------------------------------
@pytest.mark.parametrize("text", ["", "30", "3x", "-1d", "0d", "401d", "1e9d"])
def test_an_unknown_since_is_one_line(text):
    with pytest.raises(AirlockError) as exc:
        window.parse_since(text)
    assert str(exc.value).startswith("--since:") and "\n" not in str(exc.value)


def test_since_units():
    assert window.parse_since("30d") == 30 * 86400
    assert window.parse_since("1.5h") == 5400
    assert window.parse_since("2w") == 14 * 86400


@pytest.mark.parametrize("raw, words", [
    ({"utilization": [0.5, 1.5]}, "utilization: must be between 0 and 1"),
    ({"job_gpus": [64.0, 8.0]}, "job_gpus: low 64 is above high 8"),
    ({"checkpoint_minutes": [30.0]}, "checkpoint_minutes: must be [low, high]"),
    ({"jobs": "slurmdbd"}, "jobs: must be one of"),
    ({"failure_rates": {"gpu": -1.0}}, "failure_rates.gpu"),
])
def test_a_model_input_out_of_range_is_one_config_line(raw, words):
    from airlock.config import loader as config

    with pytest.raises(config.ConfigError) as exc:
        config.from_dict({"ledger": raw})
    assert "[ledger]" in str(exc.value) and words in str(exc.value)
    assert "\n" not in str(exc.value)
