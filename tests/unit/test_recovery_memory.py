"""Escalation with memory: the recovery service remembers, per node and per hardware identity,
the reboots it did for a failing check; after [escalation] reboots_not_cleared of them (2) the
same check failing again skips the reboot and asks for the replacement. The pure rule, the
policy file's keys, and the service over several cases against a real SQLite store, with the
hardware identity read from the node's own document in the shared directory."""

from __future__ import annotations

import io

import pytest

from airlock import finish
from airlock.config import loader as config
from airlock.errors import ConfigError
from airlock.records.results import NodeResults
from airlock.recovery import machine as m
from airlock.recovery import policy as pol
from airlock.recovery.journal import Journal
from airlock.recovery.providers import Provider
from airlock.recovery.service import Service, hardware_of
from airlock.recovery.store import RecoveryStore
from airlock.slurm import reasons
from airlock.slurm.client import Node
from airlock.status import collect as status

POLICY = pol.load()
DAY = 86400.0
ECC = "airlock: FAIL ecc gpu3 2 DRAM uncorrectable"


def reboot(node, at, check="ecc", keys=()):
    return m.Reboot(node, check, at, frozenset(keys))


def test_memory_counts_by_node_since_its_replacement_and_by_hardware_anywhere():
    mem = m.Memory((reboot("n1", 10 * DAY), reboot("n1", 11 * DAY, keys={"gpu:A"}),
                    reboot("n1", 11 * DAY, check="xid"), reboot("n9", 12 * DAY, keys={"gpu:B"})),
                   {}, {"n1": frozenset({"gpu:A"}), "n2": frozenset({"gpu:B"})})
    assert mem.not_cleared("n1", "ecc", 12 * DAY, 7 * DAY) == 2
    assert mem.not_cleared("n1", "ecc", 18 * DAY, 7 * DAY) == 1  # one left the window
    # n2 holds the GPU that was rebooted in n9: the hardware's memory follows it
    assert mem.not_cleared("n2", "ecc", 12 * DAY, 7 * DAY) == 1
    replaced = m.Memory(mem.reboots, {"n1": 10.5 * DAY}, {})
    assert replaced.not_cleared("n1", "ecc", 12 * DAY, 7 * DAY) == 1


def opened(count: int, ladder_check: str = "gpu_count", **policy_toml):
    reboots = tuple(reboot("n1", 100 + i, check=ladder_check) for i in range(count))
    mem = m.Memory(reboots, {}, {"n1": frozenset({"instance:i-0abc"})})
    o = m.Obs("n1", f"airlock: FAIL {ladder_check} 7 GPUs", True, False, "2026-01-01T00:00:00")
    return m.plan(None, o, 1000.0, POLICY, None, memory=mem)


def test_two_reboots_that_did_not_clear_skip_the_reboot():
    one = opened(1)
    assert one.case.next_action == "reboot" and one.case.not_cleared == 1
    assert one.case.hardware == ("instance:i-0abc",)
    two = opened(2)
    assert two.case.state == m.DETECTED and two.case.next_action == "replace"
    assert two.case.not_cleared == 2
    assert ("memory", "2 reboots within 604800s did not clear gpu_count on this node or its "
                      "hardware (limit 2): skipping the reboot; next: replace") in two.events
    # a class whose ladder has nothing after the reboot: a person
    remap = m.Memory((reboot("n1", 1, "row_remap"), reboot("n1", 2, "row_remap")), {}, {})
    o = m.Obs("n1", "airlock: FAIL row_remap gpu1 row remap pending", True, False, "")
    step = m.plan(None, o, 10.0, POLICY, None, memory=remap)
    assert step.case.state == m.MANUAL and "nothing after the reboot" in step.events[-1][1]


def test_the_limit_is_policy_data(tmp_path):
    text = POLICY_TEXT.replace("reboots_not_cleared = 2", "reboots_not_cleared = 3")
    p = pol.parse(text, "site")
    assert p.escalation.reboots == 3
    p = pol.parse(text + '\n[[class]]\nname = "x"\nchecks = ["*"]\nladder = ["reboot"]\n'
                  'reboots_not_cleared = 0\n', "site")
    assert p.reboot_limit(p.classes[-1]) == 0
    with pytest.raises(ConfigError, match="reboots_not_cleared must be a whole number"):
        pol.parse(text.replace("reboots_not_cleared = 3", "reboots_not_cleared = -1"), "x")
    with pytest.raises(ConfigError, match=r"\[escalation\]: unknown key 'reboots'"):
        pol.parse(text.replace("reboots_not_cleared = 3", "reboots = 3"), "x")


POLICY_TEXT = (pol.resources.files("airlock.recovery") / "policy.toml").read_text()


