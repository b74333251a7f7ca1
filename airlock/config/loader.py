"""One TOML config file, validated on load.

The path comes from $AIRLOCK_CONFIG, else /etc/airlock/airlock.toml. Every key has a default, so a
minimal (even empty) file works, and so does no file at the default path (`airlock doctor` says
so); a file that $AIRLOCK_CONFIG names must exist. Errors name the file, the key and the problem.

Sections are plain classes (airlock.config.sections). load() validates
the file whole, every section it holds, before any check runs: a typo anywhere, even in a
section this process never reads, is a ConfigError (Airlock's own error, `airlock: FAIL config
...`), never the FAIL of the check whose section it is (a section validated when its check
first read it made one typo in [flaps] drain every proven node). `Config.problems()` lists
every mistake in the file for `airlock doctor` (load(whole=False)). SECTIONS names each
section's class as "module:Class" in those leaf modules, imported only when the file has that
section or a process reads it.

When the file cannot be loaded at all, `salvage()` still reads the few keys a hook needs to fail
closed (state_dir, log_dir, [slurm] conf and bin_dir), line by line if the TOML is broken.
"""

from __future__ import annotations

import importlib
import math
import os
import re
import tomllib
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airlock.config.sections import Setting, is_section, settings_of
from airlock.errors import ConfigError
from airlock.paths import atomic_write, read_json

if TYPE_CHECKING:  # the sections' modules load lazily (SECTIONS); these names are for typing
    from airlock.config.sections.checks import (
        AllreduceSection,
        BurninSection,
        DcgmSection,
        DriftSection,
        FlapsSection,
        LoopbackSection,
        MemtestSection,
        P2pSection,
        PcieBwSection,
        ProfileSection,
        SystemSection,
        XidSection,
    )
    from airlock.config.sections.ledger import LedgerSection
    from airlock.config.sections.node import (
        CheckDefaults,
        EpilogSection,
        HealthcheckSection,
        MetricsSection,
        NvmlSection,
        PrologSection,
        RegistrationSection,
        SlurmSection,
    )
    from airlock.config.sections.ondemand import OndemandSection
    from airlock.config.sections.preflight import PreflightSection
    from airlock.config.sections.recovery import RecoverySection
    from airlock.config.sections.serve import ServeSection

DEFAULT_PATH = "/etc/airlock/airlock.toml"
ENV_VAR = "AIRLOCK_CONFIG"
# Keys that older versions accepted: ignored with a warning rather than breaking a node's hooks.
RETIRED = {
    ("registration", "boot_tolerance"): "boot identity no longer uses the wall clock",
}


SECTIONS: dict[str, str] = {
    "slurm": "airlock.config.sections.node:SlurmSection",
    "registration": "airlock.config.sections.node:RegistrationSection",
    "healthcheck": "airlock.config.sections.node:HealthcheckSection",
    "nvml": "airlock.config.sections.node:NvmlSection",
    "profile": "airlock.config.sections.checks:ProfileSection",
    "system": "airlock.config.sections.checks:SystemSection",
    "xid": "airlock.config.sections.checks:XidSection",
    "checks": "airlock.config.sections.node:CheckDefaults",
    "ondemand": "airlock.config.sections.ondemand:OndemandSection",
    "burnin": "airlock.config.sections.checks:BurninSection",
    "memtest": "airlock.config.sections.checks:MemtestSection",
    "allreduce": "airlock.config.sections.checks:AllreduceSection",
    "dcgm": "airlock.config.sections.checks:DcgmSection",
    "flaps": "airlock.config.sections.checks:FlapsSection",
    "loopback": "airlock.config.sections.checks:LoopbackSection",
    "pcie_bw": "airlock.config.sections.checks:PcieBwSection",
    "p2p": "airlock.config.sections.checks:P2pSection",
    "drift": "airlock.config.sections.checks:DriftSection",
    "recovery": "airlock.config.sections.recovery:RecoverySection",
    "metrics": "airlock.config.sections.node:MetricsSection",
    "prolog": "airlock.config.sections.node:PrologSection",
    "epilog": "airlock.config.sections.node:EpilogSection",
    "serve": "airlock.config.sections.serve:ServeSection",
    "ledger": "airlock.config.sections.ledger:LedgerSection",
    "preflight": "airlock.config.sections.preflight:PreflightSection",
}

