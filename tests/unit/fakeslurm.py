"""A stand-in for Slurm's client commands, so that unit tests never reach a real controller.

install(dir, nodes) writes executable `scontrol` and `sinfo` into dir (point [slurm] bin_dir at
it) and the node table beside them (state.json). They answer what Airlock asks, in the formats
the real 22.05 commands print (tests/data/22.05), and change the table on updates:

  scontrol -o [--future] show node [LIST]    one line per node; "Node X not found" and exit 1
                                             for a name the table does not hold
  scontrol update nodename=N state=drain reason=TEXT | state=resume
  sinfo -h -N -n LIST -O FIELDS              the fields Airlock's one-node reader asks for
  scontrol show topology                     from state.json's "topology" lines, if any

Every call is appended to calls.log (one line: the program and its arguments, tab-separated),
so a test can count what a piece of code asked of "Slurm".
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

PROGRAM = r'''#!@PYTHON@
import json, os, sys, time
here = os.path.dirname(os.path.abspath(__file__))
tool = os.path.basename(sys.argv[0])
args = sys.argv[1:]
with open(os.path.join(here, "calls.log"), "a") as fh:
    fh.write("\t".join([tool, *args]) + "\n")
path = os.path.join(here, "state.json")
with open(path) as fh:
    db = json.load(fh)
nodes = db["nodes"]
if db.get("down"):
    print("slurm_load_node error: Unable to contact slurm controller (connect failure)",
          file=sys.stderr)
    sys.exit(1)

def expand(expr):
    out = []
    for part in expr.split(","):
        if "[" in part:
            head, rng = part[:-1].split("[")
            lo, hi = rng.split("-")
            out += [f"{head}{i:0{len(lo)}d}" for i in range(int(lo), int(hi) + 1)]
        elif part:
            out.append(part)
    return out

def state_of(n):
    return "+".join([n.get("state", "IDLE"), *n.get("flags", [])])

def line(name, n):
    reason = n.get("reason", "")
    text = (f"NodeName={name} Arch=x86_64 CoresPerSocket=1  CPUAlloc={n.get('cpu_alloc', 0)} "
            f"CPUEfctv=1 CPUTot=1 AvailableFeatures=gpu ActiveFeatures=gpu Gres=(null) "
            f"NodeAddr={n.get('addr', '127.0.0.1')} NodeHostName=localhost Port=6818 "
            f"RealMemory=1000 State={state_of(n)} Partitions=main  "
            f"BootTime=None SlurmdStartTime=None")
    if reason:
        text += f" Reason={reason} [root@2026-01-01T00:00:00]"
    return text

def save():
    tmp = path + ".tmp"
    with open(tmp, "w") as fh:
        json.dump(db, fh)
    os.replace(tmp, path)

if tool == "scontrol":
    rest = [a for a in args if a not in ("-o", "--future")]
    if rest[:2] == ["show", "node"]:
        names = expand(rest[2]) if len(rest) > 2 else sorted(nodes)
        rc = 0
        for name in names:
            if name in nodes:
                print(line(name, nodes[name]))
            else:
                print(f"Node {name} not found")
                rc = 1
        sys.exit(rc)
    if rest[:2] == ["show", "topology"]:
        for t in db.get("topology", []):
            print(t)
        sys.exit(0)
    if rest[:1] == ["update"]:
        kv = dict(a.split("=", 1) for a in rest[1:])
        for name in expand(kv["nodename"]):
            n = nodes[name]
            if kv.get("state") == "drain":
                n["flags"] = sorted(set(n.get("flags", [])) | {"DRAIN"})
                n["reason"] = kv["reason"]
            elif kv.get("state") == "resume":
                n["flags"] = [f for f in n.get("flags", []) if f != "DRAIN"]
                n["reason"] = ""
        save()
        sys.exit(0)
    if rest[:1] == ["ping"]:
        sys.exit(0)
if tool == "sinfo":
    names = expand(args[args.index("-n") + 1]) if "-n" in args else sorted(nodes)
    for name in names:
        n = nodes.get(name)
        if n is None or n.get("state") == "FUTURE":
            continue
        reason = n.get("reason", "")
        print("|".join([name, state_of(n).lower(), f"{n.get('cpu_alloc', 0)}/0/0/1",
                        n.get("addr", "127.0.0.1"), "localhost", "main*", "gpu", "(null)",
                        "root(0)" if reason else "Unknown",
                        "2026-01-01T00:00:00" if reason else "Unknown", reason or "none"]))
    sys.exit(0)
print(f"fake {tool}: unsupported {args}", file=sys.stderr)
sys.exit(2)
'''


class FakeSlurm:
    def __init__(self, folder: Path):
        self.dir = Path(folder)

    @property
    def state(self) -> dict:
        return json.loads((self.dir / "state.json").read_text())

    def node(self, name: str) -> dict:
        return self.state["nodes"][name]

    def set(self, **values) -> None:
        db = self.state
        db.update(values)
        (self.dir / "state.json").write_text(json.dumps(db))

    def calls(self) -> list[list[str]]:
        log = self.dir / "calls.log"
        return [c.split("\t") for c in log.read_text().splitlines()] if log.exists() else []


def install(folder: Path, nodes: dict[str, dict], topology: list[str] | None = None) -> FakeSlurm:
    """Write the fake commands and the node table ({name: {state, flags, reason, cpu_alloc,
    addr}}) into folder."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for tool in ("scontrol", "sinfo"):
        p = folder / tool
        p.write_text(PROGRAM.replace("@PYTHON@", sys.executable))
        p.chmod(0o755)
    (folder / "state.json").write_text(json.dumps({"nodes": nodes,
                                                   "topology": topology or []}))
    return FakeSlurm(folder)
