"""`airlock doctor` against a real cluster whose slurm.conf Includes the fragment `airlock render
slurm-conf` produced (so this also proves Slurm accepts the rendered fragment), then broken item
by item."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from airlock.admin import doctor, render
from airlock.dev.cluster import DevCluster
from tests.cluster.conftest import running_cluster

HOOK_KEYS = ("HealthCheckProgram", "HealthCheckInterval", "HealthCheckNodeState",
             "HealthCheckTimeout", "Prolog", "Epilog", "PrologEpilogTimeout")


class IncludedCluster(DevCluster):
    """The dev cluster, with its hook lines replaced by an Include of the rendered fragment."""

    def slurm_conf(self) -> str:
        lines = [ln for ln in super().slurm_conf().splitlines()
                 if ln.split("=", 1)[0] not in HOOK_KEYS]
        bin_dir = self.root / "bin"
        fragment = render.slurm_conf(self.slurm_version,
                                     healthcheck_program=f"{bin_dir}/healthcheck",
                                     prolog=f"{bin_dir}/prolog", epilog=f"{bin_dir}/epilog",
                                     interval=300, prolog_epilog_timeout=30)
        (self.root / "airlock-slurm.conf").write_text(fragment)
        lines.insert(1, f"Include {self.root}/airlock-slurm.conf")
        return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def cluster(slurm_variant):
    with running_cluster(slurm_variant, IncludedCluster, wait=True, nodes=["node1"],
                         airlock={"registration": {"level": "quick"}}) as c:
        yield c


def _doctor(c: DevCluster, *args: str, config: Path | None = None) -> tuple[int, dict[str, str]]:
    env = c.env()
    if config is not None:
        env["AIRLOCK_CONFIG"] = str(config)
    out = subprocess.run([sys.executable, "-m", "airlock.cli", "doctor", "--node", "node1",
                          "--no-torch", *args], env=env, capture_output=True, text=True,
                         timeout=60)
    assert "Traceback" not in out.stderr, out.stderr
    lines = {}
    for line in out.stdout.splitlines()[:-1]:
        status, rest = line.split(None, 1)
        name, _, detail = rest.partition(": ")
        lines[name] = f"{status} {detail}"
    return out.returncode, lines


@pytest.mark.cluster
def test_doctor_passes_on_a_good_install(cluster):
    conf = doctor.parse_show_config(cluster.slurm.scontrol("show", "config"))
    assert conf["HealthCheckProgram"] == f"{cluster.root}/bin/healthcheck"
    # 22.05 prints "Prolog", 24.11+ "Prolog[0]"
    assert doctor.hook_paths(conf, "Prolog") == [f"{cluster.root}/bin/prolog"]
    rc, lines = _doctor(cluster)
    assert rc == 0, lines
    for item in ("install", "config", "state_dir", "shared_dir", "scontrol ping", "Slurm version",
                 "HealthCheckProgram",
                 "Prolog", "Epilog", "HealthCheckInterval", "PrologEpilogTimeout", "NVML"):
        assert lines[item].startswith("OK "), (item, lines[item])
    assert lines["HealthCheckInterval"] == "OK 300 s, node state ANY"
    # what the running Slurm offers, asked of it: 26.05's timeout as rendered, none before
    release = cluster.slurm_version
    assert lines["HealthCheckTimeout"] == ("OK 299 s" if release == "26.05" else
                                           f"OK none in Slurm {release}: the fixed 60 s")
    assert "HealthCheckNodeState" not in lines
    assert lines["NVML"].endswith(": 8 GPUs")


@pytest.mark.cluster
def test_doctor_names_each_broken_item(cluster, tmp_path):
    epilog = cluster.root / "bin" / "epilog"
    bad = tmp_path / "airlock.toml"
    bad.write_text(cluster.airlock_conf.read_text().replace(
        str(cluster.sim_file), str(tmp_path / "missing.json")))
    epilog.chmod(0o644)
    try:
        rc, lines = _doctor(cluster, config=bad)
    finally:
        epilog.chmod(0o755)
    assert rc == 1
    assert lines["Epilog"] == f"FAIL {epilog} is not executable"
    assert lines["NVML"].startswith("FAIL simulation configured but unusable")
    assert "missing.json" in lines["NVML"]
    assert lines["Prolog"].startswith("OK ") and lines["scontrol ping"].startswith("OK ")

    broken = tmp_path / "broken.toml"
    broken.write_text(cluster.airlock_conf.read_text() + "\n[prolog]\nbugdet = 3\n")
    rc, lines = _doctor(cluster, config=broken)
    assert rc == 1
    assert lines["config"].startswith("FAIL ") and "unknown key 'bugdet'" in lines["config"]
    # Without a config the Slurm items are still checked (SLURM_CONF from the environment).
    assert lines["scontrol ping"].startswith("OK ")
    assert lines["HealthCheckProgram"].startswith("OK ")


@pytest.mark.cluster
def test_doctor_finds_missing_slurm_lines_in_real_config(cluster):
    text = cluster.slurm.scontrol("show", "config")
    stripped = "\n".join(ln for ln in text.splitlines()
                         if not ln.startswith(("Prolog ", "Prolog[", "HealthCheckProgram")))
    conf = doctor.parse_show_config(stripped)
    items = {i.name: i for i in doctor.check_hooks(conf)}
    assert items["Prolog"].status == "FAIL" and "not set" in items["Prolog"].detail
    assert items["HealthCheckProgram"].status == "FAIL"
    assert items["Epilog"].status == "OK"
