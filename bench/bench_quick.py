"""The periodic HealthCheckProgram hook and the prolog's pass path, run exactly as slurmd runs
them, against `python -c pass` on the same clean interpreter, and against LBNL NHC (mej/nhc)
with a trivial config where its source is at hand: wall time, CPU time and peak RSS,
interleaved in one run, as ratios. Also which modules the hook imports and what each costs
(-X importtime), and an assertion that it imports neither torch nor click.

The clean interpreter: a venv the bench creates in its temporary directory (`python -m venv
--without-pip`, from this Python's base installation) whose site-packages holds Airlock (this
checkout, laid out as the installed package is, by symlinks) and the single-file modules it
may import (hostlist, pynvml), and nothing else: no .pth file, so neither an editable
install's finder nor setuptools' distutils hack runs at start-up on either side. The hooks are
the console scripts pip writes (`airlock-healthcheck`, `airlock-prolog`) beside that venv's
python, and `python -c pass` is that same python: the ratio is what Airlock itself adds.

As slurmd runs them: an empty environment but SLURMD_NODENAME and AIRLOCK_CONFIG (plus the job
variables for the prolog; AIRLOCK_RUNTIME_DIR in the bench's temporary directory, never the
host's /run). The node is a simulated 8-GPU H200 node (or the real GPUs with --real-nvml), with
a proven, settled boot, so the hook takes its periodic path: the quick level, no Slurm call.

NHC, for comparison: its driver script `nhc` from a checkout of https://github.com/mej/nhc
(`git clone https://github.com/mej/nhc DIR`, then `--nhc DIR`; Airlock does not ship it), or an
installed one (`nhc` in /usr/sbin or /usr/bin with /etc/nhc/scripts), run in the same empty
environment with one check, `* || check_fs_mount_rw -f /` (the first active line of NHC's own
sample nhc.conf; read-only), its log in the temporary directory and MARK_OFFLINE=0 (so it never
calls scontrol). Without NHC at hand the table says so.

Goals (issue 11): the hook's and the prolog's wall time at most 2.1x `python -c pass`, peak
RSS at most 16 MiB.

    python bench/bench_quick.py [--runs 11] [--nhc DIR] [--real-nvml] [--extra-config FILE]
                                [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import tomllib

NODE = "bench1"
GOAL_RATIO = 2.1
GOAL_RSS_MIB = 16.0
# the rule of the house for the HealthCheckProgram and prolog (and nothing of `airlock serve`)
FORBIDDEN = ("torch", "click", "fastapi", "starlette", "uvicorn", "pydantic")
WATCHED = ("jinja2", "requests", "prometheus_client", "hostlist", "pynvml", "subprocess",
           "argparse", "tempfile", "importlib.resources")


def stage_source(repo: str, dest: str) -> str:
    """An import tree of the checkout at `repo`, laid out as the installed package is (the
    package-dir map of pyproject.toml: checks/ is airlock.checks, ...), by symlinks; returns the
    directory to put on PYTHONPATH."""
    with open(os.path.join(repo, "pyproject.toml"), "rb") as fh:
        mapping = tomllib.load(fh)["tool"]["setuptools"]["package-dir"]
    root = os.path.join(dest, "airlock")
    os.makedirs(root, exist_ok=True)
    top = os.path.join(repo, mapping["airlock"])
    for name in os.listdir(top):
        os.symlink(os.path.join(top, name), os.path.join(root, name))
    for package, folder in mapping.items():
        if package != "airlock":
            link = os.path.join(dest, *package.split("."))
            if os.path.lexists(link):
                os.unlink(link)
            os.symlink(os.path.join(repo, folder), link)
    return dest


def stage_dependencies(dest: str, modules: tuple[str, ...] = ("hostlist", "pynvml")) -> None:
    """Airlock's single-file dependencies copied into dest (a clean venv's site-packages): what
    a clean install would hold. Copied, not linked, so that one found in a wheel on PYTHONPATH
    (bench/gpu_proof.py) works too."""
    from importlib.util import find_spec

    for name in modules:
        spec = find_spec(name)
        if spec is None or not spec.origin or not spec.origin.endswith(f"{name}.py"):
            continue
        with open(os.path.join(dest, f"{name}.py"), "wb") as fh:
            fh.write(spec.loader.get_data(spec.origin))


# What pip writes for a console script (the entry points in pyproject.toml), beside the python
# it was installed with: what slurmd runs.
CONSOLE_SCRIPT = """#!{python}
# -*- coding: utf-8 -*-
import re
import sys
from airlock.hooks.{hook} import main
if __name__ == '__main__':
    sys.argv[0] = re.sub(r'(-script\\.pyw|\\.exe)?$', '', sys.argv[0])
    sys.exit(main())
