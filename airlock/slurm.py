"""The one place Airlock talks to Slurm.

Every call runs scontrol/sinfo with an argv list (never a shell), a timeout and a clear error.
22.05 has no `scontrol --json`, so node records come from `scontrol show node -o`, parsed here.
Drains and resumes follow the owned-reason protocol of airlock.reasons: Airlock changes a node's
drain only when the reason in force carries its prefix.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import hostlist

from airlock import reasons
from airlock.errors import NodeNotFound, SlurmError

SEARCH_DIRS = ("/usr/bin", "/usr/local/bin", "/opt/slurm/bin", "/usr/sbin", "/usr/local/sbin")
DRAIN_FLAGS = frozenset({"DRAIN", "DRAINING", "DRAINED", "FAIL", "FAILING"})
# "Reason=text [user@2026-11-30T08:00:00]": Slurm always appends who set it and when.
_REASON = re.compile(
    r"(?:^| )Reason=(?P<text>.*) \[(?P<user>[^@\]]*)@(?P<time>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)\]"
    r"(?=$| [A-Z][A-Za-z_]*=)"
)
_KEY_SPLIT = re.compile(r" (?=[A-Z][A-Za-z_]*=)")


@dataclass(frozen=True)
class Node:
    name: str
    state: str  # base state, e.g. IDLE, ALLOCATED, MIXED, DOWN, FUTURE
    flags: frozenset[str] = frozenset()  # DRAIN, NOT_RESPONDING, CLOUD, POWERED_DOWN, ...
    reason: str = ""
    reason_user: str = ""
    reason_time: str = ""
    features: tuple[str, ...] = ()
    gres: str = ""
    partitions: tuple[str, ...] = ()
    boot_time: str = ""
    slurmd_start_time: str = ""
    address: str = ""
    hostname: str = ""
    cpu_alloc: int = 0
    raw: dict[str, str] = field(default_factory=dict, compare=False, repr=False)

    @property
    def drained(self) -> bool:
        return bool(self.flags & DRAIN_FLAGS) or self.state in ("DRAINED", "DRAINING", "FAIL")

    @property
    def state_text(self) -> str:
        return "+".join([self.state, *sorted(self.flags)])

    @property
    def claim(self) -> reasons.Reason | None:
        """Airlock's reason while it is in force: the node is drained (or failed) and the reason
        carries the prefix. A reason on a node that is not drained is history, not a claim:
        Slurm 23.11+ without an accounting plugin keeps the old reason after a resume."""
        return reasons.parse(self.reason) if self.drained else None

    @property
    def owned(self) -> bool:
        return self.claim is not None

    @property
    def foreign_drain(self) -> bool:
        """Drained (or failed) for a reason Airlock did not set: never touch it.

        A drain with an empty reason is nobody's claim (Slurm requires a reason for every drain
        it is asked for); it happens when a FUTURE node registers and loses its reason.
        """
        return self.drained and bool(self.reason) and not self.owned

    @property
    def busy(self) -> bool:
        return self.state in ("ALLOCATED", "MIXED", "COMPLETING") or "COMPLETING" in self.flags \
            or self.cpu_alloc > 0

    @property
    def responding(self) -> bool:
        return "NOT_RESPONDING" not in self.flags and \
            self.state not in ("DOWN", "FUTURE", "UNKNOWN")


def parse_node_line(line: str) -> Node:
    line = line.strip()
    if not line.startswith("NodeName="):
        raise SlurmError(f"unexpected scontrol output (no NodeName=): {line[:80]!r}")
    fields: dict[str, str] = {}
    reason = _REASON.search(line)
    head = line
    if reason:
        fields["Reason"] = reason.group("text")
        head = line[: reason.start()] + " " + line[reason.end():]
    for token in _KEY_SPLIT.split(head.strip()):
        key, sep, value = token.partition("=")
        if not sep:
            continue  # a value with spaces that does not look like a key (e.g. OS=...)
        fields.setdefault(key, value.strip())
    if "State" not in fields:
        raise SlurmError(f"unexpected scontrol output for {fields['NodeName']}: no State=")
    state, *flags = fields["State"].rstrip("*~#!%$@^-").split("+")
    return Node(
        name=fields["NodeName"].split()[0],
        state=state,
        flags=frozenset(f for f in flags if f),
        reason=fields.get("Reason", ""),
        reason_user=reason.group("user") if reason else "",
        reason_time=reason.group("time") if reason else "",
        features=_list(fields.get("AvailableFeatures", "")),
        gres=_none(fields.get("Gres", "")),
        partitions=_list(fields.get("Partitions", "")),
        boot_time=_none(fields.get("BootTime", "")),
        slurmd_start_time=_none(fields.get("SlurmdStartTime", "")),
        address=fields.get("NodeAddr", ""),
        hostname=fields.get("NodeHostName", ""),
        cpu_alloc=_int(fields.get("CPUAlloc", "0")),
        raw=fields,
    )


def parse_show_node(text: str) -> list[Node]:
    nodes = []
    for line in text.splitlines():
        if not line.strip():
            continue
        if line.startswith("No nodes in the system"):
            continue
        nodes.append(parse_node_line(line))
    return nodes


def _none(value: str) -> str:
    return "" if value in ("(null)", "None", "N/A") else value


def _list(value: str) -> tuple[str, ...]:
    value = _none(value)
    return tuple(v for v in value.split(",") if v) if value else ()


def _int(value: str) -> int:
    try:
        return int(value)
    except ValueError:
        return 0


def expand(expr: str | Iterable[str]) -> list[str]:
    """Expand a hostlist expression ("node[1-4],gpu07") with python-hostlist."""
    if not isinstance(expr, str):
        expr = ",".join(expr)
    try:
        return hostlist.expand_hostlist(expr)
    except hostlist.BadHostlist as exc:
        raise SlurmError(f"bad node list {expr!r}: {exc}") from None


def collect(names: Iterable[str]) -> str:
    return hostlist.collect_hostlist(list(names))


@dataclass
class DrainResult:
    node: str
    changed: bool
    why: str = ""


class Slurm:
    """A Slurm client: finds the binaries itself (hooks get no PATH) and never uses a shell."""

    def __init__(self, bin_dir: str = "", conf: str = "", timeout: float = 15.0):
        self.bin_dir = bin_dir
        self.conf = conf
        self.timeout = timeout

    @classmethod
    def from_config(cls, cfg) -> Slurm:
        s = cfg.slurm
        return cls(bin_dir=s.bin_dir, conf=s.conf, timeout=s.timeout)

    def binary(self, name: str) -> str:
        if self.bin_dir:
            path = os.path.join(self.bin_dir, name)
            if os.access(path, os.X_OK):
                return path
            raise SlurmError(f"{name} not found in slurm.bin_dir {self.bin_dir}")
        found = shutil.which(name)
        if found:
            return found
        for d in SEARCH_DIRS:
            path = os.path.join(d, name)
            if os.access(path, os.X_OK):
                return path
        raise SlurmError(f"{name} not found on PATH or in {', '.join(SEARCH_DIRS)}")

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.setdefault("PATH", "/usr/bin:/bin:/usr/sbin:/sbin")
        if self.conf:
            env["SLURM_CONF"] = self.conf
        return env

    def run(self, tool: str, args: Sequence[str], timeout: float | None = None) -> str:
        argv = [self.binary(tool), *args]
        limit = timeout or self.timeout
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=limit,
                                  env=self.env(), stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            raise SlurmError(f"{tool} {' '.join(args[:2])}: timed out after {limit:g} s") from None
        except OSError as exc:
            raise SlurmError(f"{tool}: cannot run: {exc.strerror}") from None
        if proc.returncode != 0:
            msg = (proc.stderr or proc.stdout).strip().splitlines()
            detail = msg[-1] if msg else f"exit {proc.returncode}"
            if "Invalid node name" in detail or "not found" in detail.lower():
                raise NodeNotFound(f"{tool}: {detail}")
            raise SlurmError(f"{tool} {' '.join(args[:2])}: {detail}")
        return proc.stdout

    def scontrol(self, *args: str, timeout: float | None = None) -> str:
        return self.run("scontrol", args, timeout)

    # --- reading ---------------------------------------------------------------------------
    def nodes(self, names: str | Iterable[str] | None = None) -> list[Node]:
        """All nodes (one call), or the named ones. Unknown names raise NodeNotFound."""
        if names is None:
            out = self.scontrol("-o", "--future", "show", "node")
            return parse_show_node(out)
        wanted = expand(names)
        if not wanted:
            return []
        out = self.scontrol("-o", "--future", "show", "node", collect(wanted))
        nodes = parse_show_node(out)
        by_name = {n.name: n for n in nodes}
        missing = [n for n in wanted if n not in by_name]
        if missing:
            raise NodeNotFound(f"unknown node {missing[0]}")
        return [by_name[n] for n in wanted]

    def node(self, name: str) -> Node:
        _check_name(name)
        return self.nodes([name])[0]

    def hostnames(self, expr: str) -> list[str]:
        return expand(expr)

    def nodes_in(self, partition: str | None = None, feature: str | None = None) -> list[Node]:
        nodes = self.nodes()
        if partition:
            nodes = [n for n in nodes if partition in n.partitions]
        if feature:
            nodes = [n for n in nodes if feature in n.features]
        return nodes

    # --- the owned-reason protocol ----------------------------------------------------------
    def drain(self, name: str, reason: reasons.Reason | str) -> DrainResult:
        """Drain with an Airlock reason, unless someone else's drain is in force."""
        text = reason.format() if isinstance(reason, reasons.Reason) else reasons.clean(reason)
        if not reasons.is_owned(text):
            raise ValueError(f"refusing to set a reason without the {reasons.PREFIX} prefix")
        node = self.node(name)
        if node.foreign_drain:
            return DrainResult(name, False, f"kept foreign drain: {node.reason!r}")
        if node.drained and node.reason == text:
            return DrainResult(name, False, "already drained with this reason")
        self.scontrol("update", f"nodename={name}", "state=drain", f"reason={text}")
        return DrainResult(name, True)

    def resume(self, name: str, only_if=None) -> DrainResult:
        """Resume a node only when Airlock's reason is in force (and only_if(reason) agrees)."""
        node = self.node(name)
        if not node.drained:
            # Also on 24.11 without accounting, where a resumed node keeps its old reason text:
            # resuming it again would fail with "Invalid node state specified".
            return DrainResult(name, False, "not drained")
        if not node.owned:
            return DrainResult(name, False, f"kept foreign reason: {node.reason!r}")
        parsed = node.claim
        if only_if is not None and not only_if(parsed):
            return DrainResult(name, False, f"reason changed to {node.reason!r}")
        self.scontrol("update", f"nodename={name}", "state=resume")
        return DrainResult(name, True)


_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


def _check_name(name: str) -> None:
    if not name or not _NAME.match(name):
        raise SlurmError(f"invalid node name {name!r}")
