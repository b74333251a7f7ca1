"""A hook spends its Slurm calls within the time Slurm gives it (issue 19).

slurmd kills its HealthCheckProgram after HealthCheckTimeout (26.05; 60 s before, and when
unset), and registers the node only once the program ended. A boot-time hook killed while
scontrol waited for an absent controller left neither a drain nor a record (measured on 26.05
with HealthCheckTimeout=4; tests/cluster/test_fault_matrix.py runs that scenario on the real
daemons of every release). So: the hook reads its time from slurm.conf (airlock.slurm.conf),
records the boot's suite first, cuts each Slurm call to the time left, retries a drain only
while slurmctld does not answer and time lasts, starts the suite, and leaves the rest to it."""

from __future__ import annotations

import time

import pytest

from airlock.config import loader as config
from airlock.errors import SlurmError
from airlock.hooks import gate
from airlock.hooks.common import Hook
from airlock.slurm import conf as slurmconf
from airlock.slurm.client import Slurm
from tests.unit.fakeslurm import FakeSlurm


# --- slurm.conf, read as Slurm reads it ----------------------------------------------------------
def test_settings_follow_includes_ignore_case_and_comments_and_the_last_one_wins(tmp_path):
    (tmp_path / "conf.d").mkdir()
    (tmp_path / "conf.d" / "airlock.conf").write_text(
        "# HealthCheckTimeout=1\nhealthchecktimeout=7   # the fragment's\n")
    main = tmp_path / "slurm.conf"
    main.write_text("ClusterName=x\nHealthCheckTimeout=3\nInclude conf.d/airlock.conf\n"
                    "NodeName=n1 HealthCheckTimeout=9 CPUs=1\nInclude /nonexistent/x.conf\n"
                    "PrologEpilogTimeout=45\n")
    assert slurmconf.settings(str(main), ("HealthCheckTimeout", "PrologEpilogTimeout")) == {
        "healthchecktimeout": "7", "prologepilogtimeout": "45"}
    assert slurmconf.health_check_timeout(str(main)) == 7.0
    assert slurmconf.hook_timeout("prolog", str(main)) == 45.0


def test_include_loops_end(tmp_path):
    loop = tmp_path / "slurm.conf"
    loop.write_text(f"Include {loop}\nHealthCheckTimeout=5\n")
    assert slurmconf.health_check_timeout(str(loop)) == 5.0


@pytest.mark.parametrize("text, seconds", [
    ("", 60.0),                          # unset: Slurm's default, and the fixed limit before 26.05
    ("HealthCheckTimeout=4\n", 4.0),
    ("HealthCheckTimeout=0\n", 60.0),    # Slurm resets 0 to the default
    ("HealthCheckTimeout=soon\n", 60.0),
])
def test_health_check_timeout(tmp_path, text, seconds):
    conf = tmp_path / "slurm.conf"
    conf.write_text(text)
    assert slurmconf.health_check_timeout(str(conf)) == seconds


def test_no_slurm_conf_is_slurm_s_default(tmp_path, monkeypatch):
    monkeypatch.setattr(slurmconf, "DEFAULT_PATHS", (str(tmp_path / "none"),))
    monkeypatch.delenv("SLURM_CONF", raising=False)
    assert slurmconf.find("") == ""
    assert slurmconf.health_check_timeout("") == 60.0
    assert slurmconf.hook_timeout("prolog", "") is None  # Slurm waits forever
    conf = tmp_path / "slurm.conf"
    conf.write_text("PrologEpilogTimeout=65534\n")  # how Slurm shows "unset"
    monkeypatch.setenv("SLURM_CONF", str(conf))
    assert slurmconf.find("") == str(conf)
    assert slurmconf.hook_timeout("epilog", "") is None


