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

from airlock.errors import ConfigError

ACTIONS = ("reboot", "replace")


@dataclass(frozen=True)
class FailureClass:
    name: str
    checks: tuple[str, ...]
    detail: re.Pattern | None
    ladder: tuple[str, ...]

    def matches(self, check: str, detail: str) -> bool:
        if "*" not in self.checks and check not in self.checks:
            return False
        return self.detail is None or bool(self.detail.search(detail))


@dataclass(frozen=True)
class Policy:
    classes: tuple[FailureClass, ...]
    source: str

    def classify(self, check: str, detail: str) -> FailureClass:
        for cls in self.classes:
            if cls.matches(check, detail):
                return cls
        return self.classes[-1]  # validated: the last class matches everything

    def by_name(self, name: str) -> FailureClass | None:
        return next((c for c in self.classes if c.name == name), None)


def parse(text: str, source: str) -> Policy:
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"recovery policy {source}: invalid TOML: {exc}") from None
    unknown = set(raw) - {"version", "class"}
    if unknown:
        raise ConfigError(f"recovery policy {source}: unknown key '{sorted(unknown)[0]}'")
    if raw.get("version", 1) != 1:
        raise ConfigError(f"recovery policy {source}: version {raw.get('version')!r} unsupported")
    items = raw.get("class")
    if not isinstance(items, list) or not items:
        raise ConfigError(f"recovery policy {source}: needs at least one [[class]]")
    classes, seen = [], set()
    for i, item in enumerate(items):
        where = f"recovery policy {source}: class #{i + 1}"
        if not isinstance(item, dict):
            raise ConfigError(f"{where}: must be a table")
        bad = set(item) - {"name", "checks", "detail", "ladder"}
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
        classes.append(FailureClass(name, tuple(checks), pattern, tuple(ladder)))
    last = classes[-1]
    if "*" not in last.checks or last.detail is not None:
        raise ConfigError(f"recovery policy {source}: the last class must match everything "
                          "(checks = [\"*\"], no detail) so that every failure has a ladder")
    return Policy(tuple(classes), source)


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
