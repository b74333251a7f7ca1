"""The Slurm client's failure modes, with real executables standing in for a broken scontrol."""

import os
import stat
import time

import pytest

from airlock.errors import NodeNotFound, SlurmError
from airlock.slurm.client import Slurm
from tests.unit.procstate import alive


def fake_bin(tmp_path, body: str) -> str:
    d = tmp_path / "bin"
    d.mkdir(exist_ok=True)
    p = d / "scontrol"
    p.write_text("#!/bin/sh\n" + body + "\n")
    p.chmod(p.stat().st_mode | stat.S_IEXEC)
    (d / "calls").write_text("")
    return str(d)


def test_missing_scontrol_is_clear(tmp_path):
    s = Slurm(bin_dir=str(tmp_path))
    with pytest.raises(SlurmError, match="scontrol not found in slurm.bin_dir"):
        s.nodes()


def test_hung_scontrol_times_out(tmp_path):
    s = Slurm(bin_dir=fake_bin(tmp_path, "sleep 30"), timeout=0.5)
    with pytest.raises(SlurmError, match="timed out after 0.5 s"):
        s.nodes()


def test_garbage_output_never_leads_to_an_update(tmp_path):
    d = fake_bin(tmp_path, 'echo "$@" >> "$(dirname "$0")/calls"; echo "Segmentation fault"')
    s = Slurm(bin_dir=d)
    with pytest.raises(SlurmError, match="unexpected scontrol output"):
        s.drain("node1", "airlock: FAIL x y")
    calls = (tmp_path / "bin" / "calls").read_text()
    assert "update" not in calls


def test_unknown_node_among_known_ones_is_named(tmp_path):
    """`scontrol show node a,b` with b unknown exits 1 and prints a's record and "Node b not
    found" in the order of the (sorted) list: the unknown name is the error, wherever it is."""
    line = "NodeName=node1 State=IDLE Partitions=main Reason=disk not found"
    s = Slurm(bin_dir=fake_bin(tmp_path, f"printf '%s\\n' 'Node $(id) not found' '{line}'; exit 1"))
    with pytest.raises(NodeNotFound, match=r"^scontrol: Node \$\(id\) not found$"):
        s.nodes("node1,$(id)")


def test_unknown_node_and_failures(tmp_path):
    s = Slurm(bin_dir=fake_bin(tmp_path, 'echo "Node nodeX not found" >&2; exit 1'))
    with pytest.raises(NodeNotFound):
        s.node("nodeX")
    s = Slurm(bin_dir=fake_bin(tmp_path, 'echo "slurm_load_node error: Unable to contact" >&2; '
                                         "exit 1"))
    with pytest.raises(SlurmError, match="Unable to contact"):
        s.nodes()


def test_bad_node_names_never_reach_scontrol(tmp_path):
    s = Slurm(bin_dir=fake_bin(tmp_path, 'echo "$@" >> "$(dirname "$0")/calls"'))
    for bad in ("", "a b", "x;rm -rf /", "-o", "$(id)"):
        with pytest.raises(SlurmError):
            s.node(bad)
    assert (tmp_path / "bin" / "calls").read_text() == ""


def test_refuses_to_write_a_reason_without_prefix(tmp_path):
    s = Slurm(bin_dir=fake_bin(tmp_path, "exit 0"))
    with pytest.raises(ValueError):
        s.drain("node1", "disk swap")


def test_hooks_find_scontrol_without_path(tmp_path, monkeypatch):
    monkeypatch.delenv("PATH", raising=False)
    found = Slurm().binary("scontrol")
    assert os.path.isabs(found) and os.access(found, os.X_OK)


def test_without_path_the_usual_install_dirs_are_searched(tmp_path, monkeypatch):
    """Slurm gives the hooks no PATH (docs/guide.md): a tool outside Python's default path
    (/usr/local/bin, /opt/slurm/bin, /usr/sbin, ...) is found in Airlock's own search list.
    Here the list is two temporary folders and the tool a name no system has."""
    from airlock.slurm import client as slurm_mod

    first, second = tmp_path / "opt-slurm-bin", tmp_path / "usr-sbin"
    first.mkdir()
    second.mkdir()
    tool = second / "airlock-test-scontrol"
    tool.write_text("#!/bin/sh\nexit 0\n")
    tool.chmod(0o755)
    monkeypatch.setattr(slurm_mod, "SEARCH_DIRS", (str(first), str(second)))
    monkeypatch.delenv("PATH", raising=False)
    assert Slurm().binary("airlock-test-scontrol") == str(tool)
    with pytest.raises(SlurmError, match="not found on PATH or in"):
        Slurm().binary("airlock-test-sinfo")


def test_a_hung_scontrol_leaves_nothing_behind(tmp_path):
    """A wrapper (a site's scontrol shim, a hung plugin's helper) whose child hangs: at the
    timeout the whole session goes, not only the program Airlock started (issue 24: the Slurm
    client starts its children through airlock/proc.py like every other place)."""
    pidfile = tmp_path / "child.pid"
    s = Slurm(bin_dir=fake_bin(tmp_path, f"sleep 60 & echo $! > {pidfile}; wait"), timeout=1)
    with pytest.raises(SlurmError, match="timed out after 1 s"):
        s.nodes()
    pid = int(pidfile.read_text())
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and alive(pid):
        time.sleep(0.05)
    assert not alive(pid), "scontrol's child outlived the timeout"



def test_a_reason_with_a_carriage_return_is_read_as_typed(tmp_path):
    """Output is decoded, never newline-translated: a reason someone typed with a carriage
    return stays one line of scontrol's output."""
    s = Slurm(bin_dir=fake_bin(tmp_path, r"printf 'a\rb\nc\n'"))
    assert s.scontrol("show", "x") == "a\rb\nc\n"
