"""DCGM diagnostics: the parser on recorded `dcgmi diag -j` outputs of DCGM 1.7, 3.x and 4.x
(tests/data/dcgm/SOURCES.md says where each came from), and the check end to end through its
real subprocess and timeout path with a stand-in dcgmi that replays a recording or hangs."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import jsonschema
import pytest

from airlock.checks import dcgm
from airlock.checks.base import Verdict
from airlock.checks.context import Context
from airlock.config import loader as config
from airlock.errors import ConfigError
from airlock.runner import run_level

DATA = Path(__file__).resolve().parents[1] / "data" / "dcgm"
FAKE = DATA / "fake-dcgmi"


def recorded(name: str) -> str:
    return (DATA / name).read_text()


def v4_document() -> str:
    """The recorded 4.x test entry, unchanged, in the document structure of NVIDIA's schema."""
    test = json.loads(recorded("dcgm-4.x-issue215-diagnostic-test.json"))
    doc = {"DCGM Diagnostic": {"test_categories": [{"category": "Hardware", "tests": [test]}]}}
    jsonschema.Draft7Validator(json.loads(recorded("dcgm_diag_schema.json"))).validate(doc)
    return json.dumps(doc, indent=2)


# --- the parser on recorded outputs ----------------------------------------------------------
def test_real_3_1_output_with_banner_and_nulls_passes():
    report = dcgm.parse(recorded("dcgm-3.1.0-real-pass.txt"))
    assert report.version == "3.1.0"
    names = {r.test for r in report.results}
    assert {"Denylist", "Persistence Mode", "Inforom", "software"} <= names
    deployment = next(r for r in report.results if r.test == "Denylist")
    assert deployment.entity == ",".join(f"gpu{i}" for i in range(8))
    software = [r.entity for r in report.results if r.test == "software"]
    assert software == [f"gpu{i}" for i in range(8)]
    out = dcgm.verdict(report, 1)
    assert out.verdict is Verdict.PASS
    assert out.detail == "level 1: 10 tests passed on 8 GPUs (DCGM 3.1.0)"


def test_per_gpu_failure_names_the_gpu_the_test_and_dcgms_message():
    out = dcgm.verdict(dcgm.parse(recorded("dcgm-3.x-per-gpu-fail.json")), 3)
    assert out.failed
    assert out.detail == ("gpu0 sm_stress: Max stress level of 2128.7 did not exceed desired "
                          "stress level of 3000.0 for GPU 0 (DCGM error 50) (+2 more)")
    assert [f.split(":")[0] for f in out.figures["failed"]] == \
        ["gpu0 sm_stress", "gpu2 sm_stress", "gpu3 sm_stress"]
    assert out.figures["tests"]["memory"] == {"gpu0": "skip", "gpu1": "pass", "gpu2": "pass",
                                              "gpu3": "pass"}


def test_1_7_failure_with_a_plain_string_warning():
    out = dcgm.verdict(dcgm.parse(recorded("dcgm-1.7-persistence-fail.json")), 1)
    assert out.failed
    assert out.detail.startswith("gpu0,gpu1,gpu2,gpu3 Persistence Mode: Persistence mode for "
                                 "GPU 1 is currently disabled.")
    assert out.figures["version"] == "1.7"


def test_4x_entity_results_and_test_summary():
    report = dcgm.parse(v4_document())
    assert [r.entity for r in report.results] == [f"gpu{i}" for i in range(8)]
    out = dcgm.verdict(report, 4)
    assert out.verdict is Verdict.PASS and out.detail.startswith("level 4: 1 tests passed on 8")


def test_4x_failure_in_one_gpu_result_fails_the_check():
    doc = json.loads(v4_document())
    result = doc["DCGM Diagnostic"]["test_categories"][0]["tests"][0]["results"][5]
    result.update(status="Fail", warnings=[{"warning": "GPU 5 calculated at approximately 12.0 "
                                            "gigaflops", "error_id": 93, "error_category": 1,
                                            "error_severity": 1}])
    out = dcgm.verdict(dcgm.parse(json.dumps(doc)), 3)
    assert out.failed and out.detail == ("gpu5 diagnostic: GPU 5 calculated at approximately 12.0 "
                                         "gigaflops (DCGM error 93)")
    assert dcgm.verdict(dcgm.parse(json.dumps(doc)), 3, ["diagnostic"]).verdict is Verdict.WARN


