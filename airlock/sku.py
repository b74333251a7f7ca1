"""SKU profiles, shipped as TOML data in airlock/profiles/ (one file per SKU).

A profile is picked by name from the config ([profile] name), else by the detected GPU model
(a profile's `models` are substrings of the NVML name) with the count breaking ties; a node with
no GPUs gets the `cpu` profile.

Fields: name, models (list of NVML name substrings), gpus (expected count), memory_mib (per GPU).
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from airlock.errors import ConfigError


@dataclass(frozen=True)
class Profile:
    name: str
    models: tuple[str, ...] = ()
    gpus: int = 0
    memory_mib: int = 0
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    def get(self, key: str, default: Any = None) -> Any:
        return self.extra.get(key, default)


_BASE_KEYS = {"name", "models", "gpus", "memory_mib"}


def _from_dict(data: dict[str, Any], origin: str) -> Profile:
    try:
        return Profile(
            name=str(data["name"]),
            models=tuple(data.get("models", ())),
            gpus=int(data.get("gpus", 0)),
            memory_mib=int(data.get("memory_mib", 0)),
            extra={k: v for k, v in data.items() if k not in _BASE_KEYS},
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise ConfigError(f"profile {origin}: invalid: {exc}") from None


def builtin() -> dict[str, Profile]:
    out = {}
    for entry in resources.files("airlock.profiles").iterdir():
        if entry.name.endswith(".toml"):
            p = _from_dict(tomllib.loads(entry.read_text()), entry.name)
            out[p.name] = p
    return out


def select(models: list[str], count: int, name: str = "") -> Profile:
    profiles = builtin()
    if name:
        if name not in profiles:
            raise ConfigError(f"unknown profile {name!r} (known: {', '.join(sorted(profiles))})")
        return profiles[name]
    if count == 0 or not models:
        return profiles["cpu"]
    model = models[0]
    matches = [p for p in profiles.values() if any(m in model for m in p.models)]
    if not matches:
        # An unknown SKU still gets its count checked against what is there now; its figures
        # are judged only by fixed floors the operator configures.
        return Profile(name=f"auto:{model}", models=(model,), gpus=count)
    matches.sort(key=lambda p: (p.gpus != count, p.name))
    return matches[0]
