"""bench/bench_scale.py runs: a smoke run at two nodes on each Slurm version (its figures at full
size are in docs/scale.md; no timing is asserted here, only that every figure is there and
that no user code ran before a node's pass)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench" / "bench_scale.py"


def test_bench_scale_join_at_small_n(slurm_variant, tmp_path):
    version = slurm_variant.removesuffix("-dbd")
    out = tmp_path / "runs.json"
    proc = subprocess.run([sys.executable, str(BENCH), "--nodes", "2", "--slurm", version,
                           "--timeout", "240", "--json", str(out)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    runs = json.loads(out.read_text())
    assert [(r["hooks"], r["slurm"], r["nodes"]) for r in runs] == [
        ("airlock", version, 2), ("baseline", version, 2)]
    airlock, baseline = runs
    for r in runs:
        assert r["in_service"] == 2 and not r["jobs_missing"], r
        for key in ("service_median_s", "service_p95_s", "service_max_s", "rpc_per_node",
                    "rpc_time_ms_per_node"):
            assert isinstance(r[key], (int, float)), (key, r)
        assert r["rpc"]["MESSAGE_NODE_REGISTRATION_STATUS"] >= 2, r["rpc"]
    assert airlock["user_code_before_pass"] == 0
    assert airlock["rpc"]["REQUEST_UPDATE_NODE"] >= 4  # a drain and a resume per node
    assert "REQUEST_UPDATE_NODE" not in baseline["rpc"]
    assert airlock["hook_runs"] >= 6 and airlock["suites_reaped"] == 2, airlock
    # Both RSS figures rest on rusage (the sampled total is floored by the largest process's
    # own peak), never on a 0.5 s sample catching a quick suite alive.
    assert airlock["airlock_cpu_s"] > 0 and airlock["max_process_rss_mib"] > 0, airlock
    assert airlock["peak_total_rss_mib"] >= airlock["max_process_rss_mib"], airlock
    assert "total per node" in proc.stdout and "REQUEST_NODE_INFO" in proc.stdout