"""


def clean_venv(root: str, repo: str) -> tuple[str, dict[str, str]]:
    """A venv without pip and without any .pth file, holding this checkout as installed; its
    python and the hooks' console scripts ({"healthcheck": path, "prolog": path})."""
    import subprocess

    venv = os.path.join(root, "venv")
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-I", "-m", "venv", "--without-pip", venv], check=True,
                   env={"PATH": "/usr/bin:/bin"})
    python = os.path.join(venv, "bin", "python")
    site = subprocess.run([python, "-I", "-c", "import sysconfig; "
                           "print(sysconfig.get_paths()['purelib'])"], check=True,
                          capture_output=True, text=True).stdout.strip()
    if not site.startswith(venv):
        raise SystemExit(f"the venv's site-packages is {site}, not inside {venv}")
    stage_source(repo, site)
    stage_dependencies(site)
    pth = [n for n in os.listdir(site) if n.endswith(".pth")]
    if pth:
        raise SystemExit(f"the clean venv has .pth files: {pth}")
    scripts = {}
    for hook in ("healthcheck", "prolog"):
        path = os.path.join(venv, "bin", f"airlock-{hook}")
        with open(path, "w") as fh:
            fh.write(CONSOLE_SCRIPT.format(python=python, hook=hook))
        os.chmod(path, 0o755)
        scripts[hook] = path
    return python, scripts


NHC_CHECK = "* || check_fs_mount_rw -f /"


def find_nhc(given: str) -> tuple[str, str] | None:
    """(the nhc driver script, its scripts directory) from --nhc DIR, else an installed one."""
    candidates = []
    if given:
        candidates.append((os.path.join(given, "nhc"), os.path.join(given, "scripts")))
    for d in ("/usr/sbin", "/usr/bin"):
        candidates.append((os.path.join(d, "nhc"), "/etc/nhc/scripts"))
    for driver, scripts in candidates:
        if os.access(driver, os.X_OK) and os.path.isdir(scripts):
            return driver, scripts
    if given:
        raise SystemExit(f"--nhc {given}: no executable nhc and scripts/ there "
                         "(git clone https://github.com/mej/nhc DIR)")
    return None


def nhc_argv(root: str, nhc: tuple[str, str]) -> list[str]:
    conf = os.path.join(root, "nhc.conf")
    with open(conf, "w") as fh:
        fh.write(NHC_CHECK + "\n")
    return [nhc[0], "-c", conf, "-l", os.path.join(root, "nhc.log"), f"INCDIR={nhc[1]}",
            "MARK_OFFLINE=0"]


# Runs one command and reports its wall time and its own peak RSS (wait4). It runs in a bare
# interpreter of its own because Linux charges a child, at exec, with the peak RSS of the memory
# it was forked from: spawned from this process, every command would "peak" at this process's
# size. The bare interpreter (about 8 MiB) is below anything measured here.
MEASURE = """import os, sys, time
t = time.perf_counter()
pid = os.posix_spawn(sys.argv[2], sys.argv[2:], os.environ)
_, status, ru = os.wait4(pid, 0)
wall = time.perf_counter() - t
cpu = ru.ru_utime + ru.ru_stime
with open(sys.argv[1], "w") as fh:
    fh.write(f"{wall} {ru.ru_maxrss} {cpu} {os.waitstatus_to_exitcode(status)}")
"""


