"""Memory test: the verdict from hand-made results, the plan arithmetic, and the test itself on
small CPU buffers, for real, healthy and with memtest_corrupt / alloc_fail caught and named."""

from __future__ import annotations

import pytest

from airlock.checks import memtest
from airlock.checks.context import Context
from airlock.checks.memtest import MIB, BadWord, DeviceMem, verdict_memtest
from airlock.config import loader as config
from airlock.config.sections.checks import MemtestSection
from airlock.errors import ConfigError
from airlock.hw import faults


def test_verdict_pass_sums_tested_memory():
    out = verdict_memtest([DeviceMem("g0", 4 * MIB, 34), DeviceMem("g1", 4 * MIB, 34)])
    assert out.verdict.value == "pass" and out.detail == "2 devices, 8 MiB clean"
    assert out.figures["tested_mib"] == {"g0": 4.0, "g1": 4.0}


def test_verdict_bad_words_name_device_offset_expected_got():
    bad = BadWord("g1", "address", 0x1F40, 0x7D0, 0x7F0, address=0x7F0000001F40)
    out = verdict_memtest([DeviceMem("g0", MIB, 1), DeviceMem("g1", MIB, 1, 3, (bad,))])
    assert out.failed and out.remediation == "replace"
    assert out.detail == ("g1 3 bad words, first at offset 0x1f40 expected 0x000007d0 "
                          "got 0x000007f0 (address)")
    assert out.figures["bad"][0]["address"] == 0x7F0000001F40
    assert out.figures["bad_words"] == {"g1": 3}


def test_verdict_error_before_bad_words():
    out = verdict_memtest([DeviceMem("g0", MIB, 1, 1, ()),
                           DeviceMem("g1", error="allocation of 4 MiB failed: x")])
    assert out.detail == "g1 allocation of 4 MiB failed: x" and out.remediation == "reboot"
    assert verdict_memtest([]).detail == "no devices ran"


def test_plan_bytes_gpu_share_and_cpu():
    cfg = MemtestSection()
    total, chunk = memtest.plan_bytes(cfg, True, "standard", 80 * 1024 * MIB)
    assert chunk == 256 * MIB and total % chunk == 0
    assert 0.49 * 80 * 1024 * MIB < total <= 0.5 * 80 * 1024 * MIB
    deep, _ = memtest.plan_bytes(cfg, True, "deep", 80 * 1024 * MIB)
    assert deep > 1.7 * total
    assert memtest.plan_bytes(cfg, True, "standard", 10 * MIB) == (256 * MIB, 256 * MIB)
    assert memtest.plan_bytes(cfg, False, "standard", 0) == (4 * MIB, MIB)
    assert memtest.plan_bytes(cfg, False, "deep", 0) == (8 * MIB, MIB)


def test_int32_wrap_is_exact():
    import torch

    x = torch.tensor([0, 1, (1 << 31) - 1, 1 << 31, (1 << 32) + 5, -1], dtype=torch.int64)
    assert memtest._as_int32(torch, x).tolist() == [0, 1, (1 << 31) - 1, -(1 << 31), 5, -1]


def make_ctx(fault: str = "", level: str = "standard", **section) -> Context:
    cfg = config.from_dict({"memtest": {"cpu_mib": 2, **section}})
    return Context(cfg=cfg, node="n1", level=level, faults=faults.parse(fault))


def test_check_memtest_cpu_healthy():
    out = memtest.check_memtest(make_ctx())
    assert out.verdict.value == "pass", out.detail
    assert out.detail == "2 devices, 4 MiB clean"


def test_memtest_corrupt_is_caught_and_located():
    out = memtest.check_memtest(make_ctx("memtest_corrupt=1"))
    assert out.failed
    # word 1000 of the region, bit 5 flipped while it held walking-ones bit 0
    assert out.detail == ("cpu1 1 bad words, first at offset 0xfa0 expected 0x00000001 "
                          "got 0x00000021 (walking_ones)")
    assert out.figures["bad"] == [{"device": "cpu1", "offset": 4000, "expected": 1, "got": 33,
                                   "pattern": "walking_ones", "address": 0}]


def test_alloc_fail_is_named():
    out = memtest.check_memtest(make_ctx("alloc_fail=0"))
    assert out.failed and out.detail == "cpu0 allocation of 2 MiB failed: injected alloc_fail"


def test_every_pattern_runs_deep_rounds():
    cfg = MemtestSection(cpu_mib=1, deep_rounds=2)
    import torch

    res = memtest.run_memtest(torch, ["cpu0"], cfg, "deep", {})
    assert res[0].passes == 2 * (32 + 1 + 1) and res[0].bytes_tested == 2 * MIB
    assert not res[0].bad_words and not res[0].error


def test_config_rejects_bad_values():
    for bad, msg in (({"share": 0.99}, "share: must be > 0 and <= 0.95"),
                     ({"patterns": ["march"]}, "patterns: must be one of"),
                     ({"cpu_mib": 0}, "cpu_mib: must be > 0")):
        with pytest.raises(ConfigError, match=msg):
            config.from_dict({"memtest": bad}).memtest  # noqa: B018 - loading validates
