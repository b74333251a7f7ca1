"""The recovery service against the real Slurm test cluster and a cloud on loopback."""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import sys
import time

import pytest

from airlock.dev.cloud import FakeCloud
from airlock.dev.cluster import healthy_gpus
from airlock.dev.demo import fast_recovery
from airlock.recovery.store import RecoveryStore
from tests.cluster.conftest import RELEASES
from tests.cluster.recovery_db import case_state, db_rows

pytestmark = pytest.mark.cluster


def recovery_config(tmp_path, cloud: FakeCloud, level: str = "quick", **over) -> dict:
    token = tmp_path / "token"
    token.write_text(cloud.token + "\n")
    token.chmod(0o600)  # the provider refuses a token file others can read
    rec = fast_recovery(
        tmp_path / "recovery.db", provider="http", reboot_timeout=45.0, replace_timeout=45.0,
        verdict_timeout=60.0,
        http={"url": cloud.url, "token_file": str(token), "timeout": 1.0, "retries": 3,
              "backoff": 0.1, "backoff_max": 1.0})
    rec.update(over)
    return {"registration": {"level": level},
            "burnin": {"cpu_size": 64, "cpu_iterations": 2}, "recovery": rec}


def start_service(cluster, faults: str = "", log=None, config=None) -> subprocess.Popen:
    env = cluster.env(**({"AIRLOCK_CONFIG": str(config)} if config else {}))
    env.pop("AIRLOCK_FAULTS", None)
    if faults:
        env["AIRLOCK_FAULTS"] = faults
    return subprocess.Popen([sys.executable, "-m", "airlock", "recover", "--interval", "0.5"],
                            env=env, stdout=log or subprocess.DEVNULL, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL)


