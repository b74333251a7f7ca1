"""Cutting a set of nodes into groups for a multi-node test: at most a given size, and along the
network's own lines where Slurm knows them.

A group check over hundreds of nodes is cut into groups of at most `group_max` (a registration
window, an on-demand check). With a topology plugin Slurm knows which nodes share a leaf switch
(topology/tree: `SwitchName=s1 Level=0 ... Nodes=gpu[001-016]`) or a block (topology/block,
23.11+: `BlockName=b1 BlockIndex=0 Nodes=gpu[001-016] BlockSize=16`); `scontrol show topology`
prints them, one record per line. A group then stays within one switch or block where it can,
so a culprit search that narrows down to a few nodes narrows down to neighbours, and a bad link
between two switches shows as a group that fails in every cut across it. Nodes Slurm places
nowhere come last, in name order (racks are usually named in order).

Pure functions: the caller reads the text (airlock.slurm.client.Slurm.topology).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence

from airlock.slurm.client import expand

_FIELD = re.compile(r"(\w+)=(\S+)")
_DIGITS = re.compile(r"(\d+)")


def natural(name: str) -> tuple:
    """gpu2 before gpu10."""
    return tuple(int(p) if p.isdigit() else p for p in _DIGITS.split(name))


def parse_topology(text: str) -> list[list[str]]:
    """The leaf domains (a level-0 switch's nodes, or a block's) in the order Slurm lists them;
    records that name no nodes (upper-level switches) are skipped, as is anything unparsable."""
    domains: list[list[str]] = []
    for line in text.splitlines():
        fields = dict(_FIELD.findall(line))
        if "Nodes" not in fields or not ("SwitchName" in fields or "BlockName" in fields):
            continue
        if "SwitchName" in fields and fields.get("Level", "0") != "0":
            continue
        try:
            nodes = expand(fields["Nodes"])
        except Exception:  # a record we cannot read places nobody
            continue
        if nodes:
            domains.append(nodes)
    return domains


def cut(nodes: Sequence[str], max_size: int,
        domains: Iterable[Sequence[str]] = ()) -> list[list[str]]:
    """Groups of two to max_size nodes (max_size 0: one group), following domains: each domain
    is split into the fewest balanced groups, and a node left alone joins a neighbour group.
    Fewer than two nodes: no group."""
    wanted = list(dict.fromkeys(nodes))
    if len(wanted) < 2:
        return []
    if max_size <= 0 or len(wanted) <= max_size:
        return [_ordered(wanted, domains)]
    max_size = max(2, max_size)
    placed: set[str] = set()
    pieces: list[list[str]] = []
    members = set(wanted)
    for domain in domains:
        mine = [n for n in domain if n in members and n not in placed]
        placed.update(mine)
        pieces += _balanced(mine, max_size)
    rest = sorted((n for n in wanted if n not in placed), key=natural)
    pieces += _balanced(rest, max_size)
    groups = [p for p in pieces if len(p) >= 2]
    # Nodes alone in their domain form groups of their own together (they share no switch
    # with anyone here anyway); one left over joins the smallest group, past max_size by one
    # only when every group is full: an untested node is worse.
    loners = [p[0] for p in pieces if len(p) == 1]
    for piece in _balanced(loners, max_size):
        if len(piece) >= 2:
            groups.append(piece)
        elif groups:
            roomy = [g for g in groups if len(g) < max_size] or groups
            min(roomy, key=len).append(piece[0])
    return groups


def _balanced(nodes: list[str], max_size: int) -> list[list[str]]:
    if not nodes:
        return []
    k = math.ceil(len(nodes) / max_size)
    size, extra = divmod(len(nodes), k)
    out, at = [], 0
    for i in range(k):
        n = size + (1 if i < extra else 0)
        out.append(nodes[at:at + n])
        at += n
    return out


def _ordered(nodes: list[str], domains: Iterable[Sequence[str]]) -> list[str]:
    """nodes in topology order (one group: its first node hosts the rendezvous either way)."""
    out: list[str] = []
    seen: set[str] = set()
    members = set(nodes)
    for domain in domains:
        for n in domain:
            if n in members and n not in seen:
                out.append(n)
                seen.add(n)
    return out + [n for n in nodes if n not in seen]
