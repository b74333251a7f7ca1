"""A fake Slurm 22.05 controller for unit tests: an executable `scontrol` (and `sinfo`) in a
temporary bin directory that `[slurm] bin_dir` points at, so the real hooks, the registration
suite and the Slurm client run unchanged, as subprocesses or in process, and never reach a
real controller.

    fake = FakeSlurm(tmp_path / "slurm", nodes=["n1"])    # n1 IDLE, booted with this machine
    fake.set("n1", state="ALLOCATED", cpu_alloc=1)         # a job runs there
    fake.fail("update")                                   # slurmctld refuses updates (exit 1)
    fake.fail("show", mode="hang")                         # ... or never answers
    fake.heal()
    fake.calls("update")   # every call, argv and the caller's parent pid, in order

What it does, as 22.05's scontrol does it:

* `scontrol [-o] [--future] show node [NAMES]` prints one line per node in the format recorded
  from a real 22.05 controller (tests/data/22.05/show-node-o.txt: the line of an idle node is
  the template, its fields replaced), `Reason=text [user@time]` last; FUTURE nodes only with
  --future; an unknown name prints `Node X not found` in its place and the exit is 1.
* `scontrol update nodename=N state=drain reason=R` adds DRAIN (an ALLOCATED node becomes
  ALLOCATED+DRAIN: draining), `state=resume` removes it and the reason (22.05 clears it;
  a node that is not drained is refused with `Invalid node state specified`), `state=down`
  sets DOWN; a drain without a reason is refused as Slurm refuses it.
* `scontrol create reservation ReservationName=R Nodes=... ...` adds R to a reservation table
  (refused with 22.05's `Error creating the reservation: Duplicate reservation name` when R is
  there); `scontrol [-o] show reservation` prints the table (one line each with -o), `update
  ReservationName=R Nodes=...` and `delete ReservationName=R` change it.
* `scontrol --json ...` is refused as 22.05 refuses it (no --json before 23.02), so the client
  stays on the text reader; `scontrol ping` answers UP.
* A verb told to fail exits 1 with Slurm's own error text for that verb (slurmctld unreachable
  by default), or hangs (the caller's timeout must end it), for the next N calls or until
  heal().

Every call is appended to calls.jsonl before it is answered, so a hung call is logged too.
The node table is a JSON file changed under a lock, so a hook and the suite it started can
both talk to it. This module imports nothing but the standard library: the executable runs it
with `python -I -S` (fast, and blind to whatever the caller's environment holds).
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import sys
import time
from contextlib import contextmanager
from pathlib import Path

RECORDED = Path(__file__).resolve().parents[1] / "data" / "22.05" / "show-node-o.txt"
TEMPLATE_NODE = "node5"  # the recorded idle node without a reason: the template line

# The errors 22.05's scontrol prints when slurmctld cannot be reached, per verb.
UNREACHABLE = {
    "show": "slurm_load_node error: Unable to contact slurm controller (connect failure)",
    "update": "slurm_update error: Unable to contact slurm controller (connect failure)",
    "ping": "Slurmctld(primary) at localhost is DOWN",
    "reboot": "slurm_reboot_nodes error: Unable to contact slurm controller (connect failure)",
    "create": "Error creating the reservation: Unable to contact slurm controller (connect "
              "failure)",
    "delete": "Error deleting the reservation: Unable to contact slurm controller (connect "
              "failure)",
}
VERBS = ("show", "update", "ping", "reboot", "sinfo", "create", "delete")
TRIPWIRE_TOOLS = ("scontrol", "sinfo", "squeue", "srun", "sbatch", "salloc", "scancel", "sacct",
                  "sacctmgr", "sreport", "sstat", "strigger")

MARKER = ".fakeslurm"  # in a fake's bin directory: what runs from there is the fake itself
_TIME = "%Y-%m-%dT%H:%M:%S"
# The fields a line is made of: Node dict key -> the key=value token of the 22.05 line.
_FIELDS = {"name": "NodeName", "cpu_alloc": "CPUAlloc", "features": "AvailableFeatures",
           "gres": "Gres", "addr": "NodeAddr", "hostname": "NodeHostName", "partitions":
           "Partitions", "boot_time": "BootTime", "slurmd_start_time": "SlurmdStartTime"}


def this_boot_time() -> str:
    """This machine's boot as slurmd reports it (BootTime): the wall clock minus the boot
    clock, so a node of the fake is, to the hooks, the boot they run in."""
    return time.strftime(_TIME, time.localtime(time.time() -
                                               time.clock_gettime(time.CLOCK_BOOTTIME)))


def template_line() -> str:
    for line in RECORDED.read_text().splitlines():
        if line.startswith(f"NodeName={TEMPLATE_NODE} "):
            return line
    raise RuntimeError(f"no {TEMPLATE_NODE} in {RECORDED}")


def new_node(name: str, **fields) -> dict:
    node = {"name": name, "state": "IDLE", "flags": [], "reason": "", "reason_user": "",
            "reason_time": "", "cpu_alloc": 0, "features": "gpu", "gres": "(null)",
            "addr": "127.0.0.1", "hostname": "localhost", "partitions": "main",
            "boot_time": this_boot_time(), "slurmd_start_time": this_boot_time()}
    unknown = set(fields) - set(node)
    if unknown:
        raise ValueError(f"unknown node field {sorted(unknown)[0]!r}")
    node.update(fields)
    node["flags"] = sorted(node["flags"])
    return node


def render(node: dict, template: str) -> str:
    """The node as one line of 22.05's `scontrol -o show node`."""
    line = template
    for key, token in _FIELDS.items():
        value = str(node[key]) if node[key] not in ("", None) else "None"
        line = re.sub(rf"(^| ){token}=\S*", lambda m, t=token, v=value: f"{m.group(1)}{t}={v}",
                      line, count=1)
    state = "+".join([node["state"], *node["flags"]])
    line = re.sub(r" State=\S*", lambda m: f" State={state}", line, count=1)
    alloc = f"cpu={node['cpu_alloc']}" if node["cpu_alloc"] else ""
    line = re.sub(r" AllocTRES=\S*", lambda m: f" AllocTRES={alloc}", line, count=1)
    if node["reason"]:
        line += (f" Reason={node['reason']} "
                 f"[{node['reason_user'] or 'root'}@{node['reason_time'] or 'Unknown'}]")
    return line


