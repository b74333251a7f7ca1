"""All-reduce: the exact-sum pattern, combining node reports and the verdict from hand-made
reports; then real gloo process groups on the CPU: healthy, each fault switch (corrupt, slow,
hang) caught and named, the hang killed with no process left behind (also through the runner's
isolated path), and two launchers joining one world the way the group check runs them across
nodes."""

from __future__ import annotations

import os
import socket
import subprocess
import uuid

import pytest

from airlock import collective as dist
from airlock.checks import allreduce, allreduce_verdict, registry
from airlock.checks.allreduce_verdict import verdict_allreduce
from airlock.checks.context import Context
from airlock.collective import params_for
from airlock.config import loader as config
from airlock.config.sections.checks import AllreduceSection
from airlock.errors import ConfigError
from airlock.hw import faults

CPU = AllreduceSection(cpu_sizes_kib=[64, 1024], cpu_iters=5, cpu_warmup=1, timeout=30)


# --- the pattern ---------------------------------------------------------------------------------
@pytest.mark.parametrize("world", [1, 2, 3, 8, 9, 17, 300])
def test_expected_values_are_the_exact_sums(world):
    m = dist.pattern_modulus(world, "fp32")
    brute = [sum(dist.contribution_values(r, m)[k] for r in range(world)) for k in range(m)]
    assert dist.expected_values(world, m) == brute
    assert max(brute) <= dist.EXACT["fp32"]


def test_pattern_modulus_keeps_low_precision_sums_exact():
    assert dist.pattern_modulus(8, "fp32") == 8
    assert dist.pattern_modulus(64, "bf16") == 5  # 64 * 4 = 256 is still exact in bf16
    assert dist.pattern_modulus(200, "bf16") == 2
    with pytest.raises(ValueError, match="overflow exact bf16"):
        dist.pattern_modulus(300, "bf16")


def test_tiled_repeats_the_period():
    import torch

    t = dist.tiled(torch, [0, 1, 2], 7, torch.float32, "cpu")
    assert t.tolist() == [0, 1, 2, 0, 1, 2, 0]


def test_worker_argv_and_parse_report():
    argv = dist.worker_argv("10.0.0.1", 29500, 16, 8, 8, node="gpu2", sizes=[1 << 20, 1 << 30],
                            iters=5, faults="", python="python3")
    assert argv == ["python3", "-m", "airlock.collective", "worker", "--master-addr", "10.0.0.1",
                    "--master-port", "29500", "--world-size", "16", "--rank-offset", "8",
                    "--local-ranks", "8", "--level", "standard", "--node", "gpu2",
                    "--sizes", "1048576,1073741824", "--iters", "5", "--faults", ""]
    assert dist.parse_report("noise\nAIRLOCK-DIST {\"node\": \"a\"}\n") == {"node": "a"}
    assert dist.parse_report("AIRLOCK-DIST {broken") is None
    assert dist.parse_report("") is None


def test_sizes_and_bus_factor():
    assert dist.parse_sizes("64K, 1M,1G,512") == [65536, 1 << 20, 1 << 30, 512]
    with pytest.raises(ConfigError, match="not a list of sizes"):
        dist.parse_sizes("big")
    assert dist.bus_factor(8) == 1.75 and dist.bus_factor(2) == 1.0
    assert dist.human_bytes(1 << 30) == "1G" and dist.human_bytes(1000) == "1000B"


# --- combining reports and the verdict -----------------------------------------------------------
def rank_report(rank: int, node: str, loop_s: float = 0.01, own: float = 1e-5,
                verify: list | None = None) -> dict:
    return {"rank": rank, "local_rank": rank % 2, "node": node, "device": "cpu",
            "verify": verify or [{"bytes": 1 << 20, "sent_bad": 0, "bad": 0}],
            "sizes": [{"bytes": 1 << 20, "iters": 10, "loop_s": loop_s, "own_median_s": own}]}


