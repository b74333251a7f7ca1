"""`airlock render`: install files from the templates in airlock.templates (jinja2).

  airlock render slurm-conf   the slurm.conf fragment (HealthCheckProgram, Prolog, Epilog, ...)
                              for the Slurm release it finds (or --slurm-version): what each
                              release offers the gate is in healthcheck_settings()
  airlock render systemd      the recovery service's systemd unit (--serve: the console's)
  airlock render config       an example airlock.toml with every key and its default

slurm.conf.d/ in the repository holds `airlock render slurm-conf --slurm-version V` with the
defaults below for each release in COMMITTED; a test fails when they drift apart.
"""

from __future__ import annotations

import math
import os
import shutil
import sys
from importlib import resources
from typing import Any

from airlock.config import loader as config_mod
from airlock.config.loader import DEFAULT_PATH
from airlock.config.sections import is_section, settings_of
from airlock.errors import AirlockError
from airlock.paths import atomic_write_text
from airlock.slurm import client as slurm_mod

DEFAULT_BIN_DIR = "/usr/local/bin"
SLURM_DEFAULTS: dict[str, Any] = {
    "bin_dir": DEFAULT_BIN_DIR,
    "interval": 300,
    "node_state": "",
    "prolog_epilog_timeout": 60,
    "reboot_program": "",
    "config": DEFAULT_PATH,
}
NODE_STATES = ("ANY", "ALLOC", "MIXED", "IDLE", "CYCLE", "START_ONLY", "REBOOT_ONLY")
# The releases the committed fragments are rendered for (slurm.conf.d/): the fragment of
# 22.05-25.05 (no HealthCheckTimeout, no START_ONLY) and the newest's. A test keeps them current.
COMMITTED = {"airlock.conf": "22.05", "airlock-26.05.conf": "26.05"}
# With HealthCheckTimeout (26.05+), how long at most the HealthCheckProgram may run: the
# boot-time run holds the node's registration while it waits for slurmctld to take its drain
# (measured: slurmd registers only once the program ends), so it is as long as Slurm allows
# below HealthCheckInterval, and never above this (or with no interval, START_ONLY).
BOOT_HOLD_MAX_S = 600


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


def healthcheck_settings(version: tuple[int, int], interval: int = 300,
                         node_state: str = "") -> dict[str, str]:
    """HealthCheckInterval, HealthCheckNodeState and (26.05+) HealthCheckTimeout: the best
    settings of this release for the interval, or a one-line error for what cannot work.

    Measured on the real daemons of 22.05, 24.11 and 26.05 (docs/guide.md, Supported Slurm):
    HealthCheckInterval=0 switches the program off on every release, even at slurmd start,
    unless HealthCheckNodeState=START_ONLY (25.11+), which runs it at slurmd start only (no
    periodic run, whatever the interval). REBOOT_ONLY (26.05) runs it only after `scontrol
    reboot`, and after the node has registered: a new node or an unplanned reboot is never
    isolated, and a rebooted one is schedulable before the program runs. So: ANY (or the
    site's choice) with an interval; START_ONLY without one; never REBOOT_ONLY.
    """
    state = (node_state or "").upper()
    if interval < 0:
        raise AirlockError(f"interval {interval}: must be >= 0 (0: only at slurmd start, "
                           "Slurm 25.11+)")
    if state and state not in NODE_STATES:
        raise AirlockError(f"node state {node_state!r}: must be one of {', '.join(NODE_STATES)}")
    name = slurm_mod.release(version)
    if state == "REBOOT_ONLY":
        raise AirlockError("node state REBOOT_ONLY: Slurm then runs the HealthCheckProgram only "
                           "after `scontrol reboot`, once the node is already in service; new "
                           "nodes and unplanned reboots are never isolated")
    if interval == 0:
        if not slurm_mod.has(version, "HealthCheckNodeState=START_ONLY"):
            raise AirlockError(f"interval 0: Slurm {name} then never runs the "
                               "HealthCheckProgram, not even at slurmd start (START_ONLY, which "
                               "runs it there only, is 25.11+); use an interval")
        if state not in ("", "START_ONLY"):
            raise AirlockError(f"interval 0 with node state {state}: Slurm never runs the "
                               "HealthCheckProgram; use START_ONLY (the default for interval 0)")
        state = "START_ONLY"
    elif state == "START_ONLY":
        raise AirlockError(f"node state START_ONLY with interval {interval}: START_ONLY runs it "
                           "at slurmd start only, never every interval; use --interval 0")
    out = {"HealthCheckInterval": str(interval), "HealthCheckNodeState": state or "ANY"}
    if slurm_mod.has(version, "HealthCheckTimeout"):
        if interval == 1:
            raise AirlockError(f"interval 1: Slurm {name} needs HealthCheckTimeout below "
                               "HealthCheckInterval and at least 1; use an interval of 2 or more")
        out["HealthCheckTimeout"] = str(min(interval - 1, BOOT_HOLD_MAX_S) if interval
                                        else BOOT_HOLD_MAX_S)
    return out


def slurm_conf(slurm_version: str, bin_dir: str = DEFAULT_BIN_DIR, interval: int = 300,
               node_state: str = "", prolog_epilog_timeout: int = 60, reboot_program: str = "",
               config: str = DEFAULT_PATH, healthcheck_program: str = "", prolog: str = "",
               epilog: str = "", scheduler_parameters: str = "",
               preflight: tuple[float, float] | None = None) -> str:
    """The fragment for a Slurm release ("26.05"); hooks default to the entry points
    airlock-healthcheck/-prolog/-epilog. preflight: ([prolog] budget, [preflight] budget) when
    [preflight] is enabled: PrologFlags=Alloc, and a PrologEpilogTimeout no shorter than both
    budgets and the preflight's spare seconds (airlock.preflight.doctor checks the same)."""
    try:
        version = slurm_mod.parse_version(slurm_version)
    except AirlockError:
        raise AirlockError(f"slurm version {slurm_version!r}: give it as 22.05, 24.11, "
                           "26.05, ...") from None
    health = healthcheck_settings(version, interval, node_state)
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
    extra: dict[str, Any] = {"preflight": False}
    if preflight is not None:
        from airlock.preflight import doctor as preflight_doctor  # only with [preflight] on

        need = math.ceil(sum(preflight) + preflight_doctor.SPARE_S)
        prolog_epilog_timeout = max(prolog_epilog_timeout, need)
        extra = {"preflight": True, "preflight_need": need,
                 "qos_in_prolog": version >= preflight_doctor.QOS_IN_PROLOG}
    return render_template("slurm-airlock.conf.j2", release=slurm_mod.release(version),
                           **extra,
                           interval=interval, node_state=health["HealthCheckNodeState"],
                           timeout=health.get("HealthCheckTimeout", ""),
                           scheduler_parameters=",".join(params),
                           prolog_epilog_timeout=prolog_epilog_timeout,
                           reboot_program=reboot_program, config=config, **paths)


def running_release(slurm: slurm_mod.Slurm | None = None) -> str:
    """The release of the Slurm this host runs ("26.05"), asked of it; a one-line error when
    there is none to ask."""
    try:
        return slurm_mod.release((slurm or slurm_mod.Slurm(timeout=10)).version())
    except AirlockError as exc:
        raise AirlockError(f"cannot tell the Slurm release here ({exc}): pass "
                           "--slurm-version") from None


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
        from airlock.config.sections.serve import parse_listen

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
