"""The architecture holds: the import-linter layers contract in pyproject.toml is kept, and no
module imports itself back through others (in-function imports count too).

import-linter reads the package from disk, and checks/ and hooks/ only become airlock.checks
and airlock.hooks through pyproject's package-dir map, so the tree is staged as installed."""

from __future__ import annotations

import ast
import importlib.util
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MAP = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]


def stage(dest: Path) -> Path:
    """The package as installed: airlock/ with checks/, hooks/ and templates/ inside it."""
    skip = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(ROOT / MAP["airlock"], dest / "airlock", ignore=skip)
    for package, folder in MAP.items():
        if package != "airlock":
            shutil.copytree(ROOT / folder, dest.joinpath(*package.split(".")), ignore=skip)
    shutil.copy(ROOT / "pyproject.toml", dest / "pyproject.toml")
    return dest


def lint_imports(tree: Path) -> subprocess.CompletedProcess:
    exe = shutil.which("lint-imports", path=os.path.dirname(sys.executable) + os.pathsep
                       + os.environ.get("PATH", ""))
    if exe is None:
        pytest.fail("lint-imports not installed (pip install -e '.[test]')")
    env = {**os.environ, "PYTHONPATH": str(tree)}
    return subprocess.run([exe, "pyproject.toml"], cwd=tree, env=env, capture_output=True,
                          text=True, timeout=120)


def test_layers_contract_is_kept_and_can_break(tmp_path):
    tree = stage(tmp_path / "ok")
    ok = lint_imports(tree)
    assert ok.returncode == 0 and "3 kept, 0 broken" in ok.stdout, ok.stdout + ok.stderr
    # The contract is real: a leaf that imports the runner breaks it.
    bad = stage(tmp_path / "bad")
    with open(bad / "airlock" / "paths.py", "a") as fh:
        fh.write("\nimport airlock.runner  # noqa\n")
    broken = lint_imports(bad)
    assert broken.returncode != 0 and "BROKEN" in broken.stdout, broken.stdout


def check_modules() -> set[str]:
    """The check modules: those checks/registry.py names in a target ("module:function")."""
    spec = importlib.util.spec_from_file_location("_registry", ROOT / "checks" / "registry.py")
    assert spec and spec.loader
    registry = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(registry)
    return {c.target.partition(":")[0] for c in registry.CHECKS}


def independence_contract() -> dict:
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"][
        "contracts"]
    found = [c for c in contracts if c["type"] == "independence"
             and c["name"].startswith("A check never imports another check")]
    assert len(found) == 1, [c["name"] for c in contracts]
    return found[0]


def test_the_independence_contract_lists_exactly_the_registry_s_check_modules():
    """A new check module cannot be left out of the contract (nor a removed one kept in it)."""
    listed = independence_contract()["modules"]
    assert len(listed) == len(set(listed))
    assert set(listed) == check_modules()


def test_a_check_that_imports_another_check_breaks_the_contract(tmp_path):
    bad = stage(tmp_path / "cross")
    with open(bad / "airlock" / "checks" / "p2p.py", "a") as fh:
        fh.write("\nimport airlock.checks.pcie_bw  # noqa\n")
    broken = lint_imports(bad)
    assert broken.returncode != 0, broken.stdout
    assert "A check never imports another check" in broken.stdout
    assert "2 kept, 1 broken" in broken.stdout, broken.stdout


def imports_of(tree: Path) -> dict[str, set[str]]:
    """{module: airlock modules it imports anywhere (functions included)}."""
    files = {}
    for path in (tree / "airlock").rglob("*.py"):
        parts = path.relative_to(tree).with_suffix("").parts
        name = ".".join(p for p in parts if p != "__init__")
        files[name] = path
    known = set(files)

    def resolve(mod: str) -> str | None:
        while mod and mod not in known:
            mod = mod.rpartition(".")[0]
        return mod or None

    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        found = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                targets = [f"{node.module}.{a.name}" for a in node.names]
            else:
                continue
            for t in targets:
                r = resolve(t)
                if r and r != name and not name.startswith(r + "."):
                    found.add(r)
        graph[name] = found
    return graph


def cycle_through(graph: dict[str, set[str]], start: str) -> list[str]:
    """A path start -> ... -> start, or [] when there is none."""
    stack, seen = [(start, [start])], set()
    while stack:
        node, path = stack.pop()
        for nxt in graph.get(node, ()):
            if nxt == start:
                return [*path, start]
            if nxt not in seen:
                seen.add(nxt)
                stack.append((nxt, [*path, nxt]))
    return []


def test_no_import_cycles(tmp_path):
    graph = imports_of(stage(tmp_path / "t"))
    assert len(graph) > 50  # the whole package was found
    cycles = [c for m in sorted(graph) if (c := cycle_through(graph, m))]
    assert not cycles, " ; ".join(" -> ".join(c) for c in cycles[:3])
    # and the check is real
    graph["airlock.paths"].add("airlock.runner")
    assert cycle_through(graph, "airlock.paths")
