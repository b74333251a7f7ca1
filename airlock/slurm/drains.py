"""The drain policy: what Airlock may do to a node's drain, in one place.

Built on Slurm.drain/resume, which already leave foreign drains (an admin's, Slurm's own) alone.
Every rule reads the node's state flags through Node.claim: a reason on a node that is not
drained is history, not a claim (Slurm 23.11+ without accounting keeps the reason text after a
resume), so it never stops a new drain.

  isolate   a registration begins: drain with "pending <level> check <why>"
  fail      a check failed: drain with the failure, unless a failure of the node's hardware or a
            recovery action is already in force there (the first failure stays the story until
            someone acts on it); Airlock's own-error failures (config, a crashed hook, ...) are
            replaced by a real verdict
  release   a registration or a run passed: resume only a pending/checking claim, or an
            own-error failure that this working run disproves; after a registration, a drain
            that lost its reason (a FUTURE node registering on 22.05) is claimed first
"""

from __future__ import annotations

from airlock.slurm import reasons
from airlock.slurm.client import DrainResult, Node, Slurm


def unclaimed(node: Node) -> bool:
    """No drain in force that anyone owns: not drained, or drained with an empty reason (a FUTURE
    node that registers on 22.05 keeps DRAIN but loses its reason; a reboot with
    nextstate=resume clears both). A registration puts its claim back then."""
    return not node.drained or not node.reason


def isolate(slurm: Slurm, node: str, level: str, why: str,
            current: Node | None = None) -> DrainResult:
    """current: the node as the caller read it a moment ago (one read fewer for slurmctld)."""
    return slurm.drain(node, reasons.pending(level, why), current=current)


def keeps(claim: reasons.Reason | None) -> str:
    """Why a new failure must not replace the claim in force ("" when it may)."""
    if claim is None:
        return ""
    if claim.is_failure and not claim.own_error:
        return "earlier failure"
    if claim.state == "recover":
        return "recovery in progress"
    return ""


def fail(slurm: Slurm, node: str, reason: reasons.Reason) -> DrainResult:
    current = slurm.node(node)
    kept = keeps(current.claim)
    if kept:
        return DrainResult(node, False, f"kept {kept} {current.reason!r}")
    return slurm.drain(node, reason, current=current)


def releasable(claim: reasons.Reason | None) -> bool:
    return claim is not None and (claim.state in ("pending", "checking") or claim.own_error)


def release(slurm: Slurm, node: str, level: str = "", trigger: str = "") -> DrainResult:
    """Resume the node per the policy. With the registration's level and trigger, a drain with
    no reason is claimed first: it is the registration's own drain that Slurm lost, and left
    alone it would keep the node out for good. A node in service is left alone."""
    current = slurm.node(node)
    if level and current.drained and not current.reason:
        isolate(slurm, node, level, trigger, current=current)
        current = None  # the claim changed it: resume reads it again
    return slurm.resume(node, only_if=releasable, current=current)
