"""`airlock doctor`: check an install on this node, one line per item (OK, WARN or FAIL).

Each item is a small function returning Items; the ones that read Slurm's running config take
the text of `scontrol show config` so they are pure and tested on real output. Exit status 1
when any item FAILs, else 0.
"""

from __future__ import annotations

import json
import os
import re
import sys
import tempfile
from dataclasses import dataclass
from typing import Any, NamedTuple

from airlock import proc
from airlock.admin import render
from airlock.checks.context import Context
from airlock.checks.device_plan import simulated_view
from airlock.config import loader as config_mod
from airlock.errors import AirlockError
from airlock.hw import boot, nvml
from airlock.paths import node_dir, shared_node_dir
from airlock.preflight import doctor as preflight_doctor
from airlock.records import incidents
from airlock.records import proof as nodestate
from airlock.recovery.providers.http import token_file_problem
from airlock.slurm import client as slurm_mod
from airlock.slurm import conf as slurmconf
from airlock.slurm.client import TESTED_VERSIONS, Slurm

OK, WARN, FAIL = "OK", "WARN", "FAIL"
HOOKS = (("HealthCheckProgram", "airlock-healthcheck", "airlock.hooks.healthcheck"),
         ("Prolog", "airlock-prolog", "airlock.hooks.prolog"),
         ("Epilog", "airlock-epilog", "airlock.hooks.epilog"))
# Slurm prints this for an unset PrologEpilogTimeout: "wait forever".
UNLIMITED = {"65534", "UNLIMITED", "(null)", "0"}


@dataclass(frozen=True)
class Item:
    status: str
    name: str
    detail: str

    def line(self) -> str:
        return f"{self.status:<4}  {self.name}: {self.detail}"


def parse_show_config(text: str) -> dict[str, str]:
    """`scontrol show config` prints "Key                     = value" lines."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() and " " not in key.strip():
            out.setdefault(key.strip(), value.strip())
    return out


def _hook_is_airlocks(path: str, entry: str, module: str) -> bool:
    if os.path.basename(path).startswith(entry):
        return True
    try:
        with open(path, "rb") as fh:
            head = fh.read(65536)
    except OSError:
        return False
    return module.encode() in head or entry.encode() in head


def hook_paths(conf: dict[str, str], key: str) -> list[str]:
    """Every program configured for a hook: 22.05 prints `Prolog = a`, 23.11+ prints one
    `Prolog[N] = a` per configured program and leaves an unset one out."""
    pattern = re.compile(re.escape(key) + r"\[(\d+)\]")
    indexed = sorted((int(m.group(1)), v) for k, v in conf.items()
                     if (m := pattern.fullmatch(k)))
    values = [conf.get(key, "")] + [v for _, v in indexed]
    return [p.strip() for v in values if v not in ("", "(null)") for p in v.split(",")
            if p.strip()]


def check_hooks(conf: dict[str, str]) -> list[Item]:
    """slurm.conf carries Airlock's hooks, and each one is an executable file here."""
    items = []
    for key, entry, module in HOOKS:
        paths = hook_paths(conf, key)
        value = ",".join(paths)
        if not paths:
            items.append(Item(FAIL, key, "not set in slurm.conf (see `airlock render "
                                         "slurm-conf`)"))
            continue
        ours = [p for p in paths if _hook_is_airlocks(p, entry, module)]
        if not ours:
            items.append(Item(FAIL, key, f"{value} is not Airlock's {entry}"))
            continue
        path = ours[0]
        if not os.path.isfile(path):
            items.append(Item(FAIL, key, f"{path} does not exist on this node"))
        elif not os.access(path, os.X_OK):
            items.append(Item(FAIL, key, f"{path} is not executable"))
        else:
            items.append(Item(OK, key, path))
    return items


def check_version(conf: dict[str, str]) -> list[Item]:
    """The running Slurm's version, and whether CI tests Airlock against that release."""
    version = conf.get("SLURM_VERSION", "").strip()
    release = ".".join(version.split(".")[:2])
    if not version:
        return [Item(WARN, "Slurm version", "not in `scontrol show config`")]
    if release in TESTED_VERSIONS:
        return [Item(OK, "Slurm version", f"{version} (tested in CI)")]
    return [Item(WARN, "Slurm version", f"{version}: never tested in CI (tested: "
                 f"{', '.join(TESTED_VERSIONS)}); see docs/guide.md, Supported Slurm")]