def expand(expr: str) -> list[str]:
    """Slurm hostlists as the client writes them: a,b and prefix[1-3,5]."""
    out: list[str] = []
    for part in re.findall(r"[^,\[]+(?:\[[^\]]*\])?", expr):
        m = re.fullmatch(r"(.*)\[(.*)\](.*)", part)
        if not m:
            out.append(part)
            continue
        for rng in m.group(2).split(","):
            lo, _, hi = rng.partition("-")
            for i in range(int(lo), int(hi or lo) + 1):
                out.append(f"{m.group(1)}{str(i).zfill(len(lo))}{m.group(3)}")
    return out


class FakeSlurm:
    """The test's handle on a fake controller under root (see the module docstring)."""

    def __init__(self, root: str | os.PathLike, nodes=("n1",), **fields):
        self.root = Path(root)
        self.bin = self.root / "bin"
        self.bin.mkdir(parents=True, exist_ok=True)
        self.state_path = self.root / "state.json"
        self.log_path = self.root / "calls.jsonl"
        self.log_path.touch()
        launcher = (f"#!{sys.executable} -IS\n"
                    "import sys\n"
                    f"sys.path.insert(0, {str(Path(__file__).resolve().parent)!r})\n"
                    "import fakeslurm\n"
                    f"sys.exit(fakeslurm.main(sys.argv, {str(self.state_path)!r}))\n")
        (self.bin / MARKER).touch()
        for tool in ("scontrol", "sinfo"):
            path = self.bin / tool
            path.write_text(launcher)
            path.chmod(0o755)
        with self._locked() as state:
            state.update(template=template_line(), nodes={}, fail={}, log=str(self.log_path))
            for name in nodes:
                state["nodes"][name] = new_node(name, **fields)

    @property
    def bin_dir(self) -> str:
        return str(self.bin)

    @contextmanager
    def _locked(self):
        with locked(str(self.state_path)) as state:
            yield state

    # --- the node table ---------------------------------------------------------------------
    def add(self, name: str, **fields) -> None:
        with self._locked() as state:
            state["nodes"][name] = new_node(name, **fields)

    def add_many(self, nodes: dict[str, dict]) -> None:
        """Many nodes in one write of the table ({name: fields}): bench/bench_serve.py's 10,000."""
        with self._locked() as state:
            for name, fields in nodes.items():
                state["nodes"][name] = new_node(name, **fields)

    def set(self, name: str, **fields) -> None:
        """Change a node as the controller would see it (state, flags, reason, cpu_alloc...)."""
        with self._locked() as state:
            node = state["nodes"][name]
            unknown = set(fields) - set(node)
            if unknown:
                raise ValueError(f"unknown node field {sorted(unknown)[0]!r}")
            node.update(fields)
            node["flags"] = sorted(node["flags"])
            if "reason" in fields and fields["reason"] and "reason_time" not in fields:
                node["reason_time"] = time.strftime(_TIME)
                node["reason_user"] = node["reason_user"] or "root"

    def reservations(self) -> dict[str, dict]:
        """The reservation table: {name: {"nodes", "flags", "users", ...}}."""
        with self._locked() as state:
            return dict(state.get("reservations", {}))

    def add_reservation(self, name: str, nodes: str, flags: str = "MAINT") -> None:
        """A reservation someone else made (an admin, another on-demand run)."""
        with self._locked() as state:
            state.setdefault("reservations", {})[name] = {
                "nodes": nodes, "flags": flags, "users": "root", "duration": "01:00:00"}

    def node(self, name: str) -> dict:
        with self._locked() as state:
            return dict(state["nodes"][name])

    def line(self, name: str) -> str:
        with self._locked() as state:
            return render(state["nodes"][name], state["template"])

    # --- faults -------------------------------------------------------------------------------
    def fail(self, *verbs: str, mode: str = "error", text: str = "", times: int = 0) -> None:
        """The next `times` calls (0: every call until heal()) of each verb fail: exit 1 with
        `text` (Slurm's own error for the verb when empty), or hang with mode="hang"."""
        if mode not in ("error", "hang"):
            raise ValueError(f"mode must be error or hang, not {mode!r}")
        with self._locked() as state:
            for verb in verbs or VERBS:
                if verb not in VERBS:
                    raise ValueError(f"unknown verb {verb!r} (known: {', '.join(VERBS)})")
                state["fail"][verb] = {"mode": mode, "text": text, "times": times}

    def unreachable(self, mode: str = "error") -> None:
        """slurmctld is away: every verb fails as it does then."""
        self.fail(*VERBS, mode=mode)

    def heal(self, *verbs: str) -> None:
        with self._locked() as state:
            for verb in verbs or list(state["fail"]):
                state["fail"].pop(verb, None)

    # --- what was asked ---------------------------------------------------------------------
    def calls(self, verb: str = "") -> list[dict]:
        """Every call so far ({"tool", "verb", "argv", "ppid", "t"}), or those of one verb."""
        out = []
        for line in self.log_path.read_text().splitlines():
            call = json.loads(line)
            if not verb or call["verb"] == verb:
                out.append(call)
        return out

    def updates(self) -> list[list[str]]:
        """The argv (after `update`) of every update call, in order."""
        return [c["argv"][c["argv"].index("update") + 1:] for c in self.calls("update")]

    def clear_log(self) -> None:
        self.log_path.write_text("")


