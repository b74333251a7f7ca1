"""The config's sections, as plain dataclasses that import nothing above them.

Each key is a dataclass field made with setting(), whose `doc` is the key's meaning: the one text
behind `airlock render config` and docs/config.md (a test keeps the page equal to it). Each
section validates itself in validate(); airlock.config builds a section the first time it is
used, so a process never pays for, or breaks on, a section it does not read.

  node      what every node's hooks read: [slurm] [registration] [healthcheck] [nvml] [checks]
            [prolog] [epilog] [metrics]
  checks    the checks' own: [burnin] [memtest] [allreduce] [system] [xid] [profile]
  ondemand  [ondemand] (airlock check --nodes/--partition/--feature)
  [recovery] lives in airlock/recovery/settings.py, a leaf of the same kind.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

LEVELS = ("quick", "standard", "deep")


def setting(default: Any = dataclasses.MISSING, doc: str = "", *,
            factory: Callable[[], Any] | None = None) -> Any:
    """A section field with its meaning attached (factory= for a mutable default)."""
    if factory is not None:
        return dataclasses.field(default_factory=factory, metadata={"doc": doc})
    return dataclasses.field(default=default, metadata={"doc": doc})


def doc(field: dataclasses.Field) -> str:
    return str(field.metadata.get("doc", ""))


def positive(value: float, name: str) -> None:
    if not value > 0:
        raise ValueError(f"{name}: must be > 0, got {value}")


def choice(value: str, choices: tuple[str, ...], name: str) -> None:
    if value not in choices:
        raise ValueError(f"{name}: must be one of {', '.join(choices)}, got {value!r}")


def in_range(value: float, name: str, low: float, high: float) -> None:
    if not low <= value <= high:
        raise ValueError(f"{name}: must be between {low:g} and {high:g}, got {value}")
