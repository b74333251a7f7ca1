"""The shapes of Airlock's two records, for readers and the type checker: a run document
(airlock.records.results, written by airlock.finish) with its check records, and the proof of a
boot (airlock.records.proof). They are plain JSON on disk, validated where they are read; these
only name their keys, at no cost at run time (typing alone)."""

from __future__ import annotations

from typing import Any, Literal, NotRequired, TypedDict

Verdict = Literal["pass", "warn", "fail", "skip", "error"]


class CheckRecord(TypedDict):
    """One check's outcome in a run (checks.base.Outcome.to_dict plus the runner's fields)."""

    check: str
    verdict: Verdict
    detail: str
    figures: dict[str, Any]
    remediation: str
    timed_out: NotRequired[bool]
    finding: NotRequired[str]  # "config": a setting on the node to fix (checks.base.CONFIG)
    duration_s: NotRequired[float]
    attempts: NotRequired[int]
    observe: NotRequired[bool]  # in observe mode: seen, never gating


class ObservedRecord(TypedDict):
    check: str
    verdict: Verdict
    detail: str


class RunDoc(TypedDict):
    """A run document, schema 1 (airlock.records.results)."""

    node: str
    run_id: str
    level: str
    trigger: str
    started_at: float
    finished_at: float
    duration_s: float
    verdict: Literal["pass", "warn", "fail", "error"]
    failed_check: str | None
    detail: str
    unseen: list[str]
    observed: list[ObservedRecord]
    profile: str
    checks: list[CheckRecord]
    schema: NotRequired[int]


class ProofRecord(TypedDict):
    """The proof of a boot, <state_dir>/node.json, schema 2 (airlock.records.proof)."""

    node: str
    run_id: str
    status: Literal["running", "done", "adopted"]
    level: str
    trigger: str
    pid: int
    attempt: int
    started_uptime: float
    boot: dict[str, Any]
    schema: NotRequired[int]
    verdict: NotRequired[Literal["pass", "warn", "fail", "error"] | None]
    pid_start: NotRequired[int | None]
    error: NotRequired[str]
    finished_uptime: NotRequired[float | None]
    slurm_pending: NotRequired[Literal["", "resume", "fail"]]
    started_at: NotRequired[float]
    finished_at: NotRequired[float | None]
    detail: NotRequired[str]
    reason: NotRequired[str]
    phase: NotRequired[str]
    claim_checked_uptime: NotRequired[float]
