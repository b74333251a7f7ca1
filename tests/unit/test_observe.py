"""Observe mode: a check set to observe ([checks] observe, or a profile's `observe` list) runs,
records and shows its verdict, and never drains nor keeps a boot closed. Applied in one place
(airlock.runner.observed marks the records, airlock.finish.summarize leaves them out of the
run's verdict); seen in the run document, `airlock status` and the metrics."""

from __future__ import annotations

import json

import pytest
from prometheus_client.parser import text_string_to_metric_families

from airlock import finish
from airlock.config import loader as config
from airlock.dev.cluster import healthy_gpus
from airlock.errors import ConfigError
from airlock.hw.profiles import PROFILE_DIR
from airlock.records import results
from airlock.runner import run_level
from airlock.slurm.client import Node
from airlock.status import collect as status


def ecc_node(fake_node, tmp_path, extra: str = ""):
    """A proven node (fake Slurm, simulated GPUs) whose gpu2 has uncorrectable ECC errors."""
    node = fake_node(extra=f'[metrics]\ntextfile_dir = "{tmp_path}/prom"\n'
                           f'[profile]\nname = "h100-sxm-8x"\n{extra}')
    gpus = healthy_gpus(8)
    gpus[2]["ecc_volatile_uncorrected_dram"] = 3
    node.sim.write_text(json.dumps({"nodes": {node.name: {"gpus": gpus}}}))
    node.prove()
    return node


def test_an_observed_failure_lets_the_job_run_and_is_recorded_and_shown(fake_node, tmp_path):
    node = ecc_node(fake_node, tmp_path, '[checks]\nobserve = ["ecc"]\n')
    out = node.run("prolog")
    assert out.returncode == 0, out.stderr
    assert node.slurm.updates() == []  # no drain
    cfg = config.load(node.conf)
    run = results.ResultStore(cfg, node.name).latest()
    assert run["verdict"] == "warn" and run["failed_check"] is None
    assert run["observed"] == [{"check": "ecc", "verdict": "fail",
                                "detail": "gpu2 3 DRAM uncorrectable"}]
    assert run["detail"] == "observe: ecc fail (gpu2 3 DRAM uncorrectable)"
    rec = next(r for r in run["checks"] if r["check"] == "ecc")
    assert rec["verdict"] == "fail" and rec["observe"] is True
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for fam in text_string_to_metric_families(
                   (tmp_path / "prom" / "airlock.prom").read_text()) for s in fam.samples}
    labels = (("check", "ecc"), ("level", "quick"), ("node", node.name))
    assert samples[("airlock_check_observed", labels)] == 1
    assert samples[("airlock_check_verdict", (*labels, ("verdict", "fail")))] == 1
    row = status.node_status(Node(name=node.name, state="IDLE"),
                             results.NodeResults(node.name, run=run))
    assert row["observed"] == {"ecc": "fail: gpu2 3 DRAM uncorrectable"}
    assert "Checks in observe mode (recorded, never drain):\n  n1 ecc: fail: gpu2 3 DRAM" in \
        status.render({"nodes": [row], "summary": dict.fromkeys(status.STATES, 0),
                       "stuck": 0, "errors": 0})


def test_the_same_failure_not_observed_drains_and_refuses_the_job(fake_node, tmp_path):
    node = ecc_node(fake_node, tmp_path)
    out = node.run("prolog")
    assert out.returncode == 1
    (update,) = node.slurm.updates()
    assert any("airlock: FAIL ecc gpu2 3 DRAM uncorrectable" in w for w in update), update


def site_profile(tmp_path, **changes) -> str:
    import tomllib

    with open(f"{PROFILE_DIR}/h100-sxm-8x.toml", "rb") as fh:
        data = tomllib.load(fh)
    data.update(name="h100-site", **changes)
    folder = tmp_path / "profiles"
    folder.mkdir(exist_ok=True)
    lines = [f"{k} = {json.dumps(v)}" for k, v in data.items() if not isinstance(v, dict)]
    lines += [f"{k} = {{ {', '.join(f'{a} = {b}' for a, b in v.items())} }}"
              for k, v in data.items() if isinstance(v, dict)]
    (folder / "h100-site.toml").write_text("\n".join(lines) + "\n")
    return str(folder)


def fault_cfg(tmp_path, checks: dict, profile_changes: dict):
    gpus = healthy_gpus(8)
    gpus[2]["ecc_volatile_uncorrected_dram"] = 3
    sim = tmp_path / "gpus.json"
    sim.write_text(json.dumps({"nodes": {"n1": {"gpus": gpus}}}))
    return config.from_dict({
        "state_dir": str(tmp_path / "state"), "nvml": {"simulate": str(sim)},
        "checks": checks,
        "profile": {"name": "h100-site", "dirs": [site_profile(tmp_path, **profile_changes)]}})


def test_a_profile_ships_a_check_in_observe_mode_and_a_site_can_enforce_it(tmp_path):
    cfg = fault_cfg(tmp_path, {}, {"observe": ["ecc"]})
    records, ctx = run_level(cfg, "n1", "quick", only=["nvml", "ecc"])
    run = finish.summarize("n1", "quick", "manual", records, 0.0, ctx.profile_name)
    assert run["verdict"] == "warn" and [o["check"] for o in run["observed"]] == ["ecc"]
    cfg = fault_cfg(tmp_path, {"enforce": ["ecc"]}, {"observe": ["ecc"]})
    records, ctx = run_level(cfg, "n1", "quick", only=["nvml", "ecc"])
    run = finish.summarize("n1", "quick", "manual", records, 0.0, ctx.profile_name)
    assert run["verdict"] == "fail" and run["failed_check"] == "ecc" and run["observed"] == []


def test_an_observed_check_that_saw_nothing_does_not_hold_the_run():
    records = [{"check": "nvml", "verdict": "pass", "detail": "8 GPUs"},
               {"check": "dcgm", "verdict": "error", "detail": "hung", "observe": True}]
    run = finish.summarize("n1", "standard", "boot", records, 0.0)
    assert run["verdict"] == "warn" and run["unseen"] == []
    assert run["observed"] == [{"check": "dcgm", "verdict": "error", "detail": "hung"}]


def test_unknown_names_are_config_errors(tmp_path):
    cfg = fault_cfg(tmp_path, {"observe": ["ecc_typo"]}, {})
    with pytest.raises(ConfigError, match=r"\[checks\] observe: unknown check 'ecc_typo'"):
        run_level(cfg, "n1", "quick", only=["nvml"])
    cfg = fault_cfg(tmp_path, {}, {"observe": ["p2p_typo"]})
    with pytest.raises(ConfigError, match="observe: unknown check 'p2p_typo'"):
        run_level(cfg, "n1", "quick", only=["nvml", "ecc"])
    with pytest.raises(ConfigError, match="in both observe and enforce"):
        config.from_dict({"checks": {"observe": ["ecc"], "enforce": ["ecc"]}})


def test_status_ignores_malformed_observed_entries():
    run = {"observed": [{"check": "ecc", "verdict": "fail", "detail": "x"}, {"check": 1},
                        "junk", {"check": "p2p", "verdict": "warn"}]}
    assert status.observed_of(run) == {"ecc": "fail: x"}
    assert status.observed_of({"observed": "nope"}) == {}
