"""System quick checks against a fake /sys and /proc tree in tmp_path (and real statvfs/writes)."""

from __future__ import annotations

import os

import pytest

from airlock.checks import rdma_ports, system
from airlock.checks.base import Verdict
from airlock.checks.context import Context
from airlock.config import loader as config
from airlock.errors import ConfigError


def ib_port(root, dev: str, port: str, state: str, rate: str) -> None:
    d = root / "sys" / "class" / "infiniband" / dev / "ports" / port
    d.mkdir(parents=True)
    (d / "state").write_text(state + "\n")
    (d / "rate").write_text(rate + "\n")


def ctx_for(tmp_path, **section) -> Context:
    raw = {"sys_root": str(tmp_path / "sys"), "proc_root": str(tmp_path / "proc"), **section}
    cfg = config.from_dict({"system": raw, "state_dir": str(tmp_path), "log_dir": str(tmp_path)})
    return Context.create(cfg, "n1")


def test_parsers():
    assert rdma_ports.parse_state("4: ACTIVE") == "ACTIVE"
    assert rdma_ports.parse_state("1: DOWN\n") == "DOWN"
    assert rdma_ports.parse_rate("400 Gb/sec (4X NDR)") == 400
    assert rdma_ports.parse_rate("") == 0
    assert system.parse_meminfo_total_kib("MemTotal:  2113204224 kB\nMemFree: 1 kB\n") \
        == 2113204224
    mounts = system.parse_mounts("fs /shared\\040data nfs4 rw,relatime 0 0\n"
                                 "fs /scratch xfs ro,noatime 0 0\n")
    assert mounts["/shared data"] == {"rw", "relatime"} and "ro" in mounts["/scratch"]


def test_rdma_verdicts():
    P = rdma_ports.RdmaPort
    ok = [P("mlx5_0", "1", "ACTIVE", 400), P("mlx5_1", "1", "ACTIVE", 400)]
    assert system.verdict_rdma(ok, 2, 400).verdict is Verdict.PASS
    down = [ok[0], P("mlx5_1", "1", "DOWN", 0)]
    out = system.verdict_rdma(down, 2, 0)
    assert out.failed and out.detail == "1/2 ports active: mlx5_1/1 DOWN"
    slow = [ok[0], P("mlx5_1", "1", "ACTIVE", 200)]
    assert system.verdict_rdma(slow, 2, 400).detail == "mlx5_1/1 200 Gb/s < 400"
    assert system.verdict_rdma([], 4, 0).detail == "0/4 ports active: no RDMA devices"
    assert system.verdict_rdma(ok, 0, 0).verdict is Verdict.SKIP


def test_rdma_check_reads_sysfs_tree(tmp_path):
    ib_port(tmp_path, "mlx5_0", "1", "4: ACTIVE", "400 Gb/sec (4X NDR)")
    ib_port(tmp_path, "mlx5_1", "1", "1: DOWN", "10 Gb/sec (4X SDR)")
    ib_port(tmp_path, "efa_0", "1", "4: ACTIVE", "100 Gb/sec")
    assert system.check_rdma(ctx_for(tmp_path)).verdict is Verdict.SKIP
    out = system.check_rdma(ctx_for(tmp_path, rdma_ports=3))
    assert out.failed and "mlx5_1/1 DOWN" in out.detail
    only = ctx_for(tmp_path, rdma_ports=1, rdma_devices=["mlx5_0"], rdma_rate_gbps=400)
    assert system.check_rdma(only).verdict is Verdict.PASS
    efa = ctx_for(tmp_path, rdma_ports=1, rdma_devices=["efa_0"], rdma_rate_gbps=200)
    assert system.check_rdma(efa).detail == "efa_0/1 100 Gb/s < 200"


def test_disk_check_real_statvfs(tmp_path):
    assert system.check_disk(ctx_for(tmp_path)).verdict is Verdict.SKIP
    assert system.check_disk(ctx_for(tmp_path, disk_paths=[str(tmp_path)],
                                     disk_min_free_gib=0.001)).verdict is Verdict.PASS
    full = system.check_disk(ctx_for(tmp_path, disk_paths=[str(tmp_path)],
                                     disk_min_free_gib=10**9))
    assert full.failed and "GiB free < 1e+09" in full.detail
    gone = system.check_disk(ctx_for(tmp_path, disk_paths=[str(tmp_path / "nope")]))
    assert gone.failed and "No such file or directory" in gone.detail
    inodes = system.verdict_disk([system.DiskStat("/x", 50.0, 0.5)], 1, 1)
    assert inodes.failed and "0.50% inodes free" in inodes.detail