def spawn(argv: list[str], env: dict[str, str], out_path: str) -> dict:
    """Run argv to completion: wall time, CPU time, peak RSS, exit code and output."""
    figures = out_path + ".figures"
    actions = [(os.POSIX_SPAWN_OPEN, 0, "/dev/null", os.O_RDONLY, 0),
               (os.POSIX_SPAWN_OPEN, 1, out_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644),
               (os.POSIX_SPAWN_DUP2, 1, 2)]
    pid = os.posix_spawn(sys.executable, [sys.executable, "-I", "-S", "-c", MEASURE, figures,
                                          *argv], env, file_actions=actions)
    _, status, _ = os.wait4(pid, 0)
    with open(out_path, errors="replace") as fh:
        output = fh.read()
    try:
        with open(figures) as fh:
            wall, rss, cpu, rc = fh.read().split()
    except (OSError, ValueError):
        raise SystemExit(f"could not run {argv[0]}: {output[-500:]}") from None
    return {"wall": float(wall), "rss_kib": int(rss), "rc": int(rc), "cpu": float(cpu),
            "output": output}


def with_importtime(argv: list[str], python: str) -> list[str]:
    if argv[0] == python:
        return [python, "-X", "importtime", *argv[1:]]
    return [python, "-X", "importtime", *argv]  # a console script: run by its python


def write_setup(root: str, real_nvml: bool, extra: str = "") -> str:
    """Config (plus `extra` TOML), simulation file and a proven boot for NODE; returns the config
    path."""
    from airlock.dev.proof import prove_boot
    from airlock.hw.nvml import healthy_gpu_dict

    conf = os.path.join(root, "airlock.toml")
    lines = [f'state_dir = "{root}/state"', f'log_dir = "{root}/log"']
    if not real_nvml:
        sim = os.path.join(root, "sim.json")
        gpus = [healthy_gpu_dict(i, model="NVIDIA H200", memory_mib=143771) for i in range(8)]
        with open(sim, "w") as fh:
            json.dump({"nodes": {NODE: {"gpus": gpus}}}, fh)
        lines += ["[nvml]", f'simulate = "{sim}"']
    if extra:
        lines.append(extra)
    with open(conf, "w") as fh:
        fh.write("\n".join(lines) + "\n")
    prove_boot(conf, NODE)  # settled: the periodic pass path asks Slurm nothing
    return conf


def importtime(output: str) -> list[tuple[int, int, int, str]]:
    """(depth, self us, cumulative us, module) from -X importtime's stderr."""
    rows = []
    for line in output.splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        parts = line[len("import time:"):].split("|")
        if len(parts) != 3:
            continue
        name = parts[2].rstrip()
        depth = (len(name) - len(name.lstrip())) // 2
        rows.append((depth, int(parts[0]), int(parts[1]), name.strip()))
    return rows


def median_rows(runs: list[list[tuple[int, int, int, str]]]) -> list[tuple[int, int, int, str]]:
    """Per module, the median self and cumulative time over several -X importtime runs (one run
    on a shared machine is noise), in the first run's order."""
    by: dict[str, list[tuple[int, int, int, str]]] = {}
    for rows in runs:
        for r in rows:
            by.setdefault(r[3], []).append(r)
    return [(r[0], int(statistics.median(x[1] for x in by[r[3]])),
             int(statistics.median(x[2] for x in by[r[3]])), r[3]) for r in runs[0]]


