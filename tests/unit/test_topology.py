"""Cutting nodes into groups (airlock/groups/topology.py): sizes, and the network's own lines."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from airlock.groups.topology import cut, parse_topology

# What `scontrol show topology` printed, recorded from the dev cluster (22.05 and 24.11 with
# topology/tree print the same; topology/block is 24.11's), for this topology.conf:
#   tree:  SwitchName=s1 Nodes=gpu[001-004] / s2 gpu[005-008] / s3 gpu[009-010] /
#          SwitchName=top Switches=s[1-3]
#   block: BlockName=b1 Nodes=gpu[001-004] / b2 gpu[005-008] / b3 gpu[009-010] / BlockSizes=2,4
TREE = """\
SwitchName=s1 Level=0 LinkSpeed=1 Nodes=gpu[001-004]
SwitchName=s2 Level=0 LinkSpeed=1 Nodes=gpu[005-008]
SwitchName=s3 Level=0 LinkSpeed=1 Nodes=gpu[009-010]
SwitchName=top Level=1 LinkSpeed=1 Nodes=gpu[001-010] Switches=s[1-3]
"""
BLOCK = """\
BlockName=b1 BlockIndex=0 Nodes=gpu[001-004] BlockSize=2
BlockName=b2 BlockIndex=1 Nodes=gpu[005-008] BlockSize=2
BlockName=b3 BlockIndex=2 Nodes=gpu[009-010] BlockSize=2
AggregatedBlock=b[1-2] BlockIndex=3 Nodes=gpu[001-008] BlockSize=4
"""


def test_leaf_switches_and_blocks_are_read_upper_levels_skipped():
    assert parse_topology(TREE) == [[f"gpu{i:03d}" for i in range(1, 5)],
                                    [f"gpu{i:03d}" for i in range(5, 9)],
                                    ["gpu009", "gpu010"]]
    assert parse_topology(BLOCK) == parse_topology(TREE)
    assert parse_topology("") == [] and parse_topology("garbage Nodes=[") == []


def test_groups_follow_the_switches():
    nodes = [f"gpu{i:03d}" for i in (10, 3, 7, 1, 9, 2, 5, 8, 4, 6)]  # in arrival order
    groups = cut(nodes, 4, parse_topology(TREE))
    assert groups == [["gpu001", "gpu002", "gpu003", "gpu004"],
                      ["gpu005", "gpu006", "gpu007", "gpu008"], ["gpu009", "gpu010"]]


def test_without_a_topology_groups_follow_names_and_are_balanced():
    nodes = [f"n{i}" for i in range(70)]
    groups = cut(nodes, 16)
    assert [len(g) for g in groups] == [14] * 5
    assert groups[0][:3] == ["n0", "n1", "n2"]  # n2 before n10


def test_a_node_alone_in_its_switch_joins_a_group():
    groups = cut(["a1", "a2", "a3", "b1"], 3, [["a1", "a2", "a3"], ["b1"]])
    assert sorted(len(g) for g in groups) == [4]  # every group full: one past max, none alone
    groups = cut(["a1", "a2", "b1", "c1", "c2"], 3, [["a1", "a2"], ["b1"], ["c1", "c2"]])
    assert sorted(map(len, groups)) == [2, 3] and all(len(g) >= 2 for g in groups)


@settings(max_examples=150, deadline=None)
@given(st.integers(min_value=0, max_value=300), st.integers(min_value=0, max_value=70),
       st.data())
def test_every_node_is_in_one_group_of_two_to_max(n, max_size, data):
    max_size = 0 if max_size == 1 else max_size
    nodes = [f"n{i:03d}" for i in range(n)]
    cuts = data.draw(st.lists(st.integers(min_value=0, max_value=max(n, 1)), max_size=8))
    bounds = sorted({0, n, *[c for c in cuts if c <= n]})
    domains = [nodes[a:b] for a, b in zip(bounds, bounds[1:], strict=False) if b > a]
    groups = cut(nodes, max_size, domains)
    flat = [x for g in groups for x in g]
    assert sorted(flat) == (nodes if n >= 2 else [])
    assert all(len(g) >= 2 for g in groups)
    limit = max_size if max_size else n
    assert all(len(g) <= limit + 1 for g in groups)
    assert sum(len(g) > limit for g in groups) <= 1


def test_nodes_alone_in_their_switches_group_together():
    groups = cut(["a", "b", "c", "d"], 2, [["a"], ["b"], ["c"], ["d"]])
    assert groups == [["a", "b"], ["c", "d"]]
    groups = cut(["a", "b", "c"], 2, [["a"], ["b"], ["c"]])
    assert sorted(map(len, groups)) == [3]
