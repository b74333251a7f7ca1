"""The fault catalogue: every fault class that can be injected through the interface its check
reads, run against each level, repeated; per class and level, whether it was caught, by which
check, and the time to the verdict; and false fails on a healthy node over many runs of each
level. docs/faults.md holds the table and what each level promises.

Each run is `airlock check --level L --node N --json` in a process of its own, exactly as a
person (or the registration suite's runner) runs a level, on a node simulated through the real
interfaces: the NVML simulation file ([nvml] simulate: its GPU fields, "nvml_hang_s", "cuda"),
the fault switches (the simulation's "faults", airlock/hw/faults.py), an RDMA port tree under
[system] sys_root whose `link_downed` counter grows between runs (a flapping port), and the
recorded DCGM outputs replayed by tests/data/dcgm/fake-dcgmi ([dcgm] dcgmi). Every run has a
fresh state directory: nothing carries over but what the class itself sets up (the flap
baseline). [profile] gres is off: there is no Slurm here to ask for the node's GRES.

The periodic path (a drain by the HealthCheckProgram) and the on-demand group check need a
cluster: tests/cluster/test_cluster_quick_faults.py and test_ondemand.py cover them; this bench
times the verdict of a level, not a drain. There is no `preflight` level in this version.

    python bench/bench_faults.py [--runs 3] [--healthy 100] [--levels quick,standard,deep]
                                 [--classes ecc,gemm_corrupt] [--lightest] [--json FILE]
                                 [--markdown]

--lightest runs each class once, at the lightest level that promises to catch it, with
--healthy runs of each such level; --only-expected restricts each class's run to the checks
expected to catch it (`airlock check --only`). CI runs `--lightest --only-expected --healthy 1`
(every class once, no timing asserted anywhere) with `--collective-timeout 30`: a hang is
caught at [allreduce] timeout whatever its value, and the default (120 s) only makes CI wait.
The table in docs/faults.md comes from full runs, without either, on the default config.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DCGM = ROOT / "tests" / "data" / "dcgm"
LEVELS = ("quick", "standard", "deep")


@dataclass
class FaultClass:
    name: str
    interface: str  # nvml | cuda | switch | rdma | dcgm
    promise: str  # the lightest level that should catch it
    checks: tuple[str, ...]  # the checks expected to catch it
    gpu: dict[str, Any] = field(default_factory=dict)  # fields changed on gpu3
    node: dict[str, Any] = field(default_factory=dict)  # node-entry keys (cuda, nvml_hang_s)
    faults: dict[str, str] = field(default_factory=dict)  # fault switches
    env: dict[str, str] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)  # config sections
    flaps: int = 0  # RDMA: link_downed grows by this many over as many runs after a baseline
    gpus: int = 8
    # "warn": on CPU stand-ins a slow device only warns, by design (checks/burnin.py: a CPU
    # "device" straggles on shared cores); on GPUs the profile's floors fail it
    on_cpu: str = "fail"

    def describe(self) -> str:
        what = self.gpu or self.node or self.faults or self.env
        if self.flaps:
            return f"port mlx5_0/1 link_downed +1 between {self.flaps + 1} runs"
        if self.gpus != 8:
            return f"{self.gpus} of 8 GPUs in NVML"
        return ", ".join(f"{k}={_short(v)}" for k, v in what.items())


def _short(value: Any) -> str:
    """A field's value for the table: a long list as its count of each item."""
    if isinstance(value, list) and len(value) > 4:
        counts = {str(v): value.count(v) for v in value}
        return "[" + ", ".join(f"{n}x {v}" for v, n in counts.items()) + "]"
    if isinstance(value, str) and value.startswith("replay:"):
        path, _, code = value[len("replay:"):].rpartition(":")
        return f"replay {Path(path).name}, exit {code}"
    return str(value)


def _dcgm(file: str, code: int) -> dict[str, str]:
    return {"FAKE_DCGMI": f"replay:{DCGM / file}:{code}"}