def breakdown(rows: list[tuple[int, int, int, str]], baseline: set[str]) -> dict:
    """Top-level imports beyond the baseline's, by cumulative time, and Airlock's own modules."""
    extra = [r for r in rows if r[3] not in baseline]
    top = sorted((r for r in extra if r[0] == 0), key=lambda r: -r[2])
    own = sorted((r for r in extra if r[3].startswith("airlock")), key=lambda r: -r[1])
    return {
        "modules": len(extra),
        "total_us": sum(r[1] for r in extra),
        "top_level": [{"module": r[3], "cumulative_us": r[2]} for r in top[:15]],
        "airlock_self": [{"module": r[3], "self_us": r[1]} for r in own],
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=11, help="runs of each command (interleaved)")
    p.add_argument("--real-nvml", action="store_true", help="the GPUs here, not a simulation")
    p.add_argument("--nhc", default="", help="a checkout of https://github.com/mej/nhc")
    p.add_argument("--extra-config", default="", help="TOML appended to the bench's config")
    p.add_argument("--json", default="", help="also write the figures to this file")
    args = p.parse_args()
    extra = ""
    if args.extra_config:
        with open(args.extra_config) as fh:
            extra = fh.read()
    nhc = find_nhc(args.nhc)
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with tempfile.TemporaryDirectory(prefix="airlock-bench-quick-") as root:
        runtime = os.path.join(root, "run")
        os.environ["AIRLOCK_RUNTIME_DIR"] = runtime  # prove_boot's config load, too
        conf = write_setup(root, args.real_nvml, extra)
        python, scripts = clean_venv(root, repo)
        env = {"SLURMD_NODENAME": NODE, "AIRLOCK_CONFIG": conf, "AIRLOCK_RUNTIME_DIR": runtime}
        passed = []
        if args.real_nvml and os.environ.get("LD_LIBRARY_PATH"):
            # Where libnvidia-ml is found only through it (containers), a node's slurmd would
            # need it too; recorded, so the figures say so.
            env["LD_LIBRARY_PATH"] = os.environ["LD_LIBRARY_PATH"]
            passed.append("LD_LIBRARY_PATH")
        job = {"SLURM_JOB_ID": "0", "SLURM_JOB_USER": "bench", "SLURM_CONF": "/dev/null"}
        commands = {
            "pass": ([python, "-c", "pass"], env),
            "hook": ([scripts["healthcheck"]], env),
            "prolog": ([scripts["prolog"]], {**env, **job}),
        }
        if nhc is not None:
            commands["nhc"] = (nhc_argv(root, nhc), env)
        # slurmd's hooks do not run in a checkout: the working directory is not the source tree
        os.chdir(root)
        out = os.path.join(root, "out.txt")
        samples: dict[str, list[dict]] = {k: [] for k in commands}
        names = list(commands)
        for i in range(args.runs):
            k = i % len(names)
            for name in names[k:] + names[:k]:  # rotate who goes first
                argv, cenv = commands[name]
                if name == "prolog":
                    cenv = {**cenv, "SLURM_JOB_ID": str(1000 + i)}
                r = spawn(argv, cenv, out)
                if r["rc"] != 0 or (name in ("hook", "prolog") and "quick pass" not in r["output"]):
                    print(f"{name} did not take its pass path (exit {r['rc']}):\n{r['output']}",
                          file=sys.stderr)
                    return 1
                samples[name].append(r)
        airlock = ("pass", "hook", "prolog")
        rows = {n: median_rows([importtime(spawn(
            with_importtime(commands[n][0], python),
            {**commands[n][1], "SLURM_JOB_ID": str(900 + k)}, out)["output"]) for k in range(3)])
            for n in airlock}
        base_modules = {r[3] for r in rows["pass"]}
        med = {n: {"wall_s": statistics.median(r["wall"] for r in s),
                   "cpu_s": statistics.median(r["cpu"] for r in s),
                   "rss_mib": statistics.median(r["rss_kib"] for r in s) / 1024,
                   # on a shared machine contention only ever adds: the fastest run is the
                   # closest to the command's own cost
                   "min_wall_s": min(r["wall"] for r in s),
                   "min_cpu_s": min(r["cpu"] for r in s)}
               for n, s in samples.items()}
        report: dict = {"runs": args.runs, "nvml": "real" if args.real_nvml else "simulated",
                        "python": python, "base_python": getattr(sys, "_base_executable",
                                                                 sys.executable),
                        "interpreter": "clean venv (no .pth files)",
                        "passed_env": passed, "hook_argv": commands["hook"][0],
                        "nhc": {"argv": commands["nhc"][0], "check": NHC_CHECK}
                        if nhc is not None else None,
                        "median": med, "goals": {"wall_ratio": GOAL_RATIO,
                                                  "rss_mib": GOAL_RSS_MIB}}
        ok_imports = True
        for n in ("hook", "prolog"):
            mods = {r[3] for r in rows[n]}
            forbidden = sorted(m for m in mods if m.split(".")[0] in FORBIDDEN)
            ok_imports &= not forbidden
            report[n] = {
                "wall_ratio": med[n]["wall_s"] / med["pass"]["wall_s"],
                "min_wall_ratio": med[n]["min_wall_s"] / med["pass"]["min_wall_s"],
                "cpu_ratio": med[n]["cpu_s"] / med["pass"]["cpu_s"],
                "rss_mib": med[n]["rss_mib"],
                "forbidden_imports": forbidden,
                "watched_imports": sorted(m for m in WATCHED if m in mods),
                "imports": breakdown(rows[n], base_modules),
            }
            report[n]["goal_met"] = (report[n]["wall_ratio"] <= GOAL_RATIO
                                     and report[n]["rss_mib"] <= GOAL_RSS_MIB)
        if nhc is not None:
            report["nhc_ratio"] = {
                "wall": med["nhc"]["wall_s"] / med["pass"]["wall_s"],
                "min_wall": med["nhc"]["min_wall_s"] / med["pass"]["min_wall_s"],
                "cpu": med["nhc"]["cpu_s"] / med["pass"]["cpu_s"],
                "hook_vs_nhc_wall": med["hook"]["wall_s"] / med["nhc"]["wall_s"]}
    print_report(report)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(report, fh, indent=1)
    if not ok_imports:
        print("FAIL: the hook path imported " + ", ".join(
            report["hook"]["forbidden_imports"] + report["prolog"]["forbidden_imports"]),
            file=sys.stderr)
        return 1
    return 0


