"""Network loopback: the result-table parser on recorded perftest and fabtests outputs
(tests/data/loopback/SOURCES.md), the verdict, and the check end to end on a sysfs tree with a
stand-in tool (its real server/client subprocess path): a slow port is named, a hung tool is
inconclusive, a missing tool skips."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from airlock.checks import loopback
from airlock.checks.base import Verdict
from airlock.checks.context import Context
from airlock.config import loader as config

DATA = Path(__file__).resolve().parents[1] / "data" / "loopback"
FAKE = DATA / "fake-rdma-tool"


def test_parser_reads_each_recorded_format():
    assert loopback.parse_bandwidth((DATA / "perftest-issue273-gbits.txt").read_text()) == 0.48
    assert loopback.parse_bandwidth((DATA / "perftest-issue65-mbsec.txt").read_text()) == \
        pytest.approx(920.13 * 8 / 1000, abs=1e-3)
    # fabtests: the row of the largest size (1m), MB/sec
    assert loopback.parse_bandwidth((DATA / "efa_test-dlami-guide.txt").read_text()) == \
        pytest.approx(2122.41 * 8 / 1000, abs=1e-3)
    assert loopback.parse_bandwidth("Couldn't connect to localhost:18515\n") is None
    assert loopback.parse_bandwidth("") is None


def test_a_warning_inside_the_table_is_not_a_row():
    text = (" #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]\n"
            "Conflicting CPU frequency values detected: 3295.212000 != 5003.410000.\n"
            " 65536      1000             328.64             328.61 \t\t     0.626777\n")
    assert loopback.parse_bandwidth(text) == 328.61


P = loopback.Port


def test_verdict_names_the_slow_port_against_a_share_of_its_rate():
    m = [loopback.Measured(P("mlx5_0", "1", 400, False), 391.0),
         loopback.Measured(P("mlx5_1", "1", 400, False), 200.5)]
    out = loopback.verdict_loopback(m, 0.9, 0)
    assert out.failed and out.detail == "mlx5_1/1 200.5 Gb/s < 360 (0.9 of 400 Gb/s)"
    assert loopback.verdict_loopback(m, 0, 100).verdict is Verdict.PASS
    assert loopback.verdict_loopback(m, 0, 250).detail == "mlx5_1/1 200.5 Gb/s < 250"
    none = loopback.verdict_loopback([loopback.Measured(P("efa_0", "1", 100, True), None,
                                                        "fi_rma_bw gave no result: x")], 0.9, 0)
    assert none.verdict is Verdict.ERROR and none.detail == "efa_0/1: fi_rma_bw gave no result: x"


# --- the check ----------------------------------------------------------------------------------
def rdma_port(root, dev: str, rate: str, state: str = "4: ACTIVE", driver: str = "mlx5_core"):
    d = root / "sys" / "class" / "infiniband" / dev
    (d / "ports" / "1").mkdir(parents=True)
    (d / "ports" / "1" / "state").write_text(state + "\n")
    (d / "ports" / "1" / "rate").write_text(rate + "\n")
    (d / "device").mkdir()
    (root / "drivers" / driver).mkdir(parents=True, exist_ok=True)
    os.symlink(root / "drivers" / driver, d / "device" / "driver")


@pytest.fixture
def tools(tmp_path):
    folder = tmp_path / "bin"
    folder.mkdir()
    for name in ("ib_write_bw", "fi_rma_bw"):
        os.symlink(FAKE, folder / name)
    return folder


def ctx_for(tmp_path, tools, fraction: float, **section) -> Context:
    profiles = tmp_path / "profiles"
    profiles.mkdir(exist_ok=True)
    (profiles / "rdma.toml").write_text(f'name = "rdma"\nloopback_min_fraction = {fraction}\n')
    raw = {"state_dir": str(tmp_path / "state"), "system": {"sys_root": str(tmp_path / "sys")},
           "profile": {"name": "rdma", "dirs": [str(profiles)]},
           "loopback": {"perftest": str(tools / "ib_write_bw"),
                        "fabtests": str(tools / "fi_rma_bw"), "server_start": 0.2,
                        "tcp_port": 30100, **section}}
    return Context.create(config.from_dict(raw), "n1", "standard")


def test_one_slow_port_is_named_and_every_port_gets_its_own_server(tmp_path, tools,
                                                                   monkeypatch):
    rdma_port(tmp_path, "mlx5_0", "10 Gb/sec (4X SDR)")
    rdma_port(tmp_path, "mlx5_1", "100 Gb/sec (4X EDR)")
    rdma_port(tmp_path, "efa_0", "25 Gb/sec", driver="efa")
    rdma_port(tmp_path, "mlx5_2", "100 Gb/sec (4X EDR)", state="1: DOWN")  # the rdma check's
    replay = f"replay:{DATA / 'perftest-issue65-mbsec.txt'}"
    monkeypatch.setenv("FAKE_RDMA_TOOL", json.dumps({
        "mlx5_0": replay, "mlx5_1": replay,
        "efa_0": f"replay:{DATA / 'efa_test-dlami-guide.txt'}"}))
    log = tmp_path / "calls.log"
    monkeypatch.setenv("FAKE_RDMA_TOOL_LOG", str(log))
    out = loopback.check_loopback(ctx_for(tmp_path, tools, 0.5))
    assert out.failed and out.detail == "mlx5_1/1 7.361 Gb/s < 50 (0.5 of 100 Gb/s)"
    assert out.figures["gbps"] == {"efa_0/1": pytest.approx(16.979, abs=1e-3),
                                   "mlx5_0/1": 7.361, "mlx5_1/1": 7.361}
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    servers = [c for c in calls if "localhost" not in c]
    assert sorted(c[0] for c in servers) == ["fi_rma_bw", "ib_write_bw", "ib_write_bw"]
    efa = next(c for c in calls if c[0] == "fi_rma_bw" and "localhost" in c)
    assert efa[1:9] == ["-p", "efa", "-e", "rdm", "-o", "write", "-d", "efa_0-rdm"]
    perftest = next(c for c in calls if c[0] == "ib_write_bw" and "localhost" in c)
    assert {"-d", "mlx5_0", "--report_gbits", "-F"} <= set(perftest) or \
        {"-d", "mlx5_1", "--report_gbits", "-F"} <= set(perftest)
    out = loopback.check_loopback(ctx_for(tmp_path, tools, 0.05))
    assert out.verdict is Verdict.PASS


def test_a_hung_tool_is_inconclusive_and_killed(tmp_path, tools, monkeypatch):
    rdma_port(tmp_path, "mlx5_0", "400 Gb/sec (4X NDR)")
    monkeypatch.setenv("FAKE_RDMA_TOOL", json.dumps({"mlx5_0": "hang"}))
    out = loopback.check_loopback(ctx_for(tmp_path, tools, 0.9, timeout=1.0))
    assert out.verdict is Verdict.ERROR
    assert out.detail == "mlx5_0/1: ib_write_bw gave no result within 1s (killed)"


def test_a_tool_that_fails_is_inconclusive_with_its_words(tmp_path, tools, monkeypatch):
    rdma_port(tmp_path, "mlx5_0", "400 Gb/sec (4X NDR)")
    monkeypatch.setenv("FAKE_RDMA_TOOL", json.dumps(
        {"mlx5_0": "fail: Couldn't connect to localhost:30100"}))
    out = loopback.check_loopback(ctx_for(tmp_path, tools, 0.9))
    assert out.verdict is Verdict.ERROR
    assert out.detail == "mlx5_0/1: ib_write_bw gave no result: Couldn't connect to localhost:30100"


def test_no_tool_or_no_port_skips_with_the_reason(tmp_path, tools, monkeypatch):
    assert loopback.check_loopback(ctx_for(tmp_path, tools, 0.9)).detail == \
        "no active RDMA ports"
    rdma_port(tmp_path, "mlx5_0", "400 Gb/sec (4X NDR)")
    out = loopback.check_loopback(ctx_for(tmp_path, tools, 0.9,
                                          perftest=str(tmp_path / "nowhere" / "ib_write_bw")))
    assert out.verdict is Verdict.SKIP
    assert out.detail.startswith("no loopback tool here (") and "for mlx5_0/1" in out.detail


def test_every_rdma_port_down_on_a_profile_with_a_floor_fails(tmp_path, tools):
    """Issue 25 item 5: enforcing loopback on an InfiniBand profile passed a node whose RDMA
    ports were all down (loopback skipped "no active RDMA ports", rdma skipped with its default
    of 0 expected ports). Ports that are there and down are the node's own reading."""
    rdma_port(tmp_path, "mlx5_0", "400 Gb/sec (4X NDR)", state="1: DOWN")
    rdma_port(tmp_path, "mlx5_1", "400 Gb/sec (4X NDR)", state="1: DOWN")
    out = loopback.check_loopback(ctx_for(tmp_path, tools, 0.9))
    assert out.failed, out
    assert out.detail == "every RDMA port down (mlx5_0/1 DOWN, mlx5_1/1 DOWN): nothing to measure"
    # a profile without a loopback floor expects nothing of the network
    assert loopback.check_loopback(ctx_for(tmp_path, tools, 0.0)).verdict is Verdict.SKIP
