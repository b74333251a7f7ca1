"""SKU profiles, shipped as TOML data beside this module (one file per SKU), plus site profiles
from [profile] dirs (a site file with the same name replaces the built-in one).

Which profile a node gets, most specific first:
  1. [profile.by_node]       node name or hostlist expression -> profile
  2. [profile.by_partition]  Slurm partition -> profile   (first match in table order)
  3. [profile.by_feature]    Slurm node feature -> profile (first match in table order)
  4. [profile] name
  5. detected: the first GPU's NVML name contains one of a profile's `models`, the count
     breaking ties; a node with no GPUs gets `cpu`.
Partitions and features come from one `scontrol show node` call, made only when those tables are
set (the same call gives the node's GRES to the gpu_count check at registration), and shared by
every check of a run.

A node with NVIDIA GPUs on its PCI bus never counts as having none: when NVML cannot load (a
driver that failed to load, a missing library), detection gives an `auto:nvidia-pci` profile that
expects the GPUs the bus shows, so `gpu_count` fails instead of the node passing as `cpu`.

Loading is lazy, because the periodic hook pays for it on every run: a profile named in config
is read from its own file (a shipped profile's file is named after it), and every file is parsed
only when detection needs all of their `models`.

Every key a profile may carry is in SCHEMA below, with its type and default; an unknown key or a
wrong type is a clear error naming the file and the key (a typo must not silently drop a floor).
"""

from __future__ import annotations

import copy
import os
import tomllib
from typing import Any, NamedTuple

from airlock.errors import AirlockError, ConfigError
from airlock.hw.nvml import pci_gpus

# The shipped profiles (and xid_policy.toml) are the TOML files beside this module, read by path
# rather than through importlib.resources: that import (zipfile and all) costs the periodic hook
# more than the files it reads.
PROFILE_DIR = os.path.dirname(os.path.abspath(__file__))

DTYPES = ("bf16", "fp16", "tf32", "fp32")
ACTIONS = ("fail", "warn", "ignore")
# The names airlock.hw.nvml gives the NVML clock event ("throttle") reason bits.
THROTTLE_NAMES = ("gpu_idle", "app_clocks", "sw_power_cap", "hw_slowdown", "sync_boost",
                  "sw_thermal", "hw_thermal", "hw_power_brake", "display_clocks")
NOT_PROFILES = {"xid_policy.toml"}  # data files that live beside the profiles

# key: (kind, default, meaning). Kinds: str, int, number, fraction, strings, throttle, tflops,
# action.
SCHEMA: dict[str, tuple[str, Any, str]] = {
    "name": ("str", None, "profile name (required; what config and results refer to)"),
    "description": ("str", "", "one line for people"),
    "models": ("strings", [], "substrings of the NVML GPU name that identify this SKU"),
    "gpus": ("int", 0, "expected GPU count"),
    "memory_mib": ("int", 0, "expected memory per GPU (NVML total), MiB; 0 = not checked"),
    "memory_tolerance_pct": ("number", 1.0, "how far below memory_mib a GPU may report"),
    "tflops_floor": ("tflops", {}, "burn-in floor per dtype (bf16, fp16, tf32, fp32), TFLOPS"),
    "busbw_floor_gbps": ("number", 0.0, "intra-node all-reduce bus bandwidth floor, GB/s"),
    "nvlink_links": ("int", 0, "active NVLink links expected per GPU; 0 = no NVLink"),
    "pcie_gen": ("int", 0, "expected PCIe generation; 0 = the device's reported max"),
    "pcie_width": ("int", 0, "expected PCIe width; 0 = the device's reported max"),
    "pcie_gen_below": ("action", "warn", "a link running below its generation (idle GPUs "
                                         "downshift, so warn by default)"),
    "throttle_allowed": ("throttle", [], "clock event reasons that are normal"),
    "throttle_warn": ("throttle", [], "reasons recorded as a warning"),
    "throttle_fail": ("throttle", [], "reasons that fail the node"),
    "temp_warn_c": ("int", 0, "GPU temperature that warns; 0 = off"),
    "temp_fail_c": ("int", 0, "GPU temperature that fails; 0 = off"),
    "ecc_dram_max": ("int", 0, "volatile uncorrectable DRAM ECC errors tolerated"),
    "ecc_sram_max": ("int", 0, "volatile uncorrectable SRAM ECC errors tolerated"),
    "persistence_mode": ("action", "warn", "what persistence mode off means"),
    "xid_policy": ("str", "default", "a table of xid_policy.toml (or [xid] policy_file)"),
    "h2d_floor_gbps": ("number", 0.0, "pcie_bw: host-to-device copy floor per GPU, pinned "
                                       "memory, GB/s; 0 = not judged"),
    "d2h_floor_gbps": ("number", 0.0, "pcie_bw: device-to-host copy floor per GPU, GB/s"),
    "p2p_floor_gbps": ("number", 0.0, "p2p: copy floor between every GPU pair, each direction, "
                                       "GB/s; 0 = not judged"),
    "loopback_min_fraction": ("fraction", 0.0, "loopback: floor as a share of each RDMA port's "
                                               "own rate (sysfs rate)"),
    "loopback_floor_gbps": ("number", 0.0, "loopback: absolute floor per port, Gb/s"),
    "observe": ("strings", [], "checks this SKU ships in observe mode (never drain), e.g. a floor "
                               "without a public figure; [checks] enforce overrides"),
}


