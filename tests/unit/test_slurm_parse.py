"""The `scontrol show node -o` parser, on recorded 22.05 output and on generated odd input."""

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airlock import reasons
from airlock.errors import SlurmError
from airlock.slurm import expand, parse_node_line, parse_show_node

DATA = Path(__file__).parents[1] / "data" / "show_node_2205.txt"


def test_recorded_output_parses_every_field_we_use():
    nodes = {n.name: n for n in parse_show_node(DATA.read_text())}
    assert list(nodes) == ["gpu-a01", "node1", "node9", "dgx-017", "dgx-018"]
    a = nodes["gpu-a01"]
    assert (a.state, a.flags, a.reason_user) == ("IDLE", {"DRAIN"}, "root")
    assert a.reason == "airlock: pending standard check new" and a.owned and not a.foreign_drain
    admin = nodes["node1"]
    assert admin.reason == "disk swap [ticket 42] Reason=x"
    assert admin.foreign_drain and admin.reason_time == "2026-11-30T08:39:34"
    future = nodes["node9"]
    assert future.state == "FUTURE" and future.reason == "" and future.boot_time == ""
    busy = nodes["dgx-017"]
    assert busy.busy and busy.drained and busy.owned
    assert busy.features == ("h100", "ib", "rack12") and busy.partitions == ("train", "debug")
    assert busy.gres == "gpu:h100:8(S:0-1)" and busy.cpu_alloc == 224
    assert reasons.parse(busy.reason) == reasons.Reason("FAIL", "nvml.xid",
                                                        "gpu3 xid 79 (fell off bus)")
    down = nodes["dgx-018"]
    assert down.flags == {"DRAIN", "NOT_RESPONDING"} and down.foreign_drain
    assert not down.responding


@pytest.mark.parametrize("line", ["", "garbage", "Node=x State=IDLE", "NodeName=x Arch=y"])
def test_garbage_is_a_clear_error(line):
    with pytest.raises(SlurmError) as exc:
        parse_node_line(line)
    assert "scontrol output" in str(exc.value)


def test_no_nodes_message_is_empty_list():
    assert parse_show_node("No nodes in the system\n") == []


TEMPLATE = ("NodeName={name} Arch=x86_64 CoresPerSocket=1  CPUAlloc=0 AvailableFeatures=gpu "
            "Gres=(null) OS=Linux 6.1 #1 SMP  RealMemory=1000 State={state} "
            "Partitions=main  BootTime=None{reason}")

node_names = st.from_regex(r"[A-Za-z][A-Za-z0-9._-]{0,30}", fullmatch=True)
reason_text = st.text(
    alphabet=st.characters(blacklist_categories=("Cc", "Cs", "Zl", "Zp")), min_size=1,
    max_size=80,
).map(reasons.clean).filter(bool)


@settings(max_examples=300)
@given(name=node_names, reason=reason_text,
       state=st.sampled_from(["IDLE+DRAIN", "MIXED+DRAIN", "DOWN+DRAIN+NOT_RESPONDING", "IDLE"]))
def test_any_name_and_reason_round_trip(name, reason, state):
    line = TEMPLATE.format(name=name, state=state,
                           reason=f" Reason={reason} [root@2026-11-30T08:39:34]")
    node = parse_node_line(line)
    assert node.name == name
    assert node.reason == reason
    assert node.state_text.split("+")[0] == state.split("+")[0]


def test_expand_uses_hostlist_and_rejects_bad_expressions():
    assert expand("node[1-3],gpu-a[01-02]") == ["node1", "node2", "node3", "gpu-a01", "gpu-a02"]
    with pytest.raises(SlurmError):
        expand("node[1-")