def check_interval(conf: dict[str, str], budget: float) -> list[Item]:
    raw = conf.get("HealthCheckInterval", "0")
    try:
        interval = int(raw.split()[0])
    except (ValueError, IndexError):
        return [Item(FAIL, "HealthCheckInterval", f"unreadable value {raw!r}")]
    state = conf.get("HealthCheckNodeState", "")
    if interval == 0 and "START_ONLY" in state.upper():
        item = Item(OK, "HealthCheckInterval", "0: at slurmd start only (START_ONLY); no "
                    "periodic quick level, the prolog's runs before every job")
    elif interval == 0:
        item = Item(WARN, "HealthCheckInterval", "0: Slurm never runs the HealthCheckProgram, "
                    "not even at slurmd start; the prolog is the only lock")
    elif interval < 2 * budget:
        item = Item(WARN, "HealthCheckInterval", f"{interval} s is below twice the hook budget "
                    f"({budget:g} s): runs may overlap")
    elif interval > 3600:
        item = Item(WARN, "HealthCheckInterval", f"{interval} s: a failing GPU may take jobs "
                    "for over an hour before it is drained")
    else:
        item = Item(OK, "HealthCheckInterval", f"{interval} s, node state {state or '?'}")
    items = [item]
    timeout = conf.get("PrologEpilogTimeout", "")
    if timeout.split()[0:1] and timeout.split()[0] not in UNLIMITED:
        items.append(Item(OK, "PrologEpilogTimeout", f"{timeout.split()[0]} s"))
    else:
        items.append(Item(WARN, "PrologEpilogTimeout", "not set: Slurm waits forever for a hung "
                          "prolog or epilog"))
    return items


def check_mechanisms(conf: dict[str, str], budget: float) -> list[Item]:
    """What the running Slurm offers the gate, asked of it (SLURM_VERSION and the keys of its
    config), against what is configured; a better mechanism available but unused is a WARN
    naming it. The measurements behind each rule: docs/guide.md, Supported Slurm."""
    try:
        version = slurm_mod.parse_version(conf.get("SLURM_VERSION", ""))
    except AirlockError:
        return []  # check_version says so
    state = conf.get("HealthCheckNodeState", "ANY").upper()
    try:
        interval = int(conf.get("HealthCheckInterval", "0").split()[0])
    except (ValueError, IndexError):
        return []  # check_interval says so
    items = []
    if "REBOOT_ONLY" in state:
        items.append(Item(FAIL, "HealthCheckNodeState", "REBOOT_ONLY: Slurm runs the "
                          "HealthCheckProgram only after `scontrol reboot`, once the node is "
                          "already in service; new nodes and unplanned reboots are never "
                          "isolated. Use ANY (or START_ONLY with HealthCheckInterval=0)"))
    elif "START_ONLY" in state and interval:
        items.append(Item(WARN, "HealthCheckNodeState", f"START_ONLY: the HealthCheckProgram "
                          f"runs at slurmd start only; HealthCheckInterval={interval} runs "
                          "nothing (no periodic quick level)"))
    elif interval == 0 and "START_ONLY" not in state \
            and slurm_mod.has(version, "HealthCheckNodeState=START_ONLY"):
        items.append(Item(WARN, "HealthCheckNodeState", f"{state or 'ANY'} with "
                          "HealthCheckInterval=0: Slurm never runs the HealthCheckProgram; "
                          f"Slurm {slurm_mod.release(version)} has START_ONLY, which runs it at "
                          "slurmd start (`airlock render slurm-conf --interval 0`)"))
    raw = conf.get("HealthCheckTimeout")
    if raw is None:
        # no such setting in this release (before 26.05): the fixed 60 s, which the hooks read
        items.append(Item(OK, "HealthCheckTimeout", f"none in Slurm "
                          f"{slurm_mod.release(version)}: the fixed 60 s"))
        return items
    try:
        timeout = int(raw.split()[0])
    except (ValueError, IndexError):
        return items + [Item(WARN, "HealthCheckTimeout", f"unreadable value {raw!r}")]
    try:
        best = render.healthcheck_settings(version, interval, "START_ONLY" if not interval
                                           and "START_ONLY" in state else "")
    except AirlockError:
        best = {}
    want = best.get("HealthCheckTimeout", "")
    hint = f"; `airlock render slurm-conf` sets {want}" if want else ""
    if timeout == 0:  # how 26.05 shows an unset one; slurmd applies 60
        late = f", not below HealthCheckInterval={interval} (slurmctld logs an error)" \
            if interval and interval <= 60 else ""
        items.append(Item(WARN, "HealthCheckTimeout", f"not set (Slurm's 60 s){late}: at boot "
                          "the hook could hold the node's registration until slurmctld takes "
                          f"its drain for longer{hint}"))
    elif interval and timeout >= interval:
        items.append(Item(WARN, "HealthCheckTimeout", f"{timeout} s is not below "
                          f"HealthCheckInterval={interval} (slurmctld logs an error){hint}"))
    elif timeout < budget + slurmconf.SPARE_S + slurmconf.DRAIN_RESERVE_S:
        left = max(0.0, timeout - slurmconf.SPARE_S - slurmconf.DRAIN_RESERVE_S)
        items.append(Item(WARN, "HealthCheckTimeout", f"{timeout} s: the periodic quick level "
                          f"gets about {left:g} s of its [healthcheck] budget of {budget:g} s"))
    else:
        items.append(Item(OK, "HealthCheckTimeout", f"{timeout} s"))
    return items