PATH_KEYS = ("state_dir", "log_dir", "shared_dir")
# The top-level keys: (type, default, meaning).
TOP_LEVEL: dict[str, tuple[type, Any, str]] = {
    "state_dir": (str, "/var/lib/airlock", "node-local results and hook state"),
    "shared_dir": (str, "", "optional shared results directory the controller can read"),
    "log_dir": (str, "/var/log/airlock", "hook and suite logs (healthcheck.log, prolog.log, "
                "epilog.log, registration-*.log); may hold {node}"),
}


class Config:
    """The loaded config: top-level keys as attributes, sections built on first access."""

    # Declared for editors and the type checker, so `cfg.burnin.floor_tflops` leads to its
    # definition; at run time __getattr__ builds a section on first access, importing only the
    # module that holds it (the hooks' pass path never imports the heavy checks' sections).
    state_dir: str
    shared_dir: str
    log_dir: str
    if TYPE_CHECKING:
        slurm: SlurmSection
        registration: RegistrationSection
        healthcheck: HealthcheckSection
        nvml: NvmlSection
        profile: ProfileSection
        system: SystemSection
        xid: XidSection
        checks: CheckDefaults
        ondemand: OndemandSection
        burnin: BurninSection
        memtest: MemtestSection
        allreduce: AllreduceSection
        dcgm: DcgmSection
        flaps: FlapsSection
        loopback: LoopbackSection
        pcie_bw: PcieBwSection
        p2p: P2pSection
        drift: DriftSection
        recovery: RecoverySection
        metrics: MetricsSection
        prolog: PrologSection
        epilog: EpilogSection
        serve: ServeSection
        ledger: LedgerSection
        preflight: PreflightSection

    def __init__(self, raw: dict[str, Any], path: str, exists: bool = True):
        self.path = path
        self.exists = exists  # False: no file at the default path, every default applies
        self.warnings: list[str] = []
        self._raw = dict(raw)
        self._sections: dict[str, Any] = {}
        for (section, key), why in RETIRED.items():
            table = self._raw.get(section)
            if isinstance(table, dict) and key in table:
                self._raw[section] = {k: v for k, v in table.items() if k != key}
                self.warnings.append(f"config {path}: [{section}] {key} is ignored ({why})")
        for key, (typ, default, _doc) in TOP_LEVEL.items():
            value = _coerce(raw.get(key, default), typ.__name__, None, key, path)
            if key in PATH_KEYS:
                _check_path(value, key, path, required=key != "shared_dir")
            setattr(self, key, value)
        for name in sorted(set(raw) - set(TOP_LEVEL) - set(SECTIONS)):
            # A misspelt key or section would silently leave its defaults in force.
            if not isinstance(raw[name], dict):
                raise ConfigError(f"config {path}: unknown key '{name}'")
            raise ConfigError(f"config {path}: unknown section [{name}]")

    def section(self, name: str) -> Any:
        if name not in self._sections:
            if name not in SECTIONS:
                raise ConfigError(f"config {self.path}: no section [{name}] is known")
            self._sections[name] = _build(_resolve(SECTIONS[name]), self._raw.get(name, {}),
                                          name, self.path)
        return self._sections[name]

    def problems(self) -> list[str]:
        """Every mistake in the file, one line each (sections this process never uses too)."""
        out = []
        for name in sorted(set(self._raw) & set(SECTIONS)):
            try:
                self.section(name)
            except ConfigError as exc:
                out.append(str(exc))
        return out

    def validate(self) -> None:
        """Raise the first mistake anywhere in the file (strict, for tests and tools)."""
        problems = self.problems()
        if problems:
            raise ConfigError(problems[0])

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_") or name not in SECTIONS:
            raise AttributeError(name)
        return self.section(name)

    @property
    def state_path(self) -> Path:
        return Path(self.state_dir)


def config_path(path: str | os.PathLike | None = None) -> tuple[str, bool]:
    """(the path to load, whether someone named it) from the argument, $AIRLOCK_CONFIG or the
    default location."""
    named = path or os.environ.get(ENV_VAR)
    return str(named or DEFAULT_PATH), bool(named)