# --- the service, over several cases --------------------------------------------------------
class World:
    """A node seen by the service poll after poll: its reason, drain and boot, and a clock."""

    def __init__(self, tmp_path):
        self.now = 10 * DAY
        self.cfg = config.from_dict({
            "state_dir": str(tmp_path / "state" / "{node}"),
            "shared_dir": str(tmp_path / "shared"),
            "recovery": {"db": str(tmp_path / "recovery.db"), "detect_grace": 0,
                         "cooldown": 0, "refail_window": 3600}})
        self.store = RecoveryStore(self.cfg.recovery.db)
        self.svc = Service(self.cfg, None, self.store, Provider(), Provider(),
                           Journal(self.store, io.StringIO()), clock=lambda: self.now)
        self.boot_at = self.now - DAY
        self.reason = ""

    def obs(self) -> m.Obs:
        drained = bool(self.reason)
        return m.Obs("n1", self.reason, drained, False, m.format_slurm_time(self.boot_at))

    def poll(self) -> m.Decision:
        cases = self.store.cases()
        ledger = self.store.ledger(self.now, 3600, 600)
        obs, memory = self.svc.documents(cases, {"n1": self.obs()}, self.now)
        d = m.decide(cases, list(obs.values()), self.now, self.svc.policy, self.svc.settings,
                     ledger, memory=memory)
        self.svc.commit_decision(cases, d, self.now, ledger, {})
        return d

    def publish(self, serials: list[str], instance: str = "i-0abc") -> None:
        """The node's registration run, with its drift check's identity, in the shared dir."""
        run = finish.summarize("n1", "standard", "boot", [
            {"check": "drift", "verdict": "pass", "detail": "",
             "figures": {"facts": {}, "identity": {"instance": instance, "gpus": serials}}}],
            self.now)
        finish.record_run(self.cfg, "n1", run)

    def fails_and_gets(self) -> str:
        """The node fails ecc; the service acts: the action it asked for."""
        self.reason = ECC
        for _ in range(3):
            d = self.poll()
            if d.starts:
                (node, action), = d.starts
                self.reason = reasons.Reason("recover", action, "x").format()
                return action
            self.now += 60
        raise AssertionError(f"no action: {self.store.case('n1')}")

    def reboots_and_passes(self) -> None:
        self.now += 120
        self.boot_at = self.now - 30
        self.reason = "airlock: pending standard check boot"
        self.poll()  # the new boot
        self.reason = ""
        self.now += 60
        self.poll()  # healthy
        self.now += 3700
        self.poll()  # stayed healthy through the refail window: done


def test_after_two_reboots_that_did_not_clear_ecc_the_third_failure_is_a_replace(tmp_path):
    w = World(tmp_path)
    w.publish(["165000001", "165000002"])
    assert hardware_of(w.cfg, ["n1"]) == {"n1": frozenset({"instance:i-0abc", "gpu:165000001",
                                                           "gpu:165000002"})}
    assert w.fails_and_gets() == "reboot"
    w.reboots_and_passes()
    assert w.store.case("n1").state == m.DONE
    w.now += DAY
    assert w.fails_and_gets() == "reboot"  # one reboot did not clear it: not yet
    assert w.store.case("n1").not_cleared == 1
    w.reboots_and_passes()
    w.now += DAY
    assert w.fails_and_gets() == "replace"
    case = w.store.case("n1")
    assert case.not_cleared == 2
    history = [(h["event"], h["detail"]) for h in w.store.history("n1")]
    assert any(e == "memory" and "skipping the reboot; next: replace" in d for e, d in history)
    # airlock status shows the count
    assert status.recovery_memory(w.cfg) == {"n1": {"ecc": 2}}
    row = status.node_status(Node(name="n1", state="IDLE", flags=frozenset({"DRAIN"}),
                                  reason=w.reason), NodeResults("n1"),
                             status.recovery_states(w.cfg)["n1"],
                             not_cleared=status.recovery_memory(w.cfg)["n1"])
    assert row["not_cleared"] == {"ecc": 2} and row["recovery"] == "replace_requested"
    text = status.render({"nodes": [row], "summary": dict.fromkeys(status.STATES, 0),
                          "stuck": 0, "errors": 0})
    assert "Escalation memory (reboots that did not clear the failing check):\n  n1 ecc: 2 " \
           "reboots did not clear it" in text


def test_the_memory_follows_the_hardware_and_a_replacement_starts_the_node_afresh(tmp_path):
    w = World(tmp_path)
    w.publish(["GPU-A"])
    for _ in range(2):
        assert w.fails_and_gets() == "reboot"
        w.reboots_and_passes()
        w.now += DAY
    # the node is replaced: new hardware under the same name starts from nothing
    with w.store.tx() as db:
        w.store.remember(db, "n1", "replace", "ecc", (), w.now)
    w.publish(["GPU-NEW"], instance="i-0new")
    w.now += 60
    assert w.fails_and_gets() == "reboot"


