"""`airlock render`: install files from the templates in airlock.templates (jinja2).

  airlock render slurm-conf   the slurm.conf fragment (HealthCheckProgram, Prolog, Epilog, ...)
  airlock render systemd      the recovery service's systemd unit (--serve: the console's)
  airlock render config       an example airlock.toml with every key and its default

slurm.conf.d/airlock.conf in the repository is `airlock render slurm-conf` with the defaults
below; a test fails when the two drift apart.
"""

from __future__ import annotations

import os
import shutil
import sys
from importlib import resources
from typing import Any

from airlock import config as config_mod
from airlock.config import DEFAULT_PATH
from airlock.errors import AirlockError
from airlock.paths import atomic_write_text
from airlock.settings import is_section, settings_of

DEFAULT_BIN_DIR = "/usr/local/bin"
SLURM_DEFAULTS: dict[str, Any] = {
    "bin_dir": DEFAULT_BIN_DIR,
    "interval": 300,
    "node_state": "ANY",
    "prolog_epilog_timeout": 60,
    "reboot_program": "",
    "config": DEFAULT_PATH,
}
NODE_STATES = ("ANY", "ALLOC", "MIXED", "IDLE", "CYCLE", "START_ONLY")


def toml_value(value: Any) -> str:
    """One TOML value on one line (the example config puts `key = value` under each comment).

    The quoting and escaping are tomli-w's (a kept library; the hand-written writer this
    replaces produced invalid TOML for non-ASCII text). tomli-w always breaks arrays over
    several lines, so arrays and inline tables are joined here from tomli-w's own items."""
    import tomli_w

    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        items = [f"{tomli_w.dumps({str(k): 0}).partition(' = ')[0]} = {toml_value(v)}"
                 for k, v in value.items()]
        return "{" + ", ".join(items) + "}"
    try:
        return tomli_w.dumps({"v": value}).partition(" = ")[2].rstrip("\n")
    except TypeError:
        raise AirlockError(f"cannot write {type(value).__name__} as TOML") from None


def template_text(name: str) -> str:
    try:
        return resources.files("airlock.templates").joinpath(name).read_text()
    except FileNotFoundError:
        raise AirlockError(f"template {name} is not installed with airlock") from None


def render_template(name: str, **values: Any) -> str:
    import jinja2

    env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True,
                             autoescape=False)
    try:
        return env.from_string(template_text(name)).render(**values)
    except jinja2.UndefinedError as exc:
        raise AirlockError(f"template {name}: {exc}") from None


NOHOLD = "nohold_on_prolog_fail"  # refused jobs are requeued, not held


def slurm_conf(bin_dir: str = DEFAULT_BIN_DIR, interval: int = 300, node_state: str = "ANY",
               prolog_epilog_timeout: int = 60, reboot_program: str = "",
               config: str = DEFAULT_PATH, healthcheck_program: str = "", prolog: str = "",
               epilog: str = "", scheduler_parameters: str = "") -> str:
    """The fragment; hooks default to the entry points airlock-healthcheck/-prolog/-epilog."""
    if node_state.upper() not in NODE_STATES:
        raise AirlockError(f"node state {node_state!r}: must be one of {', '.join(NODE_STATES)}")
    if interval < 0:
        raise AirlockError(f"interval {interval}: must be >= 0 (0 disables the periodic run)")
    if prolog_epilog_timeout <= 0:
        raise AirlockError("prolog-epilog-timeout: must be > 0 (Slurm waits forever otherwise)")
    paths = {
        "healthcheck_program": healthcheck_program or os.path.join(bin_dir, "airlock-healthcheck"),
        "prolog": prolog or os.path.join(bin_dir, "airlock-prolog"),
        "epilog": epilog or os.path.join(bin_dir, "airlock-epilog"),
    }
    for key, path in [*paths.items(), ("reboot_program", reboot_program), ("config", config)]:
        if path and (not os.path.isabs(path) or any(c.isspace() for c in path)):
            raise AirlockError(f"{key} {path!r}: must be an absolute path without spaces")
    params = [p.strip() for p in scheduler_parameters.split(",") if p.strip()]
    if any(c.isspace() or c == "#" for p in params for c in p):
        raise AirlockError(f"scheduler-parameters {scheduler_parameters!r}: a comma-separated "
                           "list without spaces")
    params = [p for p in params if p != NOHOLD] + [NOHOLD]
    return render_template("slurm-airlock.conf.j2", interval=interval,
                           node_state=node_state.upper(), scheduler_parameters=",".join(params),
                           prolog_epilog_timeout=prolog_epilog_timeout,
                           reboot_program=reboot_program, config=config, **paths)


