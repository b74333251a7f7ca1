"""Build Airlock's wheel from this checkout and install it into a clean venv, as a site does.

The venv sees the wheel's files and nothing of the checkout: it is created without system
site-packages, the wheel is installed into it with pip (no index, no dependencies), and the
dependencies (click, torch, fastapi, ...) are reached through a `.pth` line naming the
interpreter's own site-packages *directory*. A directory added that way is not a site
directory, so the `.pth` files inside it are not run: the editable install of this checkout
(`__editable__.slurm_airlock-*.pth`) stays invisible, and `import airlock` can only find the
wheel's copy. `installed_python()` checks that before anyone relies on it.

Used by tests/install/test_wheel.py (the wheel lane) and by the cluster tests whose dev
cluster runs its hooks from the installed wheel (DevCluster(python=...)).
"""

from __future__ import annotations

import os
import shutil
import site
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# What a build never needs from the checkout: VCS data, venvs, caches, and (at the top only:
# airlock/dist is a package) earlier build output.
_ANYWHERE = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", ".pytest_cache",
                                   ".ruff_cache", ".mypy_cache", ".hypothesis")
_TOP = {".git", ".venv", "venv", "build", "dist"}


def _ignored(folder: str, names: list[str]) -> set[str]:
    out = set(_ANYWHERE(folder, names))
    if Path(folder) == ROOT:
        out |= _TOP & set(names)
    return out


def build_wheel(out: Path) -> Path:
    """The wheel of a copy of this checkout (the checkout itself is never written)."""
    src = out / "src"
    shutil.copytree(ROOT, src, ignore=_ignored, symlinks=True)
    dist = out / "dist"
    # --no-build-isolation: setuptools from this interpreter, so the build needs no network
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
                    "--no-build-isolation", "-w", str(dist), str(src)],
                   check=True, capture_output=True, text=True, cwd=out, timeout=300)
    wheels = sorted(dist.glob("slurm_airlock-*.whl"))
    if len(wheels) != 1:
        raise RuntimeError(f"expected one wheel in {dist}, found {wheels}")
    shutil.rmtree(src)
    return wheels[0]


def installed_python(out: Path) -> Path:
    """A clean venv under out with the wheel installed; its python."""
    out.mkdir(parents=True, exist_ok=True)
    wheel = build_wheel(out)
    venv = out / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True,
                   timeout=120)
    py = venv / "bin" / "python"
    purelib = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()"
                              "['purelib'])"], check=True, capture_output=True, text=True,
                             timeout=60).stdout.strip()
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index",
                    "--target", purelib, str(wheel)], check=True, capture_output=True,
                   text=True, timeout=300)
    # pip --target also writes console scripts under purelib/bin: the venv's bin gets them
    # with this interpreter, as an install into the venv would.
    scripts = Path(purelib) / "bin"
    for script in sorted(scripts.glob("airlock*")) if scripts.is_dir() else []:
        body = script.read_text().splitlines()
        body[0] = f"#!{py}"
        target = venv / "bin" / script.name
        target.write_text("\n".join(body) + "\n")
        target.chmod(0o755)
    deps = [p for p in site.getsitepackages() if os.path.isdir(p)]
    (Path(purelib) / "zz-airlock-test-deps.pth").write_text("\n".join(deps) + "\n")
    where = subprocess.run([str(py), "-c", "import airlock; print(airlock.__file__)"],
                           check=True, capture_output=True, text=True, cwd=out,
                           timeout=60).stdout.strip()
    if not where.startswith(purelib):
        raise RuntimeError(f"the venv imports airlock from {where}, not from the wheel")
    return py
