"""Where things live on disk, and how Airlock writes and reads its small JSON files.

A leaf: nothing here imports the rest of Airlock.

* `{node}` in a configured path (state_dir, log_dir, shared_dir, textfile_dir) stands for the node
  name; the dev cluster runs every node on one host, so per-node directories need it.
* A node's shared directory is <shared_dir>/<node>, or shared_dir itself with {node} replaced.
* Writes are atomic (a temporary file in the same directory, then rename), so a reader never sees
  half a document and a crash leaves the old one.
"""

from __future__ import annotations

import json
import os
import socket
import tempfile
from pathlib import Path
from typing import Any

NODE = "{node}"


def expand(template: str, node: str) -> str:
    """template with {node} replaced by the node name."""
    return template.replace(NODE, node)


def node_dir(template: str, node: str) -> Path:
    return Path(expand(template, node))


def shared_node_dir(shared_dir: str, node: str) -> Path | None:
    """This node's folder under the shared results directory (None when none is configured)."""
    if not shared_dir:
        return None
    if NODE in shared_dir:
        return node_dir(shared_dir, node)
    return Path(shared_dir) / node


def local_node_name() -> str:
    """The Slurm node name of this host: $SLURMD_NODENAME (set in every Slurm hook), else the
    short host name."""
    return os.environ.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]


def atomic_write(path: Path, data: Any) -> None:
    atomic_write_text(path, json.dumps(data, indent=1, sort_keys=True) + "\n")


def atomic_write_text(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def read_json(path: Path) -> Any | None:
    """The parsed document, or None when it is missing, unreadable or not JSON."""
    try:
        with open(path) as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return None