# --- the client cuts each call to the time left -----------------------------------------------
def test_no_call_starts_without_time_left(tmp_path):
    fake = FakeSlurm(tmp_path / "slurm", nodes=["n1"])
    client = Slurm(bin_dir=fake.bin_dir, timeout=15, deadline=time.monotonic() + 0.05)
    with pytest.raises(SlurmError, match="not started, no time left"):
        client.node("n1")
    assert fake.calls() == []


def test_a_call_is_cut_at_the_deadline_not_at_the_client_timeout(tmp_path):
    fake = FakeSlurm(tmp_path / "slurm", nodes=["n1"])
    fake.fail("show", mode="hang")  # a controller that never answers
    client = Slurm(bin_dir=fake.bin_dir, timeout=15, deadline=time.monotonic() + 1.0)
    with pytest.raises(SlurmError, match=r"timed out after (0\.\d+|1) s"):
        client.node("n1")


# --- the boot-time hook: record first, drain within its time -----------------------------------
class Clocked(Hook):
    """A hook whose time left is scripted, to count drain attempts without waiting."""

    def __init__(self, node, left):
        super().__init__("healthcheck", node.name)
        self.cfg = config.load(node.conf)
        self._left = iter(left)

    def time_left(self) -> float:
        return next(self._left)

    def deadline(self) -> float:
        # The real one counts from this process's start: a pytest worker older than Slurm's
        # 60 s would have none left, and the test would depend on which tests ran before it.
        return time.monotonic() + 60.0


def test_drain_is_retried_while_slurmctld_does_not_answer_and_time_lasts(fake_node, monkeypatch):
    node = fake_node()
    monkeypatch.setattr(gate, "RETRY_S", 0.0)
    node.slurm.fail("show", times=2)  # slurmctld back at the third try
    assert gate.isolate_in_time(Clocked(node, [9.0, 9.0]), "quick", "new") == "drained"
    assert len(node.slurm.calls("show")) == 3 and len(node.slurm.calls("update")) == 1
    node.slurm.set("n1", state="IDLE", flags=[], reason="")
    node.slurm.fail("show")  # never back: tries until the hook's time is spent
    said = gate.isolate_in_time(Clocked(node, [9.0, 5.0, 0.8]), "quick", "new")
    assert said.startswith("drain failed (scontrol -o --future: slurm_load_node error: Unable "
                           "to contact slurm controller") and "left to the suite" in said
    assert len(node.slurm.calls("show")) == 3 + 3


def test_a_refusal_is_not_retried(fake_node):
    node = fake_node()
    node.slurm.fail("update", text="slurm_update error: Invalid node state specified")
    said = gate.isolate_in_time(Clocked(node, [9.0] * 5), "quick", "new")
    assert "Invalid node state specified" in said and len(node.slurm.calls("update")) == 1


def test_boot_hook_records_its_suite_and_ends_within_its_time_while_slurmctld_hangs(fake_node):
    """The scenario of issue 19 with a fake controller that never answers: HealthCheckTimeout=3
    in slurm.conf, and the hook run under a 3 s kill as slurmd runs it. It is not killed, and
    it leaves the boot's record and a started suite behind (the drain is the suite's now)."""
    node = fake_node()
    conf = node.root / "slurm.conf"
    conf.write_text("HealthCheckInterval=5\nHealthCheckTimeout=3\n")
    text = node.conf.read_text().replace("[slurm]\n", f'[slurm]\nconf = "{conf}"\n')
    node.conf.write_text(text)
    node.slurm.fail("show", mode="hang")
    out = node.run("healthcheck", prefix=("timeout", "3"))
    assert out.returncode != 124, ("killed at HealthCheckTimeout", out.stderr)
    record = node.record()
    assert record is not None and record["status"] == "running" and record["trigger"] == "new"
    line = node.log("healthcheck").strip().splitlines()[-1]
    # the adopt query (is it running jobs?) had half the time, the drain the rest
    assert line.count("timed out after") == 1 and "new: drain failed (scontrol -o --future: " \
        "timed out after" in line, line
    assert "left to the suite" in line and record["run_id"] in line
