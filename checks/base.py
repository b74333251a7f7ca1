"""What every check shares: the outcome record and the context a check reads.

A check is a small unit: gather what it needs, then a pure verdict function turns the gathered
data into an Outcome. Outcomes are frozen so a verdict cannot be edited after the fact.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any


class Verdict(StrEnum):
    PASS = "pass"
    WARN = "warn"  # recorded and shown, never drains (e.g. flaky, or a soft throttle reason)
    FAIL = "fail"
    SKIP = "skip"  # not applicable here (e.g. no NVLink on this SKU)


@dataclass(frozen=True)
class Outcome:
    check: str
    verdict: Verdict
    detail: str = ""  # short, goes into the drain reason on failure
    figures: dict[str, Any] = field(default_factory=dict)
    remediation: str = ""  # suggested action: "reboot", "replace", "" (policy decides)

    @property
    def failed(self) -> bool:
        return self.verdict is Verdict.FAIL

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["verdict"] = self.verdict.value
        return d


def passed(check: str, detail: str = "", **figures: Any) -> Outcome:
    return Outcome(check, Verdict.PASS, detail, figures)


def failed(check: str, detail: str, remediation: str = "", **figures: Any) -> Outcome:
    return Outcome(check, Verdict.FAIL, detail, figures, remediation)


def warned(check: str, detail: str, **figures: Any) -> Outcome:
    return Outcome(check, Verdict.WARN, detail, figures)


def skipped(check: str, detail: str) -> Outcome:
    return Outcome(check, Verdict.SKIP, detail)


def worst(outcomes: list[Outcome]) -> Verdict:
    order = [Verdict.FAIL, Verdict.WARN, Verdict.PASS, Verdict.SKIP]
    for v in order:
        if any(o.verdict is v for o in outcomes):
            return v
    return Verdict.PASS
