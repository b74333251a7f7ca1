"""The config's sections, as plain Section classes that import nothing above them.

Each key is a class attribute made with setting(), whose `doc` is the key's meaning: the one text
behind `airlock render config` and docs/config.md (a test keeps the page equal to it). Each
section validates itself in validate(); airlock.config.loader.load() builds and validates every
section the file holds before any check runs (a typo anywhere is a config error, never a check's
FAIL), and builds an absent one, from its defaults, when it is first used.

  node      what every node's hooks read: [slurm] [registration] [healthcheck] [nvml] [checks]
            [prolog] [epilog] [metrics]
  checks    the checks' own: [burnin] [memtest] [allreduce] [system] [xid] [profile]
  ondemand  [ondemand] (airlock check --nodes/--partition/--feature)
  serve     [serve] (airlock serve: the console and API)
  recovery  [recovery] and its provider sub-tables (airlock/recovery/ reads them)
  ledger, preflight  [ledger], [preflight]
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

LEVELS = ("quick", "standard", "deep")
_MISSING = object()


class Setting:
    """One key of a section: its default (or a factory for a mutable one), its meaning, and its
    type as written in the class's annotation ("float", "list[str]", "HttpSettings", ...)."""

    __slots__ = ("name", "default", "factory", "doc", "type", "owner")

    def __init__(self, default: Any, factory: Callable[[], Any] | None, doc: str):
        self.default, self.factory, self.doc = default, factory, doc
        self.name = self.type = ""
        self.owner: type | None = None

    def initial(self) -> Any:
        return self.factory() if self.factory is not None else self.default

    def resolve(self, name: str) -> Any:
        """A class named in an annotation, from the module that declared the section."""
        return vars(sys.modules[self.owner.__module__])[name]


def setting(default: Any = _MISSING, doc: str = "", *,
            factory: Callable[[], Any] | None = None) -> Any:
    """A section key with its meaning attached (factory= for a mutable default)."""
    if factory is None and default is _MISSING:
        raise TypeError("a setting needs a default or a factory")
    return Setting(default, factory, doc)


class Section:
    """The base of every config section: each key is a class attribute made with setting() and
    typed by its annotation; an instance holds the values. Deliberately not a dataclass: the
    HealthCheckProgram builds sections on every run, and importing dataclasses (and inspect
    with it) would cost the hook more than its checks."""

    _settings: dict[str, Setting] = {}

    def __init_subclass__(cls, **kw: Any) -> None:
        super().__init_subclass__(**kw)
        found = dict(getattr(cls, "_settings", {}))
        for name, kind in cls.__dict__.get("__annotations__", {}).items():
            value = cls.__dict__.get(name)
            if isinstance(value, Setting):
                value.name, value.type, value.owner = name, str(kind), cls
                found[name] = value
        cls._settings = found

    def __init__(self, **values: Any):
        unknown = sorted(set(values) - set(self._settings))
        if unknown:
            raise TypeError(f"{type(self).__name__}: unknown key {unknown[0]!r}")
        for name, s in self._settings.items():
            setattr(self, name, values[name] if name in values else s.initial())
        post = getattr(self, "__post_init__", None)
        if post is not None:
            post()

    def __repr__(self) -> str:
        inner = ", ".join(f"{n}={getattr(self, n)!r}" for n in self._settings)
        return f"{type(self).__name__}({inner})"

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and all(
            getattr(self, n) == getattr(other, n) for n in self._settings)

    __hash__ = None  # mutable, like a dataclass


def settings_of(cls_or_obj: Any) -> list[Setting]:
    """The keys of a section class (or instance), in declaration order."""
    return list(cls_or_obj._settings.values())


def is_section(obj: Any) -> bool:
    return isinstance(obj, Section) or (isinstance(obj, type) and issubclass(obj, Section))


def doc(s: Setting) -> str:
    return s.doc


def positive(value: float, name: str) -> None:
    if not value > 0:
        raise ValueError(f"{name}: must be > 0, got {value}")


def choice(value: str, choices: tuple[str, ...], name: str) -> None:
    if value not in choices:
        raise ValueError(f"{name}: must be one of {', '.join(choices)}, got {value!r}")


def in_range(value: float, name: str, low: float, high: float) -> None:
    if not low <= value <= high:
        raise ValueError(f"{name}: must be between {low:g} and {high:g}, got {value}")


def is_loopback(host: str) -> bool:
    """localhost (any case) or a loopback IP address; a name is never resolved."""
    import ipaddress  # the hooks import this module: only listen and URL checks need it

    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
