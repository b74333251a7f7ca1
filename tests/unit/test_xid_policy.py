"""XID policy as data: the shipped policy, policy-file validation, kernel-log parsing (every date
format we read), de-duplication and the verdict's window."""

from __future__ import annotations

import time
from datetime import UTC, datetime

import pytest

from airlock.checks import xid
from airlock.checks.base import Verdict
from airlock.errors import ConfigError
from airlock.hw.nvml import XidEvent
from airlock.hw.profiles import xid_policy

NOW = 1_800_000_000.0
BOOT = NOW - 86400


def iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat().replace(".", ",")


def test_default_policy_is_the_documented_fatal_set():
    pol = xid_policy.policy("default")
    expected = {48, 56, 57, 58, 62, 63, 64, 65, 68, 69, 73, 74, 79, 80, 81, 92, 119, 120}
    assert pol.fatal == expected
    assert pol.window_s == 7200 and pol.dedup_s == 60 and pol.since_boot
    for app_error in (13, 31, 43, 45):
        assert pol.action(app_error) in ("warn", "ignore")
    assert pol.action(999) == "warn"  # unknown XIDs are looked at, not drained


def test_policy_file_errors_are_clear(tmp_path):
    def bad(text: str, words: str) -> None:
        f = tmp_path / "p.toml"
        f.write_text(text)
        xid_policy._POLICY_CACHE.pop(str(f), None)
        with pytest.raises(ConfigError, match=words):
            xid_policy.load_policies(str(f))

    bad("[p]\nfatal = [79]\nwarn = [79]\n", "XID 79 is in both fatal and warn")
    bad("[p]\nfatal = ['80-70']\n", "bad XID or range '80-70'")
    bad("[p]\nfatal = [79]\nwindow = 10\n", "unknown key 'window'")
    bad("[p]\ndefault = 'drain'\n", "default: must be one of fail, warn, ignore")
    bad("[p]\nwindow_s = -1\n", "window_s: expected seconds >= 0")
    bad("[p\n", "invalid TOML")
    with pytest.raises(ConfigError, match="xid policy 'nope' not in"):
        xid_policy.policy("nope")


def test_site_policy_file_via_config(tmp_path):
    from airlock.config import loader as config

    f = tmp_path / "xid.toml"
    f.write_text("[strict]\nfatal = [13]\ndefault = 'fail'\nwindow_s = 60\n")
    cfg = config.from_dict({"xid": {"policy_file": str(f)}})
    pol = xid_policy.policy("strict", cfg.xid.policy_file)
    assert pol.action(13) == "fail" and pol.action(1) == "fail"
    with pytest.raises(ConfigError, match="bad XID"):
        g = tmp_path / "bad.toml"
        g.write_text("[x]\nfatal = ['a']\n")
        config.from_dict({"xid": {"policy_file": str(g)}})


def test_kernel_log_formats_and_pci_mapping():
    t = NOW - 600
    lines = [
        # dmesg --time-format iso
        f"{iso(t)} NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off "
        "the bus.",
        # rsyslog RFC 3339
        f"{iso(t + 1).replace(',', '.')} gpu07 kernel: [ 812.1] NVRM: Xid (PCI:0000:5d:00): 48, "
        "An uncorrectable double bit error",
        # dmesg raw: seconds since boot
        "[ 5000.250000] NVRM: Xid (PCI:0000:3b:00): 13, Graphics Exception",
        # an older driver's form without "PCI:"
        f"{iso(t + 2)} NVRM: Xid (0000:3b:00): 31, Ch 00000010",
        # undated
        "NVRM: Xid (PCI:0000:3b:00): 62, Internal micro-controller halt",
        f"{iso(t)} nvidia-nvlink: unrelated line",
    ]
    events, undated, untagged = xid.parse_kernel_log("\n".join(lines), NOW, BOOT,
                                                     {"0000:3b:00": 2})
    assert [(e.xid, e.gpu) for e in events] == [(79, 2), (48, -1), (13, 2), (31, 2)]
    assert events[0].time == pytest.approx(t, abs=1)
    assert events[2].time == pytest.approx(BOOT + 5000.25)
    assert events[1].source == "kernel:0000:5d:00"
    assert undated == 1 and untagged == 0


def test_classic_syslog_date():
    now = time.mktime((2026, 3, 10, 12, 0, 0, 0, 0, -1))
    t = xid.line_time("Mar 10 11:30:00 gpu07 kernel: NVRM: Xid (PCI:0000:3b:00): 79, x", now, 0)
    assert t == pytest.approx(now - 1800)
    # a December line read in January is last year's
    jan = time.mktime((2026, 1, 2, 0, 0, 0, 0, 0, -1))
    dec = xid.line_time("Dec 31 23:00:00 h kernel: x", jan, 0)
    assert jan - dec == pytest.approx(3600 * 25, abs=3600)