def node_report(node: str, offset: int, ranks: list[dict], world: int = 4, **kw) -> dict:
    rep = {"node": node, "rank_offset": offset, "local_ranks": 2, "world_size": world,
           "backend": "gloo", "timeout": 30.0, "ranks": ranks, "errors": {},
           "timed_out": False, "progress": {}, "leftover": []}
    rep.update(kw)
    return rep


def healthy_world(**overrides) -> list[dict]:
    a = node_report("a", 0, [rank_report(0, "a"), rank_report(1, "a")])
    b = node_report("b", 2, [rank_report(2, "b"), rank_report(3, "b", loop_s=0.02)])
    for rep in (a, b):
        rep.update(overrides.get(rep["node"], {}))
    return [a, b]


def test_combine_takes_the_slowest_rank_and_bus_factor():
    sw = dist.combine(healthy_world())
    assert sw.world_size == 4 and sw.nodes == {0: "a", 1: "a", 2: "b", 3: "b"}
    (size,) = sw.sizes
    assert size.time_s == 0.002  # rank 3: 0.02 s for 10 iterations
    assert size.algbw_gbps == pytest.approx((1 << 20) / 0.002 / 1e9)
    assert size.busbw_gbps == pytest.approx(size.algbw_gbps * 1.5)
    assert sw.own_fraction[3] == pytest.approx(1e-5 / 0.002)
    out = verdict_allreduce(sw, floor_gbps=0.1)
    assert out.verdict.value == "pass" and out.detail == "busbw 0.786 GB/s at 1M, 4 ranks"
    assert out.figures["busbw_gbps"] == pytest.approx(0.7864, abs=1e-4)
    assert out.figures["nodes"]["3"] == "b"


def test_verdict_floor():
    out = verdict_allreduce(dist.combine(healthy_world()), floor_gbps=5.0)
    assert out.failed and out.detail == "busbw 0.786 GB/s < floor 5 at 1M"


def test_verdict_timeout_names_the_laggard():
    world = healthy_world(
        a={"timed_out": True, "ranks": [], "progress": {"0": [2, "verify 64K"],
                                                       "1": [2, "verify 64K"],
                                                       "2": [1, "joined"], "3": [2, "verify 64K"]}},
        b={"timed_out": True, "ranks": []})
    sw = dist.combine(world)
    assert sw.laggards == [2] and sw.missing == []
    out = verdict_allreduce(sw)
    assert out.failed and out.detail == "timeout after 30s (rank 2 (b) stuck at joined)"


def test_verdict_timeout_all_stuck_and_leftovers():
    world = healthy_world(a={"timed_out": True, "ranks": [], "leftover": [4242],
                             "progress": {"0": [3, "timed 1M"], "1": [3, "timed 1M"]}})
    out = verdict_allreduce(dist.combine(world))
    assert out.detail == ("timeout after 30s (all ranks stuck at timed 1M); "
                          "left running: [4242]")


def test_verdict_error_missing_sent_bad_wrong_sum():
    err = healthy_world(b={"ranks": [rank_report(2, "b")], "errors": {"3": "RuntimeError: x"}})
    assert verdict_allreduce(dist.combine(err)).detail == "rank 3 (b) error: RuntimeError: x"
    gone = healthy_world(b={"ranks": [rank_report(2, "b")]})
    assert verdict_allreduce(dist.combine(gone)).detail == "no report from rank 3 (b)"
    bad_sum = {"bytes": 1 << 20, "sent_bad": 0, "bad": 5, "first": 7, "expected": 12.0,
               "got": 13.0}
    sent = {"bytes": 1 << 20, "sent_bad": 1, "sent_first": 7, "bad": 5, "first": 7,
            "expected": 12.0, "got": 13.0}
    world = healthy_world(b={"ranks": [rank_report(2, "b", verify=[bad_sum]),
                                       rank_report(3, "b", verify=[sent])]})
    out = verdict_allreduce(dist.combine(world))
    assert out.detail == "rank 3 (b) sent wrong data at 1M (1 elements, first 7)"
    assert out.remediation == "replace"
    world = healthy_world(b={"ranks": [rank_report(2, "b", verify=[bad_sum]),
                                       rank_report(3, "b", verify=[bad_sum])]})
    out = verdict_allreduce(dist.combine(world))
    assert out.detail == "wrong sum on ranks 2,3 at 1M: element 7 expected 12 got 13"