class Profile(NamedTuple):
    name: str
    models: tuple[str, ...] = ()
    gpus: int = 0
    memory_mib: int = 0
    extra: dict[str, Any] | None = None  # every other SCHEMA key; read through get()
    origin: str = ""

    def get(self, key: str, default: Any = None) -> Any:
        value = (self.extra or {}).get(key)
        return default if value is None else value


_BASE_KEYS = {"name", "models", "gpus", "memory_mib"}


def _check_value(kind: str, key: str, value: Any) -> Any:
    def bad(expected: str) -> ValueError:
        return ValueError(f"{key}: expected {expected}, got {value!r}")

    if kind == "str":
        if not isinstance(value, str):
            raise bad("a string")
        return value
    if kind == "int":
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise bad("a whole number >= 0")
        return value
    if kind == "number":
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            raise bad("a number >= 0")
        return float(value)
    if kind in ("strings", "throttle"):
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise bad("a list of strings")
        if kind == "throttle":
            unknown = [v for v in value if v not in THROTTLE_NAMES]
            if unknown:
                raise ValueError(f"{key}: unknown throttle reason {unknown[0]!r} "
                                 f"(known: {', '.join(THROTTLE_NAMES)})")
        return list(value)
    if kind == "tflops":
        if not isinstance(value, dict):
            raise bad("a table like {bf16 = 500, fp32 = 40}")
        out = {}
        for dtype, floor in value.items():
            if dtype not in DTYPES:
                raise ValueError(f"{key}: unknown dtype {dtype!r} (known: {', '.join(DTYPES)})")
            out[dtype] = _check_value("number", f"{key}.{dtype}", floor)
        return out
    if kind == "fraction":
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
            raise bad("a number between 0 and 1")
        return float(value)
    if kind == "action":
        if value not in ACTIONS:
            raise bad(f"one of {', '.join(ACTIONS)}")
        return value
    raise AssertionError(kind)


def from_dict(data: dict[str, Any], origin: str) -> Profile:
    """Validate one profile's data; every problem is a ConfigError naming origin and key."""
    try:
        if not isinstance(data, dict):
            raise ValueError("expected a table")
        unknown = sorted(set(data) - set(SCHEMA))
        if unknown:
            raise ValueError(f"unknown key {unknown[0]!r}")
        if "name" not in data:
            raise ValueError("missing key 'name'")
        values = {k: _check_value(SCHEMA[k][0], k, v) for k, v in data.items()}
        if not values["name"]:
            raise ValueError("name: must not be empty")
        overlap = (set(values.get("throttle_fail", [])) & set(values.get("throttle_warn", []))
                   | set(values.get("throttle_allowed", [])) & set(values.get("throttle_fail", []))
                   | set(values.get("throttle_allowed", [])) & set(values.get("throttle_warn", [])))
        if overlap:
            raise ValueError(f"throttle reason {sorted(overlap)[0]!r} is in two of "
                             "throttle_allowed/throttle_warn/throttle_fail")
        warn_c, fail_c = values.get("temp_warn_c", 0), values.get("temp_fail_c", 0)
        if warn_c and fail_c and warn_c > fail_c:
            raise ValueError(f"temp_warn_c {warn_c} is above temp_fail_c {fail_c}")
    except ValueError as exc:
        raise ConfigError(f"profile {origin}: {exc}") from None
    extra = {k: copy.deepcopy(default) for k, (_, default, _) in SCHEMA.items()
             if k not in _BASE_KEYS}
    extra.update({k: v for k, v in values.items() if k not in _BASE_KEYS})
    return Profile(name=values["name"], models=tuple(values.get("models", ())),
                   gpus=values.get("gpus", 0), memory_mib=values.get("memory_mib", 0),
                   extra=extra, origin=origin)