def test_what_is_not_a_verdict_is_inconclusive_never_a_pass():
    runtime = json.dumps({"DCGM Diagnostic": {"version": "4.2.3", "runtime_error":
                          "Error: unable to establish a connection to the specified host"}})
    out = dcgm.verdict(dcgm.parse(runtime), 2)
    assert out.verdict is Verdict.ERROR and "unable to establish a connection" in out.detail
    empty = json.dumps({"DCGM Diagnostic": {"test_categories": []}})
    assert dcgm.verdict(dcgm.parse(empty), 2).verdict is Verdict.ERROR
    odd = json.loads(v4_document())
    odd["DCGM Diagnostic"]["test_categories"][0]["tests"][0]["results"][0]["status"] = "Aborted"
    out = dcgm.verdict(dcgm.parse(json.dumps(odd)), 2)
    assert out.verdict is Verdict.ERROR and "'aborted'" in out.detail
    for text in ("", "Error: could not open /dev/nvidiactl", "{not json", "[1, 2]", '{"a": 1}'):
        with pytest.raises(dcgm.DcgmParseError):
            dcgm.parse(text)


def test_every_hardware_test_skipped_is_inconclusive_naming_it():
    """Issue 25 item 10: a level whose hardware tests all skipped looked at no hardware; main
    called it a skip, which passes the node."""
    doc = json.loads(v4_document())
    for r in doc["DCGM Diagnostic"]["test_categories"][0]["tests"][0]["results"]:
        r.update(status="Skip", warnings=[{"warning": "Plugin is not allowed on this SKU",
                                           "error_id": 0}])
    out = dcgm.verdict(dcgm.parse(json.dumps(doc)), 2)
    assert out.verdict is Verdict.ERROR and "diagnostic" in out.detail, out
    assert out.figures["never_ran"] == ["diagnostic"]


# --- DCGM 4.x as DCGM classifies its findings (recorded on a GB10 DGX Spark) ------------------
GB10_L1 = "dcgm-4.2.3-gb10-level1-persistence.json"
GATED = "dcgm-4.5.2-gb10-level2-plugins-gated.json"
ALLOWED = "dcgm-4.5.2-gb10-level2-plugins-allowed.json"


def test_4x_findings_carry_dcgm_s_numeric_classification():
    (software,) = dcgm.parse(recorded(GB10_L1)).results
    assert [(f.severity, f.category, f.error_id) for f in software.findings] == [(5, 8, 29)]
    assert software.findings[0].kind == "config"


def test_a_configuration_finding_holds_the_node_for_an_operator_not_as_hardware():
    """Persistence mode disabled: DCGM_FR_PERSISTENCE_MODE (29), severity DCGM_ERROR_CONFIG (5),
    category SOFTWARE_OTHER (8). main failed the node as hardware, and recovery rebooted and
    replaced it; it is a setting to fix, typed (finding = "config") in the run document."""
    out = dcgm.verdict(dcgm.parse(recorded(GB10_L1)), 1)
    assert out.failed and out.finding == "config", out
    assert out.detail.startswith("config: gpu0 software: Persistence Mode: Persistence mode for "
                                 "GPU 0 is disabled"), out.detail
    assert out.remediation == ""  # never a reboot
    record = out.to_dict()
    assert record["finding"] == "config" and record["verdict"] == "fail"


def test_a_level_whose_plugins_dcgm_gated_off_is_not_a_pass():
    """The same GB10 at level 2 without the plugins allowed: memory and pcie Skip, only the
    deployment test ran. The config finding holds the node and names what never ran; with that
    finding only warning, the level is inconclusive naming the tests that never ran."""
    out = dcgm.verdict(dcgm.parse(recorded(GATED)), 2)
    assert out.failed and out.finding == "config" and out.figures["never_ran"] == \
        ["memory", "pcie"]
    out = dcgm.verdict(dcgm.parse(recorded(GATED)), 2, ["software"])
    assert out.verdict is Verdict.ERROR, out
    assert out.detail == "DCGM level 2: memory, pcie never ran (no result of theirs ran)"
    # allowed, the same tests ran and passed: the warning stands, nothing is unseen
    out = dcgm.verdict(dcgm.parse(recorded(ALLOWED)), 2, ["software"])
    assert out.verdict is Verdict.WARN and "never_ran" not in out.figures, out


def test_a_document_with_results_and_a_runtime_error_is_inconclusive():
    doc = json.loads(recorded(ALLOWED))
    doc["DCGM Diagnostic"]["runtime_error"] = "Error: the diagnostic was interrupted"
    out = dcgm.verdict(dcgm.parse(json.dumps(doc)), 2, ["software"])
    assert out.verdict is Verdict.ERROR and "interrupted" in out.detail, out


def test_gated_plugins_make_the_suite_list_dcgm_unseen(tmp_path, monkeypatch):
    from airlock import finish

    monkeypatch.setenv("FAKE_DCGMI", f"replay:{DATA / GATED}:226")
    ctx = ctx_for(tmp_path, warn_tests=["software"])
    records, _ = run_level(ctx.cfg, "n1", "standard", only=["dcgm"], ctx=ctx)
    run = finish.summarize("n1", "standard", "test", records, time.time(), "")
    assert run["verdict"] == "error" and run["unseen"] == ["dcgm"], run