def check_config(path: str | None) -> tuple[Any, list[Item]]:
    """The file loads, and every section is valid, each mistake on its own line (a hook's load
    stops at the first)."""

    try:
        cfg = config_mod.load(path, whole=False)  # every mistake listed below, not the first
    except AirlockError as exc:
        return None, [Item(FAIL, "config", str(exc))]
    problems = []
    for name in config_mod.SECTIONS:
        try:
            cfg.section(name)  # every section, even absent ones, must build
        except AirlockError as exc:
            problems.append(str(exc))
    items = [Item(FAIL, "config", p) for p in problems]
    items += [Item(WARN, "config", w) for w in cfg.warnings]
    if not cfg.exists:
        items.append(Item(OK, "config", f"no file at {cfg.path}: every default applies "
                                        "(`airlock render config` lists them)"))
    elif not problems:
        items.append(Item(OK, "config", f"{cfg.path} valid"))
    return cfg, items


def check_scheduler(conf: dict[str, str]) -> list[Item]:
    """A job the prolog refuses must be requeued, not held."""
    params = conf.get("SchedulerParameters", "")
    if "nohold_on_prolog_fail" in params.split(","):
        return [Item(OK, "SchedulerParameters", "nohold_on_prolog_fail set")]
    return [Item(WARN, "SchedulerParameters", "no nohold_on_prolog_fail: jobs the prolog refuses "
                 "on an unproven boot stay held until `scontrol release`")]


def check_node_state(cfg, node: str) -> list[Item]:
    """This node's proof of its current boot, and Airlock's own errors recorded here."""

    items = []
    try:
        now = boot.current(node)
        proof = nodestate.NodeState(cfg, node).proof(now)
    except OSError as exc:
        return [Item(FAIL, "boot", f"kernel boot id unreadable: {exc}")]
    record = proof.record or {}
    if proof.state == nodestate.PROVEN:
        items.append(Item(OK, "registration", f"this boot passed ({record.get('level')}, "
                                              f"{record.get('trigger')})"))
    elif proof.state == nodestate.RUNNING:
        age = now.uptime - float(record.get("started_uptime", now.uptime))
        limit = cfg.registration.suite_timeout
        status = WARN if age > limit and record.get("phase") != "waiting" else OK
        items.append(Item(status, "registration", f"suite {record.get('run_id')} running "
                          f"{age:.0f} s ({record.get('phase') or 'checking'}; limit {limit:g} s)"))
    elif proof.state == nodestate.FAILED:
        why = record.get("detail") or record.get("error") or "?"
        items.append(Item(WARN, "registration", f"this boot failed: {why}"))
    elif proof.state == nodestate.ADOPTED:
        items.append(Item(OK, "registration", f"adopted while running jobs; "
                          f"[registration] adopt = {cfg.registration.adopt}"))
    else:
        items.append(Item(WARN, "registration", f"no proof for this boot ({proof.why}): the "
                          "prolog refuses jobs until a registration passes"))
    errors = incidents.read_node(cfg.state_dir, "", node)
    for hook, entry in sorted(errors.items()):
        items.append(Item(WARN, f"{hook} errors", f"{entry.get('count', 1)}x, last: "
                          f"{entry.get('message', '?')}"))
    return items


def check_dirs(cfg, node: str) -> list[Item]:

    items = []
    state = node_dir(cfg.state_dir, node)
    try:
        state.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=state, prefix=".doctor-"):
            pass
        items.append(Item(OK, "state_dir", f"{state} writable"))
    except OSError as exc:
        items.append(Item(FAIL, "state_dir", f"{state}: {exc.strerror or exc}"))
    shared = shared_node_dir(cfg.shared_dir, node)
    if shared is None:
        items.append(Item(WARN, "shared_dir", "not set: the controller sees only Slurm reasons "
                          "for nodes other than its own"))
    else:
        try:
            shared.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile(dir=shared, prefix=".doctor-"):
                pass
            items.append(Item(OK, "shared_dir", f"{shared} writable"))
        except OSError as exc:
            items.append(Item(WARN, "shared_dir", f"{shared}: {exc.strerror or exc}"))
    return items


