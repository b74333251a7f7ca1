"""SKU profiles as data: every shipped profile validates, bad files fail with a clear line, and a
node gets the right profile from config (node, partition, feature, name) or detection."""

from __future__ import annotations

import pytest

from airlock.config import loader as config
from airlock.config.sections.checks import ProfileSection
from airlock.errors import ConfigError
from airlock.hw import profiles
from airlock.slurm.client import Node

SHIPPED = {"h100-sxm-8x", "h200-8x", "a100-80gb-8x", "b200-8x", "l40s", "cpu"}


def test_shipped_profiles_are_complete():
    shipped = profiles.builtin()
    assert set(shipped) == SHIPPED
    for name, p in shipped.items():
        floors = p.get("tflops_floor")
        assert set(floors) == set(profiles.DTYPES), name
        assert p.get("busbw_floor_gbps") > 0, name
        assert p.get("xid_policy") == "default", name
        if name != "cpu":
            assert p.gpus == 8 and p.memory_mib > 0 and p.models, name
            assert p.get("temp_fail_c") > p.get("temp_warn_c") > 0, name
            assert "hw_slowdown" in p.get("throttle_fail"), name
            assert p.get("pcie_width") == 16, name


def test_nvlink_expectations():
    p = profiles.builtin()
    assert p["h100-sxm-8x"].get("nvlink_links") == 18
    assert p["a100-80gb-8x"].get("nvlink_links") == 12
    assert p["l40s"].get("nvlink_links") == 0


def test_busbw_floors_sit_below_ring_measurements():
    p = profiles.builtin()
    # nccl-tests ring on 8x H100 reaches about 370 GB/s without NVLink SHARP (DESIGN.md section 3)
    assert p["h100-sxm-8x"].get("busbw_floor_gbps") < 370
    assert p["a100-80gb-8x"].get("busbw_floor_gbps") < 228


def test_cpu_profile_floors_let_a_cpu_pass():
    cpu = profiles.builtin()["cpu"]
    assert cpu.gpus == 0
    assert 0 < cpu.get("tflops_floor")["fp32"] <= 0.001
    assert 0 < cpu.get("busbw_floor_gbps") <= 0.01


@pytest.mark.parametrize("text,words", [
    ('name = "x"\ngpu = 8\n', "unknown key 'gpu'"),
    ('gpus = 8\n', "missing key 'name'"),
    ('name = "x"\ngpus = "8"\n', "gpus: expected a whole number >= 0, got '8'"),
    ('name = "x"\ntflops_floor = { bf16 = "fast" }\n', "tflops_floor.bf16: expected a number"),
    ('name = "x"\ntflops_floor = { int8 = 1 }\n', "unknown dtype 'int8'"),
    ('name = "x"\nthrottle_fail = ["hw_slow"]\n', "unknown throttle reason 'hw_slow'"),
    ('name = "x"\nthrottle_fail = ["hw_thermal"]\nthrottle_warn = ["hw_thermal"]\n',
     "'hw_thermal' is in two of"),
    ('name = "x"\ntemp_warn_c = 90\ntemp_fail_c = 80\n', "temp_warn_c 90 is above temp_fail_c"),
    ('name = "x"\npersistence_mode = "maybe"\n', "persistence_mode: expected one of"),
    ('name = "x"\nbusbw_floor_gbps = -1\n', "busbw_floor_gbps: expected a number >= 0"),
    ('name = "x\n', "invalid TOML"),
])
def test_bad_profile_file_is_one_clear_error(tmp_path, text, words):
    f = tmp_path / "bad.toml"
    f.write_text(text)
    with pytest.raises(ConfigError) as err:
        profiles.load_file(str(f))
    assert words in str(err.value)
    assert str(f) in str(err.value)


def test_detect_by_model_and_count():
    assert profiles.detect(["NVIDIA H100 80GB HBM3"], 8).name == "h100-sxm-8x"
    assert profiles.detect(["NVIDIA H200"], 8).name == "h200-8x"
    assert profiles.detect(["NVIDIA A100-SXM4-80GB"], 8).name == "a100-80gb-8x"
    assert profiles.detect(["NVIDIA L40S"], 4).name == "l40s"
    assert profiles.detect([], 0).name == "cpu"
    unknown = profiles.detect(["NVIDIA GeForce RTX 4090"], 2)
    assert unknown.name == "auto:NVIDIA GeForce RTX 4090" and unknown.gpus == 2


def test_site_directory_adds_and_replaces(tmp_path):
    (tmp_path / "h100.toml").write_text('name = "h100-sxm-8x"\nmodels = ["H100"]\ngpus = 4\n')
    (tmp_path / "gb200.toml").write_text('name = "gb200-4x"\nmodels = ["GB200"]\ngpus = 4\n')
    profiles._CACHE.clear()
    found = profiles.available([str(tmp_path)])
    assert found["h100-sxm-8x"].gpus == 4 and "gb200-4x" in found
    assert profiles.builtin()["h100-sxm-8x"].gpus == 8
    with pytest.raises(ConfigError, match="profile directory .* not found"):
        profiles.available([str(tmp_path / "nope")])