# --- the check, through the real subprocess path ----------------------------------------------
def ctx_for(tmp_path, level: str = "standard", **section) -> Context:
    raw = {"dcgm": {"dcgmi": str(FAKE), **section}, "state_dir": str(tmp_path),
           "log_dir": str(tmp_path)}
    cfg = config.from_dict(raw)
    return Context.create(cfg, "n1", level)


def test_check_runs_dcgmi_at_the_mapped_level_and_judges_its_document(tmp_path, monkeypatch):
    log = tmp_path / "argv.log"
    monkeypatch.setenv("FAKE_DCGMI_LOG", str(log))
    # dcgmi exits 226 (DCGM_ST_NVVS_ERROR) when a test fails: the document decides
    monkeypatch.setenv("FAKE_DCGMI", f"replay:{DATA / 'dcgm-3.x-per-gpu-fail.json'}:226")
    out = dcgm.check_dcgm(ctx_for(tmp_path, host="10.0.0.1:5555"))
    assert out.failed and out.detail.startswith("gpu0 sm_stress: Max stress level")
    assert out.figures["exit"] == 226 and out.figures["level"] == 2
    assert json.loads(log.read_text()) == ["diag", "-r", "2", "-j", "--host", "10.0.0.1:5555"]
    monkeypatch.setenv("FAKE_DCGMI", f"replay:{DATA / 'dcgm-3.1.0-real-pass.txt'}")
    out = dcgm.check_dcgm(ctx_for(tmp_path, level="deep"))
    assert out.verdict is Verdict.PASS and out.figures["level"] == 3


def test_a_hung_dcgm_is_killed_and_inconclusive(tmp_path, monkeypatch):
    pidfile = tmp_path / "pid"
    monkeypatch.setenv("FAKE_DCGMI", f"hang:{pidfile}")
    started = time.monotonic()
    out = dcgm.check_dcgm(ctx_for(tmp_path, timeouts=[1, 1.5, 1, 1]))
    assert time.monotonic() - started < 30
    assert out.verdict is Verdict.ERROR
    assert out.detail.startswith("dcgmi diag -r 2 gave no answer within 1.5s")
    pid = int(pidfile.read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_a_dcgm_that_cannot_run_is_inconclusive_and_says_what_it_said(tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_DCGMI", "fail:255:Error: Host engine connection invalid/disconnected")
    out = dcgm.check_dcgm(ctx_for(tmp_path))
    assert out.verdict is Verdict.ERROR
    assert out.detail == ("dcgmi exit 255, no JSON document in dcgmi's output: Error: Host "
                          "engine connection invalid/disconnected")


def test_no_dcgm_skips_with_the_reason_and_quick_does_not_run_it(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(dcgm, "SEARCH_PATH", str(tmp_path))
    out = dcgm.check_dcgm(ctx_for(tmp_path, dcgmi="dcgmi"))
    assert out.verdict is Verdict.SKIP and out.detail == "no DCGM on this node (dcgmi not found)"
    out = dcgm.check_dcgm(ctx_for(tmp_path, level="quick"))
    assert out.verdict is Verdict.SKIP and "quick_level = 0" in out.detail


def test_a_dcgm_hang_makes_the_run_error_never_fail(tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_DCGMI", "hang")
    ctx = ctx_for(tmp_path, timeouts=[1, 1, 1, 1])
    records, _ = run_level(ctx.cfg, "n1", "standard", only=["dcgm"], ctx=ctx)
    (rec,) = records
    assert rec["verdict"] == "error" and rec["attempts"] == 1


def test_config_is_validated():
    with pytest.raises(ConfigError, match="standard_level: must be 0"):
        config.from_dict({"dcgm": {"standard_level": 5}})
    with pytest.raises(ConfigError, match="timeouts: need four"):
        config.from_dict({"dcgm": {"timeouts": [1, 2]}})
    assert config.from_dict({"dcgm": {"deep_level": 4}}).dcgm.check_timeout == 7230


def test_recovery_reads_the_finding_dcgm_writes():
    """The two ends of one field: the run document that a DCGM configuration finding makes
    (checks.base.CONFIG in the failed check's record) is what recovery classifies as needing an
    operator (recovery.service.failure_kind). Each side's own tests wrote the field its own way
    ("finding" against "kind") until this test joined them."""
    from airlock.finish import summarize
    from airlock.recovery.service import failure_kind

    out = dcgm.verdict(dcgm.parse(recorded(GB10_L1)), 1)
    run = summarize("n1", "quick", "periodic", [out.to_dict()], started=0.0)
    assert run["failed_check"] == "dcgm"
    assert failure_kind(run) == ("dcgm", "config")