def stop_service(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def reboots_queued(cluster, node: str) -> int:
    log = (cluster.root / "log" / "slurmctld.log").read_text()
    return sum(1 for line in log.splitlines()
               if "reboot request queued for nodes" in line and line.rstrip().endswith(node))


def service_events(log_path, event: str) -> list[dict]:
    lines = log_path.read_text().splitlines() if log_path.exists() else []
    return [e for e in map(json.loads, filter(None, lines)) if e.get("event") == event]


def polls(db) -> int:
    try:
        return db_rows(db, "SELECT polls FROM heartbeat")[0][0]
    except (sqlite3.OperationalError, IndexError):
        return 0


def healthy_and_free(cluster, db, node):
    n = cluster.node(node)
    return case_state(db, node) == "healthy" and not n.drained and not n.reason_in_force \
        and n.state == "IDLE"


# On every release, and 24.11 also with slurmdbd accounting: the reboot -> re-check -> resume
# path, where 24.11 without it keeps every reason (FAIL, recover, pending) on the node and 22.05
# and 26.05 clear them.
@pytest.mark.slurm_variants("22.05", "24.11", "24.11-dbd", "26.05")
def test_reboot_fails_again_then_replace_through_http_cloud(cluster_factory, tmp_path):
    cloud = FakeCloud().start()
    cluster = cluster_factory(start=False, nodes=["node1", "node2", "node3"],
                              airlock=recovery_config(tmp_path, cloud))
    cloud.cluster = cluster
    cluster.write_files()
    cluster.set_node_sim("node2", gpus=healthy_gpus(7))  # gpu_count fails on every run
    cluster.start(wait=True)
    db = tmp_path / "recovery.db"
    with open(tmp_path / "service.log", "wb") as out:
        proc = start_service(cluster, log=out)
        try:
            cluster.wait(lambda: healthy_and_free(cluster, db, "node2"), 80,
                         "node2 replaced, healthy")
        finally:
            stop_service(proc)
            cloud.stop()
    actions = db_rows(db, "SELECT kind, via, status FROM actions WHERE node='node2' ORDER BY id")
    assert actions == [("reboot", "slurm", "done"), ("replace", "http", "done")]
    assert db_rows(db, "SELECT COUNT(*) FROM actions WHERE node != 'node2'") == [(0,)]
    assert reboots_queued(cluster, "node2") == 1
    assert len(cloud.posts("replace", "node2")) == 1 and not cloud.posts("reboot")
    assert all(p["authorized"] for p in cloud.posts())
    events = [e for (e,) in db_rows(db, "SELECT event FROM history WHERE node='node2' "
                                        "ORDER BY id")]
    expected = ["detected", "request", "issued", "booted", "escalate", "request", "issued",
                "booted", "healthy"]
    it = iter(events)
    assert all(e in it for e in expected), events  # in this order
    # the token never reaches a log line or the database
    assert cloud.token not in (tmp_path / "service.log").read_text()
    assert cloud.token not in db.read_bytes().decode(errors="replace")
    for other in ("node1", "node3"):
        assert not cluster.node(other).drained


def test_sigkill_at_every_step_one_reboot_one_replace(cluster_factory, tmp_path):
    cloud = FakeCloud().start()
    cluster = cluster_factory(start=False, nodes=["node1", "node2"],
                              airlock=recovery_config(tmp_path, cloud))
    cloud.cluster = cluster
    cluster.write_files()
    cluster.set_node_sim("node2", gpus=healthy_gpus(7))
    cluster.start(wait=True)
    db = tmp_path / "recovery.db"

    def snapshot():
        try:
            return (case_state(db, "node2"),
                    tuple(db_rows(db, "SELECT id, status FROM actions ORDER BY id")))
        except sqlite3.OperationalError:
            return (None, ())

    # The first two processes kill themselves at the worst moments: right after an intent is
    # committed (nothing sent yet), and right after the cloud accepted a replace (not recorded).
    crash_points = ["recover_crash=after_intent:reboot", "recover_crash=after_submit:replace"]
    kills, self_killed, deadline = 0, 0, time.monotonic() + 85
    try:
        while not healthy_and_free(cluster, db, "node2"):
            assert time.monotonic() < deadline, f"flow did not finish: {snapshot()}"
            faults = crash_points.pop(0) if crash_points else ""
            before = snapshot()
            proc = start_service(cluster, faults)
            # A process armed with a crash point must reach it: it dies by its own hand, not
            # by ours at the first state change (that would disarm the point it was given).
            while proc.poll() is None and (faults or snapshot() == before) \
                    and not healthy_and_free(cluster, db, "node2") \
                    and time.monotonic() < deadline:
                time.sleep(0.05)
            ours = proc.poll() is None
            if ours:
                proc.send_signal(signal.SIGKILL)  # kill -9 right after a step
                kills += 1
            proc.wait()
            if faults:
                assert not ours and proc.returncode == -signal.SIGKILL, faults
                self_killed += 1
    finally:
        cloud.stop()
    # The armed processes run several steps each; every other process dies by SIGKILL at its
    # first state change (how many there are depends on how many steps one process completes
    # before the test sees a change: at least one is killed by us).
    assert self_killed == 2 and kills >= 1
    actions = db_rows(db, "SELECT kind, status FROM actions WHERE node='node2' ORDER BY id")
    assert actions == [("reboot", "done"), ("replace", "done")]
    assert reboots_queued(cluster, "node2") == 1
    executed = [p for p in cloud.posts("replace", "node2") if p.get("executed")]
    assert len(executed) == 1
    assert len(cloud.posts("replace")) == 1  # the restart asked (GET) instead of re-sending
    events = [e for (e,) in db_rows(db, "SELECT event FROM history WHERE node='node2'")]
    assert "resend" in events  # the intent that was never sent got sent once, after restart


# Every release: 24.11 without accounting keeps the old FAIL reason on the resumed node, which
# must read as history, not as Airlock's failure in force.
@pytest.mark.slurm_variants(*RELEASES)
def test_an_intent_left_by_a_kill_is_not_sent_to_a_node_a_person_resumed(cluster_factory,
                                                                           tmp_path):
    """The service journals a reboot for node2 and is SIGKILLed before sending it; a person
    fixes the node and returns it to service; the restarted service re-decides the intent on
    Slurm's view: no reboot reaches the node, and the history says why."""
    db = tmp_path / "recovery.db"
    cluster = cluster_factory(start=False, nodes=["node1", "node2"],
                              airlock={"registration": {"level": "quick"},
                                       "recovery": fast_recovery(db)})
    cluster.write_files()
    cluster.set_node_sim("node2", gpus=healthy_gpus(7))
    cluster.start(wait=True)
    proc = start_service(cluster, "recover_crash=after_intent:reboot")
    assert proc.wait(60) == -signal.SIGKILL
    assert db_rows(db, "SELECT kind, status FROM actions") == [("reboot", "intent")]
    # The person's fix and `scontrol update state=resume`; the node's hook re-checks it.
    cluster.set_node_sim("node2", gpus=healthy_gpus(8))
    cluster.run(["scontrol", "update", "nodename=node2", "state=resume"])
    cluster.wait(lambda: not cluster.node("node2").drained, 30, "node2 resumed")
    log = tmp_path / "service.log"
    with open(log, "wb") as out:
        proc = start_service(cluster, log=out)
        try:
            cluster.wait(lambda: case_state(db, "node2") == "released" and polls(db) >= 3, 60,
                         "the intent re-decided and the case released")
        finally:
            stop_service(proc)
    assert db_rows(db, "SELECT kind, status FROM actions") == [("reboot", "dropped")]
    assert reboots_queued(cluster, "node2") == 0
    assert "REBOOT" not in " ".join(cluster.node("node2").flags)
    (why,) = db_rows(db, "SELECT detail FROM history WHERE node='node2' "
                         "AND event='intent_dropped'")
    assert why[0].startswith("reboot airlock-1-reboot-node2 not sent after a restart: "
                             "Airlock's failure is no longer in force"), why
    assert not [e for e in service_events(log, "resend")]


def test_mass_failure_trips_breaker_and_nothing_is_replaced(cluster_factory, tmp_path):
    cloud = FakeCloud().start()
    nodes = ["node1", "node2", "node3", "node4"]
    cluster = cluster_factory(start=False, nodes=nodes, airlock=recovery_config(
        tmp_path, cloud, detect_grace=8.0, breaker_same_check=3, breaker_share=0.75))
    cloud.cluster = cluster
    cluster.write_files()
    for n in nodes[:3]:  # three of four fail the same check: a shared cause, not three GPUs
        cluster.set_node_sim(n, gpus=healthy_gpus(7))
    cluster.start(wait=True)
    db = tmp_path / "recovery.db"
    log = tmp_path / "service.log"
    with open(log, "wb") as out:
        proc = start_service(cluster, log=out)
        try:
            cluster.wait(lambda: db_rows(db, "SELECT open FROM breaker") == [(1,)], 40,
                         "breaker open")
            opened_at, polls_then = time.time(), polls(db)
            time.sleep(10)  # longer than detect_grace: nothing may start while it is open ...
            # ... and the service was alive and polling all that time, holding the actions.
            assert proc.poll() is None, "the service died"
            assert polls(db) - polls_then >= 8, (polls_then, polls(db))  # every 0.5 s
            held = [e for e in service_events(log, "held") if e["ts"] > opened_at
                    and "circuit breaker open" in e["detail"]]
            assert {e["node"] for e in held} == set(nodes[:3]), held
            assert len(held) >= 3 * 2  # polls after detect_grace each held all three
            assert db_rows(db, "SELECT COUNT(*) FROM actions") == [(0,)]
            assert cloud.log == [] and all(reboots_queued(cluster, n) == 0 for n in nodes)
            why = db_rows(db, "SELECT why FROM breaker")[0][0]
            assert "gpu_count" in why or "of 4 nodes" in why
            for n in nodes[:3]:
                assert cluster.node(n).reason.startswith("airlock: FAIL gpu_count")
            held = db_rows(db, "SELECT COUNT(*) FROM cases WHERE state='detected'")
            assert held == [(3,)]
            # The operator resets the breaker while the service runs (it holds the lock) ...
            reset = subprocess.run([sys.executable, "-m", "airlock", "recover",
                                    "--reset-breaker"], env=cluster.env(),
                                   capture_output=True, text=True, timeout=30)
            assert reset.returncode == 0 and "breaker reset" in reset.stdout, reset.stderr
            assert proc.poll() is None
            # ... and its next poll honours it: the held reboots start (max_in_flight 2).
            cluster.wait(lambda: db_rows(db, "SELECT COUNT(*) FROM actions") == [(2,)], 20,
                         "actions after the reset")
            assert db_rows(db, "SELECT open FROM breaker") == [(0,)]
            assert sorted(db_rows(db, "SELECT kind FROM actions")) == [("reboot",), ("reboot",)]
            events = [e for (e,) in db_rows(db, "SELECT event FROM history ORDER BY id")]
            assert events.index("breaker_reset") < events.index("request")
        finally:
            stop_service(proc)
            cloud.stop()


def test_cloud_errors_retried_then_refusal_leaves_node_drained(cluster_factory, tmp_path):
    cloud = FakeCloud().start()
    policy = tmp_path / "policy.toml"
    policy.write_text('[[class]]\nname = "gpu-lost"\nchecks = ["gpu_count"]\n'
                      'ladder = ["replace"]\n\n'
                      '[[class]]\nname = "default"\nchecks = ["*"]\nladder = ["reboot"]\n')
    cluster = cluster_factory(start=False, nodes=["node1", "node2"], airlock=recovery_config(
        tmp_path, cloud, policy=str(policy)))
    cloud.cluster = cluster
    cloud.refuse["node2"] = "no capacity: p5.48xlarge unavailable in use1-az2"
    # The second attempt's own backoff is 0.2 s; the server asks for 0.8 s.
    cloud.script = [500, (429, {"Retry-After": "0.8"}), "timeout"]
    cloud.slow_s = 2.5
    cluster.write_files()
    cluster.set_node_sim("node2", gpus=healthy_gpus(7))
    cluster.start(wait=True)
    db = tmp_path / "recovery.db"
    proc = start_service(cluster)
    try:
        cluster.wait(lambda: case_state(db, "node2") == "manual", 40, "node2 left for a person")
    finally:
        stop_service(proc)
        cloud.stop()
    posts = cloud.posts("replace", "node2")
    assert len(posts) == 4  # 500, 429, timeout, then the refusal: one request, four attempts
    assert posts[2]["ts"] - posts[1]["ts"] >= 0.8  # Retry-After honoured, not the backoff
    hist = db_rows(db, "SELECT event, detail FROM history WHERE node='node2' ORDER BY id")
    retries = [d for e, d in hist if e == "api_retry"]
    assert len(retries) == 3
    assert "HTTP 500" in retries[0] and "HTTP 429" in retries[1] and "timeout" in retries[2]
    assert "retrying in 0.10s" in retries[0] and "retrying in 0.80s" in retries[1]
    refused = [d for e, d in hist if e == "refused"]
    assert refused and "no capacity: p5.48xlarge unavailable" in refused[0]
    assert db_rows(db, "SELECT status FROM actions") == [("refused",)]
    node = cluster.node("node2")
    # still drained and still Airlock's (the periodic hook may have rewritten the detail)
    assert node.drained and node.reason.startswith("airlock:")
    show = subprocess.run([sys.executable, "-m", "airlock", "recover", "--history", "node2"],
                          env=cluster.env(), capture_output=True, text=True, timeout=30)
    assert "no capacity" in show.stdout and show.returncode == 0
    assert reboots_queued(cluster, "node2") == 0
    assert RecoveryStore(str(db), readonly=True).cases()["node2"].note.startswith("replace refused")


def test_slurmd_restart_is_not_a_reboot_and_stuck_nodes_are_reported(cluster_factory, tmp_path):
    """A reboot that the provider accepted but that has not happened yet: slurmd restarts that
    move BootTime (by 3 s: the rounding of a restart or `scontrol reconfigure`; by 45 s: a clock
    step) must not count as the reboot; the real one (a fresh boot) must. Then a node left in
    `airlock: pending` past [registration] suite_timeout + stuck_grace is reported, not touched.
    """
    calls = tmp_path / "calls"
    exe = tmp_path / "cloudctl"
    exe.write_text(f"#!/bin/sh\necho \"$@\" >> {calls}\nexit 0\n")  # accepts, does nothing
    exe.chmod(0o755)
    policy = tmp_path / "policy.toml"
    policy.write_text('[[class]]\nname = "default"\nchecks = ["*"]\nladder = ["reboot"]\n')
    rec = {"provider": "command", "reboot_via": "provider", "command": {"path": str(exe)},
           "db": str(tmp_path / "recovery.db"), "policy": str(policy), "poll_interval": 0.5,
           "detect_grace": 0.0, "cooldown": 1.0, "reboot_timeout": 120.0,
           "verdict_timeout": 60.0, "stuck_grace": 2.0}
    # No periodic hook: a HealthCheckProgram on node1's proven boot would release the pending
    # claim this test plants (the invariant that heals a node left pending), and the point here
    # is the service's report of one that nothing on the node heals.
    cluster = cluster_factory(start=False, nodes=["node1", "node2"], health_interval=3600,
                              airlock={"registration": {"level": "quick"}, "recovery": rec})
    cluster.write_files()
    cluster.set_node_sim("node2", gpus=healthy_gpus(7))
    # The service reads its own copy of the config, with a short suite_timeout, so that a node
    # is "stuck" after 1 + 2 s; the nodes keep theirs.
    service_conf = tmp_path / "service.toml"
    text = cluster.airlock_conf.read_text()
    assert "suite_timeout = 240" in text
    service_conf.write_text(text.replace("suite_timeout = 240", "suite_timeout = 1"))
    cluster.start(wait=True)
    db = tmp_path / "recovery.db"
    log = tmp_path / "service.log"

    def boot_time():
        return cluster.node("node2").boot_time

    def restart_slurmd(boot_shift: int) -> str:
        """Restart node2's slurmd without a reboot, its boot clock moved by boot_shift s."""
        before = boot_time()
        cluster.stop_node("node2")
        # the dev cluster's own spawn (its processes are stopped with the cluster); a time
        # namespace whose boot clock is boot_shift s behind moves BootTime by that much
        cluster._spawn(["slurmd", "-D", "-N", "node2", "-f", str(cluster.conf)], "slurmd-node2",
                       ["unshare", "--time", "--fork", f"--boottime=-{boot_shift}"])
        return cluster.wait(lambda: (boot_time() != before and cluster.node("node2").responding
                                     and boot_time()), 30, f"slurmd back, BootTime +{boot_shift}")

    with open(log, "wb") as out:
        proc = start_service(cluster, log=out, config=service_conf)
        try:
            cluster.wait(lambda: case_state(db, "node2") == "reboot_requested"
                         and calls.exists(), 60, "reboot requested through the command")
            first = boot_time()
            for shift in (3, 45):
                moved = restart_slurmd(shift)
                assert moved != first
                time.sleep(3)  # six polls see the moved BootTime
                assert case_state(db, "node2") == "reboot_requested", (shift, moved)
                assert not service_events(log, "booted")
            cluster.run(["scontrol", "reconfigure"])
            time.sleep(3)
            assert case_state(db, "node2") == "reboot_requested"
            # The reboot really happens: a fresh boot is believed at once.
            cluster.restart_node("node2", fresh_boot=True, wait=False)
            cluster.wait(lambda: service_events(log, "booted"), 40, "the real reboot seen")
            assert case_state(db, "node2") in ("rebooted", "manual")
            assert calls.read_text().splitlines() == [
                f"reboot node2 --request-id {db_rows(db, 'SELECT request_id FROM actions')[0][0]}"]

            # A node left pending (e.g. a resume that failed once) is reported as stuck.
            cluster.wait(lambda: not cluster.node("node1").drained, 30, "node1 in service")
            cluster.run(["scontrol", "update", "nodename=node1", "state=drain",
                         "reason=airlock: pending quick check boot"])
            stuck = cluster.wait(lambda: service_events(log, "stuck"), 30, "node1 stuck")
            assert [e["node"] for e in stuck] == ["node1"]
            assert "'airlock: pending quick check boot' for " in stuck[0]["detail"]
            assert [r[0] for r in db_rows(db, "SELECT node FROM stuck")] == ["node1"]
            assert case_state(db, "node1") is None  # reported, not acted on
            time.sleep(2)
            assert len(service_events(log, "stuck")) == 1  # once, not on every poll
            cluster.run(["scontrol", "update", "nodename=node1", "state=resume"])
            cluster.wait(lambda: service_events(log, "unstuck"), 20, "node1 unstuck")
            assert db_rows(db, "SELECT COUNT(*) FROM stuck") == [(0,)]
        finally:
            stop_service(proc)
    show = subprocess.run([sys.executable, "-m", "airlock", "recover", "--show", "--json"],
                          env=cluster.env(), capture_output=True, text=True, timeout=30)
    doc = json.loads(show.stdout)
    assert doc["heartbeat"]["polls"] > 20 and doc["stuck"] == {}