def test_dedup_merges_bursts_and_double_reports():
    ev = [XidEvent(79, NOW - 100, 2, "nvml"), XidEvent(79, NOW - 99, 2, "kernel:0000:3b:00"),
          XidEvent(79, NOW - 95, 2, "kernel:0000:3b:00"), XidEvent(79, NOW - 10, 2, "nvml"),
          XidEvent(79, NOW - 100, 5, "nvml")]
    groups = {(g.xid, g.gpu): g for g in xid.dedup(ev, 60)}
    assert groups[(79, "gpu2")].count == 4
    assert groups[(79, "gpu2")].occurrences == 2  # the burst, then one 85 s later
    assert groups[(79, "gpu5")].occurrences == 1


def test_verdict_window_boot_and_actions():
    pol = xid_policy.policy("default")
    fatal = [XidEvent(79, NOW - 60, 3)]
    out = xid.verdict_xid(fatal, pol, NOW, BOOT)
    assert out.failed and out.detail == "79 gpu3 within 2h" and out.remediation == "reboot"
    # outside the window
    assert xid.verdict_xid([XidEvent(79, NOW - 7300, 3)], pol, NOW, BOOT).verdict is Verdict.PASS
    # before this boot: the reboot already dealt with it
    assert xid.verdict_xid(fatal, pol, NOW, NOW - 30).verdict is Verdict.PASS
    # repeated fatal XIDs are counted once per burst and named with their count
    burst = [XidEvent(48, NOW - 1000 + i, 1) for i in range(5)] + [XidEvent(48, NOW - 10, 1)]
    assert xid.verdict_xid(burst, pol, NOW, BOOT).detail == "48 gpu1 x2 within 2h"
    warn = xid.verdict_xid([XidEvent(13, NOW - 5, 0)], pol, NOW, BOOT)
    assert warn.verdict is Verdict.WARN
    ignored = xid.verdict_xid([XidEvent(45, NOW - 5, i) for i in range(8)], pol, NOW, BOOT)
    assert ignored.verdict is Verdict.PASS and "8 ignored" in ignored.detail
    unread = xid.verdict_xid([], pol, NOW, BOOT, source_error="dmesg: Operation not permitted")
    assert unread.verdict is Verdict.WARN and "unreadable" in unread.detail


def test_read_kernel_log_tail_only(tmp_path):
    f = tmp_path / "kern.log"
    old = "x" * 100 + "\n"
    f.write_text(old * 1000 + f"{iso(NOW)} NVRM: Xid (PCI:0000:3b:00): 79, tail\n")
    log = xid.read_kernel_log(str(f), 500, 3)
    assert len(log.text) <= 500 and "Xid" in log.text and not log.text.startswith("x" * 101)
    assert not log.kernel_only  # a file: only kernel-tagged lines will count
    with pytest.raises(OSError):
        xid.read_kernel_log(str(tmp_path / "missing.log"), 500, 3)