def check_nvml(cfg, node: str) -> list[Item]:

    if cfg.nvml.simulate:
        try:
            snap = nvml.gather(nvml.SimulatedBackend(cfg.nvml.simulate, node), cfg.nvml.timeout)
        except AirlockError as exc:
            return [Item(FAIL, "NVML", f"simulation configured but unusable: {exc}")]
        return [Item(OK, "NVML", f"simulated from {cfg.nvml.simulate}: {snap.count} GPUs")]
    if not nvml.real_nvml_available():
        return [Item(FAIL, "NVML", "no NVML (driver or nvidia-ml-py missing) and no [nvml] "
                                   "simulate configured")]
    try:
        snap = nvml.gather(nvml.PynvmlBackend(), cfg.nvml.timeout)
    except AirlockError as exc:
        return [Item(FAIL, "NVML", str(exc))]
    return [Item(OK, "NVML", f"driver {snap.driver_version}, {snap.count} GPUs "
                             f"({', '.join(snap.models) or 'none'})")]


def check_recovery_http(cfg) -> list[Item]:
    """[recovery.http] (provider "http" only): each insecure setting that allow_insecure lets
    through is a WARN; a token file others can read, or not root's, is a FAIL without it."""

    rec = cfg.recovery
    if rec.provider != "http":
        return []
    s = rec.http
    level = WARN if s.allow_insecure else FAIL
    items = [Item(WARN, "recovery.http", f"allow_insecure: {p}") for p in s.insecure_transport()]
    if s.token_file:
        problem = token_file_problem(s.token_file)
        if problem:
            items.append(Item(level, "recovery.http", f"token_file {s.token_file}: {problem}"))
    if not items:
        items.append(Item(OK, "recovery.http", f"{s.url}: TLS verified"
                          if s.url.startswith("https") else f"{s.url}: loopback"))
    return items


# One JSON line: the version, the CUDA it was built for (None: a CPU-only wheel), how many
# devices it can use, and CUDA's own error text when it cannot.
TORCH_PROBE = """import json, torch
err, n = "", 0
try:
    torch.cuda.init()
    n = torch.cuda.device_count()
except Exception as exc:
    err = " ".join(f"{type(exc).__name__}: {exc}".split())[:160]
print(json.dumps({"version": torch.__version__, "cuda": torch.version.cuda, "devices": n,
                  "error": err}))
"""


class Gpus(NamedTuple):
    """What the node's profile expects of torch: GPUs, and whether CUDA is simulated."""

    expected: int = 0
    profile: str = ""
    simulated: bool = False