def node(partitions=(), features=()) -> Node:
    return Node("gpu7", "IDLE", partitions=tuple(partitions), features=tuple(features))


def test_choose_name_precedence():
    sec = ProfileSection(name="h100-sxm-8x", by_node={"gpu[1-8]": "a100-80gb-8x"},
                             by_partition={"big": "h200-8x"}, by_feature={"l40s": "l40s"})
    assert profiles.choose_name(sec, "gpu7", node(["big"], ["l40s"]))[0] == "a100-80gb-8x"
    assert profiles.choose_name(sec, "gpu9", node(["big"], ["l40s"])) == ("h200-8x",
                                                                    "by_partition big")
    assert profiles.choose_name(sec, "gpu9", node(["main"], ["l40s"]))[0] == "l40s"
    assert profiles.choose_name(sec, "gpu9", node(["main"], []))[0] == "h100-sxm-8x"
    # Slurm unreachable: the tables that need it are passed over, the rest still apply
    assert profiles.choose_name(sec, "gpu9", None)[0] == "h100-sxm-8x"
    assert profiles.choose_name(ProfileSection(), "gpu9", None) == ("", "")


def test_profile_section_validation():
    with pytest.raises(ConfigError, match=r"\[profile\] by_partition.big: unknown profile 'h300'"):
        config.from_dict({"profile": {"by_partition": {"big": "h300"}}})
    with pytest.raises(ConfigError, match="name: unknown profile 'nope'"):
        config.from_dict({"profile": {"name": "nope"}})
    with pytest.raises(ConfigError, match="by_node: expected a table"):
        config.from_dict({"profile": {"by_node": "gpu1"}})
    cfg = config.from_dict({"profile": {"by_node": {"n[1-2]": "cpu"}}})
    assert not cfg.profile.needs_slurm
    assert config.from_dict({"profile": {"by_feature": {"x": "cpu"}}}).profile.needs_slurm


def test_context_profile_from_config_needs_no_nvml(tmp_path):
    """A profile set in config is known even while NVML hangs (the burn-in floors need it)."""
    import json

    from airlock.checks.context import Context

    sim = tmp_path / "gpus.json"
    sim.write_text(json.dumps({"nodes": {"gpu3": {"gpus": [], "nvml_hang_s": 5}}}))
    cfg = config.from_dict({"nvml": {"simulate": str(sim), "timeout": 0.2},
                            "profile": {"by_node": {"gpu[1-4]": "h200-8x"}}})
    ctx = Context.create(cfg, "gpu3")
    assert ctx.profile.name == "h200-8x"
    assert ctx._snapshot is None


def test_shipped_files_are_named_after_their_profiles():
    """named() reads only <name>.toml, so a shipped file must carry the profile of its name."""
    import os

    from airlock.hw.profiles import PROFILE_DIR

    for fname in os.listdir(PROFILE_DIR):
        if fname.endswith(".toml") and fname not in profiles.NOT_PROFILES:
            assert profiles.load_file(os.path.join(PROFILE_DIR, fname)).name == fname[:-5]


def test_a_named_profile_loads_only_its_own_file():
    """Lazy loading, for the periodic hook: a profile named in config (or `cpu`) reads one
    file, in a fresh process; detection by model reads them all."""
    import subprocess
    import sys

    code = ("from airlock.hw import profiles; profiles.named('h200-8x'); profiles.detect([], 0); "
            "print(sorted(p.rsplit('/', 1)[1] for p in profiles._FILES)); "
            "profiles.detect(['NVIDIA H200'], 8); print(len(profiles._FILES))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    first, total = out.stdout.splitlines()
    assert first == "['cpu.toml', 'h200-8x.toml']"
    assert int(total) == len(profiles.builtin())


def test_named_profile_errors_name_the_known_ones(tmp_path):
    with pytest.raises(ConfigError, match=r"unknown profile 'h300' \(known: .*h200-8x"):
        profiles.named("h300")
    with pytest.raises(ConfigError, match="unknown profile '../cpu'"):
        profiles.named("../cpu")  # never a path out of the profile directory
    (tmp_path / "mine.toml").write_text('name = "site-h200"\nmodels = ["H200"]\ngpus = 1\n')
    assert profiles.named("site-h200", [str(tmp_path)]).gpus == 1
    assert profiles.named("h200-8x", [str(tmp_path)]).gpus == 8


def test_a_gpu_node_nvml_cannot_see_never_gets_the_cpu_profile():
    assert profiles.detect([], 0, pci_gpus=0).name == "cpu"
    p = profiles.detect([], 0, pci_gpus=8)
    assert p.name == "auto:nvidia-pci" and p.gpus == 8