def load(path: str | os.PathLike | None = None, whole: bool = True) -> Config:
    """The config, every section in the file validated (whole=False: only what is read,
    for a tool that lists every mistake itself)."""
    path, named = config_path(path)
    try:
        with open(path, "rb") as fh:
            raw = tomllib.load(fh)
    except FileNotFoundError:
        if not named:
            return Config({}, path, exists=False)
        raise ConfigError(f"config {path}: file not found") from None
    except PermissionError:
        raise ConfigError(f"config {path}: permission denied") from None
    except IsADirectoryError:
        raise ConfigError(f"config {path}: is a directory, not a file") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config {path}: invalid TOML: {exc}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"config {path}: not UTF-8 text") from None
    cfg = Config(raw, path)
    if whole:
        cfg.validate()
    return cfg


def from_dict(raw: dict[str, Any], path: str = "<dict>", strict: bool = True) -> Config:
    """A config from a dict (tests, tools): every section validated now unless strict=False."""
    cfg = Config(raw, path)
    if strict:
        cfg.validate()
    return cfg


# --- when the file cannot be loaded --------------------------------------------------------------
_LINE = re.compile(r'^\s*([A-Za-z_]+)\s*=\s*(?:"([^"\\]*)"|(true|false))\s*(?:#.*)?$')
_TABLE = re.compile(r"^\s*\[\s*([A-Za-z_.]+)\s*\]\s*(?:#.*)?$")
_DEFAULTS: dict[str, Any] = {"state_dir": "/var/lib/airlock", "log_dir": "/var/log/airlock",
                             "shared_dir": "", "slurm.conf": "", "slurm.bin_dir": "",
                             "registration.enabled": True}


# Where the last good essentials are kept ($AIRLOCK_RUNTIME_DIR, default /run/airlock).
RUNTIME_ENV = "AIRLOCK_RUNTIME_DIR"


def essentials(cfg: Config) -> dict[str, Any]:
    """What salvage() recovers, from a config that loaded."""
    out = {"state_dir": cfg.state_dir, "log_dir": cfg.log_dir, "shared_dir": cfg.shared_dir}
    for key in ("slurm.conf", "slurm.bin_dir", "registration.enabled"):
        table, _, name = key.partition(".")
        try:
            out[key] = getattr(cfg.section(table), name)
        except ConfigError:
            out[key] = _DEFAULTS[key]
    return out


def _memory(path: str) -> str:
    """One file per config path, named after it (no hashlib: loading OpenSSL for a file name
    would cost the periodic hook a quarter of its memory)."""
    folder = os.environ.get(RUNTIME_ENV) or "/run/airlock"
    name = re.sub(r"[^A-Za-z0-9._-]", "_", os.path.abspath(path).strip("/"))
    if len(name) > 200:
        import zlib  # rare: a path this long keeps its tail and a checksum of the whole

        name = f"{zlib.crc32(name.encode()):08x}-{name[-180:]}"
    return os.path.join(folder, f"config-{name}.json")


def remember(cfg: Config) -> None:
    """Keep this config's essentials where salvage() finds them if the file later goes missing
    or breaks (then the state_dir it names cannot be read from it). Written only when they
    changed; never raises (a hook calls it on its way)."""
    try:
        target = _memory(cfg.path)
        want = {"path": os.path.abspath(cfg.path), **essentials(cfg)}
        if read_json(Path(target)) != want:
            os.makedirs(os.path.dirname(target), mode=0o700, exist_ok=True)
            atomic_write(Path(target), want)
    except Exception:  # best effort: salvage() then falls back to reading the file
        pass


def _remembered(path: str) -> dict[str, Any] | None:
    data = read_json(Path(_memory(path)))
    if not isinstance(data, dict) or data.get("path") != os.path.abspath(path):
        return None
    out = dict(_DEFAULTS)
    for key, default in _DEFAULTS.items():
        if type(data.get(key)) is type(default):
            out[key] = data[key]
    return out