def load_file(path: str, origin: str = "") -> Profile:
    origin = origin or path
    try:
        with open(path, "rb") as fh:
            data = tomllib.load(fh)
    except OSError as exc:
        raise ConfigError(f"profile {origin}: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"profile {origin}: invalid TOML: {exc}") from None
    return from_dict(data, origin)


_CACHE: dict[tuple[str, ...], dict[str, Profile]] = {}
_FILES: dict[str, Profile] = {}  # shipped file path -> its profile, parsed once per process


def _shipped_file(path: str) -> Profile:
    if path not in _FILES:
        _FILES[path] = load_file(path, origin=os.path.basename(path))
    return _FILES[path]


def _shipped_names() -> list[str]:
    return sorted(f[:-5] for f in os.listdir(PROFILE_DIR)
                  if f.endswith(".toml") and f not in NOT_PROFILES)


def builtin() -> dict[str, Profile]:
    """Every shipped profile, by name (each file is named after its profile)."""
    out: dict[str, Profile] = {}
    for stem in _shipped_names():
        p = _shipped_file(os.path.join(PROFILE_DIR, stem + ".toml"))
        out[p.name] = p
    return out


def _site(dirs: list[str] | tuple[str, ...]) -> dict[str, Profile]:
    """The site directories' profiles, by name (a later directory replaces an earlier one)."""
    out: dict[str, Profile] = {}
    for d in dirs:
        if not os.path.isdir(d):
            raise ConfigError(f"profile directory {d}: not found")
        for fname in sorted(os.listdir(d)):
            if fname.endswith(".toml") and fname not in NOT_PROFILES:
                p = load_file(os.path.join(d, fname))
                out[p.name] = p
    return out


def available(dirs: list[str] | tuple[str, ...] = ()) -> dict[str, Profile]:
    """Built-in profiles, then each site directory's *.toml (later ones replace earlier)."""
    key = tuple(dirs)
    if key not in _CACHE:
        _CACHE[key] = {**builtin(), **_site(dirs)}
    return _CACHE[key]


def named(name: str, dirs: list[str] | tuple[str, ...] = ()) -> Profile:
    """One profile by name: a site directory's, else the shipped file of that name (the other
    shipped files are not read)."""
    key = tuple(dirs)
    if key in _CACHE:
        found = _CACHE[key].get(name)
    else:
        found = _site(dirs).get(name) if dirs else None
        path = os.path.join(PROFILE_DIR, name + ".toml")
        if found is None and os.path.basename(path) == name + ".toml" and \
                name + ".toml" not in NOT_PROFILES and os.path.isfile(path):
            found = _shipped_file(path)
            if found.name != name:  # a shipped file named after another profile: ours to fix
                raise ConfigError(f"profile {name}.toml: holds profile {found.name!r}")
    if found is None:
        profiles = available(dirs)
        raise ConfigError(f"unknown profile {name!r} (known: {', '.join(sorted(profiles))})")
    return found


NVIDIA_PCI_PROFILE = "auto:nvidia-pci"


def detect(models: list[str], count: int, dirs: list[str] | tuple[str, ...] = (),
           pci_gpus: int = 0) -> Profile:
    """By the first GPU's model, the count breaking ties. `pci_gpus`: NVIDIA GPUs on the PCI
    bus; when NVML sees none of them, the node is still a GPU node (see the module note)."""
    if count == 0 or not models:
        if pci_gpus > 0:
            return from_dict({"name": NVIDIA_PCI_PROFILE, "gpus": pci_gpus,
                              "description": "NVIDIA GPUs on the PCI bus that NVML cannot see"},
                             "detected")
        return named("cpu", dirs)
    profiles = available(dirs)
    model = models[0]
    matches = [p for p in profiles.values() if any(m in model for m in p.models)]
    if not matches:
        # An unknown SKU still gets its count checked against what is there now; its figures
        # are judged only by fixed floors the operator configures.
        return from_dict({"name": f"auto:{model}", "models": [model], "gpus": count}, "detected")
    matches.sort(key=lambda p: (p.gpus != count, p.name))
    return matches[0]


def select(models: list[str], count: int, name: str = "") -> Profile:
    """By name, else detected (kept for callers without a config)."""
    return named(name) if name else detect(models, count)


def check_names(section) -> None:
    """Every profile a [profile] section names exists, and every site file parses (ConfigError
    otherwise): [profile] validate() calls it, so a typo is found when the config loads."""
    _site(section.dirs)
    for table in ("by_node", "by_partition", "by_feature"):
        for key, name in getattr(section, table).items():
            _named_or(name, section.dirs, f"{table}.{key}: ")
    if section.name:
        _named_or(section.name, section.dirs, "name: ")


def _named_or(name: str, dirs: list[str], where: str) -> Profile:
    try:
        return named(name, dirs)
    except ConfigError as exc:
        raise ConfigError(where + str(exc)) from None


def match_node(node: str, table: dict[str, str]) -> str:
    if node in table:
        return table[node]
    exprs = [(expr, pname) for expr, pname in table.items() if any(c in expr for c in "[,")]
    if not exprs:
        return ""  # (without hostlist expressions, no need to import the Slurm client)
    from airlock.slurm.client import expand  # hostlist: only for an expression in by_node

    for expr, pname in exprs:
        if node in expand(expr):
            return pname
    return ""


def choose_name(section, node: str, facts: Any) -> tuple[str, str]:
    """(profile name, why) from config alone; ("", "") means detect from the GPUs.

    `facts` is the node's Slurm record (partitions, features) or None when unknown."""
    pname = match_node(node, section.by_node)
    if pname:
        return pname, f"by_node {node}"
    if facts is not None:
        for part, pname in section.by_partition.items():
            if part in facts.partitions:
                return pname, f"by_partition {part}"
        for feat, pname in section.by_feature.items():
            if feat in facts.features:
                return pname, f"by_feature {feat}"
    if section.name:
        return section.name, "config name"
    return "", ""


def node_facts(ctx) -> Any:
    """The node's Slurm record, fetched once per run and shared; None when Slurm is unreachable
    (the caller then judges without it and says so)."""
    if ctx.slurm_facts_read:
        return ctx.slurm_facts
    from airlock.slurm.client import Slurm  # only when by_partition/by_feature need Slurm

    facts, error = None, ""
    try:
        slurm = Slurm.from_config(ctx.cfg)
        if ctx.level == "quick":  # a slow controller must not stall the periodic hook or prolog
            slurm.timeout = min(slurm.timeout, ctx.cfg.profile.slurm_timeout)
        facts = slurm.node(ctx.node)
    except AirlockError as exc:
        error = str(exc)
    ctx.slurm_facts_read, ctx.slurm_facts, ctx.slurm_facts_error = True, facts, error
    return facts


def node_pci_gpus(ctx) -> list[str]:
    """The NVIDIA GPUs on this node's PCI bus ([system] sys_root), read once per run."""
    if ctx.pci_gpus is None:
        ctx.pci_gpus = pci_gpus(ctx.cfg.system.sys_root)
    return ctx.pci_gpus


def for_context(ctx) -> Profile:
    section = ctx.cfg.profile
    facts = node_facts(ctx) if section.needs_slurm else None
    pname, _why = choose_name(section, ctx.node, facts)
    if pname:
        return named(pname, section.dirs)
    snap = ctx.snapshot
    pci = len(node_pci_gpus(ctx)) if not snap.count else 0
    return detect(snap.models, snap.count, section.dirs, pci)
