"""The one place Airlock talks to Slurm.

Every call runs scontrol/sinfo with an argv list (never a shell), a timeout and a clear error.
Node records come from two readers that give identical `Node`s (tests/data holds real output of
both versions): `scontrol -o --future show node` (every version) and `scontrol --json --future
show node` (23.02+; also 22.05's `sinfo --json`, v0.0.38). Whether the running Slurm has
`scontrol --json` is found out once per process and installation by asking it, never from its
version string. Which reader a call uses was measured per call site against real 24.11
controllers (`python bench/bench_recovery_poll.py --live`): the hook's one-node query is faster
as `-o` (17 vs 23 ms in a 100-node cluster), and the whole-cluster poll by far (0.7 vs 6.5 s at
20,000 nodes: the JSON is 2.7 times the size and slow to make). So `-o` everywhere, and JSON
for what `-o` cannot carry: a reason with a line break, which splits its one line per node.
Drains and resumes follow the owned-reason protocol of airlock.slurm.reasons: Airlock changes a
node's
drain only when the reason in force carries its prefix, and the node is drained: from 23.11 a
resume without an accounting plugin leaves the old reason on the node in service.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import json
import os
import re
import shutil
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import hostlist

from airlock.errors import NodeNotFound, ReservationExists, SlurmError, SlurmUnreachable
from airlock.proc import run as run_child
from airlock.slurm import reasons

# Slurm releases the cluster suite runs against in CI (tests/cluster/conftest.py VARIANTS);
# `airlock doctor` warns on any other. docs/guide.md's "Supported Slurm" table says what differs.
TESTED_VERSIONS = ("22.05", "24.11", "26.05")
# The gate's Slurm settings that exist only from a release on, as (major, minor); each one's
# behaviour was measured on the real daemons (docs/guide.md, "Supported Slurm"). Whether the
# running Slurm has one is asked of it (its version, and the keys of `scontrol show config`),
# never assumed from the version Airlock was installed for.
SINCE = {
    "HealthCheckNodeState=START_ONLY": (25, 11),
    "HealthCheckNodeState=REBOOT_ONLY": (26, 5),
    "HealthCheckTimeout": (26, 5),
}
_VERSION = re.compile(r"(?<![\d.])(\d{2})\.(\d{2})(?:\.(\d+))?(?![\d.])")
SEARCH_DIRS = ("/usr/bin", "/usr/local/bin", "/opt/slurm/bin", "/usr/sbin", "/usr/local/sbin")
DRAIN_FLAGS = frozenset({"DRAIN", "DRAINING", "DRAINED", "FAIL", "FAILING"})
# "Reason=text [user@2026-11-30T08:00:00]": Slurm always appends who set it and when.
# What follows " Reason=": "text [user@2026-11-30T08:00:00]", Slurm always appends who set it
# and when; then the end of the line or the next key. Greedy: the last such bracket wins, so a
# reason may itself contain "[x@...]", "Reason=" or "key=value".
_REASON_TAIL = re.compile(
    r"(?P<text>.*) \[(?P<user>[^@\]]*)@"
    r"(?P<time>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d|Unknown|None)\]"
    r"(?=\s*$| [A-Z][A-Za-z_]*=)"
)
# The same stamp inside the line: `-o` prints a reason "first\nsecond" as "first [u@t]   second"
_STAMP = re.compile(r" \[[^@\]]*@(?:\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d|Unknown|None)\] +")
# The keys a Node is made of: their values never contain a space, and each is found by one
# str.find (C) in what is left of the line once the reason is cut out. The whole-cluster poll
# parses tens of thousands of lines; a regex over every token took several times as long.
_KEYS = ("NodeName", "State", "AvailableFeatures", "Gres", "Partitions", "BootTime",
         "SlurmdStartTime", "NodeAddr", "NodeHostName", "CPUAlloc")
_NEEDLES = tuple((k, f" {k}=") for k in _KEYS)


_NODE_FIELDS = ("name", "state", "flags", "reason", "reason_user", "reason_time", "features",
                "gres", "partitions", "boot_time", "slurmd_start_time", "address", "hostname",
                "cpu_alloc")


class Node:
    """One node as Slurm reports it. A slotted class rather than a frozen dataclass: a poll of
    a 20,000-node cluster builds 20,000 of them, and the dataclass's frozen __init__ was a
    quarter of the parse. Compared by its fields (raw, the parsed key=value text, excluded)."""

    __slots__ = (*_NODE_FIELDS, "raw")

    def __init__(self, name: str, state: str, flags: frozenset[str] = frozenset(),
                 reason: str = "", reason_user: str = "", reason_time: str = "",
                 features: tuple[str, ...] = (), gres: str = "", partitions: tuple[str, ...] = (),
                 boot_time: str = "", slurmd_start_time: str = "", address: str = "",
                 hostname: str = "", cpu_alloc: int = 0, raw: dict[str, str] | None = None):
        self.name = name
        self.state = state  # base state, e.g. IDLE, ALLOCATED, MIXED, DOWN, FUTURE
        self.flags = flags  # DRAIN, NOT_RESPONDING, CLOUD, POWERED_DOWN, ...
        self.reason = reason
        self.reason_user = reason_user
        self.reason_time = reason_time
        self.features = features
        self.gres = gres
        self.partitions = partitions
        self.boot_time = boot_time
        self.slurmd_start_time = slurmd_start_time
        self.address = address
        self.hostname = hostname
        self.cpu_alloc = cpu_alloc
        self.raw = raw if raw is not None else {}

    def _key(self) -> tuple:
        return tuple(getattr(self, f) for f in _NODE_FIELDS)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Node) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return "Node(" + ", ".join(f"{f}={getattr(self, f)!r}" for f in _NODE_FIELDS) + ")"

    @property
    def drained(self) -> bool:
        return bool(self.flags & DRAIN_FLAGS) or self.state in ("DRAINED", "DRAINING", "FAIL")

    @property
    def state_text(self) -> str:
        return "+".join([self.state, *sorted(self.flags)])

    @property
    def reason_in_force(self) -> str:
        """The reason while it explains why the node is out of service (drained, failed or
        down), else "": a node in service may still carry an old reason, which is history
        (Slurm 23.11+ without an accounting plugin keeps it after a resume)."""
        return self.reason if self.drained or self.state == "DOWN" else ""

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


class AmbiguousReason(SlurmError):
    """A reason `-o` cannot show on one line (it had a line break): its text is uncertain."""


def parse_node_line(line: str, strict: bool = True) -> Node:
    """One line of `scontrol -o show node`. Any surprise is a SlurmError with a one-line message.

    A reason with a line break comes out as "first [user@time]   second": strict parsing raises
    AmbiguousReason; otherwise the reason is everything after "Reason=" (never empty, never
    Airlock's, whose reasons are one line: a foreign reason, left alone), with no user or time."""
    line = line.strip()
    if not line.startswith("NodeName="):
        raise SlurmError(f"unexpected scontrol output (no NodeName=): {line[:80]!r}")
    head, reason, user, when = line, "", "", ""
    at = line.find(" Reason=")
    if at >= 0:
        tail = _REASON_TAIL.match(line, at + 8)
        if tail:
            reason, user, when = tail.group("text", "user", "time")
            head = line[:at] + line[tail.end():]
        elif strict:
            raise AmbiguousReason(f"unexpected scontrol output for {line[9:].split(' ')[0]}: "
                                  f"a reason -o cannot show on one line: {line[at + 8:][:60]!r}")
        else:
            # The stamp stands where the line break was: put the line break back, so that
            # the reason reads as the foreign one it is (reasons.is_owned)
            reason, head = _STAMP.sub("\n", line[at + 8:], count=1), line[:at]
    fields: dict[str, str] = {}
    head = " " + head
    for key, needle in _NEEDLES:
        i = head.find(needle)
        if i >= 0:
            i += len(needle)
            j = head.find(" ", i)
            fields[key] = head[i:j] if j >= 0 else head[i:]
    if reason:
        fields["Reason"] = reason
    name = fields.get("NodeName", "").split()
    if not name:
        raise SlurmError(f"unexpected scontrol output (empty NodeName=): {line[:80]!r}")
    if not fields.get("State"):
        raise SlurmError(f"unexpected scontrol output for {name[0]}: no State=")
    state, flags = _state(fields["State"])
    return Node(
        name=name[0],
        state=state,
        flags=flags,
        reason=reason,
        reason_user=user,
        reason_time=_none(when),
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


@contextlib.contextmanager
def _no_gc():
    """Parsing a cluster allocates tens of thousands of objects and no reference cycle: the
    cyclic collector, triggered over and over by the allocations alone, took a third of the
    time of `-o` parsing and half of JSON's at 20,000 nodes (bench/bench_recovery_poll.py)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def parse_show_node(text: str, strict: bool = True) -> list[Node]:
    nodes = []
    with _no_gc():
        # only "\n" ends a record: str.splitlines() would also split a reason at \x0b,
        # \x1c..\x1e, \x85, U+2028 or U+2029, all of which scontrol prints as they are
        for line in text.split("\n"):
            if not line.strip() or line.startswith("No nodes in the system"):
                continue
            nodes.append(parse_node_line(line, strict))
    return nodes


def parse_node_json(text: str | bytes) -> list[Node]:
    """`scontrol --json show node` (data_parser v0.0.40+: "state" a list such as ["IDLE",
    "DRAIN"], times as {"set", "number"}) or 22.05's `sinfo --json` (v0.0.38: one record per
    node, "state" lowercase plus "state_flags", times as plain numbers), into the same Node
    records as parse_show_node. Times become local "YYYY-MM-DDTHH:MM:SS", as scontrol prints.
    24.11's `sinfo --json` (v0.0.42) groups nodes and has no boot times: refused."""
    try:
        with _no_gc():
            doc = json.loads(text)
    except ValueError as exc:
        raise SlurmError(f"unexpected scontrol --json output: {exc}") from None
    if not isinstance(doc, dict):
        raise SlurmError("unexpected scontrol --json output: not a JSON object")
    errors = doc.get("errors") or []
    if errors:
        first = errors[0] if isinstance(errors[0], dict) else {"description": str(errors[0])}
        detail = first.get("description") or first.get("error") or "error"
        raise SlurmError(f"scontrol --json: {' '.join(str(detail).split())}")
    if "nodes" not in doc and "sinfo" in doc:
        raise SlurmError("unexpected JSON: sinfo's grouped form carries no per-node record")
    try:
        with _no_gc():
            return [_json_node(rec) for rec in doc["nodes"]]
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
        what = f"{type(exc).__name__}: {exc}".splitlines()[0][:120]
        raise SlurmError(f"unexpected scontrol --json output ({what})") from None


def parse_reservation_names(text: str) -> set[str]:
    """The names in `scontrol [-o] show reservation`'s answer (`No reservations in the system`
    when there is none): each reservation's record begins with its ReservationName= field."""
    names = set()
    for line in text.splitlines():
        first = line.strip().split(" ", 1)[0]
        if first.startswith("ReservationName="):
            name = first.removeprefix("ReservationName=")
            if not name:
                raise SlurmError(f"unexpected scontrol output (empty ReservationName=): "
                                 f"{line[:80]!r}")
            names.add(name)
    return names


def _json_node(rec: dict[str, Any]) -> Node:
    name = rec["name"]
    if not isinstance(name, str) or not name or name.split() != [name]:
        raise ValueError(f"bad node name {name!r}")
    state = rec["state"]
    if isinstance(state, list):  # v0.0.40+: base state first, then flags
        if not state or not all(isinstance(x, str) for x in state):
            raise ValueError(f"bad state {state!r} of {name}")
        base, flags = state[0], state[1:]
    else:  # v0.0.38: "idle" + ["DRAIN", ...]
        base, flags = str(state).upper(), list(rec.get("state_flags") or [])
    reason = rec.get("reason") or ""
    if isinstance(reason, dict):  # sinfo v0.0.42 style
        reason = reason.get("description") or ""
    return Node(
        name=name,
        state=base,
        flags=frozenset(str(f) for f in flags if f),
        reason=str(reason),
        reason_user=(rec.get("reason_set_by_user") or "") if reason else "",
        reason_time=_json_time(rec.get("reason_changed_at")) if reason else "",
        features=_json_list(rec.get("features")),
        gres=_none(rec.get("gres") or ""),
        partitions=_json_list(rec.get("partitions")),
        boot_time=_json_time(rec.get("boot_time")),
        slurmd_start_time=_json_time(rec.get("slurmd_start_time")),
        address=rec.get("address") or "",
        hostname=rec.get("hostname") or "",
        cpu_alloc=int(rec.get("alloc_cpus") or 0),
        raw=rec,
    )


def _json_time(value: Any) -> str:
    if isinstance(value, dict):  # {"set": true, "infinite": false, "number": 1796084788}
        if not value.get("set") or value.get("infinite"):
            return ""
        value = value.get("number")
    if not value:  # 0 or absent: scontrol prints None/Unknown
        return ""
    return _local_time(int(value), time.tzname)


@functools.lru_cache(maxsize=8192)
def _local_time(epoch: int, _zone: tuple[str, str]) -> str:
    """Cached: a cluster's nodes share few distinct times (boot, registration), and localtime()
    asks the C library for the zone each call. The zone is part of the key."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(epoch))


def _json_list(value: Any) -> tuple[str, ...]:
    if isinstance(value, str):  # v0.0.38: "a,b"
        return _list(value)
    return tuple(str(v) for v in value or () if v)


def _none(value: str) -> str:
    return "" if value in ("(null)", "None", "N/A", "Unknown") else value


@functools.lru_cache(maxsize=1024)
def _state(text: str) -> tuple[str, frozenset[str]]:
    """"IDLE+DRAIN" -> ("IDLE", {"DRAIN"}); a cluster has few distinct states (cached)."""
    state, *flags = text.rstrip("*~#!%$@^-").split("+")
    return state, frozenset(f for f in flags if f)


@functools.lru_cache(maxsize=4096)
def _list(value: str) -> tuple[str, ...]:
    value = _none(value)
    return tuple(v for v in value.split(",") if v) if value else ()


def _int(value: str) -> int:
    try:
        return int(value)
    except ValueError:
        return 0


def parse_version(text: str) -> tuple[int, int]:
    """(major, minor) of a Slurm version as scontrol prints it: "slurm 22.05.8", "slurm-wlm
    26.05.5", "SLURM_VERSION = 24.11.5", or "26.05" given by a person."""
    m = _VERSION.search(text or "")
    if not m:
        raise SlurmError(f"not a Slurm version: {(text or '').strip()[:60]!r}")
    return int(m.group(1)), int(m.group(2))


def release(version: tuple[int, int]) -> str:
    """(26, 5) -> "26.05"."""
    return f"{version[0]:02d}.{version[1]:02d}"


def has(version: tuple[int, int], setting: str) -> bool:
    """This release has setting (a key of SINCE)."""
    return version >= SINCE[setting]


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


MIN_CALL_S = 0.2  # a call with less time than this left before the deadline is not started
# Slurm's words for a name it does not know: `Node X not found` (show) and `slurm_update error:
# Invalid node name specified` (update), each a whole line.
_UNKNOWN_NODE = re.compile(r"^(?!NodeName=)(Node \S.* not found|(\S+ error: )?Invalid node name "
                           r"specified)$")
# Slurm's words when slurmctld did not answer (as opposed to refusing): read here, once, and
# raised as SlurmUnreachable.
_UNREACHABLE = re.compile(r"Unable to contact slurm controller|Socket timed out|timed out|"
                          r"Connection refused")
# (scontrol, SLURM_CONF) -> whether `scontrol --json` exists there; one question per process.
_JSON_SUPPORT: dict[tuple[str, str], bool] = {}
_UNKNOWN_OPTION = re.compile(r"unrecognized option|invalid option|unknown option", re.I)


@dataclass
class DrainResult:
    node: str
    changed: bool
    why: str = ""


class Slurm:
    """A Slurm client: finds the binaries itself (hooks get no PATH) and never uses a shell."""

    def __init__(self, bin_dir: str = "", conf: str = "", timeout: float = 15.0,
                 deadline: float | None = None):
        self.bin_dir = bin_dir
        self.conf = conf
        self.timeout = timeout
        # time.monotonic() by which every call must be over (a hook's share of the time Slurm
        # gives it): each call's timeout is cut to what is left, and none starts without it
        self.deadline = deadline

    @contextlib.contextmanager
    def sooner(self, share: float):
        """Calls in this block end once `share` of the time left before the deadline is spent:
        the rest is kept for what must follow them (no deadline: no change)."""
        saved = self.deadline
        if saved is not None:
            self.deadline = time.monotonic() + max(0.0, saved - time.monotonic()) * share
        try:
            yield self
        finally:
            self.deadline = saved

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

    def _exec(self, tool: str, args: Sequence[str],
              timeout: float | None = None) -> tuple[int, str, str]:
        """(exit status, stdout, stderr), or SlurmError when it cannot run or times out."""
        argv = [self.binary(tool), *args]
        limit = timeout or self.timeout
        if self.deadline is not None:
            left = self.deadline - time.monotonic()
            if left < MIN_CALL_S:
                raise SlurmError(f"{tool} {' '.join(args[:2])}: not started, no time left "
                                 "(the hook's time limit)")
            limit = min(limit, left)
        try:
            # raw newlines: a reason is whatever bytes someone typed (not UTF-8, a carriage
            # return), and must neither raise nor become a line break
            done = run_child(argv, limit, env=self.env(), raw_newlines=True)
        except OSError as exc:
            raise SlurmError(f"{tool}: cannot run: {exc.strerror}") from None
        if done.timed_out or done.returncode is None:
            raise SlurmUnreachable(f"{tool} {' '.join(args[:2])}: timed out after {limit:.3g} s")
        return done.returncode, done.stdout, done.stderr

    def run(self, tool: str, args: Sequence[str], timeout: float | None = None) -> str:
        rc, stdout, stderr = self._exec(tool, args, timeout)
        if rc != 0:
            # `show node a,b` with b unknown prints a's record and "Node b not found", in the
            # order of the list: the unknown name is the error, wherever its line is.
            unknown = [line.strip() for line in (stderr + "\n" + stdout).splitlines()
                       if _UNKNOWN_NODE.match(line.strip())]
            if unknown:
                raise NodeNotFound(f"{tool}: {unknown[0]}")
            msg = (stderr or stdout).strip().splitlines()
            detail = msg[-1] if msg else f"exit {rc}"
            # Only Slurm's own lines for an unknown node (above) mean one: any other failure
            # that happens to say "not found" (a wrapper's missing tool) is Slurm's trouble.
            if _UNREACHABLE.search(detail):
                raise SlurmUnreachable(f"{tool} {' '.join(args[:2])}: {detail}")
            raise SlurmError(f"{tool} {' '.join(args[:2])}: {detail}")
        return stdout

    def scontrol(self, *args: str, timeout: float | None = None) -> str:
        return self.run("scontrol", args, timeout)

    # --- reading ---------------------------------------------------------------------------
    def has_json(self) -> bool:
        """Whether this Slurm's scontrol has --json (23.02+), asked once per process and
        installation: a scontrol without it rejects the option before contacting anyone."""
        key = (self.binary("scontrol"), self.conf or os.environ.get("SLURM_CONF", ""))
        known = _JSON_SUPPORT.get(key)
        if known is None:
            rc, _out, err = self._exec("scontrol", ["--json", "--version"])
            if rc != 0 and not _UNKNOWN_OPTION.search(err):
                last = (err.strip().splitlines() or [f"exit {rc}"])[-1]
                raise SlurmError(f"scontrol --json --version: {last}")
            known = _JSON_SUPPORT[key] = rc == 0
        return known

    def version(self) -> tuple[int, int]:
        """The running Slurm's release: the controller's (`scontrol show config`), else, when
        no controller answers, that of the local scontrol (a node's Slurm matches its
        controller's within the supported skew; a fragment is rendered for one release)."""
        try:
            conf = self.scontrol("show", "config")
            found = re.search(r"^SLURM_VERSION\s*=\s*(\S+)", conf, re.M)
            if found:
                return parse_version(found.group(1))
        except SlurmError:
            pass
        return parse_version(self.scontrol("--version"))

    def nodes(self, names: str | Iterable[str] | None = None,
              reader: str = "auto") -> list[Node]:
        """All nodes (one call), or the named ones. Unknown names raise NodeNotFound.

        reader: "text" (`scontrol -o`, every version), "json" (`scontrol --json`, 23.02+) or
        "auto": text, which measured faster for one node and for the whole cluster
        (bench/bench_recovery_poll.py); json where text cannot carry the answer (a reason with a
        line break) and this Slurm has it."""
        if reader not in ("auto", "text", "json"):
            raise ValueError(f"reader must be auto, text or json, not {reader!r}")
        wanted = None if names is None else expand(names)
        if wanted == []:
            return []
        target = () if wanted is None else (collect(wanted),)
        if reader == "json":
            nodes = parse_node_json(self.scontrol("--json", "--future", "show", "node", *target))
        else:
            out = self.scontrol("-o", "--future", "show", "node", *target)
            try:
                nodes = parse_show_node(out)
            except AmbiguousReason:
                # A reason with a line break: JSON carries it exactly; without JSON (22.05)
                # the node keeps a foreign, non-empty reason, which Airlock never touches.
                if reader == "auto" and self.has_json():
                    nodes = parse_node_json(
                        self.scontrol("--json", "--future", "show", "node", *target))
                else:
                    nodes = parse_show_node(out, strict=False)
        if wanted is None:
            return nodes
        by_name = {n.name: n for n in nodes}
        missing = [n for n in wanted if n not in by_name]
        if missing:
            raise NodeNotFound(f"unknown node {missing[0]}")
        return [by_name[n] for n in wanted]

    def node(self, name: str) -> Node:
        _check_name(name)
        return self.nodes([name])[0]

    def known(self, names: Iterable[str]) -> set[str]:
        """Which of names Slurm lists (FUTURE nodes included), in one call: for documents
        written by other nodes, which may name nodes that do not exist."""
        wanted = [n for n in dict.fromkeys(names) if _NAME.match(n or "")]
        if not wanted:
            return set()
        rc, out, err = self._exec("scontrol", ["-o", "--future", "show", "node",
                                               collect(wanted)])
        found = {line[9:].split(" ", 1)[0] for line in out.split("\n")
                 if line.startswith("NodeName=")}
        if rc != 0 and not found and "not found" not in out + err:
            detail = ((err or out).strip().splitlines() or [f"exit {rc}"])[-1]
            raise SlurmError(f"scontrol show node: {detail}")
        return found & set(wanted)

    def reservations(self) -> set[str]:
        """The names of the reservations slurmctld has now."""
        return parse_reservation_names(self.scontrol("-o", "show", "reservation"))

    def create_reservation(self, name: str, *fields: str) -> None:
        """`scontrol create reservation ReservationName=<name> <fields>`. When slurmctld refuses
        and has a reservation of that name, ReservationExists: decided here, once, from its
        reservation table read after the refusal, never from the refusal's words (callers
        decide by type). slurmctld unreachable stays SlurmUnreachable; any other refusal, or a
        table that cannot be read, is the refusal's SlurmError."""
        try:
            self.scontrol("create", "reservation", f"ReservationName={name}", *fields)
        except SlurmUnreachable:
            raise
        except SlurmError as exc:
            try:
                exists = name in self.reservations()
            except SlurmError:
                raise exc from None
            if exists:
                raise ReservationExists(f"scontrol create reservation: reservation {name} "
                                        "exists") from None
            raise

    def topology(self) -> str:
        """`scontrol show topology`: "" when no topology plugin is configured (or it fails:
        the topology only orders groups, it never decides a verdict)."""
        rc, out, _err = self._exec("scontrol", ["show", "topology"])
        return out if rc == 0 else ""

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
    def drain(self, name: str, reason: reasons.Reason | str,
              current: Node | None = None) -> DrainResult:
        """Drain with an Airlock reason, unless someone else's drain is in force. current: the
        node as the caller read it a moment ago (saves slurmctld a second read: every read is
        two RPCs, the node table and the partition table)."""
        text = reason.format() if isinstance(reason, reasons.Reason) else reasons.clean(reason)
        if not reasons.is_owned(text):
            raise ValueError(f"refusing to set a reason without the {reasons.PREFIX} prefix")
        node = current if current is not None and current.name == name else self.node(name)
        if node.foreign_drain:
            return DrainResult(name, False, f"kept foreign drain: {node.reason!r}")
        if node.drained and node.reason == text:
            return DrainResult(name, False, "already drained with this reason")
        self.scontrol("update", f"nodename={name}", "state=drain", f"reason={text}")
        return DrainResult(name, True)

    def resume(self, name: str, only_if=None, current: Node | None = None) -> DrainResult:
        """Resume a node only when Airlock's reason is in force (and only_if(reason) agrees).
        current: as for drain()."""
        node = current if current is not None and current.name == name else self.node(name)
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