def salvage(path: str) -> dict[str, Any]:
    """The keys a hook needs when the config does not load: the last good values remember()
    kept for this path; else, read from the broken file, the parsed TOML when only a value is
    wrong, or simple `key = "value"` / `key = true` lines under the right table. Defaults fill
    what cannot be read; never raises."""
    known = _remembered(path)
    if known is not None:
        return known
    out: dict[str, Any] = dict(_DEFAULTS)
    try:
        with open(path, "rb") as fh:
            data = fh.read(1 << 20)
    except OSError:
        return out
    text = data.decode("utf-8", errors="replace")
    found: dict[str, Any] = {}
    try:
        raw = tomllib.loads(text)
        for key in out:
            table, _, name = key.rpartition(".")
            where = raw.get(table) if table else raw
            value = where.get(name) if isinstance(where, dict) else None
            if value is not None:
                found[key] = value
    except (tomllib.TOMLDecodeError, ValueError):
        table = ""
        for line in text.splitlines():
            m = _TABLE.match(line)
            if m:
                table = m.group(1)
                continue
            m = _LINE.match(line)
            key = f"{table}.{m.group(1)}".lstrip(".") if m else ""
            if key in out:
                value = m.group(2) if m.group(2) is not None else m.group(3) == "true"
                found[key] = value
    for key, value in found.items():
        if type(value) is not type(out[key]):
            continue
        if key in PATH_KEYS and not (value and os.path.isabs(value)):
            continue  # a path the real load would refuse: keep the default
        out[key] = value
    return out


def defaults(name: str) -> Any:
    """A section with every default, for code that runs without a config file."""
    return _resolve(SECTIONS[name])()


def _resolve(spec: str) -> type:
    module, _, cls = spec.partition(":")
    return getattr(importlib.import_module(module), cls)


def _build(cls: type, raw: Any, where: str, path: str) -> Any:
    if not isinstance(raw, dict):
        raise ConfigError(f"config {path}: [{where}] must be a table, got {type(raw).__name__}")
    known = {s.name: s for s in settings_of(cls)}
    unknown = set(raw) - set(known)
    if unknown:
        raise ConfigError(f"config {path}: [{where}] unknown key '{sorted(unknown)[0]}'")
    values = {k: _coerce(v, known[k].type, known[k], f"[{where}] {k}", path)
              for k, v in raw.items()}
    obj = cls(**values)
    validate = getattr(obj, "validate", None)
    if validate:
        try:
            validate()
        except ValueError as exc:
            raise ConfigError(f"config {path}: [{where}] {exc}") from None
    return obj


def _coerce(value: Any, kind: str, owner: Setting | None, key: str, path: str) -> Any:
    """value checked against a type as the annotation spells it: str, int, float, bool,
    list[T], dict[str, T], or the name of a nested section class."""
    kind = kind.strip()
    if kind.startswith("list[") and kind.endswith("]"):
        if not isinstance(value, list):
            raise _type_error(key, "a list", value, path)
        return [_coerce(v, kind[5:-1], owner, f"{key}[{i}]", path) for i, v in enumerate(value)]
    if kind.startswith("dict[") and kind.endswith("]"):
        if not isinstance(value, dict):
            raise _type_error(key, "a table", value, path)
        item = kind[5:-1].partition(",")[2]
        return {str(k): _coerce(v, item, owner, f"{key}.{k}", path) for k, v in value.items()}
    if kind == "bool":
        if not isinstance(value, bool):
            raise _type_error(key, "true or false", value, path)
        return value
    if kind == "int":
        if isinstance(value, bool) or not isinstance(value, int):
            raise _type_error(key, "an integer", value, path)
        return value
    if kind == "float":
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise _type_error(key, "a number", value, path)
        if not math.isfinite(value):
            raise ConfigError(f"config {path}: {key}: must be a finite number, got {value}")
        return float(value)
    if kind == "str":
        if not isinstance(value, str):
            raise _type_error(key, "a string", value, path)
        return value
    if kind == "Any":
        return value
    nested = owner.resolve(kind) if owner is not None else None
    if is_section(nested):
        return _build(nested, value, key, path)
    raise ConfigError(f"config {path}: {key}: unsupported type {kind}")


def _type_error(key: str, expected: str, value: Any, path: str) -> ConfigError:
    return ConfigError(f"config {path}: {key}: expected {expected}, got {value!r}")


def _check_path(value: str, key: str, path: str, required: bool) -> None:
    if not value and not required:
        return
    if not value:
        raise ConfigError(f"config {path}: {key}: must not be empty")
    if not os.path.isabs(value):
        raise ConfigError(f"config {path}: {key}: must be an absolute path, got {value!r}")