def test_stragglers_against_the_others():
    assert allreduce_verdict.stragglers({0: 0.8, 1: 0.001}, 0.5) == [0]
    assert allreduce_verdict.stragglers({0: 0.8, 1: 0.7}, 0.5) == []  # everyone: busbw judges
    assert allreduce_verdict.stragglers({0: 0.3, 1: 0.001}, 0.5) == []
    world = healthy_world(b={"ranks": [rank_report(2, "b"),
                                       rank_report(3, "b", loop_s=0.2, own=0.015)]})
    out = verdict_allreduce(dist.combine(world))
    assert out.detail == "rank 3 (b) straggling: 75% of each all-reduce spent outside it"


def test_params_for_levels():
    cfg = AllreduceSection()
    gpu = params_for(cfg, True, "deep")
    assert gpu.sizes[-1] == 1 << 30 and gpu.iters == 100
    cpu = params_for(cfg, False, "standard")
    assert cpu.sizes == [64 << 10, 1 << 20, 4 << 20] and cpu.iters == 10
    assert params_for(cfg, False, "deep").iters == 20
    assert cfg.check_timeout == cfg.timeout + 30


def test_config_rejects_bad_values():
    for bad, msg in (({"sizes_kib": []}, "sizes_kib: need at least one"),
                     ({"dtype": "fp64"}, "dtype: must be one of"),
                     ({"straggler_fraction": 0}, "straggler_fraction: must be in")):
        with pytest.raises(ConfigError, match=msg):
            config.from_dict({"allreduce": bad}).allreduce  # noqa: B018 - loading validates


def test_launch_rejects_bad_ranks():
    with pytest.raises(ValueError, match="bad ranks"):
        dist.launch("127.0.0.1", 0, 2, 1, 2, params_for(CPU, False, "standard"))


# --- real process groups on the CPU --------------------------------------------------------------
def live_children() -> list[int]:
    """This process's children that are still running (not zombies)."""
    me, out = os.getpid(), []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == me and fields[0] != "Z":
            out.append(int(entry))
    return out


def run_cpu(fault: str = "", **section) -> tuple[dict, object]:
    cfg = AllreduceSection(**{**CPU.__dict__, **section})
    rep = dist.run_local(2, params_for(cfg, False, "standard"), faults.parse(fault), node="n1")
    return rep, verdict_allreduce(dist.combine([rep]), 0.001, cfg.straggler_fraction)


def test_healthy_sweep_verifies_and_measures():
    rep, out = run_cpu()
    assert out.verdict.value == "pass", out.detail
    assert rep["backend"] == "gloo" and rep["leftover"] == [] and not rep["errors"]
    assert [s["bytes"] for s in out.figures["sweep"]] == [64 << 10, 1 << 20]
    assert all(s["busbw_gbps"] > 0 for s in out.figures["sweep"])
    assert all(v["bad"] == 0 for r in rep["ranks"] for v in r["verify"])
    assert live_children() == []


def test_corrupt_rank_is_named():
    _rep, out = run_cpu("allreduce_corrupt=1")
    assert out.failed and out.detail == "rank 1 (n1) sent wrong data at 64K (1 elements, " \
                                        "first 8192)"


def test_slow_rank_is_named():
    _rep, out = run_cpu("allreduce_slow=0:0.05")
    assert out.failed and out.detail.startswith("rank 0 (n1) straggling"), out.detail


