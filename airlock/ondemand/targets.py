"""Which nodes an on-demand check names (a node expression, a partition, a feature), and which
of them can be checked now. airlock.serve validates a request with select_targets too."""

from __future__ import annotations

from airlock.errors import AirlockError
from airlock.slurm.client import Node, Slurm


def select_targets(slurm: Slurm, nodes_expr: str | None, partition: str | None,
                   feature: str | None) -> list[Node]:
    if nodes_expr:
        nodes = slurm.nodes(nodes_expr)
    else:
        nodes = slurm.nodes_in(partition=partition, feature=feature)
    if partition and nodes_expr:
        nodes = [n for n in nodes if partition in n.partitions]
    if feature and nodes_expr:
        nodes = [n for n in nodes if feature in n.features]
    if not nodes:
        what = nodes_expr or (f"partition {partition}" if partition else f"feature {feature}")
        raise AirlockError(f"no nodes match {what}")
    return nodes


def unusable(node: Node) -> str:
    """Why a node cannot be checked now ("" when it can)."""
    if node.foreign_drain:
        return f"drained by someone else: {node.reason!r}"
    parsed = node.claim  # a reason left on a resumed node (Slurm 23.11+) is no claim
    if parsed is not None and parsed.state in ("pending", "checking"):
        return "registration check in progress"
    if parsed is not None:
        return f"already drained by airlock: {node.reason!r} (recovery handles it)"
    if not node.responding or node.state in ("DOWN", "FUTURE", "UNKNOWN"):
        return f"not responding ({node.state_text})"
    return ""
