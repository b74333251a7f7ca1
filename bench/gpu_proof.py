"""Airlock on a real GPU, in one run: what scripts/gpu-proof.sh runs (read its header first).

Steps, each in a process of its own with a timeout, in this order (the most telling first, so a
run cut short by its budget still proves the most); the JSON and the Markdown report are
rewritten after every step, so whatever ran is on record:

  snapshot         the NVML snapshot as Airlock sees it (real pynvml; --cpu: the simulation),
                   and the NVIDIA GPUs on the PCI bus
  check_standard   `airlock check --level standard` (quick checks on real NVML, verified GEMM
                   burn-in, memory test, all-reduce) against the proof's profile
  faults           the same check's burn-in with gemm_corrupt=0 (fp32) and memory test with
                   memtest_corrupt=0: both must fail, the GEMM naming row and column
  gemm_corrupt_by_dtype  the same corruption in each dtype on device 0 alone, with the golden
                   checksum's error beside its tolerance: what one device catches without a
                   peer to compare bits with (a multi-GPU node also compares fingerprints)
  deep             `airlock check --only pcie_bw --only p2p --only dcgm`: PCIe H2D/D2H GB/s with
                   the link NVML reports (against the profile's floors), the P2P matrix (one
                   GPU: no pair, said so), and DCGM level 1 when dcgmi is installed (else the
                   check's own skip reason); --cpu: stand-ins, labelled, never a GPU figure
  deep_faults      pcie_slow=0 (the copies lose 80 % of their speed: below the floor on a GPU),
                   and the dcgm check run on NVIDIA's recorded failing `dcgmi diag -j` output
                   (tests/data/dcgm) through a stand-in dcgmi: the failing GPU and test named
  dcgm_hang        the same stand-in dcgmi hanging: killed at its timeout, inconclusive (exit 2,
                   verdict "error"), never a hardware verdict
  nccl             one rank on device 0: NCCL initialised, a verified all-reduce per size, and
                   the same with allreduce_corrupt=0, which must be caught (--cpu: gloo)
  burnin_vs_matmul per dtype, the verified burn-in's TFLOPS beside a bare torch.matmul loop on
                   the same device, interleaved rounds (bench/bench_burnin.py); goal >= 0.95
  hooks            the periodic HealthCheckProgram hook and the prolog's pass path as slurmd
                   runs them, against python -c pass (bench/bench_quick.py; real NVML on a GPU)

The profile: the machine has one GPU, and the shipped h200-8x profile expects eight. The proof
writes a derived profile into a site profile directory of its own (never into the shipped
files): the shipped profile with `gpus = 1` and `nvlink_links = 0` (one GPU has no NVLink fabric
to judge; the snapshot still records every link's state), every floor as shipped. --cpu derives
it the same way and simulates one H200; the burn-in then judges CPU devices by the `cpu`
profile's floors, as it does on any node without GPUs.

    python bench/gpu_proof.py --out DIR [--cpu] [--budget SECONDS]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
NODE = "proof1"
DERIVED = "h200-1x-proof"
SHIPPED = "h200-8x"
RATIO_GOAL = 0.95
FLOOR_MARGIN = 1.2  # measured TFLOPS / floor: below this a healthy node sits too close to failing
KIB = 1024


# --- steps that run in a process of their own (python bench/gpu_proof.py step NAME) ----------
def step_snapshot(cfg_path: str) -> dict[str, Any]:

    from airlock.config import loader as config
    from airlock.hw import nvml, profiles

    cfg = config.load(cfg_path)
    snap = nvml.gather(nvml.backend_for(cfg, NODE), cfg.nvml.timeout)
    detected = profiles.detect(snap.models, snap.count, cfg.profile.dirs)
    return {"source": snap.source, "driver_version": snap.driver_version, "note": snap.note,
            "gather_ms": round(snap.duration_s * 1000, 1),
            "gpus": [{**g._asdict(), "xids": [x._asdict() for x in g.xids]}
                     for g in snap.gpus],
            "pci_gpus": nvml.pci_gpus(cfg.system.sys_root),
            "detected_profile": detected.name}


def step_ratio(dtypes: list[str], size: int, gemms: int, rounds: int,
               duration: float) -> dict[str, Any]:
    sys.path.insert(0, HERE)
    import bench_burnin
    import torch

    from airlock.checks.device_plan import bench_devices

    devices = bench_devices(torch, 1)[:1]  # device 0: the same device as the check
    if not devices[0][0].startswith("cuda"):
        torch.set_num_threads(1)  # one core per CPU "device", as the burn-in runs it
    out: dict[str, Any] = {"device": devices[0][0], "model": devices[0][1],
                           "torch": torch.__version__, "cuda": torch.version.cuda or ""}
    for dtype in dtypes:
        out[dtype] = bench_burnin.compare(devices, size, gemms, dtype, rounds, duration)
    return out


def step_corrupt(dtypes: list[str], size: int, duration: float) -> dict[str, Any]:
    import torch

    from airlock.checks import burnin
    from airlock.checks.device_plan import bench_devices

    devices = bench_devices(torch, 1)[:1]
    on_gpu = devices[0][0].startswith("cuda")
    if not on_gpu:
        torch.set_num_threads(1)
    out: dict[str, Any] = {"device": devices[0][0], "size": size}
    for dtype in dtypes:
        plan = burnin.Plan(size=size, dtypes=[dtype], duration=duration if on_gpu else 0,
                           iterations=16, thread_clock=not on_gpu)
        (run,) = burnin.run_dtype(torch, devices, dtype, plan, {"gemm_corrupt": "0"})
        out[dtype] = {"golden_error": run.golden_error, "tolerance": burnin.TOLERANCE[dtype],
                      "at": list(run.golden_at or ()), "error": run.error,
                      "caught": not run.golden_error <= burnin.TOLERANCE[dtype]}
    return out


def step_nccl(backend: str, sizes: list[int], iters: int) -> dict[str, Any]:
    from airlock import collective as dist

    out: dict[str, Any] = {}
    for name, faults in (("clean", {}), ("allreduce_corrupt", {"allreduce_corrupt": "0"})):
        params = dist.SweepParams(sizes, iters, 3, "fp32", backend, 120)
        report = dist.run_local(1, params, faults, node=NODE)
        sweep = dist.combine([report])
        (rank,) = report["ranks"] or [{}]
        out[name] = {"backend": report["backend"], "errors": report["errors"],
                     "timed_out": report["timed_out"], "leftover": report["leftover"],
                     "device": rank.get("device", ""), "verify": rank.get("verify", []),
                     "sizes": [{"bytes": s.bytes, "time_us": round(s.time_s * 1e6, 1),
                                "algbw_gbps": round(s.algbw_gbps, 2)} for s in sweep.sizes],
                     "sent_bad": sweep.sent_bad, "wrong_sum": sweep.wrong_sum,
                     "seconds": report.get("seconds")}
    return out


# --- the orchestrator --------------------------------------------------------------------------
class Proof:
    def __init__(self, out_dir: str, cpu: bool, budget: float):
        self.out_dir, self.cpu, self.budget = out_dir, cpu, budget
        self.started = time.monotonic()
        self.work = tempfile.mkdtemp(prefix="airlock-gpu-proof-")
        self.result: dict[str, Any] = {
            "mode": "cpu" if cpu else "gpu",
            "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
            "host": os.uname().nodename,
            "python": sys.version.split()[0],
            "budget_s": budget,
            "steps": {},
        }

    # environment
    def prepare(self) -> None:
        sys.path.insert(0, HERE)
        from bench_quick import stage_source

        self.src = stage_source(REPO, os.path.join(self.work, "src"))
        paths = [self.src]
        wheels = os.path.join(REPO, ".whl")
        if os.path.isdir(wheels):  # pure-Python wheels brought along (see gpu-proof.sh)
            paths += sorted(os.path.join(wheels, w) for w in os.listdir(wheels)
                            if w.endswith(".whl"))
        self.pythonpath = os.pathsep.join(paths)
        sys.path[:0] = paths
        self.result["pythonpath_wheels"] = [os.path.basename(p) for p in paths[1:]]
        os.makedirs(os.path.join(self.work, "profiles"))
        self.derived_profile()
        if self.cpu:
            from airlock.hw.nvml import healthy_gpu_dict

            with open(os.path.join(self.work, "sim.json"), "w") as fh:
                # the GPU is simulated, so CUDA is too: CPU stand-ins (checks/device_plan.py)
                json.dump({"nodes": {NODE: {"gpus": [healthy_gpu_dict(
                    0, model="NVIDIA H200", memory_mib=143771)], "cuda": {"stand_in": True}}}},
                          fh)
        self.config = self.write_config("proof.toml", {})
        # fp32: the dtype whose checksum catches the switch's error on one device at any size
        # (gemm_corrupt_by_dtype shows the others)
        fault_burnin = {"dtypes": ["fp32"], "duration": 3.0}
        fake = os.path.join(self.work, "dcgmi-recorded")
        with open(fake, "w") as fh:  # the test stand-in, run by this Python wherever it lives
            fh.write(f"#!/bin/sh\nexec {sys.executable} "
                     f"{os.path.join(REPO, 'tests', 'data', 'dcgm', 'fake-dcgmi')} \"$@\"\n")
        os.chmod(fake, 0o755)
        # DCGM level 1 (about a minute) keeps the real step inside the proof's budget
        self.deep_config = self.write_config("deep.toml", {"dcgm": {"standard_level": 1}})
        self.deep_fault_config = self.write_config("deep-faults.toml", {
            "dcgm": {"standard_level": 1, "dcgmi": fake, "timeouts": [5.0, 900.0, 2700.0,
                                                                       7200.0]},
            "checks": {"confirm_runs": 0}})
        self.fault_config = self.write_config("faults.toml", {
            "burnin": fault_burnin, "memtest": {"share": 0.1, "cpu_mib": 1},
            # a fault must be caught on the first reading; a confirmation would only double it
            "checks": {"confirm_runs": 0}})

    def derived_profile(self) -> None:
        """The shipped H200 profile for a one-GPU machine, in the proof's own site profile
        directory: only the count and the NVLink expectation change."""
        from airlock.hw import profiles

        shipped = profiles.named(SHIPPED)
        data = {"name": DERIVED, "models": list(shipped.models), "gpus": 1,
                "memory_mib": shipped.memory_mib}
        data.update({k: v for k, v in shipped.extra.items() if k in profiles.SCHEMA})
        data["nvlink_links"] = 0
        data["description"] = (f"{SHIPPED} for a one-GPU proof machine (derived by "
                               "scripts/gpu-proof.sh): gpus = 1, nvlink_links = 0, floors as "
                               "shipped")
        path = os.path.join(self.work, "profiles", f"{DERIVED}.toml")
        with open(path, "w") as fh:
            fh.write(toml_table(data))
        derived = profiles.load_file(path)
        changed = sorted(k for k in profiles.SCHEMA if k not in ("name", "description")
                         and _get(derived, k) != _get(shipped, k))
        self.result["profile"] = {"name": DERIVED, "derived_from": SHIPPED, "changed": changed,
                                  "tflops_floor": shipped.get("tflops_floor"),
                                  "busbw_floor_gbps": shipped.get("busbw_floor_gbps")}
        assert changed == ["gpus", "nvlink_links"], changed

    def write_config(self, name: str, override: dict[str, dict[str, Any]]) -> str:
        w = self.work
        sections: dict[str, dict[str, Any]] = {
            # a driver without persistence mode can take seconds to initialise NVML
            "nvml": {"timeout": 30.0},
            # There is no Slurm on the proof machine: no GRES to compare at registration.
            "profile": {"name": DERIVED, "dirs": [os.path.join(w, "profiles")], "gres": False},
            # 10 s of GEMMs per dtype (60 s shipped): the proof has minutes, not hours
            "burnin": {"duration": 10.0, "cpu_devices": 1},
            "memtest": {"cpu_devices": 1},
        }
        if self.cpu:
            sections["nvml"]["simulate"] = os.path.join(w, "sim.json")
        for sec, values in override.items():
            sections.setdefault(sec, {}).update(values)
        text = f'state_dir = "{w}/state"\nlog_dir = "{w}/log"\n'
        for sec, values in sections.items():
            text += f"\n[{sec}]\n" + toml_table(values)
        path = os.path.join(w, name)
        with open(path, "w") as fh:
            fh.write(text)
        return path

    # running
    def left(self) -> float:
        return self.budget - (time.monotonic() - self.started)

    def run(self, argv: list[str], timeout: float, env: dict[str, str] | None = None
            ) -> dict[str, Any]:
        timeout = min(timeout, self.left() - 5)
        if timeout < 10:
            return {"skipped": f"out of time ({self.left():.0f}s of the budget left)"}
        full_env = {k: v for k, v in os.environ.items() if k != "AIRLOCK_FAULTS"}
        full_env.update({"PYTHONPATH": self.pythonpath, "AIRLOCK_CONFIG": self.config,
                         **(env or {})})
        started = time.monotonic()
        try:
            p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                               env=full_env, cwd=self.work, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired as exc:
            return {"error": f"timed out after {timeout:.0f}s", "seconds": timeout,
                    "stderr_tail": _tail(exc.stderr)}
        return {"rc": p.returncode, "stdout": p.stdout, "stderr_tail": _tail(p.stderr),
                "seconds": round(time.monotonic() - started, 1)}

    def step(self, name: str, argv: list[str], timeout: float, env: dict[str, str] | None = None,
             parse=None) -> None:
        r = self.run(argv, timeout, env)
        rec: dict[str, Any] = {k: v for k, v in r.items() if k != "stdout"}
        if "stdout" in r:
            try:
                rec.update(parse(r["stdout"]) if parse else json.loads(r["stdout"]))
            except (ValueError, KeyError, IndexError) as exc:
                rec["error"] = f"unreadable output ({exc}): {_tail(r['stdout'])}"
        self.result["steps"][name] = rec
        self.save()

    def airlock(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "airlock", *args]

    def me(self, *args: str) -> list[str]:
        return [sys.executable, os.path.abspath(__file__), "step", *args]

    def all_steps(self) -> None:
        py_cfg = ["--config", self.config]
        self.step("snapshot", self.me("snapshot", *py_cfg), 60)
        self.step("check_standard", self.airlock("check", "--level", "standard", "--node", NODE,
                                                 "--json"), 300, parse=parse_run)
        self.step("faults", self.airlock("check", "--level", "standard", "--node", NODE,
                                         "--only", "burnin", "--only", "memtest", "--json"),
                  180, env={"AIRLOCK_CONFIG": self.fault_config,
                            "AIRLOCK_FAULTS": "gemm_corrupt=0,memtest_corrupt=0"},
                  parse=parse_run)
        self.step("deep", self.airlock("check", "--level", "standard", "--node", NODE,
                                       "--only", "pcie_bw", "--only", "p2p", "--only", "dcgm",
                                       "--json"), 240,
                  env={"AIRLOCK_CONFIG": self.deep_config}, parse=parse_run)
        recorded = os.path.join(REPO, "tests", "data", "dcgm", "dcgm-3.x-per-gpu-fail.json")
        self.step("deep_faults", self.airlock("check", "--level", "standard", "--node", NODE,
                                              "--only", "pcie_bw", "--only", "dcgm", "--json"),
                  120, env={"AIRLOCK_CONFIG": self.deep_fault_config,
                            "AIRLOCK_FAULTS": "pcie_slow=0:0.2",
                            "FAKE_DCGMI": f"replay:{recorded}:226"}, parse=parse_run)
        self.step("dcgm_hang", self.airlock("check", "--level", "standard", "--node", NODE,
                                            "--only", "dcgm", "--json"), 60,
                  env={"AIRLOCK_CONFIG": self.deep_fault_config, "FAKE_DCGMI": "hang"},
                  parse=parse_run)
        self.step("gemm_corrupt_by_dtype", self.me(
            "corrupt", "--dtypes", "bf16,fp16,fp32" if self.cpu else "bf16,fp16,tf32,fp32",
            "--size", "128" if self.cpu else "8192", "--duration", "1"), 120)
        if self.cpu:
            sizes, backend = [64 * KIB, 1024 * KIB], "gloo"
        else:
            sizes, backend = [1 << 20, 64 << 20, 256 << 20], "nccl"
        self.step("nccl", self.me("nccl", "--backend", backend,
                                  "--sizes", ",".join(map(str, sizes)), "--iters", "20"), 120)
        if self.cpu:
            # CPU sizes stay small for CI; there the fixed cost of verifying (float64 reference,
            # inputs) weighs on the ratio, which is meant for GPU-sized GEMMs.
            ratio = ["--dtypes", "fp32,bf16", "--size", "192", "--gemms", "32", "--rounds", "3"]
        else:
            # 4 s rounds: long enough that the reference sums (computed on the CPU while the
            # GPU works) hide behind the GEMMs, as they do in the check's 10 s
            ratio = ["--dtypes", "bf16,fp16,tf32,fp32", "--size", "8192", "--rounds", "2",
                     "--duration", "4"]
        self.step("burnin_vs_matmul", self.me("ratio", *ratio), 200)
        extra = os.path.join(self.work, "hooks-extra.toml")
        with open(extra, "w") as fh:
            if not self.cpu:  # the bench simulates 8x H200 itself; real NVML sees our one GPU
                fh.write(f'[profile]\nname = "{DERIVED}"\n'
                         f'dirs = ["{os.path.join(self.work, "profiles")}"]\ngres = false\n'
                         "[nvml]\ntimeout = 30.0\n")
        hooks_json = os.path.join(self.work, "hooks.json")
        argv = [sys.executable, os.path.join(HERE, "bench_quick.py"), "--runs",
                "5" if self.cpu else "7", "--extra-config", extra, "--json", hooks_json]
        if not self.cpu:
            argv.append("--real-nvml")
        r = self.run(argv, 120)
        rec = {k: v for k, v in r.items() if k != "stdout"}
        rec["table"] = r.get("stdout", "")
        try:
            with open(hooks_json) as fh:
                rec.update(json.load(fh))
        except (OSError, ValueError) as exc:
            rec.setdefault("error", f"no figures: {exc}")
        self.result["steps"]["hooks"] = rec
        self.save()

    # the verdict
    def summarize(self) -> None:
        s = self.result["steps"]
        summary: dict[str, Any] = {}
        check = s.get("check_standard", {})
        summary["check_standard"] = check.get("verdict", "not run")
        faults = s.get("faults", {}).get("checks", {})
        gemm, mem = faults.get("burnin", {}), faults.get("memtest", {})
        at = re.search(r"\((\d+), (\d+)\)", gemm.get("detail", ""))
        summary["gemm_corrupt_caught"] = gemm.get("verdict") == "fail" and bool(at)
        summary["gemm_corrupt_at"] = [int(at.group(1)), int(at.group(2))] if at else None
        summary["memtest_corrupt_caught"] = mem.get("verdict") == "fail" and \
            "bad words" in mem.get("detail", "")
        by_dtype = s.get("gemm_corrupt_by_dtype", {})
        summary["gemm_corrupt_caught_by_dtype"] = {
            dt: v["caught"] for dt, v in by_dtype.items() if isinstance(v, dict)}
        deep = (s.get("deep", {}).get("checks") or {})
        for name in ("pcie_bw", "p2p", "dcgm"):
            rec = deep.get(name, {})
            summary[name] = f"{rec.get('verdict', 'not run')}: {rec.get('detail', '')}"
        pcie = (deep.get("pcie_bw", {}).get("figures") or {})
        summary["pcie_gbps"] = pcie.get("gbps")
        summary["pcie_devices_kind"] = pcie.get("devices_kind")
        dfaults = (s.get("deep_faults", {}).get("checks") or {})
        slow = dfaults.get("pcie_bw", {})
        # a stand-in's copy is never a PCIe verdict: only a GPU can show this fault as a FAIL
        summary["pcie_slow_caught"] = None if self.cpu else slow.get("verdict") == "fail"
        dfail = dfaults.get("dcgm", {})
        summary["dcgm_recorded_fail_caught"] = dfail.get("verdict") == "fail" and \
            dfail.get("detail", "").startswith("gpu0 sm_stress: Max stress level")
        hang = ((s.get("dcgm_hang", {}).get("checks") or {}).get("dcgm") or {})
        summary["dcgm_hang_inconclusive"] = hang.get("verdict") == "error" and \
            s.get("dcgm_hang", {}).get("verdict") == "error"
        nccl = s.get("nccl", {})
        clean, bad = nccl.get("clean", {}), nccl.get("allreduce_corrupt", {})
        summary["allreduce_verified"] = bool(clean.get("verify")) and not clean.get("errors") \
            and all(v.get("bad") == 0 and v.get("sent_bad") == 0 for v in clean["verify"])
        summary["allreduce_backend"] = clean.get("backend", "")
        summary["allreduce_corrupt_caught"] = bool(bad.get("sent_bad"))
        # The goal is judged on the figure the burn-in reports and its floors judge (the median
        # timed chunk); the end-to-end ratio (inputs, reference sums, final checks) is beside it.
        ratios = {dt: v["ratio_reported"] for dt, v in s.get("burnin_vs_matmul", {}).items()
                  if isinstance(v, dict) and "ratio_reported" in v}
        summary["burnin_vs_matmul_ratio"] = {dt: round(r, 3) for dt, r in ratios.items()}
        summary["burnin_vs_matmul_ratio_end_to_end"] = {
            dt: round(v["ratio"], 3) for dt, v in s.get("burnin_vs_matmul", {}).items()
            if isinstance(v, dict) and "ratio" in v}
        # CPU "devices" time their chunks in thread CPU time, the raw loop in wall time: the
        # goal means something on a GPU only
        summary["ratio_goal_met"] = None if self.cpu else \
            bool(ratios) and min(ratios.values()) >= RATIO_GOAL
        margins = {dt: round(m, 2) for dt, m in self.floor_margins(check).items()}
        summary["floor_margin"] = margins
        summary["floors_pass_with_margin"] = bool(margins) and \
            min(margins.values()) >= FLOOR_MARGIN
        hooks = s.get("hooks", {})
        for h in ("hook", "prolog"):
            if isinstance(hooks.get(h), dict):
                summary[f"{h}_wall_ratio"] = round(hooks[h]["wall_ratio"], 2)
                summary[f"{h}_rss_mib"] = round(hooks[h]["rss_mib"], 1)
        faults_ok = summary["gemm_corrupt_caught"] and summary["memtest_corrupt_caught"] and \
            summary["allreduce_corrupt_caught"] and summary["dcgm_recorded_fail_caught"] and \
            summary["dcgm_hang_inconclusive"] and summary["pcie_slow_caught"] is not False
        summary["ok"] = bool(faults_ok and summary["check_standard"] in ("pass", "warn")
                             and summary["allreduce_verified"] and ratios
                             and (self.cpu or (summary["ratio_goal_met"]
                                               and summary["floors_pass_with_margin"])))
        summary["elapsed_s"] = round(time.monotonic() - self.started, 1)
        self.result["summary"] = summary
        self.save()

    def floor_margins(self, check: dict[str, Any]) -> dict[str, float]:
        """Each dtype's median burn-in TFLOPS over the floor of the profile that judged it (the
        derived H200 one on a GPU, `cpu` for CPU devices)."""
        from airlock.hw import profiles

        burn = (check.get("checks") or {}).get("burnin", {}).get("figures") or {}
        if not burn.get("median_tflops") or not burn.get("profile"):
            return {}
        floors = profiles.named(burn["profile"], [os.path.join(self.work, "profiles")]).get(
            "tflops_floor") or {}
        burn["floors"] = floors  # for the report
        return {dt: v / floors[dt] for dt, v in burn["median_tflops"].items() if floors.get(dt)}

    def save(self) -> None:
        os.makedirs(self.out_dir, exist_ok=True)
        for name, text in (("gpu-proof.json", json.dumps(self.result, indent=1, default=str)),
                           ("gpu-proof.md", markdown(self.result))):
            tmp = os.path.join(self.out_dir, f".{name}.tmp")
            with open(tmp, "w") as fh:
                fh.write(text + "\n")
            os.replace(tmp, os.path.join(self.out_dir, name))


def parse_run(stdout: str) -> dict[str, Any]:
    """`airlock check --json`: the verdict, each check's record, and the burn-in's margins."""
    run = json.loads(stdout)
    checks = {c["check"]: {k: c.get(k) for k in ("verdict", "detail", "duration_s", "attempts",
                                                  "figures")} for c in run["checks"]}
    out: dict[str, Any] = {"verdict": run["verdict"], "failed_check": run["failed_check"],
                           "detail": run["detail"], "profile": run["profile"],
                           "duration_s": run["duration_s"], "checks": checks}
    return out


# --- small helpers -----------------------------------------------------------------------------
def _get(profile, key: str) -> Any:
    return getattr(profile, key) if key in ("models", "gpus", "memory_mib") else \
        profile.get(key)


def toml_table(values: dict[str, Any]) -> str:
    """Plain keys with strings, numbers, booleans, lists and inline tables of numbers."""
    def value(v: Any) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, (int, float)):
            return repr(v)
        if isinstance(v, str):
            return json.dumps(v)  # a JSON string is a valid TOML basic string for our values
        if isinstance(v, (list, tuple)):
            return "[" + ", ".join(value(x) for x in v) + "]"
        if isinstance(v, dict):
            return "{ " + ", ".join(f"{k} = {value(x)}" for k, x in v.items()) + " }"
        raise TypeError(f"no TOML for {v!r}")

    return "".join(f"{k} = {value(v)}\n" for k, v in values.items())


def _tail(text: str | bytes | None, n: int = 1500) -> str:
    if isinstance(text, bytes):
        text = text.decode(errors="replace")
    return (text or "")[-n:]


def markdown(r: dict[str, Any]) -> str:
    s, summ = r["steps"], r.get("summary", {})
    snap = s.get("snapshot", {})
    gpus = snap.get("gpus") or []
    g0 = gpus[0] if gpus else {}
    ratio = s.get("burnin_vs_matmul", {})
    lines = [
        f"# Airlock GPU proof ({r['mode']} mode), {r['date']}",
        "",
        f"Host {r['host']}, Python {r['python']}, torch {ratio.get('torch', '?')} "
        f"(CUDA {ratio.get('cuda') or 'none'}); NVML {snap.get('source', '?')}, driver "
        f"{snap.get('driver_version') or '?'}; {len(gpus)} GPU(s): {g0.get('name', '?')}, "
        f"{g0.get('memory_total_mib', '?')} MiB; NVIDIA GPUs on the PCI bus: "
        f"{len(snap.get('pci_gpus') or [])}. Profile `{DERIVED}` = shipped `{SHIPPED}` with "
        f"{', '.join(r.get('profile', {}).get('changed', []))} changed (one GPU).",
        "",
        "| step | result |",
        "|---|---|",
    ]
    check = s.get("check_standard", {})
    per = ", ".join(f"{k} {v.get('verdict')}" for k, v in (check.get("checks") or {}).items())
    lines.append(f"| airlock check --level standard | **{check.get('verdict', 'not run')}** "
                 f"in {check.get('duration_s', '?')} s ({per}) |")
    burn = (check.get("checks") or {}).get("burnin", {}).get("figures") or {}
    med = burn.get("median_tflops") or {}
    if med:
        lines.append("| burn-in TFLOPS (median) / floor / margin | " + ", ".join(
            f"{dt} {v:.4g} / {(burn.get('floors') or {}).get(dt, '-')} / "
            f"{summ.get('floor_margin', {}).get(dt, '-')}x" for dt, v in med.items()) + " |")
    if ratio:
        lines.append("| burn-in vs raw torch.matmul (same device, same run): burn-in's figure "
                     "/ raw = ratio (end to end) | " + ", ".join(
                         f"{dt} {v['burnin_reported_tflops']:.4g} / {v['raw_tflops']:.4g} "
                         f"TFLOPS = {v['ratio_reported']:.3f} ({v['ratio']:.3f})"
                         for dt, v in ratio.items() if isinstance(v, dict) and "ratio" in v)
                     + (" (on a CPU, chunks are timed in thread CPU time: no goal)"
                        if r["mode"] == "cpu" else f" (goal >= {RATIO_GOAL})") + " |")
    faults = (s.get("faults", {}).get("checks") or {})
    for name, key in (("gemm_corrupt=0", "burnin"), ("memtest_corrupt=0", "memtest")):
        f = faults.get(key, {})
        lines.append(f"| {name} | {f.get('verdict', 'not run')}: {f.get('detail', '')} |")
    by_dtype = s.get("gemm_corrupt_by_dtype", {})
    if any(isinstance(v, dict) for v in by_dtype.values()):
        lines.append(f"| gemm_corrupt=0 on {by_dtype.get('device')} alone, size "
                     f"{by_dtype.get('size')}: checksum error / tolerance | " + ", ".join(
                         f"{dt} {v['golden_error']:.2e} / {v['tolerance']:.0e} "
                         f"{'caught' if v['caught'] else '**missed**'}"
                         for dt, v in by_dtype.items() if isinstance(v, dict)) + " |")
    deep = s.get("deep", {}).get("checks") or {}
    for name in ("pcie_bw", "p2p", "dcgm"):
        rec = deep.get(name)
        if rec:
            lines.append(f"| {name} | {rec.get('verdict')}: {rec.get('detail', '')} |")
    dfaults = s.get("deep_faults", {}).get("checks") or {}
    for name, label in (("pcie_bw", "pcie_slow=0:0.2"),
                        ("dcgm", "dcgm on NVIDIA's recorded failing output")):
        rec = dfaults.get(name)
        if rec:
            lines.append(f"| {label} | {rec.get('verdict')}: {rec.get('detail', '')} |")
    hang = (s.get("dcgm_hang", {}).get("checks") or {}).get("dcgm")
    if hang:
        lines.append(f"| dcgm hanging | {hang.get('verdict')}: {hang.get('detail', '')} |")
    nccl = s.get("nccl", {})
    clean = nccl.get("clean", {})
    if clean:
        sizes = ", ".join(f"{x['bytes'] >> 10} KiB {x['algbw_gbps']} GB/s"
                          for x in clean.get("sizes", []))
        lines.append(f"| {clean.get('backend')} all-reduce, world size 1 | verified: "
                     f"{summ.get('allreduce_verified')}; {sizes}; allreduce_corrupt=0 caught: "
                     f"{summ.get('allreduce_corrupt_caught')} |")
    hooks = s.get("hooks", {})
    med_h = hooks.get("median") or {}
    if med_h:
        lines.append(
            f"| periodic hook / prolog vs python -c pass (NVML {hooks.get('nvml')}) | "
            + ", ".join(f"{n} {med_h[n]['wall_s'] * 1000:.0f} ms, {med_h[n]['rss_mib']:.1f} MiB"
                        for n in ("pass", "hook", "prolog"))
            + f"; ratios {summ.get('hook_wall_ratio')}x / {summ.get('prolog_wall_ratio')}x |")
    for name, rec in s.items():
        if rec.get("error") or rec.get("skipped"):
            lines.append(f"| {name}: problem | {rec.get('error') or rec.get('skipped')} |")
    lines += [
        "",
        f"**Summary:** ok = {summ.get('ok')}; faults caught: gemm "
        f"{summ.get('gemm_corrupt_caught')} (at {summ.get('gemm_corrupt_at')}), memtest "
        f"{summ.get('memtest_corrupt_caught')}, all-reduce {summ.get('allreduce_corrupt_caught')}"
        f", pcie_slow {summ.get('pcie_slow_caught')}, DCGM failure "
        f"{summ.get('dcgm_recorded_fail_caught')}, DCGM hang inconclusive "
        f"{summ.get('dcgm_hang_inconclusive')}; {summ.get('elapsed_s', '?')} s.",
        "",
        "World size 1 proves that the collective library loads and initialises a communicator on "
        "this GPU with this driver, that its kernels run and return exactly the right data, and "
        "that Airlock's launcher, rendezvous and verification work on this device (a corrupted "
        "contribution is caught). It does not prove NVLink, NVSwitch, PCIe peer-to-peer or "
        "InfiniBand transport, bus bandwidth (busbw is 0 by definition with one rank), the "
        "straggler detection between ranks, or the profile's busbw floor: those need two or "
        "more GPUs.",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd")
    st = sub.add_parser("step")
    st.add_argument("name", choices=("snapshot", "ratio", "nccl", "corrupt"))
    st.add_argument("--config", default="")
    st.add_argument("--dtypes", default="fp32")
    st.add_argument("--size", type=int, default=128)
    st.add_argument("--gemms", type=int, default=32)
    st.add_argument("--rounds", type=int, default=3)
    st.add_argument("--duration", type=float, default=0.0)
    st.add_argument("--backend", default="nccl")
    st.add_argument("--sizes", default="1048576")
    st.add_argument("--iters", type=int, default=20)
    p.add_argument("--out", default=os.environ.get("OUT") or "./gpu-proof-out")
    p.add_argument("--cpu", action="store_true", help="the same steps on the CPU (CI)")
    p.add_argument("--budget", type=float, default=440.0, help="seconds for every step together")
    args = p.parse_args(argv)
    if args.cmd == "step":
        if args.name == "snapshot":
            out = step_snapshot(args.config)
        elif args.name == "ratio":
            out = step_ratio(args.dtypes.split(","), args.size, args.gemms, args.rounds,
                             args.duration)
        elif args.name == "corrupt":
            out = step_corrupt(args.dtypes.split(","), args.size, args.duration)
        else:
            out = step_nccl(args.backend, [int(x) for x in args.sizes.split(",")], args.iters)
        print(json.dumps(out, default=str))
        return 0
    proof = Proof(os.path.abspath(args.out), args.cpu, args.budget)
    proof.prepare()
    proof.save()
    proof.all_steps()
    proof.summarize()
    print(markdown(proof.result))
    print(f"\nwritten: {os.path.join(proof.out_dir, 'gpu-proof.json')} and gpu-proof.md")
    return 0 if proof.result["summary"]["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
