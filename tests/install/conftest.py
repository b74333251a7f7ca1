"""The wheel lane runs the hooks as unit tests do: a fake Slurm and the host guard
(tests/unit/conftest.py), so nothing here reaches a real controller or the host's /run."""

from tests.unit.conftest import fake_node, host_guard  # noqa: F401  (fixtures)
