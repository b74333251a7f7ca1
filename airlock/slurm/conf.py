"""The few slurm.conf settings a hook reads from the file itself: the time Slurm gives it.

slurmd kills its HealthCheckProgram after HealthCheckTimeout seconds (26.05; unset, and on every
older release, 60). A hook must spend its Slurm calls within that time (a boot-time hook that
is killed while scontrol waits for an absent controller leaves nothing behind), and it must know
the time without asking the controller, which may be what is missing. So it reads slurm.conf
the way Slurm's own clients find it: the path Airlock is told ([slurm] conf), $SLURM_CONF,
/etc/slurm/slurm.conf, then configless slurmd's cache /run/slurm/conf/slurm.conf; `Include`
lines are followed (relative to the file's directory, as Slurm does), keys compare without case,
the last definition wins (Slurm: "specified more than once, latest value used").

A leaf: it imports nothing of Airlock's, and only os, so the hooks' pass path can afford it.
"""

from __future__ import annotations

import os

DEFAULT_PATHS = ("/etc/slurm/slurm.conf", "/run/slurm/conf/slurm.conf")
HEALTH_CHECK_TIMEOUT_S = 60.0  # Slurm's default, and the fixed limit before 26.05
PROLOG_EPILOG_UNLIMITED = 65534  # Slurm's INFINITE16 - 1: PrologEpilogTimeout unset
# Of the time Slurm gives a hook, what its Slurm calls leave for the rest (its log line, its
# records, its exit; Slurm's clock starts when slurmd forks the hook), and what the periodic
# quick level leaves for a failure's drain.
SPARE_S = 0.5
DRAIN_RESERVE_S = 1.0
MAX_INCLUDE_DEPTH = 8
MAX_BYTES = 16 << 20  # a slurm.conf is kilobytes to a few MB; never read an unbounded file


def find(conf: str = "") -> str:
    """The slurm.conf slurmd reads here, or "" when none is found."""
    for path in (conf, os.environ.get("SLURM_CONF", ""), *DEFAULT_PATHS):
        if path and os.path.isfile(path):
            return path
    return ""


def settings(path: str, keys: tuple[str, ...]) -> dict[str, str]:
    """{key (lower case): value} for the keys found in path and the files it includes; keys
    not set are absent. An unreadable file (or include) contributes nothing."""
    wanted = {k.lower() for k in keys}
    found: dict[str, str] = {}
    _scan(path, wanted, found, 0)
    return found


def _scan(path: str, wanted: set[str], found: dict[str, str], depth: int) -> None:
    if depth > MAX_INCLUDE_DEPTH:
        return
    try:
        with open(path, "rb") as fh:
            text = fh.read(MAX_BYTES).decode("utf-8", "replace")
    except OSError:
        return
    here = os.path.dirname(path)
    for raw in text.split("\n"):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        head = line.split(None, 1)
        if head[0].lower() == "include" and len(head) == 2:
            target = head[1].split()[0]
            if "%" not in target:  # %c (the cluster's name) is the controller's business
                _scan(os.path.join(here, target), wanted, found, depth + 1)
            continue
        # "Key=value", possibly several on one line ("NodeName=x CPUs=1"): only a line that
        # starts with a wanted key counts, as Slurm reads global keys one per line.
        key, sep, value = line.partition("=")
        key = key.strip().lower()
        if sep and key in wanted:
            found[key] = value.strip().split()[0] if value.strip() else ""


def health_check_timeout(conf: str = "") -> float:
    """Seconds slurmd lets this HealthCheckProgram run: HealthCheckTimeout, else 60 (Slurm's
    default, and the fixed limit before 26.05, where the key does not exist). A value Slurm
    would reset (0, not a number) is the default too."""
    path = find(conf)
    raw = settings(path, ("HealthCheckTimeout",)).get("healthchecktimeout", "") if path else ""
    try:
        value = float(int(raw))
    except ValueError:
        return HEALTH_CHECK_TIMEOUT_S
    return value if 0 < value <= 65535 else HEALTH_CHECK_TIMEOUT_S


def hook_timeout(hook: str, conf: str = "") -> float | None:
    """Seconds Slurm lets a hook run: the HealthCheckProgram health_check_timeout(), the prolog
    and the epilog PrologEpilogTimeout (None when unset or unlimited: Slurm waits forever)."""
    if hook == "healthcheck":
        return health_check_timeout(conf)
    path = find(conf)
    raw = settings(path, ("PrologEpilogTimeout",)).get("prologepilogtimeout", "") if path else ""
    try:
        value = int(raw)
    except ValueError:
        return None
    return float(value) if 0 < value < PROLOG_EPILOG_UNLIMITED else None
