"""Record what a real Slurm prints about nodes, for tests/unit/test_slurm_parse.py.

    python tests/data/record.py 22.05   # the host's Slurm, into tests/data/22.05/
    python tests/data/record.py 24.11   # the chroot's (scripts/slurm-chroot.sh), tests/data/24.11/
    python tests/data/record.py 26.05   # sid's chroot, tests/data/26.05/

A dev cluster with plain hooks (exit 0: Slurm's own behaviour, not Airlock's) is put into every
state the parsers must read, then each reader's output is saved as Slurm printed it, with TZ=UTC
(times in the text form are local time; the tests read them under UTC too):

    node1  IDLE+DRAIN, Airlock's reason          node2  IDLE+DRAIN, a hostile foreign reason
    node3  a running job, then drained            node4  slurmd stopped, set DOWN with a reason
    node5  drained, then resumed (24.11 and 26.05 without accounting keep the reason)
    node9  FUTURE, drained with a reason          cloud1 CLOUD, powered down
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))

from airlock.dev.cluster import DevCluster  # noqa: E402

HOSTILE = "disk swap [ticket 42] Reason=x k=v [bob@2026-01-01T00:00:00] ünïcode ✓ ]["


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("version", choices=("22.05", "24.11", "26.05"))
    args = ap.parse_args()
    out = HERE / args.version
    out.mkdir(exist_ok=True)
    root = tempfile.mkdtemp(prefix="alc-rec-", dir="/tmp")
    c = DevCluster(root, nodes=["node1", "node2", "node3", "node4", "node5"], future=["node9"],
                   cloud=["cloud1"], health_interval=3600, slurm_version=args.version,
                   hooks=dict.fromkeys(("healthcheck", "prolog", "epilog"), "#!/bin/sh\nexit 0\n"))
    env_tz = {"TZ": "UTC"}

    def run(*argv: str, check: bool = True) -> str:
        import subprocess

        proc = subprocess.run([c.client(argv[0]), *argv[1:]], env=c.env(**env_tz),
                              capture_output=True, text=True, timeout=30)
        if check and proc.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)}: {proc.stderr.strip()}")
        return proc.stdout

    def update(node: str, *what: str) -> None:
        run("scontrol", "update", f"nodename={node}", *what)

    try:
        c.start(wait=True)
        update("node1", "state=drain", "reason=airlock: FAIL nvml.xid gpu3 xid 79 (fell off bus)")
        update("node2", "state=drain", f"reason={HOSTILE}")
        job = c.sbatch("sleep 600", "-w", "node3")
        c.wait(lambda: c.node("node3").busy, 30, "node3 running a job")
        update("node3", "state=drain", "reason=airlock: pending standard check boot")
        c.stop_node("node4")
        update("node4", "state=down", "reason=Not responding")
        update("node5", "state=drain", "reason=airlock: pending standard check new")
        update("node5", "state=resume")
        update("node9", "state=drain", "reason=ops: hold Owner=ops ticket=INC-42")
        time.sleep(1)
        files = {
            "show-node-o.txt": ("scontrol", "-o", "--future", "show", "node"),
            "show-node2-o.txt": ("scontrol", "-o", "--future", "show", "node", "node2"),
            "sinfo.json": ("sinfo", "--json"),
            "show-config.txt": ("scontrol", "show", "config"),
        }
        if args.version != "22.05":
            files["show-node.json"] = ("scontrol", "--json", "--future", "show", "node")
            files["show-node2.json"] = ("scontrol", "--json", "--future", "show", "node", "node2")
        # the text and JSON snapshots must show the same moment: retake until nothing moved
        for _ in range(5):
            got = {name: run(*argv) for name, argv in files.items()}
            again = run(*files["show-node-o.txt"])
            if _stable(got["show-node-o.txt"]) == _stable(again):
                break
        for name, text in got.items():
            (out / name).write_text(text)
        # a reason with a line break: `-o` cannot show it on one line, JSON can
        update("node1", "state=drain", "reason=first line\nsecond line")
        (out / "newline-reason-o.txt").write_text(run("scontrol", "-o", "--future", "show",
                                                      "node", "node1"))
        if args.version != "22.05":
            (out / "newline-reason.json").write_text(run("scontrol", "--json", "--future",
                                                         "show", "node", "node1"))
        run("scancel", str(job), check=False)
        print(f"recorded Slurm {args.version} into {out}")
        return 0
    finally:
        c.stop()
        left = c.leftovers() + c.leftover_mounts()
        if not left:
            shutil.rmtree(root, ignore_errors=True)
        else:
            print(f"left after stop: {left}", file=sys.stderr)


def _stable(text: str) -> list[str]:
    """Node lines without the fields that move on their own (load, free memory)."""
    return [" ".join(t for t in line.split() if not t.startswith(("CPULoad=", "FreeMem=")))
            for line in text.splitlines()]


if __name__ == "__main__":
    sys.exit(main())
