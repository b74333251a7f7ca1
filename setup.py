"""The package list is derived from the tree, never kept by hand (a hand-kept list left out
airlock.config.sections, and every hook of an installed wheel died on the import). Everything else
is in pyproject.toml; its [tool.setuptools] package-dir maps the card's top-level folders
(checks/, hooks/, templates/) into the one `airlock` namespace, and each mapped folder's
subpackages are found here under it."""

import tomllib
from pathlib import Path

from setuptools import find_packages, setup

HERE = Path(__file__).resolve().parent


def packages() -> list[str]:
    with open(HERE / "pyproject.toml", "rb") as fh:
        mapping = tomllib.load(fh)["tool"]["setuptools"]["package-dir"]
    mapped = set(mapping.values())
    out: list[str] = []
    for name, folder in mapping.items():
        out.append(name)
        # a mapped folder's own subpackages; a folder mapped elsewhere is not one of them
        out += [f"{name}.{sub}" for sub in find_packages(str(HERE / folder))
                if f"{folder}/{sub.replace('.', '/')}" not in mapped]
    return sorted(set(out))


setup(packages=packages())
