"""Network loopback, per RDMA port: a bandwidth test whose server and client run on this node
against the same HCA (HyperPod's EFA loopback, and the same for InfiniBand and RoCE), against the
SKU profile's floor.

* InfiniBand and RoCE: perftest's `ib_write_bw` (or `ib_read_bw`, [loopback] perftest), the
  way perftest's own run_perftest_loopback and Azure's aznhc run it: a server on the device and
  a client to localhost, one TCP port each, `--report_gbits`.
* EFA (the device's driver is `efa`): fabtests' `fi_rma_bw -p efa -e rdm -o write` with
  out-of-band address exchange (-E), the client to localhost.
* No tool for a device, or no RDMA port: skipped, saying which tool is missing where; but
  RDMA ports that are all down FAIL on a profile with a loopback floor (no_active_port).

The floor is the profile's `loopback_min_fraction` of the port's own rate (sysfs `rate`, e.g.
"400 Gb/sec (4X NDR)"), so one profile fits an 8x400G InfiniBand node and a 32x100G EFA node,
and/or its absolute `loopback_floor_gbps`. Only a measured bandwidth below the floor FAILs,
naming the HCA and port; a tool that hangs (killed at [loopback] timeout) or ends without a
result is inconclusive (the tool's or the host's trouble, not proven to be the port's).

Each port runs on its own (one after another), so ports do not share the host's PCIe and memory
bandwidth while one is measured.
"""

from __future__ import annotations

import os
import re
import time
from typing import Any, NamedTuple

from airlock.checks.base import Outcome, failed, inconclusive, passed, skipped
from airlock.checks.rdma_ports import read_rdma_ports

CHECK = "loopback"
SEARCH_PATH = "/usr/bin:/usr/local/bin:/opt/amazon/efa/bin:/usr/sbin"


class Port(NamedTuple):
    device: str
    port: str
    rate_gbps: float
    efa: bool

    @property
    def name(self) -> str:
        return f"{self.device}/{self.port}"


class Measured(NamedTuple):
    port: Port
    gbps: float | None  # None: no result (see problem)
    problem: str = ""
    tool: str = ""


# --- parsing the tools' tables (pure) --------------------------------------------------------
_UNITS = {"gb/sec": 1.0, "mb/sec": 8e-3, "mib/sec": 8 * 1.048576e-3}


def parse_bandwidth(text: str) -> float | None:
    """Gb/s at the largest message size of a perftest (`#bytes ... BW average[Gb/sec] ...`) or
    fabtests (`bytes iters total time MB/sec ...`) result table; None when there is none.
    Lines that are not rows (a CPU frequency warning inside the table) are skipped."""
    lines = text.splitlines()
    best: tuple[int, float] | None = None
    for i, line in enumerate(lines):
        head = line.replace("#", " ").split()
        col, unit = _bandwidth_column(head)
        if col is None:
            continue
        for row in lines[i + 1:]:
            cells = row.split()
            if not cells or set(row.strip()) <= {"-"}:
                if cells:
                    break  # the table's closing rule
                continue
            size = _size(cells[0])
            if size is None or len(cells) <= col:
                continue
            value = _number(cells[col])
            if value is not None and (best is None or size >= best[0]):
                best = (size, value * unit)
    return None if best is None else round(best[1], 3)


def _bandwidth_column(words: list[str]) -> tuple[int | None, float]:
    """(the data column of the average bandwidth, its unit in Gb/s) from a header's words."""
    if not words or words[0] != "bytes":
        return None, 0.0
    head: list[str] = []
    for word in words:  # perftest's "BW peak[..]" and "BW average[..]" are one column each
        if head and head[-1] == "BW":
            head[-1] = f"BW {word}"
        else:
            head.append(word)
    for idx, col in enumerate(head):
        low = col.lower()
        if low.startswith("bw average[") and low.endswith("]"):
            unit = _UNITS.get(low[len("bw average["):-1])
            if unit:
                return idx, unit
    for idx, col in enumerate(head):  # fabtests: "MB/sec"
        if col.lower() in _UNITS:
            return idx, _UNITS[col.lower()]
    return None, 0.0