CLASSES: tuple[FaultClass, ...] = (
    # NVML simulation fields (the quick checks)
    FaultClass("ecc", "nvml", "quick", ("ecc",), gpu={"ecc_volatile_uncorrected_dram": 2}),
    FaultClass("row_remap", "nvml", "quick", ("row_remap",), gpu={"remap_pending": True}),
    FaultClass("xid", "nvml", "quick", ("xid",), gpu={"xids": [{"xid": 79}]}),
    FaultClass("nvlink", "nvml", "quick", ("nvlink",),
               gpu={"nvlink_active": [True] * 15 + [False] * 3}),
    FaultClass("gpu_lost", "nvml", "quick", ("gpu_lost",), gpu={"lost": True}),
    FaultClass("gpu_missing", "nvml", "quick", ("gpu_count",), gpus=7),
    FaultClass("nvml_hang", "nvml", "quick", ("nvml",), node={"nvml_hang_s": 30}),
    FaultClass("thermal", "nvml", "quick", ("temperature", "throttle"),
               gpu={"temperature_c": 97, "throttle_reasons": ["hw_thermal_slowdown"]}),
    FaultClass("clocks", "nvml", "quick", ("throttle",),
               gpu={"throttle_reasons": ["hw_slowdown"]}),
    FaultClass("pcie_width", "nvml", "quick", ("pcie",), gpu={"pcie_width": 8}),
    # the CUDA simulation (what torch could use)
    FaultClass("cuda_hidden", "cuda", "standard", ("cuda",),
               node={"cuda": {"stand_in": True, "hide": [3]}}),
    FaultClass("cuda_error", "cuda", "standard", ("cuda",),
               node={"cuda": {"error": "CUDA error 802: system not yet initialized"}}),
    # the fault switches
    FaultClass("gemm_corrupt", "switch", "standard", ("burnin",), faults={"gemm_corrupt": "0"}),
    FaultClass("gemm_slow", "switch", "standard", ("burnin",), faults={"gemm_slow": "0:0.2"},
               on_cpu="warn"),
    FaultClass("memtest", "switch", "standard", ("memtest",), faults={"memtest_corrupt": "0"}),
    FaultClass("allreduce_corrupt", "switch", "standard", ("allreduce",),
               faults={"allreduce_corrupt": "1"}),
    FaultClass("allreduce_slow", "switch", "standard", ("allreduce",),
               faults={"allreduce_slow": "1:0.5"}),
    FaultClass("allreduce_hang", "switch", "standard", ("allreduce",),
               faults={"allreduce_hang": "1"}),
    FaultClass("pcie_slow", "switch", "standard", ("pcie_bw",), faults={"pcie_slow": "0:0.1"},
               on_cpu="warn"),
    FaultClass("p2p_slow", "switch", "standard", ("p2p",), faults={"p2p_slow": "0-1:0.1"},
               on_cpu="warn"),
    # a flapping RDMA port (sysfs under [system] sys_root)
    FaultClass("rdma_flap", "rdma", "quick", ("link_flap",), flaps=3),
    # DCGM replays ([dcgm] dcgmi -> the recorded outputs)
    FaultClass("dcgm_fail", "dcgm", "standard", ("dcgm",),
               env=_dcgm("dcgm-3.x-per-gpu-fail.json", 226)),
)
BY_NAME = {c.name: c for c in CLASSES}


def _gpus(count: int, change: dict[str, Any]) -> list[dict[str, Any]]:
    from airlock.hw.nvml import healthy_gpu_dict

    out = [healthy_gpu_dict(i) for i in range(count)]
    if count > 3:
        out[3].update(change)
    return out