def test_hang_times_out_and_leaves_nothing():
    rep, out = run_cpu("allreduce_hang=1", timeout=4)
    assert out.failed and out.detail == "timeout after 4s (rank 1 (n1) stuck at joined)"
    assert rep["timed_out"] and rep["leftover"] == []
    assert live_children() == []


def test_check_allreduce_uses_cpu_profile_floor():
    cfg = config.from_dict({"allreduce": {"cpu_sizes_kib": [64], "cpu_iters": 3}})
    out = allreduce.check_allreduce(Context(cfg=cfg, node="n1", level="standard"))
    assert out.verdict.value == "pass", out.detail
    assert out.figures["profile"] == "cpu" and out.figures["floor"] == 0.001


def _procs_with(marker: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/environ", "rb") as fh:
                    if marker.encode() in fh.read():
                        found.append(int(entry))
            except OSError:
                pass
    return found


def test_hang_through_the_runner_is_killed(tmp_path, monkeypatch):
    from airlock import runner

    path = tmp_path / "airlock.toml"
    path.write_text(f'state_dir = "{tmp_path}/state"\n'
                    "[allreduce]\ncpu_sizes_kib = [64]\ncpu_iters = 2\ntimeout = 4\n")
    cfg = config.load(str(path))
    marker = f"AIRLOCK_TEST_MARK={uuid.uuid4().hex}"
    monkeypatch.setenv("AIRLOCK_TEST_MARK", marker.split("=")[1])
    monkeypatch.setenv("AIRLOCK_FAULTS", "allreduce_hang=0")
    ctx = Context.create(cfg, "n1", "standard")
    spec = registry.by_name("allreduce")
    out = runner.run_check(spec, ctx, registry.timeout_for(spec, cfg))
    assert out.failed and out.detail == "timeout after 4s (rank 0 (n1) stuck at joined)"
    # the hung check and its ranks are gone at once; the fork server lives on for the level's
    # next check, and goes when the level ends
    server = runner._SERVER._proc.pid if runner._SERVER else None
    assert [p for p in _procs_with(marker) if p != server] == []
    runner._drop_server()
    assert _procs_with(marker) == []


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def secret_file(folder, name: str = "secret", value: str = "s" * 64) -> str:
    path = folder / name
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.write(fd, value.encode())
    os.close(fd)
    return str(path)


def test_two_launchers_join_one_world_and_name_the_remote_culprit(tmp_path):
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("AIRLOCK_CONFIG", "AIRLOCK_FAULTS")}
    env["AIRLOCK_CONFIG"] = "/nonexistent/airlock.toml"  # defaults; faults from --faults only
    common = {"master_addr": "127.0.0.1", "master_port": port, "world_size": 4,
              "local_ranks": 2, "sizes": [64 << 10, 256 << 10], "iters": 3, "timeout": 60,
              "secret_file": secret_file(tmp_path)}
    a = subprocess.Popen(dist.worker_argv(rank_offset=0, host_store=True, node="a", faults="",
                                          **common), stdout=subprocess.PIPE, text=True, env=env)
    b = subprocess.Popen(dist.worker_argv(rank_offset=2, node="b", faults="allreduce_corrupt=1",
                                          **common), stdout=subprocess.PIPE, text=True, env=env)
    reports = [dist.parse_report(p.communicate(timeout=120)[0]) for p in (a, b)]
    assert [r["world_size"] for r in reports] == [4, 4]
    assert a.returncode == 0 and b.returncode == 0  # the run completed; the verdict judges
    sw = dist.combine(reports)
    assert sorted(sw.nodes.items()) == [(0, "a"), (1, "a"), (2, "b"), (3, "b")]
    out = verdict_allreduce(sw)
    assert out.failed and out.detail == "rank 3 (b) sent wrong data at 64K (1 elements, " \
                                        "first 8192)"
    # every rank saw the same wrong sum, which is how a culprit search narrows it down
    assert sorted({w["rank"] for w in sw.wrong_sum}) == [0, 1, 2, 3]


