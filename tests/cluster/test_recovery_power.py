"""The slurm-power provider against real Slurm power saving: a State=CLOUD node of the dev
cluster fails its registration checks, the recovery service forces a power-down (the cluster's
SuspendProgram releases the instance), powers it up again (ResumeProgram boots a new one), and
the new instance passes its checks and goes back into service."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys

import pytest

from airlock.dev.cluster import healthy_gpus
from airlock.dev.demo import fast_recovery
from tests.cluster.recovery_db import case_state, db_rows

pytestmark = pytest.mark.cluster

CLOUD = "node5"


def power_config(tmp_path) -> dict:
    policy = tmp_path / "policy.toml"
    # a lost GPU goes straight to a new instance: exactly one power cycle, no reboot first
    policy.write_text('[[class]]\nname = "gpu-lost"\nchecks = ["gpu_count"]\n'
                      'ladder = ["replace"]\n\n'
                      '[[class]]\nname = "default"\nchecks = ["*"]\nladder = ["reboot"]\n')
    rec = fast_recovery(
        tmp_path / "recovery.db", provider="slurm-power", policy=str(policy),
        reboot_timeout=45.0, verdict_timeout=60.0,
        refail_window=120.0)  # the case stays "healthy" (not "done") while the test looks
    return {"registration": {"level": "quick"}, "recovery": rec}


def history(db) -> list[tuple[str, str]]:
    try:
        return db_rows(db, "SELECT event, detail FROM history WHERE node=? ORDER BY id", (CLOUD,))
    except sqlite3.OperationalError:
        return []


def ctld_lines(cluster, text: str) -> int:
    log = (cluster.root / "log" / "slurmctld.log").read_text()
    return sum(1 for line in log.splitlines() if line.rstrip().endswith(text))


def test_failed_cloud_node_is_power_cycled_into_a_new_instance(cluster_factory, tmp_path):
    cluster = cluster_factory(start=False, nodes=["node1"], cloud=[CLOUD],
                              airlock=power_config(tmp_path))
    cluster.write_files()
    cluster.set_node_sim(CLOUD, gpus=healthy_gpus(7))  # this instance lost a GPU, for good
    cluster.start(wait=True)
    db = tmp_path / "recovery.db"
    n = cluster.node(CLOUD)
    assert {"CLOUD", "POWERED_DOWN"} <= n.flags and cluster.slurmd_pid(CLOUD) is None

    with open(tmp_path / "service.log", "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "airlock", "recover", "--interval", "0.5"],
                                env=cluster.env(), stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL)
        try:
            cluster.slurm.scontrol("update", f"nodename={CLOUD}", "state=power_up")
            first_pid = cluster.wait(lambda: cluster.slurmd_pid(CLOUD), 20, "first instance")
            first = cluster.wait(lambda: (lambda x: x if x.boot_time else None)(
                cluster.node(CLOUD)), 30, "first instance registered")
            cluster.wait(lambda: case_state(db, CLOUD) is not None, 30,
                         "first instance failed and a case opened")

            def back_in_service():  # a resume leaves NOT_RESPONDING until slurmd re-registers
                node = cluster.node(CLOUD)
                return case_state(db, CLOUD) == "healthy" and node.state == "IDLE" \
                    and node.flags == {"CLOUD"} and not node.reason_in_force and node
            try:
                node = cluster.wait(back_in_service, 75, f"{CLOUD} replaced and healthy")
            except TimeoutError as exc:
                raise AssertionError(f"{exc}: Slurm {cluster.node(CLOUD).state_text}, case "
                                     f"{case_state(db, CLOUD)}, history {history(db)}") from None
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                proc.wait(10)

    # Slurm: a new instance (new boot, new slurmd), up and in service, nothing left over
    assert node.boot_time and node.boot_time != first.boot_time
    assert cluster.slurmd_pid(CLOUD) not in (None, first_pid)
    # the SuspendProgram ended the first instance: the new slurmd found none to replace
    assert "killing old slurmd" not in (cluster.root / "log" / f"slurmd-{CLOUD}.log").read_text()
    assert ctld_lines(cluster, f"powering down node {CLOUD}") == 1
    assert ctld_lines(cluster, f"powering up node {CLOUD}") == 2  # first instance, replacement
    assert len(cluster.read_sim()[CLOUD]["gpus"]) == 8  # the released instance took its fault
    # the recovery database: one replace through slurm-power, one POWER_UP follow-up
    assert db_rows(db, "SELECT kind, via, status FROM actions") == \
        [("replace", "slurm-power", "done")]
    hist = history(db)
    events = [e for e, _ in hist]
    expected = ["detected", "request", "issued", "follow_up", "booted", "healthy"]
    it = iter(events)
    assert all(e in it for e in expected), events  # in this order
    assert [d for e, d in hist if e == "follow_up"] == ["state=POWER_UP"]
    assert "gpu_count" in dict(hist)["detected"]
    assert "POWER_DOWN_FORCE" in dict(hist)["issued"]
    assert not cluster.node("node1").drained
