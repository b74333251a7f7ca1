"""Flapping links: each run counts the InfiniBand/RoCE (and EFA) ports' down-transitions and
fails a port that went down [flaps] max_downs times within [flaps] window, naming the HCA and
the port (`airlock: FAIL link_flap mlx5_0/1 3 downs in 12h`).

A down-transition is seen two ways, read under [system] sys_root:
* the port's `counters/link_downed` grew (the HCA counts each time the link failed to recover
  and went down; it catches a flap between two runs, which the state alone would miss);
* the port was ACTIVE at the last run and is not now (for ports without the counter, e.g. EFA).
The larger of the two counts, never their sum (one flap often shows in both).

The quick level runs every HealthCheckInterval (5 minutes by default), so a flap is counted,
not timed: gpud's rule ("down >= 25 s, 3 times in 12 h") needs a watcher; this is its
sampling equivalent, with the same defaults (3 in 12 h).

The memory is `<state_dir>/link_flaps.json`, per boot: a new boot starts from a fresh baseline
(the HCA's counters restart with the driver), so a reboot clears the count, and a port that
flaps on after it is counted again (the recovery service's escalation then counts that reboot
as one that did not clear `link_flap`). The first run of a boot only records a baseline: a
counter's value from before Airlock looked has no time to place it in the window. The file is
updated under a lock (the periodic hook and a prolog can run at once).
"""

from __future__ import annotations

import os
import time
from typing import Any, NamedTuple

from airlock.checks.base import Outcome, failed, inconclusive, passed, skipped

CHECK = "link_flap"
FILE = "link_flaps.json"
MAX_EVENTS = 64  # per port: enough for any threshold, bounded for a port gone mad


class PortSample(NamedTuple):
    name: str  # "mlx5_0/1"
    state: str  # "ACTIVE", "DOWN", "INIT", ...
    link_downed: int | None  # None: the port has no such counter
    link_layer: str = ""  # "InfiniBand", "Ethernet" (RoCE), "" unknown


# --- gather ----------------------------------------------------------------------------------
def read_ports(sys_root: str, devices: list[str] | tuple[str, ...] = ()) -> list[PortSample]:
    base = os.path.join(sys_root, "class", "infiniband")
    try:
        names = sorted(os.listdir(base))
    except OSError:
        return []
    out = []
    for dev in names:
        if devices and dev not in devices:
            continue
        pdir = os.path.join(base, dev, "ports")
        try:
            ports = sorted(os.listdir(pdir), key=lambda p: (len(p), p))
        except OSError:
            continue
        for port in ports:
            d = os.path.join(pdir, port)
            state = _read(os.path.join(d, "state")).split(":", 1)[-1].strip().upper()
            downed = _read(os.path.join(d, "counters", "link_downed")).strip()
            out.append(PortSample(f"{dev}/{port}", state or "UNKNOWN",
                                  int(downed) if downed.isdigit() else None,
                                  _read(os.path.join(d, "link_layer")).strip()))
    return out


def _read(path: str) -> str:
    try:
        with open(path) as fh:
            return fh.read(256)
    except OSError:
        return ""


# --- the memory (pure) -----------------------------------------------------------------------
def advance(memory: dict[str, Any], boot_id: str, ports: list[PortSample], now: float,
            window: float) -> dict[str, Any]:
    """The memory after this run's samples: per port the last sample and the times of the
    down-transitions still within the window. A memory of another boot is a fresh start."""
    if not isinstance(memory, dict) or memory.get("boot") != boot_id:
        memory = {}
    old = memory.get("ports") if isinstance(memory.get("ports"), dict) else {}
    out: dict[str, Any] = {}
    for p in ports:
        prev = old.get(p.name) if isinstance(old.get(p.name), dict) else None
        events = [t for t in (prev or {}).get("events", [])
                  if isinstance(t, (int, float)) and now - window < t <= now]
        if prev is not None:
            downs = 0
            before = prev.get("link_downed")
            if p.link_downed is not None and isinstance(before, int) and p.link_downed >= before:
                downs = p.link_downed - before
            if prev.get("state") == "ACTIVE" and p.state != "ACTIVE":
                downs = max(downs, 1)
            events += [now] * min(downs, MAX_EVENTS)
        out[p.name] = {"state": p.state, "link_downed": p.link_downed,
                       "events": events[-MAX_EVENTS:]}
    return {"boot": boot_id, "ports": out}


# --- verdict (pure) --------------------------------------------------------------------------
def verdict_flaps(memory: dict[str, Any], max_downs: int, window: float,
                  first_sample: bool) -> Outcome:
    ports = memory.get("ports", {})
    if not ports:
        return skipped(CHECK, "no RDMA ports")
    counts = {name: len(p["events"]) for name, p in ports.items()}
    figures: dict[str, Any] = {"downs": counts, "window_s": window, "max_downs": max_downs}
    flapping = sorted((n for n, c in counts.items() if c >= max_downs),
                      key=lambda n: (-counts[n], n))
    if flapping:
        name = flapping[0]
        more = f" (+{len(flapping) - 1} more ports)" if len(flapping) > 1 else ""
        return failed(CHECK, f"{name} {counts[name]} downs in {_span(window)}{more}",
                      flapping=flapping, **figures)
    if first_sample:
        return passed(CHECK, f"{len(ports)} ports: baseline for this boot", **figures)
    worst = max(counts.values())
    return passed(CHECK, f"{len(ports)} ports, at most {worst} downs in {_span(window)}",
                  **figures)


def _span(seconds: float) -> str:
    if seconds % 3600 == 0:
        return f"{seconds / 3600:g}h"
    if seconds % 60 == 0:
        return f"{seconds / 60:g}min"
    return f"{seconds:g}s"


# --- the check -------------------------------------------------------------------------------
def check_link_flap(ctx) -> Outcome:
    from airlock import paths  # the state file: only when there are ports to count
    from airlock.hw import boot

    s, sysc = ctx.cfg.flaps, ctx.cfg.system
    ports = read_ports(sysc.sys_root, s.devices or sysc.rdma_devices)
    if not ports:
        return skipped(CHECK, "no RDMA ports")
    folder = paths.node_dir(ctx.cfg.state_dir, ctx.node)
    now = time.time()
    problem = ""
    try:
        with _locked(folder):
            before = paths.read_json(folder / FILE) or {}
            boot_id = boot.current(ctx.node).boot_id
            first = not isinstance(before, dict) or before.get("boot") != boot_id
            memory = advance(before, boot_id, ports, now, s.window)
            try:
                paths.atomic_write(folder / FILE, memory)
            except OSError as exc:
                problem = f"cannot keep the count in {folder / FILE}: {exc.strerror or exc}"
    except OSError as exc:
        return inconclusive(CHECK, f"cannot lock {folder}: {exc.strerror or exc}")
    out = verdict_flaps(memory, s.max_downs, s.window, first)
    if problem and not out.failed:
        # a full or read-only state_dir is Airlock's trouble; a flap seen all the same stands
        return inconclusive(CHECK, problem, **out.figures)
    return out


class _locked:
    """An exclusive lock on <folder>/link_flaps.lock for the read-modify-write."""

    def __init__(self, folder) -> None:
        self.path = os.path.join(folder, FILE.replace(".json", ".lock"))
        self.fd = -1

    def __enter__(self) -> None:
        import fcntl

        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
        fcntl.flock(self.fd, fcntl.LOCK_EX)

    def __exit__(self, *exc: Any) -> None:
        os.close(self.fd)  # closing releases the lock