def test_dmesg_source_reads_dev_kmsg_without_blocking_or_spawning():
    # /dev/kmsg is readable as root here; it carries no NVRM lines on this machine. A blocking
    # read would wait for the next kernel message forever: the timeout catches that.
    import subprocess
    import sys

    started = time.monotonic()
    log = xid.read_kernel_log("dmesg", 1 << 20, 5)
    assert (log.source, log.kernel_only) == ("kmsg", True)
    assert time.monotonic() - started < 5
    assert xid.parse_kernel_log(log.text, time.time(), 0).events == []
    # the fallback when /dev/kmsg cannot be opened: dmesg itself, kernel facility only
    text = xid._run_reader(["dmesg", "--kernel", "--time-format", "iso", "--nopager"], 5)
    assert text.strip()
    # reading /dev/kmsg spawns nothing: not even the subprocess module gets imported
    code = ("import sys; from airlock.checks import xid; xid.read_kernel_log('dmesg', 1 << 20, 5);"
            " print('subprocess' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60)
    assert out.stdout.strip() == "False", out.stderr


def test_journal_source_runs():
    log = xid.read_kernel_log("journal", 1 << 20, 10)
    assert (log.source, log.kernel_only) == ("journal", True)


def test_check_reads_kernel_log_file_even_when_nvml_is_down(tmp_path):
    import json

    from airlock.config import loader as config
    from airlock.runner import run_level

    log = tmp_path / "kern.log"
    log.write_text(f"{iso(time.time() - 30)} gpu07 kernel: NVRM: Xid (PCI:0000:48:00): 79, "
                   "pid=7, GPU has fallen off the bus.\n")
    sim = tmp_path / "gpus.json"
    sim.write_text(json.dumps({"nodes": {"n1": {"gpus": [], "nvml_hang_s": 3}}}))
    cfg = config.from_dict({"state_dir": str(tmp_path), "log_dir": str(tmp_path),
                            "nvml": {"simulate": str(sim), "timeout": 0.3},
                            "xid": {"kernel_log": str(log)}, "profile": {"gres": False}})
    records, _ = run_level(cfg, "n1", "quick", only=["nvml", "xid"])
    by = {r["check"]: r for r in records}
    assert by["nvml"]["verdict"] == "fail"
    assert by["xid"]["verdict"] == "fail" and by["xid"]["detail"].startswith("79 0000:48:00")


# --- only the kernel may report an XID (issue 10) ----------------------------------------------
SPOOF = "alice[4242]: NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus."


def xid_run(tmp_path, kernel_log: str) -> dict:
    from airlock.config import loader as config
    from airlock.runner import run_level

    cfg = config.from_dict({"state_dir": str(tmp_path), "log_dir": str(tmp_path),
                            "xid": {"kernel_log": kernel_log}, "profile": {"gres": False}})
    (record,), _ = run_level(cfg, "n1", "quick", only=["xid"])
    return record


def test_spoofed_syslog_xid_from_a_user_process_is_ignored(tmp_path):
    t = time.time() - 30
    stamp = time.strftime("%b %d %H:%M:%S", time.localtime(t))
    log = tmp_path / "syslog"
    log.write_text("\n".join([
        f"{stamp} gpu07 {SPOOF}",  # a user's process, classic syslog format
        f"{iso(t)} gpu07 {SPOOF}",  # the same in RFC 3339 format
        # a user's message that itself begins with "kernel: "
        f"{stamp} gpu07 alice: kernel: NVRM: Xid (PCI:0000:3b:00): 79, forged",
        f"{iso(t)} NVRM: Xid (PCI:0000:3b:00): 79, no tag at all",
    ]) + "\n")
    rec = xid_run(tmp_path, str(log))
    assert rec["verdict"] == "pass", rec
    assert rec["figures"]["not_kernel"] == 4 and rec["figures"]["fatal"] == []
    # the kernel's own line in the same file counts
    with log.open("a") as fh:
        fh.write(f"{stamp} gpu07 kernel: [ 812.5] NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has "
                 "fallen off the bus.\n")
    rec = xid_run(tmp_path, str(log))
    assert rec["verdict"] == "fail" and rec["detail"].startswith("79 0000:3b:00"), rec
    assert rec["figures"]["not_kernel"] == 4


def kmsg_record(facility: int, level: int, usec: int, text: str) -> str:
    return f"{facility << 3 | level},{usec // 1000},{usec},-;{text}\n SUBSYSTEM=pci\n"


def test_kmsg_keeps_only_kernel_facility_records(tmp_path):
    """/dev/kmsg's record format, saved to a file (reading it needs no kernel change): a process
    that writes into /dev/kmsg is filed under LOG_USER by the kernel; only facility 0 counts."""
    boot = time.time() - 3600
    f = tmp_path / "kmsg"
    f.write_text(
        kmsg_record(0, 6, 1_000_000, "pci 0000:3b:00.0: [10de:2335] type 00 class 0x030200")
        + kmsg_record(1, 4, 3_500_000_000, "NVRM: Xid (PCI:0000:3b:00): 79, written by a user")
        + kmsg_record(0, 3, 3_590_250_000, "NVRM: Xid (PCI:0000:5d:00): 48, An uncorrectable "
                      "double bit error"))
    text = xid.read_kmsg(str(f))
    assert text.splitlines() == ["[3590.250000] NVRM: Xid (PCI:0000:5d:00): 48, An "
                                 "uncorrectable double bit error"]
    found = xid.parse_kernel_log(text, time.time(), boot, {"0000:5d:00": 4})
    assert [(e.xid, e.gpu) for e in found.events] == [(48, 4)]
    assert found.events[0].time == pytest.approx(boot + 3590.25)


def test_kernel_log_must_be_a_kernel_source(tmp_path):
    from airlock.config import loader as config

    with pytest.raises(ConfigError, match=r"\[xid\] kernel_log: must be .* absolute path"):
        config.from_dict({"xid": {"kernel_log": "kern.log"}})
    for ok in ("dmesg", "journal", "", str(tmp_path / "kern.log")):
        assert config.from_dict({"xid": {"kernel_log": ok}}).xid.kernel_log == ok