def test_mounts_check(tmp_path):
    shared = tmp_path / "shared"
    scratch = tmp_path / "scratch"
    shared.mkdir()
    scratch.mkdir()
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc" / "mounts").write_text(
        f"srv:/export {shared} nfs4 rw,relatime 0 0\n/dev/sdb {scratch} xfs ro 0 0\n")
    assert system.check_mounts(ctx_for(tmp_path)).verdict is Verdict.SKIP
    ok = system.check_mounts(ctx_for(tmp_path, mounts=[str(shared)]))
    assert ok.verdict is Verdict.PASS and ok.detail == "1 mounted, writable"
    assert not list(shared.iterdir())  # the probe file was removed
    ro = system.check_mounts(ctx_for(tmp_path, mounts=[str(shared), str(scratch)]))
    assert ro.failed and ro.detail == f"{scratch} read-only"
    missing = system.check_mounts(ctx_for(tmp_path, mounts=[str(tmp_path / "home")]))
    assert missing.failed and missing.detail.endswith("home not mounted")
    # mounted but the write fails (here: the directory is gone under the mount entry)
    shared.rmdir()
    broken = system.check_mounts(ctx_for(tmp_path, mounts=[str(shared)]))
    assert broken.failed and "No such file or directory" in broken.detail


def test_memory_check(tmp_path):
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc" / "meminfo").write_text("MemTotal:       2097152 kB\n")  # 2 GiB
    assert system.check_memory(ctx_for(tmp_path)).verdict is Verdict.SKIP
    assert system.check_memory(ctx_for(tmp_path, min_memory_gib=1.5)).verdict is Verdict.PASS
    low = system.check_memory(ctx_for(tmp_path, min_memory_gib=4))
    assert low.failed and low.detail == "2.0 GiB < 4 GiB"
    (tmp_path / "proc" / "meminfo").write_text("garbage\n")
    assert "no MemTotal" in system.check_memory(ctx_for(tmp_path, min_memory_gib=4)).detail


def test_real_proc_memory():
    cfg = config.from_dict({"system": {"min_memory_gib": 0.1}})
    out = system.check_memory(Context.create(cfg, "n1"))
    assert out.verdict is Verdict.PASS and out.figures["total_gib"] > 0.1


def test_system_section_validation():
    with pytest.raises(ConfigError, match=r"\[system\] disk_paths: 'tmp' is not an absolute path"):
        config.from_dict({"system": {"disk_paths": ["tmp"]}})
    with pytest.raises(ConfigError, match="rdma_ports: expected an integer"):
        config.from_dict({"system": {"rdma_ports": "4"}})
    with pytest.raises(ConfigError, match="unknown key 'ib_ports'"):
        config.from_dict({"system": {"ib_ports": 4}})


def test_faulty_system_fails_quick_level(tmp_path):
    """Through the whole quick level: a down IB port is the named failure."""
    import json

    from airlock.hw.nvml import healthy_gpu_dict
    from airlock.runner import run_level

    ib_port(tmp_path, "mlx5_0", "1", "4: ACTIVE", "400 Gb/sec (4X NDR)")
    ib_port(tmp_path, "mlx5_1", "1", "1: DOWN", "400 Gb/sec (4X NDR)")
    sim = tmp_path / "gpus.json"
    sim.write_text(json.dumps({"nodes": {"n1": {"gpus": [healthy_gpu_dict(i)
                                                         for i in range(8)]}}}))
    cfg = config.from_dict({
        "state_dir": str(tmp_path), "log_dir": str(tmp_path),
        "nvml": {"simulate": str(sim)}, "xid": {"kernel_log": ""}, "profile": {"gres": False},
        "system": {"sys_root": str(tmp_path / "sys"), "rdma_ports": 2,
                   "disk_paths": [os.path.dirname(str(tmp_path))]},
    })
    records, _ = run_level(cfg, "n1", "quick")
    failing = [(r["check"], r["detail"]) for r in records if r["verdict"] == "fail"]
    assert failing == [("rdma", "1/2 ports active: mlx5_1/1 DOWN")]
