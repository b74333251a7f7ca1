"""Cluster fixtures. Every test under tests/cluster/ is marked `cluster`.

The Slurm variants: "22.05" (the host's packages), "24.11" (Debian 13's) and "26.05" (Debian
sid's), each chrooted one in the chroot scripts/slurm-chroot.sh builds, and "24.11-dbd" (24.11
with the slurmdbd accounting plugin, without which 24.11 keeps the reason of a resumed node;
22.05 and 26.05 clear it either way, so they need no such variant). The variant is a
module-scoped parameter, so a module's own cluster fixture starts once per variant; test ids
end in [22.05], [26.05], [24.11-dbd], ...

Which variants a test runs on is chosen so that CI stays inside its budget and still sees every
difference. An unmarked cluster test runs on DEFAULT_VARIANTS: the oldest release and the newest,
which differ the most (no `scontrol --json` against HealthCheckTimeout and its 4 s boot hook).
A test whose subject is what differs between releases says so with
`@pytest.mark.slurm_variants(...)`: the version tests (test_slurm_versions.py) and the fault
matrix's Slurm-sensitive faults run on all three releases, 24.11's resume paths also with
accounting. AIRLOCK_SLURM_VARIANTS=
22.05 (comma-separated) narrows a run while developing; CI sets nothing and runs every variant.

`cluster_factory` starts a real Slurm cluster (munged, slurmctld, slurmd per node) in a short
temp dir (munge's socket path must stay under 108 bytes) and stops everything by PID afterwards,
failing the test if any of its processes or mounts survive."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from airlock.config import loader as config_mod
from airlock.dev.cluster import DevCluster

HERE = Path(__file__).parent
CHROOT_SCRIPT = HERE.parents[1] / "scripts" / "slurm-chroot.sh"
VARIANTS: dict[str, dict] = {
    "22.05": {"slurm_version": "22.05"},
    "24.11": {"slurm_version": "24.11"},
    "24.11-dbd": {"slurm_version": "24.11", "accounting": True},
    "26.05": {"slurm_version": "26.05"},
}
DEFAULT_VARIANTS = ("22.05", "26.05")
RELEASES = ("22.05", "24.11", "26.05")  # every release, without accounting


def pytest_collection_modifyitems(config, items) -> None:
    only = [v for v in os.environ.get("AIRLOCK_SLURM_VARIANTS", "").split(",") if v]
    keep, drop = [], []
    for item in items:
        spec = getattr(item, "callspec", None)
        variant = spec.params.get("slurm_variant") if spec is not None else None
        if HERE in Path(item.fspath).parents:
            item.add_marker(pytest.mark.cluster)
        # the unit of work for `--dist loadgroup` (pyproject.toml): a file, and a cluster test
        # file once per variant (a module-scoped cluster is one per variant either way)
        group = item.nodeid.split("::", 1)[0] + (f"[{variant}]" if variant else "")
        item.add_marker(pytest.mark.xdist_group(group))
        (drop if only and variant is not None and variant not in only else keep).append(item)
    if drop:  # deselected, not skipped: the run says it ran fewer tests
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def pytest_generate_tests(metafunc) -> None:
    if "slurm_variant" not in metafunc.fixturenames:
        return
    marker = metafunc.definition.get_closest_marker("slurm_variants")
    names = list(marker.args) if marker else list(DEFAULT_VARIANTS)
    unknown = [n for n in names if n not in VARIANTS]
    if unknown:
        raise pytest.UsageError(f"unknown Slurm variant {unknown[0]!r} in {metafunc.function}")
    metafunc.parametrize("slurm_variant", names, indirect=True, scope="module", ids=names)


REQUIRED = ("munged", "slurmctld", "slurmd", "scontrol", "sbatch")
_chroot_ok: set[str] = set()


def require_slurm(variant: str = "22.05") -> None:
    version = VARIANTS[variant]["slurm_version"]
    if version == "22.05":
        path = os.environ.get("PATH", "") + ":/usr/sbin:/sbin"
        missing = [b for b in REQUIRED if shutil.which(b, path=path) is None]
        if missing:
            pytest.fail(f"Slurm test cluster needs {', '.join(missing)} (see .ci/run)")
        return
    if version not in _chroot_ok:
        check = subprocess.run(["bash", str(CHROOT_SCRIPT), "--check", version],
                               capture_output=True, text=True, timeout=30)
        if check.returncode != 0:
            pytest.fail(f"Slurm {version} needs its chroot: {check.stderr.strip()}")
        _chroot_ok.add(version)


@pytest.fixture(scope="module")
def slurm_variant(request) -> str:
    """The Slurm variant of this test: "22.05", "26.05", "24.11-dbd", ..."""
    require_slurm(request.param)
    return request.param


def variant_kwargs(variant: str) -> dict:
    return dict(VARIANTS[variant])


def host_run_file(c: DevCluster) -> str:
    """Where a hook run without the cluster's $AIRLOCK_RUNTIME_DIR would keep this cluster's
    config essentials: the host's /run, which a test must never write."""
    saved = os.environ.pop(config_mod.RUNTIME_ENV, None)
    try:
        return config_mod._memory(str(c.airlock_conf))
    finally:
        if saved is not None:
            os.environ[config_mod.RUNTIME_ENV] = saved


