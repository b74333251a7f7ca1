"""bench/bench_scale.py's pure parts: sdiag's message-type block as 22.05 and 24.11 print it,
and the group mode's simulated culprit search (which asserts every culprit is found)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench" / "bench_scale.py"

# The end of a real `sdiag` (22.05; 24.11 prints the same block).
SDIAG = """\
Remote Procedure Call statistics by message type
\tREQUEST_PARTITION_INFO                  ( 2009) count:350    ave_time:5073   total_time:1775730
\tREQUEST_NODE_INFO                       ( 2007) count:350    ave_time:8130   total_time:2845500
\tREQUEST_STATS_INFO                      ( 2035) count:1      ave_time:150    total_time:150

Remote Procedure Call statistics by user
\troot            (       0) count:701    ave_time:6600   total_time:4621380
"""


def load():
    spec = importlib.util.spec_from_file_location("bench_scale", BENCH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_sdiag_message_types_are_read_and_users_are_not():
    assert load().parse_sdiag(SDIAG) == {"REQUEST_PARTITION_INFO": (350, 1775730),
                                         "REQUEST_NODE_INFO": (350, 2845500),
                                         "REQUEST_STATS_INFO": (1, 150)}


def test_group_mode_simulation_finds_every_culprit_within_its_bound(tmp_path):
    out = tmp_path / "group.json"
    proc = subprocess.run([sys.executable, str(BENCH), "--group", "--json", str(out)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    sims = json.loads(out.read_text())["simulated"]
    assert [(s["members"], s["culprits"]) for s in sims] == [
        (16, 1), (16, 2), (64, 1), (64, 2), (256, 1), (256, 2)]
    assert all(s["rounds_max"] <= s["bound"] for s in sims), sims