def check_torch(python: str = sys.executable, timeout: float = 120,
                gpus: Gpus | None = None) -> list[Item]:
    """In a child process: importing torch takes seconds and CUDA init can hang."""
    gpus = gpus or Gpus()
    try:
        out = proc.run([python, "-c", TORCH_PROBE], timeout)
    except OSError as exc:
        return [Item(FAIL, "torch", f"cannot start {python}: {exc.strerror or exc}")]
    if out.timed_out:
        return [Item(FAIL, "torch", f"import torch / CUDA init hung for {timeout:g} s")]
    if out.returncode != 0:
        last = (out.stderr.strip().splitlines() or ["?"])[-1]
        if "No module named 'torch'" in last:
            return [Item(WARN if not gpus.expected else FAIL, "torch",
                         "not installed: the deep level (burn-in, all-reduce) cannot run; "
                         "pip install 'slurm-airlock[deep]'")]
        return [Item(FAIL, "torch", f"import failed: {last[:120]}")]
    try:
        seen = json.loads(out.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return [Item(FAIL, "torch", f"probe gave no answer: {out.stdout.strip()[-120:]!r}")]
    return [judge_torch(seen, gpus)]


def judge_torch(seen: dict[str, Any], gpus: Gpus) -> Item:
    """A GPU node needs a torch that can use its GPUs: the heavy checks never fall back to the
    CPU there (checks/device_plan.py), so a CPU-only wheel fails every registration."""
    version, cuda, n = seen.get("version", "?"), seen.get("cuda"), int(seen.get("devices") or 0)
    build = f"{version} (CUDA {cuda})" if cuda else f"{version}, a CPU-only build"
    if gpus.simulated:
        return Item(OK, "torch", f"{build}; CUDA simulated ([nvml] simulate): heavy checks run "
                                 "on CPU stand-ins")
    if not gpus.expected:
        if n:
            return Item(OK, "torch", f"{build}, {n} CUDA devices")
        return Item(OK, "torch", f"{build}; no GPUs expected: heavy checks run on CPU devices")
    need = f"profile {gpus.profile} expects {gpus.expected} GPUs"
    if not cuda:
        return Item(FAIL, "torch", f"{build}: {need}; install a CUDA build of torch")
    if n < gpus.expected:
        why = seen.get("error") or f"torch.cuda.device_count() is {n}"
        return Item(FAIL, "torch", f"{build} sees {n} CUDA devices: {need}: {why}")
    return Item(OK, "torch", f"{build}, {n} CUDA devices ({need})")


def expected_gpus(cfg, node: str) -> Gpus:
    """The GPUs this node's profile expects, as the checks will resolve it."""
    ctx = Context.create(cfg, node, "standard")
    try:
        profile = ctx.profile
        override = cfg.profile.expected_gpus
        sim = simulated_view(cfg, node)
    except AirlockError:
        return Gpus()
    return Gpus(override if override >= 0 else profile.gpus, profile.name,
                sim is not None and bool(sim.devices))


# What slurmd, systemd and the suite start by name: each must import on its own, from the
# install, in a fresh interpreter, or the node's hooks crash before they can decide anything.
ENTRY_MODULES = ("airlock.hooks.healthcheck", "airlock.hooks.prolog", "airlock.hooks.epilog",
                 "airlock.registration", "airlock.recovery.service", "airlock.cli")
DIST = "slurm-airlock"


def check_install() -> list[Item]:
    """The distribution's files all on disk (its RECORD), and every entry module importable
    in a fresh interpreter started away from any checkout: a wheel that left a module out
    (`No module named 'airlock.config.sections'`) is named here in one line."""
    from importlib import metadata

    try:
        dist = metadata.distribution(DIST)
    except metadata.PackageNotFoundError:
        return [Item(FAIL, "install", f"{DIST} is not installed for {sys.executable}")]
    files = [f for f in dist.files or () if f.parts and f.parts[0] == "airlock"]
    missing = [str(f) for f in files if not os.path.exists(f.locate())]
    if missing:
        return [Item(FAIL, "install", f"{len(missing)} files of {DIST} {dist.version} missing, "
                     f"e.g. {missing[0]}: reinstall the wheel")]
    code = "import importlib, sys\nfor m in sys.argv[1:]:\n    importlib.import_module(m)"
    try:
        out = proc.run([sys.executable, "-c", code, *ENTRY_MODULES], 60, cwd="/")
    except OSError as exc:
        return [Item(FAIL, "install", f"cannot start {sys.executable}: {exc}")]
    if out.timed_out:
        return [Item(FAIL, "install", "importing the entry modules hung for 60 s")]
    if out.returncode != 0:
        last = (out.stderr.strip().splitlines() or ["no output"])[-1]
        return [Item(FAIL, "install", f"the hooks cannot import: {last[:160]}: reinstall the "
                     "wheel")]
    return [Item(OK, "install", f"{DIST} {dist.version}: {len(ENTRY_MODULES)} entry modules "
                 "import")]


def run(config_path: str | None, node: str, torch_check: bool = True) -> list[Item]:

    cfg, items = check_config(config_path)
    items = check_install() + items
    slurm = Slurm.from_config(cfg) if cfg is not None else Slurm()
    if cfg is not None:
        items += check_dirs(cfg, node)
        items += check_recovery_http(cfg)
    try:
        pong = slurm.scontrol("ping", timeout=10).strip().splitlines()
        line = next((p for p in pong if "UP" in p), "")
        items.append(Item(OK if line else FAIL, "scontrol ping",
                          line.strip() or " / ".join(pong) or "no answer"))
        conf = parse_show_config(slurm.scontrol("show", "config"))
    except AirlockError as exc:
        items.append(Item(FAIL, "scontrol ping", str(exc)))
        conf = None
    if conf is not None:
        items += check_version(conf)
        items += check_hooks(conf)
        items += check_scheduler(conf)
        budget = cfg.healthcheck.budget if cfg is not None else 30.0
        items += check_interval(conf, budget)
        items += check_mechanisms(conf, budget)
        items += [Item(*line) for line in preflight_doctor.items(conf, cfg)]
    if cfg is not None:
        items += check_node_state(cfg, node)
        items += check_nvml(cfg, node)
    if torch_check:
        items += check_torch(gpus=expected_gpus(cfg, node) if cfg is not None else None)
    return items
