"""The recovery policy names only failures that can happen, and a finding the node's own run
document types as configuration is left to an operator (issue 25, items 10 and "policy")."""

from __future__ import annotations

import io

import pytest

from airlock import finish
from airlock.checks.registry import CHECKS
from airlock.config import loader as config
from airlock.errors import ConfigError
from airlock.recovery import machine as m
from airlock.recovery import policy as pol
from airlock.recovery.journal import Journal
from airlock.recovery.providers import Provider
from airlock.recovery.service import Service
from airlock.recovery.store import RecoveryStore

POLICY = pol.load()
TAIL = '\n[[class]]\nname = "default"\nchecks = ["*"]\nladder = ["reboot"]\n'


def test_the_shipped_policy_names_only_checks_that_exist():
    """main's policy.toml named gpu_health, nccl, gemm, filesystem, network, dns and ntp: no
    check of Airlock's has those names, so those lines classified nothing."""
    known = {c.name for c in CHECKS} | {"group_allreduce", "registration"}
    other = set(getattr(POLICY, "other_checks", ()))
    named = {c for cls in POLICY.classes for c in cls.checks if c != "*"}
    assert named - known - other == set()


def test_an_unknown_check_in_a_policy_is_a_one_line_config_error():
    text = '[[class]]\nname = "x"\nchecks = ["gpu_helth"]\nladder = ["replace"]\n' + TAIL
    with pytest.raises(ConfigError) as err:
        pol.parse(text, "site.toml")
    assert str(err.value) == ("recovery policy site.toml: class #1 (x): unknown check "
                              "'gpu_helth' (not an Airlock check; list another tool's subjects "
                              "in other_checks)")
    # another tool's subject, listed as such, is accepted
    p = pol.parse('other_checks = ["gpu_helth"]\n' + text, "site.toml")
    assert p.other_checks == ("gpu_helth",) and p.classes[0].checks == ("gpu_helth",)
    # an own-error subject never opens a case: naming it is a mistake, said so
    with pytest.raises(ConfigError, match=r"class #1 \(x\): 'config' is Airlock's own error"):
        pol.parse(text.replace("gpu_helth", "config"), "site.toml")
    with pytest.raises(ConfigError, match="other_checks must be a list of names"):
        pol.parse('other_checks = "gpu_helth"\n' + text, "site.toml")
    with pytest.raises(ConfigError, match=r"other_checks: 'xid' is an Airlock check"):
        pol.parse('other_checks = ["xid"]\n' + text, "site.toml")


# --- a configuration-class finding: needs an operator, never a reboot or a replace ----------
DCGM = "airlock: FAIL dcgm persistence mode disabled on gpu0 (nvidia-smi -pm 1)"


def test_a_configuration_finding_needs_an_operator():
    lim = None  # opening a case reads no limits
    o = m.Obs("n1", DCGM, True, False, m.format_slurm_time(-1000))
    hw = m.plan(None, o, 0.0, POLICY, lim)
    assert hw.case.ladder  # the same reason, untyped: the node's trouble, the default ladder
    cfg = m.plan(None, o._replace(kind="config"), 0.0, POLICY, lim)
    assert cfg.case.failure_class == "needs-operator" and cfg.case.ladder == ()


def test_a_policy_class_by_kind_is_data_and_kinds_are_validated():
    p = pol.parse('[[class]]\nname = "op"\nkinds = ["config"]\nladder = []\n' + TAIL, "s")
    assert p.classify("xid", "79", "config").name == "op"
    assert p.classify("xid", "79", "").name == "default"
    with pytest.raises(ConfigError, match=r"class #1 \(op\): unknown kind 'hardware' "
                                          r"\(known: config\)"):
        pol.parse('[[class]]\nname = "op"\nkinds = ["hardware"]\nladder = []\n' + TAIL, "s")


def test_the_service_leaves_a_node_failed_for_configuration_to_an_operator(tmp_path):
    """The node's own run document types its failed check as a configuration finding (the
    check record's kind); the service opens a case that asks for no action, and never
    reboots or replaces the node, however long it waits."""
    now = [10 * 86400.0]
    cfg = config.from_dict({
        "state_dir": str(tmp_path / "state" / "{node}"), "shared_dir": str(tmp_path / "shared"),
        "recovery": {"db": str(tmp_path / "recovery.db"), "detect_grace": 0, "cooldown": 0}})
    store = RecoveryStore(cfg.recovery.db)
    svc = Service(cfg, None, store, Provider(), Provider(), Journal(store, io.StringIO()),
                  clock=lambda: now[0])
    run = finish.summarize("n1", "quick", "periodic", [
        {"check": "dcgm", "verdict": "fail", "finding": "config",
         "detail": "persistence mode disabled on gpu0 (nvidia-smi -pm 1)", "figures": {}}],
        now[0])
    finish.record_run(cfg, "n1", run)
    obs = {"n1": m.Obs("n1", DCGM, True, False, m.format_slurm_time(now[0] - 86400))}
    for _ in range(3):
        cases = store.cases()
        seen, memory = svc.documents(cases, obs, now[0])
        d = m.decide(cases, list(seen.values()), now[0], svc.policy, svc.settings,
                     store.ledger(now[0], 3600, 600), memory=memory)
        svc.commit_decision(cases, d, now[0])
        assert d.starts == []
        now[0] += 600
    case = store.case("n1")
    assert case.failure_class == "needs-operator" and case.state == m.MANUAL
    assert store.actions() == []
    events = [(h["event"], h["detail"]) for h in store.history("n1")]
    assert ("manual", "class needs-operator: no automatic action, left drained for a person") \
        in events


def test_a_configuration_finding_after_a_reboot_waits_for_an_operator_not_the_next_rung():
    o = m.Obs("n1", DCGM, True, False, m.format_slurm_time(500))
    case = m.plan(None, o, 0.0, POLICY, None).case
    assert case.ladder == ("reboot", "replace")
    rebooted = case.to(m.REBOOTED, 600.0, action="reboot")
    untyped = m.plan(rebooted, o, 700.0, POLICY, None)
    assert untyped.case.state == m.DETECTED and untyped.case.next_action == "replace"
    typed = m.plan(rebooted, o._replace(kind="config"), 700.0, POLICY, None)
    assert typed.case.state == m.MANUAL and typed.want is None
    assert typed.events == [("manual", "failed again after reboot: dcgm persistence mode "
                                       "disabled on gpu0 (nvidia-smi -pm 1) (kind config, class "
                                       "needs-operator): no automatic action, left drained for "
                                       "a person")]


def test_the_kind_is_read_from_the_failed_checks_record_and_validated():
    from airlock.recovery.service import failure_kind

    run = {"failed_check": "dcgm", "checks": [
        {"check": "nvml", "verdict": "pass", "finding": "config"},
        {"check": "dcgm", "verdict": "fail", "finding": "config"}]}
    assert failure_kind(run) == ("dcgm", "config")
    assert failure_kind({**run, "failed_check": "nvml"}) == ("nvml", "config")
    odd = {**run, "checks": [{"check": "dcgm", "finding": "operator"}]}
    assert failure_kind(odd) == ("dcgm", "")
    assert failure_kind({"failed_check": None, "checks": run["checks"]}) == ("", "")
    assert failure_kind({"failed_check": "dcgm", "checks": "x"}) == ("dcgm", "")
