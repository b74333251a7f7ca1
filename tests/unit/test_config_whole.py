"""The config is validated whole, once, at load (issue 25, item 1): a typo in any section, one a
process uses or not, is `airlock: FAIL config <file>: ...`, Airlock's own error, before any
check runs; never the FAIL of the check whose section it is. Its consequences are the ones
docs/guide.md promises for a config error: an unproven boot stays closed, a proven boot keeps
running and shows the error, and the recovery service never acts on it."""

from __future__ import annotations

import json

import pytest

from airlock.config import loader as config
from airlock.errors import ConfigError
from airlock.recovery.machine import Obs
from airlock.slurm import reasons

# One typo per section, each in a section some process reads only when it needs it.
TYPOS = [
    ("[flaps]\nmax_down = 3\n", "[flaps] unknown key 'max_down'"),
    ("[flaps]\nmax_downs = 0\n", "[flaps] max_downs: must be >= 1"),
    ("[system]\nmin_memory_gib = 'lots'\n", "[system]"),
    ("[xid]\nkernel_log = 'kmsg'\n", "[xid] kernel_log"),
    ("[dcgm]\nstandard_level = 7\n", "[dcgm] standard_level"),
    ("[loopback]\ntcp_port = 80\n", "[loopback] tcp_port"),
    ("[recovery]\npoll_intervall = 3\n", "[recovery] unknown key 'poll_intervall'"),
    ("[serve]\nlisten = 3\n", "[serve]"),
    # a misspelt section name would leave every key of the real one at its default
    ("[flpas]\nmax_downs = 1\n", "unknown section [flpas]"),
]


@pytest.mark.parametrize("text, needle", TYPOS)
def test_a_typo_in_any_section_fails_the_load(tmp_path, text, needle):
    path = tmp_path / "airlock.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as exc:
        config.load(path)
    assert str(exc.value).startswith(f"config {path}: ") and needle in str(exc.value)


def test_a_tool_that_lists_every_mistake_can_still_load_the_rest(tmp_path):
    path = tmp_path / "airlock.toml"
    path.write_text("[flaps]\nmax_down = 3\n[xid]\nkernel_log = 'kmsg'\n")
    cfg = config.load(path, whole=False)  # airlock doctor: one line per mistake
    assert len(cfg.problems()) == 2


def _periodic(fake_node, text: str, *, proven: bool):
    node = fake_node()
    if proven:
        node.prove(settled=True)
    node.write_config(text)
    out = node.run("healthcheck")
    errors = node.root / "state" / "errors.json"
    return out, (json.loads(errors.read_text()) if errors.exists() else {}), node


@pytest.mark.parametrize("text", ["[flaps]\nmax_down = 3\n", "[system]\nmin_memory_gib = -1\n",
                                  "[xid]\nkernel_log = 'kmsg'\n"])
def test_a_typo_on_a_proven_boot_drains_nothing_and_shows_the_error(fake_node, text):
    out, errors, node = _periodic(fake_node, text, proven=True)
    assert "Traceback" not in out.stderr
    assert node.slurm.updates() == [], node.slurm.calls()  # no check's FAIL, no drain
    assert node.slurm.node("n1")["reason"] == ""
    assert "failing open" in out.stderr and "config " in out.stderr, out.stderr
    assert errors["healthcheck"]["message"].startswith("fail open: config "), errors


def test_a_typo_on_an_unproven_boot_stays_closed_as_an_own_error(fake_node):
    out, errors, node = _periodic(fake_node, "[flaps]\nmax_down = 3\n", proven=False)
    assert "Traceback" not in out.stderr
    reason = node.slurm.node("n1")["reason"]
    assert reason.startswith("airlock: FAIL config "), (reason, out.stderr)
    assert "[flaps] unknown key 'max_down'" in reason
    assert node.processes() == []  # no suite started: it could not load the config either
    parsed = reasons.parse(reason)
    assert parsed is not None and parsed.own_error
    # the recovery service's view: a node drained for Airlock's own trouble is no failure
    obs = Obs("n1", reason, True, False, "", frozenset({"DRAIN"}), "IDLE")
    assert obs.own_error and not obs.failing
