"""Escalation policy as data: failure classes and their action ladders, from a TOML file.

The shipped policy (policy.toml beside this module) is the default; [recovery] policy names a
site's own file. Classification is pure: (check, detail) -> the first matching class.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

from airlock.checks.groupcheck import CHECK as GROUP_CHECK
from airlock.checks.registry import CHECKS
from airlock.errors import ConfigError
from airlock.slurm.reasons import OWN_ERRORS

ACTIONS = ("reboot", "replace")
# What can stand as <check> in "airlock: FAIL <check> ...": the registry's checks, the
# multi-node test, and a registration that never reached a verdict. A policy naming anything
# else classifies nothing (a typo, or a name from another tool's vocabulary): a config error,
# unless the policy lists it in other_checks.
AIRLOCK_CHECKS = frozenset({c.name for c in CHECKS} | {GROUP_CHECK, "registration"})
# The kinds a node's own run document gives its failed check (the check record's "finding"):
# "config" is a configuration finding (a setting on the node to fix, as DCGM classifies it).
KINDS = ("config",)


@dataclass(frozen=True)
class Escalation:
    """The memory's rule ([escalation] in the policy): after `reboots` reboots within `window`
    seconds that did not clear the same failing check on the same node or hardware, a new
    failure of that check skips the reboot rungs of its ladder."""
    reboots: int = 2
    window: float = 7 * 86400.0


@dataclass(frozen=True)
class FailureClass:
    name: str
    checks: tuple[str, ...]
    detail: re.Pattern | None
    ladder: tuple[str, ...]
    reboots_not_cleared: int | None = None  # this class's own limit; None = [escalation]
    kinds: tuple[str, ...] = ()  # only failures of these kinds (KINDS); () = any kind

    def matches(self, check: str, detail: str, kind: str = "") -> bool:
        if self.kinds and kind not in self.kinds:
            return False
        if "*" not in self.checks and check not in self.checks:
            return False
        return self.detail is None or bool(self.detail.search(detail))


@dataclass(frozen=True)
class Policy:
    classes: tuple[FailureClass, ...]
    source: str
    escalation: Escalation = Escalation()
    other_checks: tuple[str, ...] = ()  # subjects other tools write in Airlock's reason format

    def reboot_limit(self, cls: FailureClass) -> int:
        """Reboots that did not clear a check of this class before the next failure skips the
        reboot (0 = never skip)."""
        return self.escalation.reboots if cls.reboots_not_cleared is None \
            else cls.reboots_not_cleared

    def classify(self, check: str, detail: str, kind: str = "") -> FailureClass:
        for cls in self.classes:
            if cls.matches(check, detail, kind):
                return cls
        return self.classes[-1]  # validated: the last class matches everything

    def by_name(self, name: str) -> FailureClass | None:
        return next((c for c in self.classes if c.name == name), None)


def parse(text: str, source: str) -> Policy:
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"recovery policy {source}: invalid TOML: {exc}") from None
    unknown = set(raw) - {"version", "class", "escalation", "other_checks"}
    if unknown:
        raise ConfigError(f"recovery policy {source}: unknown key '{sorted(unknown)[0]}'")
    if raw.get("version", 1) != 1:
        raise ConfigError(f"recovery policy {source}: version {raw.get('version')!r} unsupported")
    escalation = _escalation(raw.get("escalation", {}), source)
    other = raw.get("other_checks", [])
    if not (isinstance(other, list) and all(isinstance(c, str) and c for c in other)):
        raise ConfigError(f"recovery policy {source}: other_checks must be a list of names")
    for name in other:
        if name in AIRLOCK_CHECKS or name in OWN_ERRORS:
            raise ConfigError(f"recovery policy {source}: other_checks: {name!r} is an Airlock "
                              "check, not another tool's")
    items = raw.get("class")
    if not isinstance(items, list) or not items:
        raise ConfigError(f"recovery policy {source}: needs at least one [[class]]")
    classes, seen = [], set()
    for i, item in enumerate(items):
        where = f"recovery policy {source}: class #{i + 1}"
        if not isinstance(item, dict):
            raise ConfigError(f"{where}: must be a table")
        bad = set(item) - {"name", "checks", "detail", "ladder", "reboots_not_cleared", "kinds"}
        if bad:
            raise ConfigError(f"{where}: unknown key '{sorted(bad)[0]}'")
        name = item.get("name")
        if not isinstance(name, str) or not name:
            raise ConfigError(f"{where}: name must be a non-empty string")
        if name in seen:
            raise ConfigError(f"{where}: duplicate name {name!r}")
        seen.add(name)
        checks = item.get("checks", ["*"])
        if not (isinstance(checks, list) and checks and all(isinstance(c, str) for c in checks)):
            raise ConfigError(f"{where} ({name}): checks must be a non-empty list of strings")
        for check in checks:
            if check in OWN_ERRORS:
                raise ConfigError(f"{where} ({name}): {check!r} is Airlock's own error: recovery "
                                  "never acts on it (an operator fixes it)")
            if check != "*" and check not in AIRLOCK_CHECKS and check not in other:
                raise ConfigError(f"{where} ({name}): unknown check {check!r} (not an Airlock "
                                  "check; list another tool's subjects in other_checks)")
        kinds = item.get("kinds", [])
        if not (isinstance(kinds, list) and all(isinstance(k, str) for k in kinds)):
            raise ConfigError(f"{where} ({name}): kinds must be a list of strings")
        for kind in kinds:
            if kind not in KINDS:
                raise ConfigError(f"{where} ({name}): unknown kind {kind!r} "
                                  f"(known: {', '.join(KINDS)})")
        detail = item.get("detail", "")
        if not isinstance(detail, str):
            raise ConfigError(f"{where} ({name}): detail must be a string (a regular expression)")
        try:
            pattern = re.compile(detail) if detail else None
        except re.error as exc:
            raise ConfigError(f"{where} ({name}): bad detail regex: {exc}") from None
        ladder = item.get("ladder")
        if not isinstance(ladder, list) or not all(a in ACTIONS for a in ladder):
            raise ConfigError(f"{where} ({name}): ladder must be a list of {', '.join(ACTIONS)}")
        if len(set(ladder)) != len(ladder):
            raise ConfigError(f"{where} ({name}): ladder repeats an action")
        limit = item.get("reboots_not_cleared")
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int)
                                  or limit < 0):
            raise ConfigError(f"{where} ({name}): reboots_not_cleared must be a whole number "
                              ">= 0 (0 = never skip the reboot)")
        classes.append(FailureClass(name, tuple(checks), pattern, tuple(ladder), limit,
                                    tuple(kinds)))
    last = classes[-1]
    if "*" not in last.checks or last.detail is not None or last.kinds:
        raise ConfigError(f"recovery policy {source}: the last class must match everything "
                          "(checks = [\"*\"], no detail, no kinds) so that every failure has a "
                          "ladder")
    return Policy(tuple(classes), source, escalation, tuple(other))


def _escalation(raw, source: str) -> Escalation:
    where = f"recovery policy {source}: [escalation]"
    if not isinstance(raw, dict):
        raise ConfigError(f"{where} must be a table")
    bad = set(raw) - {"reboots_not_cleared", "window"}
    if bad:
        raise ConfigError(f"{where}: unknown key '{sorted(bad)[0]}'")
    reboots = raw.get("reboots_not_cleared", Escalation.reboots)
    if isinstance(reboots, bool) or not isinstance(reboots, int) or reboots < 0:
        raise ConfigError(f"{where}: reboots_not_cleared must be a whole number >= 0 "
                          "(0 = never skip the reboot)")
    window = raw.get("window", Escalation.window)
    if isinstance(window, bool) or not isinstance(window, (int, float)) or not window > 0:
        raise ConfigError(f"{where}: window must be a number of seconds > 0")
    return Escalation(reboots, float(window))


@lru_cache(maxsize=8)
def load(path: str = "") -> Policy:
    if not path:
        text = resources.files("airlock.recovery").joinpath("policy.toml").read_text()
        return parse(text, "(shipped policy.toml)")
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except OSError as exc:
        raise ConfigError(f"recovery policy {path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"recovery policy {path}: not UTF-8 text") from None
    return parse(text, path)