def systemd_unit(airlock_bin: str = "", config: str = DEFAULT_PATH, **extra: Any) -> str:
    airlock_bin = airlock_bin or shutil.which("airlock") or os.path.join(DEFAULT_BIN_DIR,
                                                                         "airlock")
    # systemd splits Environment=/Documentation= on spaces and wants StateDirectory= relative
    # to /var/lib: refuse what it would silently misread.
    for key, path in (("airlock executable", airlock_bin), ("config", config),
                      ("state_dir", extra.get("state_dir") or "/var/lib/airlock")):
        if not os.path.isabs(path) or any(c.isspace() for c in path):
            raise AirlockError(f"{key} {path!r}: must be an absolute path without spaces")
    state_dir = extra.get("state_dir")
    if state_dir and not state_dir.startswith("/var/lib/"):
        raise AirlockError(f"state_dir {state_dir!r}: systemd's StateDirectory= lives under "
                           "/var/lib/")
    return render_template("airlock-recover.service.j2", airlock_bin=airlock_bin, config=config,
                           **extra)


def serve_unit(airlock_bin: str = "", config: str = DEFAULT_PATH, **extra: Any) -> str:
    """The airlock-serve.service unit (the console and API)."""
    airlock_bin = airlock_bin or shutil.which("airlock") or os.path.join(DEFAULT_BIN_DIR,
                                                                         "airlock")
    for key, path in (("airlock executable", airlock_bin), ("config", config)):
        if not os.path.isabs(path) or any(c.isspace() for c in path):
            raise AirlockError(f"{key} {path!r}: must be an absolute path without spaces")
    listen = extra.get("listen") or ""
    if listen:
        from airlock.settings.serve import parse_listen

        try:
            parse_listen(listen)
        except ValueError as exc:
            raise AirlockError(str(exc)) from None
    return render_template("airlock-serve.service.j2", airlock_bin=airlock_bin, config=config,
                           **extra)


def config_model() -> list[dict[str, Any]]:
    """Every config table with its keys, defaults and meanings (the fields' `doc` metadata),
    from the code itself."""


    def table(name: str, cls: type) -> list[dict[str, Any]]:
        keys, subtables = [], []
        for f in settings_of(cls):
            default = f.initial()
            if is_section(default):
                subtables += table(f"{name}.{f.name}", type(default))
                continue
            keys.append({"key": f.name, "value": toml_value(default), "comment": f.doc})
        return [{"name": name, "keys": keys, "doc": (cls.__doc__ or "").strip()
                 if not (cls.__doc__ or "").startswith(cls.__name__ + "(") else ""},
                *subtables]

    model = [{"name": "", "doc": "", "keys": [
        {"key": k, "value": toml_value(default), "comment": meaning}
        for k, (_t, default, meaning) in config_mod.TOP_LEVEL.items()]}]
    for name, spec in config_mod.SECTIONS.items():
        model += table(name, config_mod._resolve(spec))
    return model


def example_config() -> str:
    return render_template("airlock.toml.j2", tables=config_model(), default_path=DEFAULT_PATH)


def write_output(text: str, output: str | None) -> None:
    """text to stdout, or atomically to the file output names."""
    if not output or output == "-":
        sys.stdout.write(text)
        return
    from pathlib import Path


    try:
        atomic_write_text(Path(output), text)
    except OSError as exc:
        raise AirlockError(f"cannot write {output}: {exc.strerror or exc}") from None