def _size(text: str) -> int | None:
    m = re.fullmatch(r"(\d+)([kmg]?)", text.lower())
    if not m:
        return None
    return int(m.group(1)) * {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}[m.group(2)]


def _number(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if value >= 0 else None


# --- verdict (pure) --------------------------------------------------------------------------
def floor_for(port: Port, min_fraction: float, floor_gbps: float) -> float:
    return max(min_fraction * port.rate_gbps, floor_gbps)


def verdict_loopback(measured: list[Measured], min_fraction: float,
                     floor_gbps: float) -> Outcome:
    figures: dict[str, Any] = {
        "gbps": {m.port.name: m.gbps for m in measured if m.gbps is not None},
        "floor_gbps": {m.port.name: round(floor_for(m.port, min_fraction, floor_gbps), 1)
                       for m in measured},
        "rate_gbps": {m.port.name: m.port.rate_gbps for m in measured}}
    slow = [m for m in measured if m.gbps is not None
            and m.gbps < floor_for(m.port, min_fraction, floor_gbps)]
    if slow:
        m = min(slow, key=lambda x: x.gbps / max(floor_for(x.port, min_fraction, floor_gbps),
                                                 1e-9))
        floor = floor_for(m.port, min_fraction, floor_gbps)
        of = (f" ({min_fraction:g} of {m.port.rate_gbps:g} Gb/s)"
              if min_fraction * m.port.rate_gbps >= floor_gbps else "")
        more = f" (+{len(slow) - 1} more ports)" if len(slow) > 1 else ""
        return failed(CHECK, f"{m.port.name} {m.gbps:g} Gb/s < {floor:g}{of}{more}", **figures)
    unseen = [m for m in measured if m.gbps is None]
    if unseen:
        m = unseen[0]
        more = f" (+{len(unseen) - 1} more ports)" if len(unseen) > 1 else ""
        return inconclusive(CHECK, f"{m.port.name}: {m.problem}{more}", **figures)
    if not min_fraction and not floor_gbps:
        low = min(measured, key=lambda x: x.gbps or 0.0)
        return passed(CHECK, f"{len(measured)} ports, lowest {low.port.name} {low.gbps:g} Gb/s "
                             "(no floor in the profile)", **figures)
    low = min(measured, key=lambda x: x.gbps or 0.0)
    return passed(CHECK, f"{len(measured)} ports at or above their floor, lowest "
                         f"{low.port.name} {low.gbps:g} Gb/s", **figures)


# --- gather ----------------------------------------------------------------------------------
def ports_of(sys_root: str, devices: list[str] | tuple[str, ...] = ()) -> list[Port]:
    out = []
    for p in read_rdma_ports(sys_root, list(devices) or None):
        if p.state != "ACTIVE":
            continue  # a port that is down is the rdma check's finding
        driver = os.path.join(sys_root, "class", "infiniband", p.device, "device", "driver")
        try:
            efa = os.path.basename(os.readlink(driver)) == "efa"
        except OSError:
            efa = p.device.startswith(("efa", "rdmap"))
        out.append(Port(p.device, p.port, p.rate_gbps, efa))
    return out


def find_tool(name: str) -> str | None:
    import shutil

    if os.path.isabs(name):
        return name if os.access(name, os.X_OK) else None
    return shutil.which(name, path=os.pathsep.join(
        p for p in (os.environ.get("PATH", ""), SEARCH_PATH) if p))


def commands(s, port: Port, tool: str, tcp_port: int) -> tuple[list[str], list[str]]:
    """(server argv, client argv) for one port."""
    if port.efa:
        common = [tool, "-p", "efa", "-e", "rdm", "-o", "write", "-d", f"{port.device}-rdm",
                  "-S", str(s.size), "-I", str(s.iterations), f"-E={tcp_port}"]
        return common, [*common, "localhost"]
    common = [tool, "-d", port.device, "-i", port.port, "-p", str(tcp_port), "-s", str(s.size),
              "-D", f"{s.duration:g}", "-F", "--report_gbits"]
    return common, [*common, "localhost"]


def measure(s, port: Port, tool: str, tcp_port: int) -> Measured:
    """Server, then the client to localhost; both killed at the timeout (airlock.proc)."""
    import subprocess

    from airlock import proc as proc_mod

    server_argv, client_argv = commands(s, port, tool, tcp_port)
    name = os.path.basename(tool)

    def spawn(argv):
        return proc_mod.spawn(argv, merge_stderr=True)

    server = spawn(server_argv)
    client = None
    try:
        time.sleep(s.server_start)  # perftest's own loopback script waits a second
        client = spawn(client_argv)
        try:
            out, _ = client.communicate(timeout=s.timeout)
        except subprocess.TimeoutExpired:
            return Measured(port, None, f"{name} gave no result within {s.timeout:g}s "
                                        "(killed)", name)
        try:
            server_out, _ = server.communicate(timeout=5)
        except subprocess.TimeoutExpired:
            server_out = ""
    finally:
        for proc in (client, server):
            if proc is not None and proc.poll() is None:
                proc_mod.kill_group(proc)
    gbps = parse_bandwidth(out)
    if gbps is None:  # some builds report on the server side only
        gbps = parse_bandwidth(server_out)
    if gbps is None:
        tail = [ln for ln in (out or server_out).strip().splitlines() if ln.strip()]
        said = tail[-1].strip()[:120] if tail else f"exit {client.returncode}"
        return Measured(port, None, f"{name} gave no result: {said}", name)
    return Measured(port, gbps, "", name)



def no_active_port(ctx, present: list) -> Outcome:
    """No port to measure. RDMA ports that are there and all down, on a profile that sets a
    loopback floor (it expects a fabric to measure), are the node's own reading: FAIL, since
    nothing else would catch them ([system] rdma_ports defaults to 0, link_flap only starts a
    baseline). No RDMA device at all, or a profile without a floor, expects nothing: skip."""
    if present:
        p = ctx.profile
        if float(p.get("loopback_min_fraction", 0.0)) or float(p.get("loopback_floor_gbps", 0.0)):
            down = ", ".join(f"{pt.name} {pt.state}" for pt in present[:4])
            more = f" and {len(present) - 4} more" if len(present) > 4 else ""
            return failed(CHECK, f"every RDMA port down ({down}{more}): nothing to measure",
                          ports={pt.name: pt.state for pt in present})
    return skipped(CHECK, "no active RDMA ports")


def check_loopback(ctx) -> Outcome:
    s, sysc = ctx.cfg.loopback, ctx.cfg.system
    devices = s.devices or sysc.rdma_devices
    ports = ports_of(sysc.sys_root, devices)
    if not ports:
        return no_active_port(ctx, read_rdma_ports(sysc.sys_root, list(devices) or None))
    p = ctx.profile
    min_fraction = float(p.get("loopback_min_fraction", 0.0))
    floor_gbps = float(p.get("loopback_floor_gbps", 0.0))
    tools = {False: find_tool(s.perftest), True: find_tool(s.fabtests)}
    runnable = [pt for pt in ports if tools[pt.efa]]
    missing = sorted({(s.fabtests if pt.efa else s.perftest) for pt in ports
                      if not tools[pt.efa]})
    if not runnable:
        return skipped(CHECK, f"no loopback tool here ({' and '.join(missing)} not found) for "
                              f"{', '.join(pt.name for pt in ports[:4])}")
    measured = [measure(s, pt, tools[pt.efa], s.tcp_port + i) for i, pt in enumerate(runnable)]
    out = verdict_loopback(measured, min_fraction, floor_gbps)
    if missing:
        out.figures["not_measured"] = [pt.name for pt in ports if not tools[pt.efa]]
        out.figures["missing_tools"] = missing
    return out