def check_gone(c: DevCluster) -> list[str]:
    """What of a stopped cluster is still there: processes, mounts, and a file in the host's
    /run (removed once reported)."""
    left = [f"process {p}" for p in c.leftovers()] + [f"mount {m}" for m in c.leftover_mounts()]
    host = host_run_file(c)
    if os.path.lexists(host):
        os.unlink(host)
        left.append(f"host file {host} (a hook ran without the cluster's AIRLOCK_RUNTIME_DIR)")
    return left


@contextmanager
def running_cluster(variant: str, cls: type[DevCluster] = DevCluster, start: bool = True,
                    wait: bool = False, prepare=None, **kwargs) -> Iterator[DevCluster]:
    """A cluster for a module fixture: started (after prepare(c) when given), stopped after,
    failing if anything of it survives."""
    require_slurm(variant)
    root = tempfile.mkdtemp(prefix="alc-", dir="/tmp")
    c = cls(root, **variant_kwargs(variant), **kwargs)
    try:
        if prepare is not None:
            c.write_files()
            prepare(c)
        if start:
            c.start(wait=wait)
        yield c
    finally:
        c.stop()
        left = check_gone(c)
        if not left and not os.environ.get("AIRLOCK_KEEP_CLUSTERS"):
            shutil.rmtree(root, ignore_errors=True)
        assert not left, f"left after stop: {left}"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Keep each phase's report on the item, so that a fixture's teardown knows the test failed."""
    outcome = yield
    rep = outcome.get_result()
    setattr(item, f"rep_{rep.when}", rep)


TAIL_LINES = 25


def _tail(path: Path, lines: int = TAIL_LINES) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError as exc:
        return f"  ({exc.strerror or exc})"
    return "\n".join("  " + line[:300] for line in text[-lines:])


def diagnose(c: DevCluster) -> str:
    """What a failed cluster test leaves for whoever reads the CI log: Slurm's view of nodes
    and jobs, and the tail of every daemon and Airlock log (the cluster's files are deleted)."""
    out = [f"=== cluster {c.root} (Slurm {c.variant}) ==="]
    for argv in (["scontrol", "-o", "show", "node"], ["scontrol", "-o", "show", "job"]):
        try:
            out += [f"$ {' '.join(argv)}", c.run(argv, timeout=10, check=False).strip()]
        except Exception as exc:  # the controller may be what failed
            out.append(f"$ {' '.join(argv)}: {exc}")
    root = Path(c.root)
    logs = sorted(root.glob("log/*.log")) + sorted(root.glob("airlock/log/*/*.log"))
    states = sorted(root.glob("airlock/state/*/*.json"))
    for path in logs + states:
        out += [f"--- {path.relative_to(root)}", _tail(path)]
    return "\n".join(out)


@pytest.fixture(scope="session")
def wheel_python(tmp_path_factory) -> Path:
    """A clean venv with Airlock installed from a wheel of this checkout (once per worker;
    under /tmp, which the chrooted releases see too)."""
    from tests.install.wheel import installed_python
    return installed_python(tmp_path_factory.mktemp("wheel"))


@pytest.fixture
def cluster_factory(slurm_variant, request) -> Iterator:
    """A module that sets HOOKS_FROM_WHEEL = True gets clusters whose hooks and suites run
    from the installed wheel (wheel_python) instead of this checkout."""
    made: list[tuple[DevCluster, str]] = []
    from_wheel = getattr(request.module, "HOOKS_FROM_WHEEL", False)

    def make(start: bool = True, wait: bool = False, **kwargs) -> DevCluster:
        if from_wheel:
            kwargs.setdefault("python", request.getfixturevalue("wheel_python"))
        root = tempfile.mkdtemp(prefix="alc-", dir="/tmp")
        c = DevCluster(root, **variant_kwargs(slurm_variant), **kwargs)
        made.append((c, root))
        if start:
            c.start(wait=wait)
        return c

    yield make
    failed = getattr(request.node, "rep_call", None)
    if failed is not None and failed.failed:
        for c, _ in made:
            print(diagnose(c))  # shown under "Captured stdout teardown" of the failure
    leftovers = []
    for c, root in made:
        c.stop()
        left = check_gone(c)
        leftovers += left
        if not left and not os.environ.get("AIRLOCK_KEEP_CLUSTERS"):
            shutil.rmtree(root, ignore_errors=True)
    assert not leftovers, f"left after stop: {leftovers}"


@pytest.fixture
def cluster(cluster_factory) -> DevCluster:
    """Three nodes with healthy simulated GPUs, started; tests wait for what they need."""
    return cluster_factory(nodes=["node1", "node2", "node3"])
