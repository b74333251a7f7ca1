"""Cluster fixtures. Every test under tests/cluster/ is marked `cluster`.

`cluster_factory` starts a real Slurm cluster (munged, slurmctld, slurmd per node) in a short
temp dir (munge's socket path must stay under 108 bytes) and stops everything by PID afterwards,
failing the test if any of its processes survive."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from airlock.dev.cluster import DevCluster


def pytest_collection_modifyitems(config, items) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(item.fspath).parents:
            item.add_marker(pytest.mark.cluster)


REQUIRED = ("munged", "slurmctld", "slurmd", "scontrol", "sbatch")


def require_slurm() -> None:
    path = os.environ.get("PATH", "") + ":/usr/sbin:/sbin"
    missing = [b for b in REQUIRED if shutil.which(b, path=path) is None]
    if missing:
        pytest.fail(f"Slurm test cluster needs {', '.join(missing)} (see .ci/run)")


@pytest.fixture
def cluster_factory() -> Iterator:
    require_slurm()
    made: list[tuple[DevCluster, str]] = []

    def make(start: bool = True, wait: bool = False, **kwargs) -> DevCluster:
        root = tempfile.mkdtemp(prefix="alc-", dir="/tmp")
        c = DevCluster(root, **kwargs)
        made.append((c, root))
        if start:
            c.start(wait=wait)
        return c

    yield make
    leftovers = []
    for c, root in made:
        c.stop()
        leftovers += c.leftovers()
        if not leftovers and not os.environ.get("AIRLOCK_KEEP_CLUSTERS"):
            shutil.rmtree(root, ignore_errors=True)
    assert not leftovers, f"processes left running after stop: {leftovers}"


@pytest.fixture
def cluster(cluster_factory) -> DevCluster:
    """Three nodes with healthy simulated GPUs, started; tests wait for what they need."""
    return cluster_factory(nodes=["node1", "node2", "node3"])
