"""Prometheus textfile metrics: node metrics from real run documents and from a real hook run,
controller metrics with a real recovery database (and without one), read back with
prometheus-client's own parser."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from prometheus_client.parser import text_string_to_metric_families

from airlock import finish
from airlock.config import loader as config_mod
from airlock.dev.cluster import healthy_gpus
from airlock.dev.proof import prove_boot
from airlock.records import node_metrics, results
from airlock.slurm.client import Node
from airlock.status import collect as status
from airlock.status import metrics


def _samples(text: str) -> dict[tuple[str, tuple], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


RUN = {
    "node": "n1", "run_id": "20260101T000000-1-n1", "level": "standard", "trigger": "boot",
    "started_at": 1000.0, "finished_at": 1012.5, "duration_s": 12.5, "verdict": "fail",
    "failed_check": "burnin", "detail": "gpu3 12 mismatches", "profile": "h100-sxm-8x",
    "checks": [
        {"check": "gpu_count", "verdict": "pass", "detail": "8 GPUs", "duration_s": 0.02,
         "attempts": 1, "figures": {"found": 8, "expected": 8}},
        {"check": "burnin", "verdict": "fail", "detail": "gpu3 12 mismatches",
         "duration_s": 12.4, "attempts": 2,
         "figures": {"min_tflops": 51.5, "device": "cuda:3", "exact": False}},
    ],
}


def test_node_metrics_from_a_run(tmp_path):
    cfg = config_mod.from_dict({"metrics": {"textfile_dir": str(tmp_path / "{node}")}})
    path = node_metrics.write_node_textfile(cfg, "n1", {"standard": RUN})
    assert path == tmp_path / "n1" / "airlock.prom"
    assert os.listdir(path.parent) == ["airlock.prom"]  # the temp file was renamed away
    s = _samples(path.read_text())
    lv = (("level", "standard"), ("node", "n1"))
    assert s[("airlock_run_verdict", (*lv[:1], ("node", "n1"), ("verdict", "fail")))] == 1
    assert s[("airlock_run_verdict", (*lv[:1], ("node", "n1"), ("verdict", "pass")))] == 0
    assert s[("airlock_run_failed", lv)] == 1
    assert s[("airlock_run_duration_seconds", lv)] == 12.5
    assert s[("airlock_run_timestamp_seconds", lv)] == 1012.5
    burn = (("check", "burnin"), ("level", "standard"), ("node", "n1"))
    assert s[("airlock_check_duration_seconds", burn)] == 12.4
    assert s[("airlock_check_attempts", burn)] == 2
    assert s[("airlock_check_verdict", (*burn, ("verdict", "fail")))] == 1
    assert s[("airlock_check_figure", (("check", "burnin"), ("figure", "min_tflops"),
                                       ("level", "standard"), ("node", "n1")))] == 51.5
    assert s[("airlock_check_figure", (("check", "burnin"), ("figure", "exact"),
                                       ("level", "standard"), ("node", "n1")))] == 0
    # Non-numeric figures (a device name) are not metrics.
    assert not any(dict(k[1]).get("figure") == "device" for k in s)


def test_every_finished_run_refreshes_metrics(tmp_path):
    cfg = config_mod.from_dict({"state_dir": str(tmp_path / "state"),
                                "metrics": {"textfile_dir": str(tmp_path / "prom")}})
    assert finish.record_run(cfg, "n1", dict(RUN)) == []
    quick = {**RUN, "level": "quick", "run_id": "q1", "verdict": "pass", "checks": []}
    assert finish.record_run(cfg, "n1", quick, history=False) == []
    s = _samples((tmp_path / "prom" / "airlock.prom").read_text())
    assert s[("airlock_run_failed", (("level", "standard"), ("node", "n1")))] == 1
    assert s[("airlock_run_failed", (("level", "quick"), ("node", "n1")))] == 0
    # An unwritable textfile dir is a returned problem, never a lost result.
    blocker = tmp_path / "blocker"
    blocker.write_text("")
    cfg2 = config_mod.from_dict({"state_dir": str(tmp_path / "s2"),
                                 "metrics": {"textfile_dir": str(blocker / "x")}})
    problems = finish.record_run(cfg2, "n1", dict(RUN))
    assert len(problems) == 1 and problems[0].startswith("metrics textfile: ")
    assert (tmp_path / "s2" / "latest.json").exists()


def test_real_prolog_run_writes_the_node_file(tmp_path):
    sim = tmp_path / "gpus.json"
    sim.write_text(json.dumps({"nodes": {"n1": {"gpus": healthy_gpus(8)}}}))
    conf = tmp_path / "airlock.toml"
    conf.write_text(f'state_dir = "{tmp_path}/state"\nlog_dir = "{tmp_path}/log"\n'
                    f'[nvml]\nsimulate = "{sim}"\n[metrics]\ntextfile_dir = "{tmp_path}/prom"\n')
    prove_boot(conf, "n1")
    env = {"AIRLOCK_CONFIG": str(conf), "SLURMD_NODENAME": "n1", "SLURM_JOB_ID": "42",
           "AIRLOCK_RUNTIME_DIR": os.environ["AIRLOCK_RUNTIME_DIR"],  # never the host's /run
           "PATH": os.environ["PATH"]}  # the unit tests' tripwire, should Slurm be asked
    out = subprocess.run([sys.executable, "-m", "airlock.hooks.prolog"], env=env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    s = _samples((tmp_path / "prom" / "airlock.prom").read_text())
    assert s[("airlock_run_verdict", (("level", "quick"), ("node", "n1"), ("verdict", "pass")))] \
        == 1
    assert s[("airlock_check_verdict", (("check", "gpu_count"), ("level", "quick"),
                                        ("node", "n1"), ("verdict", "pass")))] == 1


def _status_doc(cfg, nodes):
    res = {n.name: results.NodeResults(n.name) for n in nodes}
    rows = [status.node_status(n, res[n.name], status.recovery_states(cfg).get(n.name, ""))
            for n in nodes]
    summary = dict.fromkeys(status.STATES, 0)
    for r in rows:
        summary[r["airlock"]] += 1
    return {"schema": 1, "generated_at": 5.0, "nodes": rows, "summary": summary}


def test_controller_metrics_with_a_real_recovery_database(tmp_path):
    from airlock.recovery.machine import Case
    from airlock.recovery.store import DONE, RecoveryStore

    db = tmp_path / "recovery.db"
    cfg = config_mod.from_dict({"recovery": {"db": str(db)}})
    assert status.recovery_metrics(cfg) == {} and status.recovery_states(cfg) == {}
    store = RecoveryStore(str(db))
    with store.tx() as tx:
        RecoveryStore.put_case(tx, Case("n2", "reboot_requested", "hardware",
                                        ("reboot", "replace"), 0, "gpu_count", "7 GPUs", 1.0,
                                        1.0), 1.0)
        RecoveryStore.put_case(tx, Case("n3", "done", "hardware", ("reboot",), 1, "burnin", "", 1.0,
                                1.0), 1.0)
        aid, _ = RecoveryStore.add_action(tx, "n2", "reboot", "slurm", "", 2.0)
        RecoveryStore.set_action(tx, aid, DONE, "", 3.0)
        RecoveryStore.add_action(tx, "n2", "replace", "http", "", 4.0)
        RecoveryStore.open_breaker(tx, "5 nodes failed gpu_count", 5.0)
    store.close()
    assert status.recovery_states(cfg) == {"n2": "reboot_requested"}  # closed cases not shown
    nodes = [Node("n1", "IDLE"), Node("n2", "DOWN", frozenset({"DRAIN"}),
                                      "airlock: FAIL gpu_count 7 GPUs")]
    doc = _status_doc(cfg, nodes)
    assert doc["nodes"][1]["recovery"] == "reboot_requested"
    path = metrics.write_controller_textfile(cfg, doc, status.recovery_metrics(cfg),
                                             str(tmp_path / "prom"))
    s = _samples(path.read_text())
    assert s[("airlock_recovery_breaker_open", ())] == 1
    assert s[("airlock_recovery_in_flight", ())] == 1
    assert s[("airlock_recovery_actions_total", (("action", "reboot"), ("status", "done")))] == 1
    assert s[("airlock_recovery_actions_total", (("action", "replace"),
                                                 ("status", "intent")))] == 1
    assert s[("airlock_node_state", (("node", "n2"), ("state", "failed")))] == 1
    assert s[("airlock_nodes", (("state", "failed"),))] == 1
    assert s[("airlock_node_results_readable", (("node", "n1"),))] == 0


def test_metrics_command_without_a_target_is_one_line(tmp_path):
    conf = tmp_path / "airlock.toml"
    conf.write_text(f'state_dir = "{tmp_path}/state"\n')
    out = subprocess.run([sys.executable, "-m", "airlock.cli", "metrics", "--node", "n1"],
                         env={**os.environ, "AIRLOCK_CONFIG": str(conf)}, capture_output=True,
                         text=True, timeout=30)
    assert out.returncode == 2
    assert out.stderr.strip() == ("airlock: no [metrics] textfile_dir configured: pass "
                                  "--textfile-dir or --stdout")
    ok = subprocess.run([sys.executable, "-m", "airlock.cli", "metrics", "--node", "n1",
                         "--stdout"], env={**os.environ, "AIRLOCK_CONFIG": str(conf)},
                        capture_output=True, text=True, timeout=30)
    assert ok.returncode == 0 and "# HELP airlock_run_verdict" in ok.stdout
