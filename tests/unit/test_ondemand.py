"""On-demand check pieces that need no cluster: the [ondemand] section's validation, the exit
codes of a report, and which of srun's lines explains a node's launch failure."""

from __future__ import annotations

import subprocess
import sys

import pytest

from airlock import config
from airlock.errors import ConfigError
from airlock.ondemand import GroupReport, GroupTarget, _srun_error


@pytest.mark.parametrize("section, message", [
    ({"group_sizes_mb": []}, "group_sizes_mb: needs at least one message size"),
    ({"group_sizes_mb": [1.0, 0]}, "group_sizes_mb: every size must be"),
    ({"group_sizes_mb": [float("nan")]}, r"group_sizes_mb\[0\]: must be a finite number"),
    ({"group_timeout": float("inf")}, "group_timeout: must be a finite number"),
    ({"poll_interval": 0}, "poll_interval: must be a finite number > 0"),
    ({"max_group_tests": 0}, "max_group_tests: must be >= 1"),
    ({"port_range": [29500, 70000]}, "port_range"),
    ({"group_busbw_floor_gbps": -1}, "group_busbw_floor_gbps"),
])
def test_ondemand_section_refuses_bad_values(section, message):
    with pytest.raises(ConfigError, match=message):
        config.from_dict({"ondemand": section}).section("ondemand")


def test_report_exit_codes():
    def report(*statuses):
        return GroupReport("standard", 0.0, 1.0,
                           [GroupTarget(f"n{i}", "a", s) for i, s in enumerate(statuses)])

    assert report("pass", "pass").exit_code == 0
    assert report("pass", "inconclusive").exit_code == 3
    assert report("pass", "skipped").exit_code == 3
    assert report("inconclusive", "fail").exit_code == 1
    doc = report("pass", "inconclusive").to_dict()
    assert doc["exit_code"] == 3 and [n["status"] for n in doc["nodes"]] == ["pass",
                                                                            "inconclusive"]


def test_srun_error_names_the_nodes_own_line():
    err = ("srun: error: Task launch for StepId=12.0 failed on node node2: Socket timed out on "
           "send/recv operation\nsrun: error: Application launch failed: Socket timed out\n")
    assert _srun_error(err, "", "node2", 1) == ("Task launch for StepId=12.0 failed on node "
                                                "node2: Socket timed out on send/recv operation")
    assert _srun_error(err, "", "node1", 1) == "Application launch failed: Socket timed out"
    assert _srun_error("", "", "node1", 255) == "exit 255"


def test_ondemand_does_not_load_click():
    """Orchestration stays below the CLI: the workers srun starts must not need click."""
    code = "import sys, airlock.ondemand; print('click' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, check=True).stdout
    assert out.strip() == "False"
