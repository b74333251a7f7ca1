"""One member's outcome of a preflight (pure).

The figures were already judged where they were measured: each member's all-reduce answer
(checks/groupcheck.judge) holds its node's ranks against the profile's group floor
(group_busbw_floor_gbps) and against the group's own median (a rank outside the collective for
most of it while the others' median is well below is a straggler), and names wrong data or a
wrong sum by rank. The batch's culprit search turns failed rounds into blame, and
airlock.groups.batch.Batch.verify_own keeps of that only what this node's own answers bear out. So
here:
a member is a culprit only when the verdict blames it and its own answer failed, passes only
when it passed a round itself, and is otherwise inconclusive.
"""

from __future__ import annotations

from typing import Any, NamedTuple

PASS, CULPRIT, INCONCLUSIVE = "pass", "culprit", "inconclusive"
CHECK = "preflight"


class Decision(NamedTuple):
    kind: str  # pass | culprit | inconclusive
    detail: str

    @property
    def verdict(self) -> str:
        """The check record's verdict: a culprit fails, inconclusive did not see the node."""
        return {PASS: "pass", CULPRIT: "fail", INCONCLUSIVE: "error"}[self.kind]


def judge(node: str, verdict: dict[str, Any] | None, missed: str = "") -> Decision:
    """verdict: this node's part of the batch's verdict (Batch.run: {bad, good, inconclusive,
    details}, this node in exactly one list); missed: why the meeting never formed."""
    if missed:
        return Decision(INCONCLUSIVE, f"no meeting: {missed}")
    if not isinstance(verdict, dict):
        return Decision(INCONCLUSIVE, "no verdict")
    details = verdict.get("details") or {}
    why = str(details.get(node, "") or "")
    if node in (verdict.get("bad") or []):
        return Decision(CULPRIT, why or "failed the job's all-reduce")
    if node in (verdict.get("good") or []):
        return Decision(PASS, "")
    return Decision(INCONCLUSIVE, why or "no verdict on this node")


def rc_of(decision: Decision) -> int:
    """The prolog's exit for this member: only a culprit's prolog fails (Slurm then requeues the
    job and keeps the node out); inconclusive lets the job run ([preflight] on_inconclusive)."""
    return 1 if decision.kind == CULPRIT else 0
