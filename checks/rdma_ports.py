"""The node's RDMA ports as sysfs lists them (<sys_root>/class/infiniband/<dev>/ports/<n>): read
by the `rdma` check (checks/system.py) and by the loopback test (checks/loopback.py)."""

from __future__ import annotations

import os
from typing import NamedTuple


class RdmaPort(NamedTuple):
    device: str
    port: str
    state: str  # "ACTIVE", "DOWN", "INIT", ...
    rate_gbps: float  # 0 when unreadable

    @property
    def name(self) -> str:
        return f"{self.device}/{self.port}"


def parse_state(text: str) -> str:
    """'4: ACTIVE' -> 'ACTIVE'."""
    return text.strip().split(":", 1)[-1].strip().upper()


def parse_rate(text: str) -> float:
    """'400 Gb/sec (4X NDR)' -> 400.0; '' or junk -> 0."""
    try:
        return float(text.strip().split()[0])
    except (IndexError, ValueError):
        return 0.0


def read_rdma_ports(sys_root: str, devices: list[str] | None = None) -> list[RdmaPort]:
    base = os.path.join(sys_root, "class", "infiniband")
    try:
        names = sorted(os.listdir(base))
    except OSError:
        return []
    ports = []
    for dev in names:
        if devices and dev not in devices:
            continue
        pdir = os.path.join(base, dev, "ports")
        try:
            port_names = sorted(os.listdir(pdir), key=lambda p: (len(p), p))
        except OSError:
            continue
        for port in port_names:
            ports.append(RdmaPort(dev, port, parse_state(_read(os.path.join(pdir, port, "state"))),
                                  parse_rate(_read(os.path.join(pdir, port, "rate")))))
    return ports


def _read(path: str) -> str:
    try:
        with open(path) as fh:
            return fh.read()
    except OSError:
        return ""