def node_of(bin_dir: str, name: str) -> dict:
    """A node of the fake whose bin directory a config names (for code that has the config)."""
    with locked(str(Path(bin_dir).parent / "state.json")) as state:
        return dict(state["nodes"][name])


@contextmanager
def locked(state_path: str):
    """The state, read under an exclusive lock and written back when the block ends."""
    fd = os.open(state_path + ".lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            with open(state_path) as fh:
                state = json.load(fh)
        except FileNotFoundError:
            state = {}
        before = json.dumps(state, sort_keys=True)
        yield state
        if json.dumps(state, sort_keys=True) != before:
            tmp = f"{state_path}.{os.getpid()}.tmp"
            with open(tmp, "w") as fh:
                json.dump(state, fh, indent=1)
            os.replace(tmp, state_path)
    finally:
        os.close(fd)


# --- the executable ------------------------------------------------------------------------
def main(argv: list[str], state_path: str) -> int:
    tool = os.path.basename(argv[0])
    args = argv[1:]
    options = [a for a in args if a.startswith("-")]
    words = [a for a in args if not a.startswith("-")]
    if tool == "sinfo":
        verb = "sinfo"
    elif "--json" in options or "--yaml" in options:
        verb = "json"
    else:
        verb = words[0].lower() if words else ("version" if options else "")
    with locked(state_path) as state:
        with open(state["log"], "a") as fh:
            fh.write(json.dumps({"tool": tool, "verb": verb, "argv": [tool, *args],
                                 "ppid": os.getppid(), "t": time.time()}) + "\n")
        fault = state["fail"].get(verb)
        if fault is not None and fault["times"]:
            fault["times"] -= 1
            if fault["times"] == 0:
                del state["fail"][verb]
        if fault is None:
            return answer(state, tool, verb, options, words)
    if fault["mode"] == "hang":
        while True:  # slurmctld that never answers: only the caller's timeout ends this
            time.sleep(3600)
    sys.stderr.write((fault["text"] or UNREACHABLE.get(verb, f"{verb}: error")) + "\n")
    return 1


def answer(state: dict, tool: str, verb: str, options: list[str], words: list[str]) -> int:
    """The call, answered as 22.05 answers it (the state is written back by the caller)."""
    if verb == "sinfo":
        sys.stderr.write("fakeslurm: sinfo is not faked; Airlock reads nodes with scontrol\n")
        return 1
    if verb == "json":
        sys.stderr.write("scontrol: unrecognized option '--json'\n"
                         'Try "scontrol --help" for more information\n')
        return 1
    if verb == "version":
        print("slurm 22.05.8")
        return 0
    if verb == "ping":
        print("Slurmctld(primary) at localhost is UP")
        return 0
    if verb == "show" and words[1:2] == ["node"]:
        return show_node(state, "--future" in options, words[2] if len(words) > 2 else "")
    if verb == "show" and words[1:2] == ["reservation"]:
        return show_reservation(state, "-o" in options or "--oneliner" in options)
    if verb == "create" and words[1:2] == ["reservation"]:
        return create_reservation(state, words[2:])
    if verb == "update" and any(w.lower().startswith("reservationname=") for w in words):
        return update_reservation(state, words[1:], "update")
    if verb == "delete":
        return update_reservation(state, words[1:], "delete")
    if verb == "update":
        return update(state, words[1:])
    sys.stderr.write(f"fakeslurm: {' '.join([tool, *options, *words])}: not faked\n")
    return 1


def show_node(state: dict, future: bool, expr: str) -> int:
    nodes = state["nodes"]
    if expr:
        # As a real controller answers (22.05 and 24.11, seen): every node it has, then a line
        # for each name it does not, and exit 1 when there was one.
        rc = 0
        for name in expand(expr):
            if name in nodes:
                print(render(nodes[name], state["template"]))
            else:
                print(f"Node {name} not found")
                rc = 1
        return rc
    else:
        names = [n for n in nodes if future or nodes[n]["state"] != "FUTURE"]
    if not names:
        print("No nodes in the system")
        return 0
    for name in names:
        print(render(nodes[name], state["template"]))
    return 0


def _fields(words: list[str]) -> dict[str, str]:
    return {k.lower(): v for k, _, v in (w.partition("=") for w in words)}


def create_reservation(state: dict, words: list[str]) -> int:
    fields = _fields(words)
    table = state.setdefault("reservations", {})
    name = fields.get("reservationname", "")
    if any(n not in state["nodes"] for n in expand(fields.get("nodes", ""))):
        sys.stderr.write("Error creating the reservation: Invalid node name specified\n")
        return 1
    if name in table:
        sys.stderr.write("Error creating the reservation: Duplicate reservation name\n")
        return 1
    table[name] = {"nodes": fields.get("nodes", ""), "flags": fields.get("flags", ""),
                   "users": fields.get("users", ""), "duration": fields.get("duration", "")}
    print(f"Reservation created: {name}")
    return 0


def update_reservation(state: dict, words: list[str], verb: str) -> int:
    fields = _fields(words)
    table = state.setdefault("reservations", {})
    name = fields.get("reservationname", "")
    if name not in table:
        what = "updating" if verb == "update" else "deleting"
        sys.stderr.write(f"Error {what} the reservation: Requested reservation is invalid\n")
        return 1
    if verb == "delete":
        del table[name]
    elif "nodes" in fields:
        table[name]["nodes"] = fields["nodes"]
    if verb == "update":
        print("Reservation updated.")
    return 0


def show_reservation(state: dict, oneliner: bool) -> int:
    """As 22.05 prints it: `No reservations in the system`, or each reservation's fields
    (with -o on one line, else wrapped over several)."""
    table = state.get("reservations", {})
    if not table:
        print("No reservations in the system")
        return 0
    for name, r in table.items():
        nodes = expand(r["nodes"]) if r["nodes"] else []
        parts = [f"ReservationName={name} StartTime=2026-01-01T00:00:00 "
                 f"EndTime=2026-01-01T01:00:00 Duration={r['duration']}",
                 f"Nodes={r['nodes']} NodeCnt={len(nodes)} CoreCnt={len(nodes)} "
                 "Features=(null) PartitionName=(null) Flags=" + (r["flags"] or "(null)"),
                 f"TRES=cpu={len(nodes)}",
                 f"Users={r['users'] or '(null)'} Groups=(null) Accounts=(null) "
                 "Licenses=(null) State=ACTIVE BurstBuffer=(null) Watts=n/a",
                 "MaxStartDelay=(null)"]
        print(" ".join(parts) if oneliner else "\n   ".join(parts) + "\n")
    return 0


def update(state: dict, words: list[str]) -> int:
    fields = {}
    for word in words:
        key, sep, value = word.partition("=")
        if not sep:
            sys.stderr.write(f"Invalid input: {word}\nRequest aborted\n")
            return 1
        fields[key.lower()] = value
    names = expand(fields.get("nodename", ""))
    if not names or any(n not in state["nodes"] for n in names):
        sys.stderr.write("slurm_update error: Invalid node name specified\n")
        return 1
    want = fields.get("state", "").lower()
    reason = fields.get("reason", "")
    if want in ("drain", "down", "fail") and not reason:
        sys.stderr.write("You must specify a reason when DOWNING or DRAINING a node. "
                         "Request denied\n")
        return 1
    now = time.strftime(_TIME)
    for name in names:
        node = state["nodes"][name]
        flags = set(node["flags"])
        if want == "drain":
            flags.add("DRAIN")
        elif want == "down":
            node["state"] = "DOWN"
        elif want in ("resume", "undrain"):
            if "DRAIN" not in flags and node["state"] not in ("DOWN", "DRAINED"):
                sys.stderr.write("slurm_update error: Invalid node state specified\n")
                return 1
            flags.discard("DRAIN")
            if node["state"] == "DOWN":
                node["state"] = "IDLE"
            node.update(reason="", reason_user="", reason_time="")
        elif want:
            sys.stderr.write("slurm_update error: Invalid node state specified\n")
            return 1
        node["flags"] = sorted(flags)
        if reason and want != "resume":
            node.update(reason=reason, reason_user="root", reason_time=now)
    return 0


def is_fake(program: str) -> bool:
    return os.path.exists(os.path.join(os.path.dirname(program), MARKER))


def tripwire(folder: str | os.PathLike, log: str | os.PathLike) -> Path:
    """Slurm's commands in folder, each of which logs its call to log and fails loudly: put
    first on PATH (and in airlock.slurm.client's search list) so that a unit test that reaches for
    Slurm without a fake is caught instead of reaching the host's controller."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for tool in TRIPWIRE_TOOLS:
        path = folder / tool
        path.write_text(
            "#!/bin/sh\n"
            f"printf '%s\\n' \"{tool} $*\" >> '{log}'\n"
            f"echo 'unit test reached for a real {tool}: use tests/unit/fakeslurm.py' >&2\n"
            "exit 1\n")
        path.chmod(0o755)
    return folder
