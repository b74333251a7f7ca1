"""The dev cluster's own bookkeeping: what it counts as its processes.

Mount namespace ids are inode numbers the kernel hands out again as soon as a namespace is
gone, so a namespace one cluster saw (a fresh boot's) can come back as another cluster's under
xdist. A cluster that killed "everything in a namespace it once saw" killed its neighbour's
namespace holder, and every later scontrol of that neighbour failed (nsenter: cannot open
/proc/PID/ns/mnt), as CI saw on 26.05."""
from __future__ import annotations

import os
import shutil
import subprocess
import time

import pytest

from airlock.dev.cluster import MARKER, DevCluster, _mount_ns

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare"),
                                reason="needs root for a private mount namespace")


def _in_own_namespace(marker: str) -> subprocess.Popen:
    env = {**os.environ, MARKER: marker}
    p = subprocess.Popen(["unshare", "--mount", "--propagation", "private", "--",
                          "sleep", "60"], env=env)
    deadline = time.monotonic() + 10
    while _mount_ns(p.pid) in ("", _mount_ns(os.getpid())) and time.monotonic() < deadline:
        time.sleep(0.02)
    return p


def test_a_namespace_seen_once_does_not_make_another_clusters_process_ours(tmp_path):
    mine = DevCluster(tmp_path / "mine", nodes=["node1"])
    other = _in_own_namespace(str(tmp_path / "other"))
    try:
        ns = _mount_ns(other.pid)
        assert ns and ns != _mount_ns(os.getpid())
        # as if the id had been one of our fresh boots' namespaces before the kernel reused it
        mine._started = True
        mine._seen_ns.add(ns)
        assert other.pid not in mine.members()
        assert not [m for m in mine.leftover_mounts() if f"pid {other.pid} " in m]
        assert other.pid not in mine.stop()
        assert other.poll() is None, "another cluster's process was killed"
    finally:
        other.kill()
        other.wait()


def test_an_unmarked_process_in_our_namespace_is_still_ours(tmp_path):
    """24.11+'s slurmstepd overwrites its environment: the namespace is how we still find it."""
    mine = DevCluster(tmp_path / "mine", nodes=["node1"])
    env = {k: v for k, v in os.environ.items() if k != MARKER}
    p = subprocess.Popen(["unshare", "--mount", "--propagation", "private", "--",
                          "sleep", "60"], env=env)
    try:
        deadline = time.monotonic() + 10
        while _mount_ns(p.pid) in ("", _mount_ns(os.getpid())) and time.monotonic() < deadline:
            time.sleep(0.02)
        mine._started = True
        mine._seen_ns.add(_mount_ns(p.pid))
        assert p.pid in mine.members()
    finally:
        p.kill()
        p.wait()