class Run:
    """One `airlock check` of one level on one simulated node, in a fresh directory."""

    def __init__(self, work: Path, node: str, fault: FaultClass | None,
                 only: tuple[str, ...] = (), collective_timeout: float = 0.0):
        self.work, self.node, self.fault, self.only = work, node, fault, only
        work.mkdir(parents=True)
        f = fault or FaultClass("healthy", "", "", ())
        entry: dict[str, Any] = {"gpus": _gpus(f.gpus, f.gpu), "cuda": {"stand_in": True},
                                 **f.node}
        if f.faults:
            entry["faults"] = dict(f.faults)
        (work / "sim.json").write_text(json.dumps({"nodes": {node: entry}}))
        cfg: dict[str, Any] = {
            "state_dir": str(work / "state"), "log_dir": str(work / "log"),
            "nvml": {"simulate": str(work / "sim.json"), "timeout": 3.0},
            "profile": {"gres": False},
        }
        if f.interface == "rdma":
            self._port(0)
            cfg["system"] = {"sys_root": str(work / "sys")}
        if f.interface == "dcgm":
            cfg["dcgm"] = {"dcgmi": str(DCGM / "fake-dcgmi"), "standard_level": 1,
                           "deep_level": 1}
        for section, values in f.extra.items():
            cfg.setdefault(section, {}).update(values)
        if collective_timeout:
            cfg.setdefault("allreduce", {})["timeout"] = collective_timeout
        (work / "airlock.toml").write_text(_toml(cfg))
        self.env = {**os.environ, "AIRLOCK_CONFIG": str(work / "airlock.toml"), **f.env}
        self.env.pop("AIRLOCK_FAULTS", None)

    def _port(self, downed: int) -> None:
        d = self.work / "sys" / "class" / "infiniband" / "mlx5_0" / "ports" / "1"
        (d / "counters").mkdir(parents=True, exist_ok=True)
        (d / "state").write_text("4: ACTIVE\n")
        (d / "rate").write_text("400 Gb/sec (4X NDR)\n")
        (d / "link_layer").write_text("InfiniBand\n")
        (d / "counters" / "link_downed").write_text(f"{downed}\n")

    def check(self, level: str, timeout: float) -> tuple[dict[str, Any] | None, float, str]:
        started = time.monotonic()
        try:
            out = subprocess.run([sys.executable, "-m", "airlock", "check", "--level", level,
                                  "--node", self.node, "--json",
                                  *[a for c in self.only for a in ("--only", c)]], env=self.env,
                                 capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return None, time.monotonic() - started, f"no verdict within {timeout:g}s"
        took = time.monotonic() - started
        try:
            return json.loads(out.stdout), took, ""
        except ValueError:
            return None, took, (out.stderr.strip().splitlines() or ["no output"])[-1][:200]

    def level(self, level: str, timeout: float) -> tuple[dict[str, Any] | None, float, str]:
        """The level's verdict, after the runs a flapping port needs (each one more down)."""
        f = self.fault
        if f is not None and f.flaps:
            took = 0.0
            for downed in range(f.flaps):  # the baseline, then a down between each two runs
                self._port(downed)
                _doc, t, why = self.check(level, timeout)
                took += t
                if why:
                    return None, took, why
            self._port(f.flaps)
            doc, t, why = self.check(level, timeout)
            return doc, took + t, why
        return self.check(level, timeout)


def _toml(cfg: dict[str, Any]) -> str:
    import tomli_w

    return tomli_w.dumps(cfg)


def outcome(doc: dict[str, Any] | None, why: str, expected: tuple[str, ...]) -> dict[str, Any]:
    """What one run says: caught (a fail verdict), by which check(s), and whether that is a
    check the class is expected to be caught by."""
    if doc is None:
        return {"verdict": "none", "caught": False, "by": [], "expected_check": False,
                "warned_by": [], "detail": why}
    failing = [r["check"] for r in doc.get("checks", []) if r.get("verdict") == "fail"]
    warning = [r["check"] for r in doc.get("checks", []) if r.get("verdict") == "warn"]
    return {"verdict": doc.get("verdict"), "caught": doc.get("verdict") == "fail",
            "by": failing, "expected_check": bool(set(failing) & set(expected)),
            "warned_by": warning, "detail": doc.get("detail", "")}


def run_matrix(classes: list[FaultClass], levels: list[str], runs: int, healthy: int,
               lightest: bool, timeout: float, only_expected: bool = False,
               say=print, collective_timeout: float = 0.0) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="airlock-faults-"))
    rows, sane = [], []
    n = 0
    try:
        for f in classes:
            wanted = [f.promise] if lightest else levels
            for level in wanted:
                results = []
                for _ in range(runs):
                    n += 1
                    r = Run(work / f"r{n}", f"bench{n}", f, f.checks if only_expected else (),
                            collective_timeout)
                    doc, took, why = r.level(level, timeout)
                    results.append({**outcome(doc, why, f.checks), "seconds": round(took, 2)})
                caught = sum(1 for x in results if x["caught"])
                by = sorted({c for x in results for c in x["by"]})
                warned = sum(1 for x in results if not x["caught"]
                             and set(x["warned_by"]) & set(f.checks))
                row = {"class": f.name, "interface": f.interface, "injected": f.describe(),
                       "level": level, "promised": LEVELS.index(level) >= LEVELS.index(f.promise),
                       "expected_checks": list(f.checks), "on_cpu": f.on_cpu, "runs": runs,
                       "caught": caught, "warned": warned,
                       "by": by, "expected_check": all(x["expected_check"] for x in results
                                                       if x["caught"]),
                       "seconds_median": _median([x["seconds"] for x in results]),
                       "seconds_max": max(x["seconds"] for x in results),
                       "details": sorted({x["detail"][:120] for x in results})}
                rows.append(row)
                ok = caught == runs or (f.on_cpu == "warn" and warned == runs)
                say(f"{f.name:<18} {level:<8} caught {caught}/{runs} by {','.join(by) or '-':<20}"
                    f" warned {warned}/{runs} median {row['seconds_median']:.1f}s"
                    + ("" if not row["promised"] or ok else "  FINDING"))
        for level in levels if not lightest else sorted({f.promise for f in classes},
                                                          key=LEVELS.index):
            false = []
            times = []
            for _ in range(healthy):
                n += 1
                r = Run(work / f"r{n}", f"bench{n}", None, (), collective_timeout)
                doc, took, why = r.level(level, timeout)
                times.append(took)
                if doc is None or doc.get("verdict") == "fail":
                    false.append(outcome(doc, why, ())["detail"] or "no verdict")
            sane.append({"level": level, "runs": healthy, "false_fails": len(false),
                         "why": sorted(set(false))[:5], "seconds_median": _median(times)})
            say(f"healthy            {level:<8} false fails {len(false)}/{healthy}"
                f" median {_median(times):.1f}s")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return {"classes": rows, "healthy": sane, "runs": runs, "lightest": lightest,
            "only_expected": only_expected}


