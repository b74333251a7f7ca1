"""The Slurm versions CI tests, `airlock doctor`'s list and the documented table agree."""

from pathlib import Path

from airlock.slurm.client import TESTED_VERSIONS
from tests.cluster.conftest import VARIANTS

ROOT = Path(__file__).parents[2]


def test_tested_versions_are_the_cluster_suite_variants_and_documented():
    assert set(TESTED_VERSIONS) == {v["slurm_version"] for v in VARIANTS.values()}
    readme = ROOT.joinpath("README.md").read_text().split("## Supported Slurm", 1)[1]
    guide = ROOT.joinpath("docs", "guide.md").read_text().split("## 8. Supported Slurm", 1)[1]
    for version in TESTED_VERSIONS:
        assert f"| {version} (Debian" in readme, version
        assert f"| {version}." in guide, version
