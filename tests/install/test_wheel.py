"""The wheel lane: Airlock as a site installs it, a wheel built from this checkout in a clean
venv with no checkout anywhere on sys.path (tests/install/wheel.py), run the ways slurm.conf,
systemd and an operator run it. A module or data file the package list leaves out fails here
(a wheel of main before issue 24 died in every hook: `No module named 'airlock.settings'`)."""

from __future__ import annotations

import json
import subprocess
import zipfile
from pathlib import Path

import pytest

from tests.install.wheel import ROOT, installed_python

# The card's folders mapped into the airlock namespace (pyproject's package-dir).
SOURCES = {"airlock": ROOT / "airlock", "airlock/checks": ROOT / "checks",
           "airlock/hooks": ROOT / "hooks", "airlock/templates": ROOT / "templates"}


@pytest.fixture(scope="module")
def venv(tmp_path_factory) -> Path:
    return installed_python(tmp_path_factory.mktemp("wheel"))


def _run(venv: Path, *argv: str, cwd: Path, env: dict | None = None, timeout: float = 120,
         script: str | None = None) -> subprocess.CompletedProcess:
    cmd = [str(venv.parent / script), *argv] if script else [str(venv), *argv]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, env=env,
                          timeout=timeout)


def test_the_wheel_holds_every_file_of_the_tree(venv):
    """Every module and data file under the package folders is in the wheel: the package
    list is derived from the tree, so a new subpackage cannot be left out."""
    wheel = next(venv.parents[2].glob("dist/*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    missing = []
    for prefix, folder in SOURCES.items():
        for f in folder.rglob("*"):
            rel = f.relative_to(folder)
            if f.is_dir() or "__pycache__" in rel.parts or f.suffix == ".pyc":
                continue
            if prefix == "airlock" and rel.parts[0] in ("checks", "hooks", "templates"):
                continue
            if f"{prefix}/{rel.as_posix()}" not in names:
                missing.append(f"{prefix}/{rel.as_posix()}")
    assert not missing, f"not in the wheel: {missing}"


def test_every_module_imports_from_the_wheel(venv, tmp_path):
    code = ("import importlib, pkgutil, airlock, sys\n"
            "bad = []\n"
            "for m in pkgutil.walk_packages(airlock.__path__, 'airlock.'):\n"
            "    if m.name.endswith('__main__'):\n"
            "        continue\n"
            "    try:\n"
            "        mod = importlib.import_module(m.name)\n"
            "        assert mod.__file__.startswith(sys.prefix), mod.__file__\n"
            "    except Exception as e:\n"
            "        bad.append(f'{m.name}: {type(e).__name__}: {e}')\n"
            "print('\\n'.join(bad))\n")
    out = _run(venv, "-c", code, cwd=tmp_path)
    assert out.returncode == 0 and not out.stdout.strip(), out.stdout + out.stderr[-2000:]


def test_cli_and_render_from_the_wheel(venv, tmp_path):
    for argv in (["--help"], ["--version"], ["render", "slurm-conf", "--slurm-version", "22.05"],
                 ["render", "config"], ["render", "systemd"]):
        out = _run(venv, *argv, cwd=tmp_path, script="airlock")
        assert out.returncode == 0, (argv, out.stderr[-2000:])
        assert out.stdout.strip(), argv
    frag = _run(venv, "render", "slurm-conf", "--slurm-version", "22.05", cwd=tmp_path,
                script="airlock").stdout
    assert "HealthCheckProgram=" in frag and "Prolog=" in frag


def test_openapi_from_the_wheel_with_the_serve_extra(venv, tmp_path):
    out = _run(venv, "serve", "--openapi", cwd=tmp_path, script="airlock")
    assert out.returncode == 0, out.stderr[-2000:]
    doc = json.loads(out.stdout)
    assert doc["openapi"].startswith("3.") and "/api/v1/nodes" in doc["paths"]


def test_quick_level_on_a_simulated_8_gpu_node(venv, fake_node):
    node = fake_node()
    out = _run(venv, "-m", "airlock", "--config", str(node.conf), "check", "--level", "quick",
               "--node", node.name, "--json", cwd=node.root, env=node.env("healthcheck"))
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    run = json.loads(out.stdout)
    assert run["verdict"] == "pass", run
    assert {c["check"] for c in run["checks"]} >= {"nvml", "gpu_count"}, run["checks"]


@pytest.mark.parametrize("hook", ["healthcheck", "prolog", "epilog"])
def test_hooks_on_a_proven_boot_from_the_wheel(venv, fake_node, hook):
    """The hooks as slurmd runs them (no PATH, the config in the environment), from the
    installed console scripts, on a proven boot: they pass and ask Slurm nothing."""
    node = fake_node()
    node.prove(settled=True)
    out = _run(venv, cwd=node.root, env=node.env(hook, job="7"), script=f"airlock-{hook}")
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert node.slurm.calls("update") == [], node.slurm.calls()


def _broken_copy(venv: Path, dest: Path, remove: str) -> Path:
    """A copy of the installed venv with one of the wheel's files gone; its python."""
    import shutil
    root = venv.parents[1]
    shutil.copytree(root, dest, symlinks=True)
    purelib = next(dest.glob("lib/python*/site-packages"))
    (purelib / remove).unlink()
    return dest / "bin" / "python"


def test_doctor_names_a_broken_install_in_one_line(venv, fake_node, tmp_path):
    node = fake_node()
    good = _run(venv, "-m", "airlock", "--config", str(node.conf), "doctor", "--no-torch",
                cwd=node.root, env=node.env("healthcheck"))
    assert "OK    install: slurm-airlock" in good.stdout, good.stdout + good.stderr
    broken = _broken_copy(venv, tmp_path / "broken", "airlock/hooks/prolog.py")
    out = _run(broken, "-m", "airlock", "--config", str(node.conf), "doctor", "--no-torch",
               cwd=node.root, env=node.env("healthcheck"))
    lines = [ln for ln in out.stdout.splitlines() if " install: " in ln]
    assert lines == ["FAIL  install: 1 files of slurm-airlock 0.1.0 missing, e.g. "
                     "airlock/hooks/prolog.py: reinstall the wheel"], out.stdout + out.stderr
    assert out.returncode == 1
