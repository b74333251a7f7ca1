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


def judge_gemm(verdict: str, detail: str, timed_out: bool = False) -> Decision:
    """This node's GEMM outcome ([preflight] level = "collective+gemm"; the burn-in check's
    Outcome at the preflight level: verdict, detail, timed_out) as a decision of its own.

    A wrong result, a device error or a GPU below the profile's floor is the node's own
    measurement: a culprit ("gemm <what>"). A CPU stand-in below its floor is the burn-in's WARN
    (never a FAIL there): a pass that keeps the warning. A GEMM the preflight's budget cut short,
    or one that never ran (ERROR: its process could not start, no time left), did not see the
    node: inconclusive, never a drain."""
    if verdict == "fail" and not timed_out:
        return Decision(CULPRIT, f"gemm {detail}".strip())
    if verdict == "fail":
        return Decision(INCONCLUSIVE, f"gemm cut short by the preflight's budget ({detail})")
    if verdict in ("pass", "warn", "skip"):
        return Decision(PASS, f"gemm warning: {detail}" if verdict == "warn" else "")
    return Decision(INCONCLUSIVE, f"gemm not measured: {detail}")


def combine(gemm: Decision, collective: Decision) -> Decision:
    """The node's outcome from its GEMM and the job's collective: a GEMM culprit is a culprit;
    otherwise the collective decides, except that a pass whose GEMM did not measure is
    inconclusive (the preflight did not see all of the node); a GEMM warning stays in the
    detail."""
    if gemm.kind == CULPRIT:
        return gemm
    if collective.kind == PASS and gemm.kind == INCONCLUSIVE:
        return gemm
    if collective.kind == PASS and gemm.detail:
        return Decision(PASS, gemm.detail)
    return collective