def test_a_replacement_that_brings_back_the_same_hardware_keeps_its_memory(tmp_path):
    w = World(tmp_path)
    w.publish(["GPU-A"], instance="i-0abc")
    for _ in range(2):
        assert w.fails_and_gets() == "reboot"
        w.reboots_and_passes()
        w.now += DAY
    # "replaced", but the provider handed back the same instance and GPUs: the node's memory
    # starts afresh, the hardware's does not
    with w.store.tx() as db:
        w.store.remember(db, "n1", "replace", "ecc", (), w.now)
    assert w.fails_and_gets() == "replace"


# --- the memory follows the published hardware identity, never a placeholder ----------------
def test_new_hardware_under_a_reused_name_starts_afresh_and_the_history_says_so():
    # swapped outside the service (the cloud, a person, a timed-out replace): no replace row
    old = {"instance:i-0old", "gpu:GPU-A"}
    mem = m.Memory((reboot("n1", 100, "gpu_count", old), reboot("n1", 200, "gpu_count", old)),
                   {}, {"n1": frozenset({"instance:i-0new", "gpu:GPU-B"})})
    assert mem.not_cleared("n1", "gpu_count", 1000.0, 7 * DAY) == 0
    o = m.Obs("n1", "airlock: FAIL gpu_count 7 GPUs", True, False, "2026-01-01T00:00:00")
    step = m.plan(None, o, 1000.0, POLICY, None, memory=mem)
    assert step.case.next_action == "reboot" and step.case.not_cleared == 0
    assert ("memory", "the hardware under n1 changed since 2 earlier reboots for gpu_count "
                      "(was instance:i-0old, now instance:i-0new): its memory starts afresh"
            ) in step.events
    # the same hardware keeps its count, under any name
    same = m.Memory(mem.reboots, {}, {"n7": frozenset(old)})
    assert same.not_cleared("n7", "gpu_count", 1000.0, 7 * DAY) == 2


@pytest.mark.parametrize("placeholder", [
    "03000200-0400-0500-0006-000700080009", "00000000-0000-0000-0000-000000000000",
    "FFFFFFFF-FFFF-FFFF-FFFF-FFFFFFFFFFFF", "0000000000", "Not Specified",
    "to be filled by o.e.m.", "DEFAULT STRING", " Default string "])
def test_placeholder_identities_are_never_shared_keys(placeholder):
    assert m.hardware_keys("n1", [f"instance:{placeholder}", "gpu:1650000001"]) == (
        frozenset({f"instance:{placeholder}@n1", "gpu:1650000001"}),
        (f"instance:{placeholder}",))
    assert m.hardware_keys("n1", ["instance:i-0abc"]) == (frozenset({"instance:i-0abc"}), ())


def test_boards_sharing_the_placeholder_uuid_share_no_memory():
    uuid = "03000200-0400-0500-0006-000700080009"
    mem = m.Memory.build(
        (m.Reboot("n1", "ecc", 100, frozenset({f"instance:{uuid}"})),
         m.Reboot("n1", "ecc", 200, frozenset({f"instance:{uuid}"}))),
        {}, {"n1": frozenset({f"instance:{uuid}"}), "n2": frozenset({f"instance:{uuid}"})})
    assert mem.not_cleared("n2", "ecc", 1000.0, 7 * DAY) == 0  # another board, same placeholder
    assert mem.not_cleared("n1", "ecc", 1000.0, 7 * DAY) == 2  # by name with its placeholder
    o = m.Obs("n2", ECC, True, False, "2026-01-01T00:00:00")
    step = m.plan(None, o, 1000.0, POLICY, None, memory=mem)
    assert step.case.next_action == "reboot"
    assert ("memory", f"placeholder identity instance:{uuid} is no hardware key: counted with "
                      "the node name n2") in step.events


def test_the_service_starts_a_swapped_node_afresh(tmp_path):
    w = World(tmp_path)
    w.publish(["GPU-A"], instance="i-0abc")
    for _ in range(2):
        assert w.fails_and_gets() == "reboot"
        w.reboots_and_passes()
        w.now += DAY
    # a person swapped the board under the same name: no replace the service knows of
    w.publish(["GPU-NEW"], instance="i-0new")
    assert w.fails_and_gets() == "reboot"
    history = [h["detail"] for h in w.store.history("n1") if h["event"] == "memory"]
    assert any("changed since 2 earlier reboots for ecc" in d for d in history), history
