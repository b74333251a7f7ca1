"""Flapping links: the count of a port's down-transitions per boot (pure), and the check and the
periodic hook against a sysfs tree under [system] sys_root whose port goes down and up between
runs, as a flapping cable does."""

from __future__ import annotations

import json

from airlock import finish
from airlock.checks import flaps
from airlock.checks.base import Verdict
from airlock.checks.context import Context
from airlock.config import loader as config
from airlock.records import results

P = flaps.PortSample
H = 3600.0


def test_first_sample_of_a_boot_is_a_baseline():
    mem = flaps.advance({}, "b1", [P("mlx5_0/1", "ACTIVE", 7)], 1000.0, 12 * H)
    assert mem == {"boot": "b1", "ports": {"mlx5_0/1": {"state": "ACTIVE", "link_downed": 7,
                                                        "events": []}}}


def test_counter_growth_and_state_changes_count_once_each_flap():
    mem = flaps.advance({}, "b1", [P("mlx5_0/1", "ACTIVE", 0)], 0.0, 12 * H)
    mem = flaps.advance(mem, "b1", [P("mlx5_0/1", "ACTIVE", 2)], 300.0, 12 * H)  # 2 between runs
    assert mem["ports"]["mlx5_0/1"]["events"] == [300.0, 300.0]
    mem = flaps.advance(mem, "b1", [P("mlx5_0/1", "DOWN", 3)], 600.0, 12 * H)  # seen down: 1
    assert len(mem["ports"]["mlx5_0/1"]["events"]) == 3
    mem = flaps.advance(mem, "b1", [P("mlx5_0/1", "ACTIVE", 3)], 900.0, 12 * H)  # back up: 0
    assert len(mem["ports"]["mlx5_0/1"]["events"]) == 3
    # without a counter (EFA), the state change is the evidence
    mem = flaps.advance({}, "b1", [P("efa_0/1", "ACTIVE", None)], 0.0, 12 * H)
    mem = flaps.advance(mem, "b1", [P("efa_0/1", "DOWN", None)], 60.0, 12 * H)
    assert mem["ports"]["efa_0/1"]["events"] == [60.0]


def test_old_downs_leave_the_window_and_a_new_boot_starts_afresh():
    mem = {"boot": "b1", "ports": {"p/1": {"state": "ACTIVE", "link_downed": 5,
                                           "events": [0.0, 100.0, 50000.0]}}}
    later = flaps.advance(mem, "b1", [P("p/1", "ACTIVE", 5)], 50100.0, 12 * H)
    assert later["ports"]["p/1"]["events"] == [50000.0]
    fresh = flaps.advance(mem, "b2", [P("p/1", "ACTIVE", 0)], 50100.0, 12 * H)
    assert fresh["ports"]["p/1"]["events"] == []
    # a counter that went backwards (reset) is a new baseline, not a flap
    reset = flaps.advance(mem, "b1", [P("p/1", "ACTIVE", 1)], 50100.0, 12 * H)
    assert len(reset["ports"]["p/1"]["events"]) == 1


def test_verdict_names_the_hca_and_port():
    mem = {"ports": {"mlx5_0/1": {"events": [1.0] * 4}, "mlx5_1/1": {"events": [1.0]},
                     "mlx5_2/1": {"events": [1.0] * 3}}}
    out = flaps.verdict_flaps(mem, 3, 12 * H, False)
    assert out.failed and out.detail == "mlx5_0/1 4 downs in 12h (+1 more ports)"
    assert out.figures["flapping"] == ["mlx5_0/1", "mlx5_2/1"]
    assert flaps.verdict_flaps({"ports": {}}, 3, H, False).verdict is Verdict.SKIP
    ok = flaps.verdict_flaps({"ports": {"a/1": {"events": [1.0, 2.0]}}}, 3, 1800, False)
    assert ok.verdict is Verdict.PASS and ok.detail == "1 ports, at most 2 downs in 30min"


# --- against a sysfs tree --------------------------------------------------------------------
def port(root, dev: str, state: str, downed: int | None, number: str = "1"):
    d = root / "sys" / "class" / "infiniband" / dev / "ports" / number
    (d / "counters").mkdir(parents=True, exist_ok=True)
    (d / "state").write_text(state + "\n")
    (d / "link_layer").write_text("InfiniBand\n")
    if downed is not None:
        (d / "counters" / "link_downed").write_text(f"{downed}\n")


def ctx_for(tmp_path, **flaps_section) -> Context:
    cfg = config.from_dict({"state_dir": str(tmp_path / "state"), "log_dir": str(tmp_path),
                            "system": {"sys_root": str(tmp_path / "sys")},
                            "flaps": flaps_section})
    return Context.create(cfg, "n1")


def test_check_counts_a_flapping_port_across_runs(tmp_path):
    port(tmp_path, "mlx5_0", "4: ACTIVE", 0)
    port(tmp_path, "mlx5_1", "4: ACTIVE", 0)
    out = flaps.check_link_flap(ctx_for(tmp_path))
    assert out.verdict is Verdict.PASS and "baseline" in out.detail
    for downed in (1, 2):  # the link went down and came back between two runs
        port(tmp_path, "mlx5_1", "4: ACTIVE", downed)
        out = flaps.check_link_flap(ctx_for(tmp_path))
        assert out.verdict is Verdict.PASS
    port(tmp_path, "mlx5_1", "1: DOWN", 3)
    out = flaps.check_link_flap(ctx_for(tmp_path))
    assert out.failed and out.detail == "mlx5_1/1 3 downs in 12h"
    assert out.figures["downs"] == {"mlx5_0/1": 0, "mlx5_1/1": 3}
    saved = json.loads((tmp_path / "state" / flaps.FILE).read_text())
    assert len(saved["ports"]["mlx5_1/1"]["events"]) == 3
    assert flaps.check_link_flap(ctx_for(tmp_path, max_downs=4)).verdict is Verdict.PASS


def test_a_count_that_cannot_be_kept_is_not_a_verdict_unless_it_flapped(tmp_path):
    port(tmp_path, "mlx5_0", "4: ACTIVE", 0)
    (tmp_path / "state" / flaps.FILE).mkdir(parents=True)  # cannot be replaced by a file
    out = flaps.check_link_flap(ctx_for(tmp_path))
    assert out.verdict is Verdict.ERROR and "cannot keep the count" in out.detail
    assert flaps.check_link_flap(ctx_for(tmp_path, max_downs=1)).verdict is Verdict.ERROR
    # (without a kept baseline nothing can flap: every run is a first sample)


def test_no_rdma_ports_skip(tmp_path):
    assert flaps.check_link_flap(ctx_for(tmp_path)).verdict is Verdict.SKIP


def test_the_periodic_hook_drains_the_flapping_port_by_name(fake_node, tmp_path):
    port(tmp_path, "mlx5_0", "4: ACTIVE", 10)
    node = fake_node(extra=f'[system]\nsys_root = "{tmp_path}/sys"\n')
    node.prove()
    assert node.run("healthcheck").returncode == 0
    assert node.slurm.updates() == []
    port(tmp_path, "mlx5_0", "4: ACTIVE", 13)  # went down and came back three times
    node.run("healthcheck")
    run = results.ResultStore(config.load(node.conf), node.name).latest()
    assert run["verdict"] == "fail" and run["failed_check"] == "link_flap"
    assert finish.failure_reason(run).format() == "airlock: FAIL link_flap mlx5_0/1 3 downs in 12h"
    (update,) = node.slurm.updates()
    assert any("airlock: FAIL link_flap mlx5_0/1 3 downs in 12h" in w for w in update), update