def _median(values: list[float]) -> float:
    import statistics

    return round(statistics.median(values), 2) if values else 0.0


def markdown(doc: dict[str, Any]) -> str:
    out = ["| class | interface | injected | level | caught | by | expected check | median s |",
           "|---|---|---|---|---|---|---|---|"]
    for r in doc["classes"]:
        warned = r.get("warned", 0)
        ok = r["caught"] == r["runs"] or (r.get("on_cpu") == "warn" and warned == r["runs"])
        mark = "" if not r["promised"] or ok else " **finding**"
        warn = f" (warned {warned}/{r['runs']})" if warned else ""
        out.append(f"| {r['class']} | {r['interface']} | `{r['injected']}` | {r['level']}"
                   f"{'' if r['promised'] else ' (not promised)'} | {r['caught']}/{r['runs']}"
                   f"{warn}{mark} | {', '.join(r['by']) or '-'} | "
                   f"{', '.join(r['expected_checks'])} | {r['seconds_median']:.1f} |")
    out += ["", "| level | healthy runs | false fails | median s |", "|---|---|---|---|"]
    for h in doc["healthy"]:
        out.append(f"| {h['level']} | {h['runs']} | {h['false_fails']} | "
                   f"{h['seconds_median']:.1f} |")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=3, help="runs of each class at each level")
    p.add_argument("--healthy", type=int, default=100, help="runs of each level, no fault")
    p.add_argument("--levels", default=",".join(LEVELS))
    p.add_argument("--classes", default="", help="comma-separated (default: all)")
    p.add_argument("--lightest", action="store_true",
                   help="each class once, at the lightest level that promises to catch it")
    p.add_argument("--only-expected", action="store_true",
                   help="run only the checks expected to catch each class (`airlock check "
                        "--only`): a smoke run, not a measure of which check catches it")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds for one level's run")
    p.add_argument("--collective-timeout", type=float, default=0.0,
                   help="[allreduce] timeout, s, for every run (default: the config's)")
    p.add_argument("--json", default="", help="write the results here")
    p.add_argument("--markdown", action="store_true", help="print docs/faults.md's tables")
    args = p.parse_args(argv)
    levels = [lv for lv in args.levels.split(",") if lv]
    bad = [lv for lv in levels if lv not in LEVELS]
    names = [c for c in args.classes.split(",") if c]
    unknown = [c for c in names if c not in BY_NAME]
    if bad or unknown or args.runs < 1 or args.healthy < 0 or args.collective_timeout < 0:
        print(f"bench_faults: unknown level {bad[0]!r}" if bad else
              f"bench_faults: unknown class {unknown[0]!r} (known: {', '.join(BY_NAME)})"
              if unknown else "bench_faults: --runs must be >= 1, --healthy and "
              "--collective-timeout >= 0",
              file=sys.stderr)
        return 2
    classes = [BY_NAME[c] for c in names] if names else list(CLASSES)
    doc = run_matrix(classes, levels, 1 if args.lightest else args.runs, args.healthy,
                     args.lightest, args.timeout, args.only_expected,
                     collective_timeout=args.collective_timeout)
    if args.json:
        Path(args.json).write_text(json.dumps(doc, indent=1))
    if args.markdown:
        print(markdown(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
