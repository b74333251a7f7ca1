"""The XID policy: which XIDs fail a node, which warn, which are ignored, as data
(xid_policy.toml beside this module, or a site's [xid] policy_file), parsed and checked here.
The XID check (checks/xid.py), the epilog and the config's validation all read it through
load_policies() / policy()."""

from __future__ import annotations

import os
import tomllib
from typing import Any, NamedTuple

from airlock.errors import ConfigError
from airlock.hw.profiles import PROFILE_DIR

ACTIONS = ("fail", "warn", "ignore")


class XidPolicy(NamedTuple):
    # A NamedTuple, not a frozen dataclass: as immutable, and no code generated at import (the
    # periodic hook imports this module on every run).
    name: str
    fatal: frozenset[int]
    warn: frozenset[int] = frozenset()
    ignore: frozenset[int] = frozenset()
    default: str = "warn"
    window_s: float = 7200.0
    dedup_s: float = 60.0
    since_boot: bool = True
    remediation: str = "reboot"

    def action(self, xid: int) -> str:
        if xid in self.fatal:
            return "fail"
        if xid in self.warn:
            return "warn"
        if xid in self.ignore:
            return "ignore"
        return self.default


_POLICY_KEYS = {"fatal", "warn", "ignore", "default", "window_s", "dedup_s", "since_boot",
                "remediation"}


def _xid_set(value: Any, where: str) -> frozenset[int]:
    if not isinstance(value, list):
        raise ConfigError(f"{where}: expected a list of XIDs or \"a-b\" ranges, got {value!r}")
    out: set[int] = set()
    for item in value:
        if isinstance(item, int) and not isinstance(item, bool) and item > 0:
            out.add(item)
            continue
        first, dash, last = item.partition("-") if isinstance(item, str) else ("", "", "")
        first, last = first.strip(), last.strip()
        if not (dash and first.isdigit() and last.isdigit()) or int(first) > int(last):
            raise ConfigError(f"{where}: bad XID or range {item!r}")
        out.update(range(int(first), int(last) + 1))
    return frozenset(out)


def policy_from_dict(name: str, data: Any, origin: str) -> XidPolicy:
    where = f"xid policy {origin} [{name}]"
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a table")
    unknown = sorted(set(data) - _POLICY_KEYS)
    if unknown:
        raise ConfigError(f"{where}: unknown key {unknown[0]!r}")
    sets = {k: _xid_set(data.get(k, []), f"{where} {k}") for k in ("fatal", "warn", "ignore")}
    for a, b in (("fatal", "warn"), ("fatal", "ignore"), ("warn", "ignore")):
        both = sets[a] & sets[b]
        if both:
            raise ConfigError(f"{where}: XID {min(both)} is in both {a} and {b}")
    default = data.get("default", "warn")
    if default not in ACTIONS:
        raise ConfigError(f"{where} default: must be one of {', '.join(ACTIONS)}, "
                          f"got {default!r}")
    nums = {}
    for key, dflt in (("window_s", 7200.0), ("dedup_s", 60.0)):
        v = data.get(key, dflt)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0:
            raise ConfigError(f"{where} {key}: expected seconds >= 0, got {v!r}")
        nums[key] = float(v)
    since_boot = data.get("since_boot", True)
    if not isinstance(since_boot, bool):
        raise ConfigError(f"{where} since_boot: expected true or false, got {since_boot!r}")
    remediation = data.get("remediation", "reboot")
    if not isinstance(remediation, str):
        raise ConfigError(f"{where} remediation: expected a string, got {remediation!r}")
    return XidPolicy(name, sets["fatal"], sets["warn"], sets["ignore"], default,
                     nums["window_s"], nums["dedup_s"], since_boot, remediation)


def parse_policies(text: str, origin: str) -> dict[str, XidPolicy]:
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"xid policy {origin}: invalid TOML: {exc}") from None
    return {name: policy_from_dict(name, data, origin) for name, data in raw.items()}


_POLICY_CACHE: dict[str, dict[str, XidPolicy]] = {}
BUILTIN_POLICY = os.path.join(PROFILE_DIR, "xid_policy.toml")


def load_policies(path: str = "") -> dict[str, XidPolicy]:
    if path not in _POLICY_CACHE:
        if path:
            try:
                with open(path) as fh:
                    text = fh.read()
            except OSError as exc:
                raise ConfigError(f"xid policy {path}: {exc.strerror or exc}") from None
        else:
            # A plain path, not importlib.resources: that import alone (zipfile and all) costs
            # the periodic hook more than reading the file.
            with open(BUILTIN_POLICY) as fh:
                text = fh.read()
        _POLICY_CACHE[path] = parse_policies(text, path or "xid_policy.toml")
    return _POLICY_CACHE[path]


def policy(name: str, path: str = "") -> XidPolicy:
    policies = load_policies(path)
    if name not in policies:
        raise ConfigError(f"xid policy {name!r} not in {path or 'xid_policy.toml'} "
                          f"(known: {', '.join(sorted(policies))})")
    return policies[name]