def print_report(rep: dict) -> None:
    med = rep["median"]
    print(f"{rep['runs']} runs each, interleaved, medians; NVML {rep['nvml']}; "
          f"{rep['interpreter']} of {rep['base_python']}")
    rows = [("pass", "python -c pass"), ("hook", "healthcheck (periodic)"),
            ("prolog", "prolog (pass path)")]
    if rep["nhc"] is not None:
        rows.append(("nhc", "LBNL NHC, 1 check"))
    for n, label in rows:
        line = (f"{label:24s} wall {med[n]['wall_s'] * 1000:6.1f} ms (min "
                f"{med[n]['min_wall_s'] * 1000:6.1f})   CPU {med[n]['cpu_s'] * 1000:6.1f} ms   "
                f"peak RSS {med[n]['rss_mib']:5.1f} MiB")
        if n in ("hook", "prolog"):
            line += (f"   ratio {rep[n]['wall_ratio']:.2f}x (min {rep[n]['min_wall_ratio']:.2f}x,"
                     f" CPU {rep[n]['cpu_ratio']:.2f}x)   goal "
                     f"{'met' if rep[n]['goal_met'] else 'NOT met'} (<= {GOAL_RATIO}x, "
                     f"<= {GOAL_RSS_MIB:g} MiB)")
        elif n == "nhc":
            r = rep["nhc_ratio"]
            line += (f"   ratio {r['wall']:.2f}x (min {r['min_wall']:.2f}x, CPU {r['cpu']:.2f}x)"
                     f"   healthcheck/NHC {r['hook_vs_nhc_wall']:.2f}x")
        print(line)
    if rep["nhc"] is None:
        print("LBNL NHC: not measured (no source at hand: git clone https://github.com/mej/nhc "
              "DIR, then --nhc DIR)")
    else:
        print(f"  NHC: {' '.join(rep['nhc']['argv'][:1])} with `{rep['nhc']['check']}`")
    for n in ("hook", "prolog"):
        imp = rep[n]["imports"]
        print(f"\n{n}: {imp['modules']} modules beyond python -c pass, "
              f"{imp['total_us'] / 1000:.1f} ms of import (self times, -X importtime); "
              f"torch/click imported: {', '.join(rep[n]['forbidden_imports']) or 'no'}; "
              f"of {', '.join(WATCHED)}: {', '.join(rep[n]['watched_imports']) or 'none'}")
        print("  top-level imports by cumulative time: " + ", ".join(
            f"{t['module']} {t['cumulative_us'] / 1000:.1f}" for t in imp["top_level"][:10]))
        print("  Airlock modules by own time: " + ", ".join(
            f"{t['module']} {t['self_us'] / 1000:.1f}" for t in imp["airlock_self"][:10]))


if __name__ == "__main__":
    sys.exit(main())
