"""What every check shares: the outcome record and the context a check reads.

A check is a small unit: gather what it needs, then a pure verdict function turns the gathered
data into an Outcome. Outcomes are frozen so a verdict cannot be edited after the fact.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any


class Verdict(StrEnum):
    PASS = "pass"
    WARN = "warn"  # recorded and shown, never drains (e.g. flaky, or a soft throttle reason)
    FAIL = "fail"
    SKIP = "skip"  # not applicable here (e.g. no NVLink on this SKU)
    # No verdict on the node: the check was not run or could not conclude for a reason that is
    # not the node's (no time left in the hook's budget, a tool that hung under a budget cut,
    # a DCGM that timed out). A check proves only what it touched: this is never a pass, and
    # never a hardware failure either. It keeps an unproven boot closed (as Airlock's own
    # trouble, which recovery never acts on) and never drains a proven one.
    ERROR = "error"


# Outcome.finding of a FAIL that is a setting to fix, not the hardware (run document: the
# check's record carries "finding": "config").
CONFIG = "config"


class Outcome:
    """A check's verdict. Frozen (a verdict is not edited after the fact; the figures dict is
    the check's own to fill), and a plain slotted class rather than a dataclass: every quick
    check returns one in the HealthCheckProgram, which must not pay for importing dataclasses."""

    __slots__ = ("check", "verdict", "detail", "figures", "remediation", "timed_out", "finding")

    def __init__(self, check: str, verdict: Verdict, detail: str = "",
                 figures: dict[str, Any] | None = None, remediation: str = "",
                 timed_out: bool = False, finding: str = ""):
        set_ = object.__setattr__
        set_(self, "check", check)
        set_(self, "verdict", verdict)
        set_(self, "detail", detail)  # short, goes into the drain reason on failure
        set_(self, "figures", {} if figures is None else figures)
        set_(self, "remediation", remediation)  # "reboot", "replace", "" (policy decides)
        # Set where the time ran out (the runner killed the check): what the runner decides on,
        # never the word "timeout" in a detail, which a measurement may hold too.
        set_(self, "timed_out", bool(timed_out))
        # What a FAIL found, where the tool that measured says so itself: "" = the hardware;
        # CONFIG = a setting on the node to fix (DCGM's DCGM_ERROR_CONFIG): the node is held,
        # and recovery leaves it to an operator (never a reboot or a replacement).
        set_(self, "finding", finding)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"Outcome is frozen: cannot set {name}")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Outcome) and self.to_dict() == other.to_dict()

    __hash__ = None

    def __repr__(self) -> str:
        return (f"Outcome({self.check!r}, {self.verdict.value}, {self.detail!r}, "
                f"{self.figures!r}, {self.remediation!r})")

    @property
    def failed(self) -> bool:
        return self.verdict is Verdict.FAIL

    def to_dict(self) -> dict[str, Any]:
        out = {"check": self.check, "verdict": self.verdict.value, "detail": self.detail,
               "figures": _copy(self.figures), "remediation": self.remediation}
        if self.timed_out:
            out["timed_out"] = True
        if self.finding:
            out["finding"] = self.finding
        return out


def _copy(value: Any) -> Any:
    """A deep copy of JSON-like figures (the record must not share them with the outcome)."""
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_copy(v) for v in value]
    return value


def passed(check: str, detail: str = "", **figures: Any) -> Outcome:
    return Outcome(check, Verdict.PASS, detail, figures)


def failed(check: str, detail: str, remediation: str = "", **figures: Any) -> Outcome:
    return Outcome(check, Verdict.FAIL, detail, figures, remediation)


def warned(check: str, detail: str, **figures: Any) -> Outcome:
    return Outcome(check, Verdict.WARN, detail, figures)


def skipped(check: str, detail: str) -> Outcome:
    return Outcome(check, Verdict.SKIP, detail)


def timed_out(check: str, timeout: float) -> Outcome:
    """The runner's limit ended the check: the check hung in the node (a driver call, a tool);
    typed, so that nothing reads it back from the words."""
    return Outcome(check, Verdict.FAIL, f"timeout after {timeout:g}s", timed_out=True)


def inconclusive(check: str, detail: str, **figures: Any) -> Outcome:
    """The check did not see the node (see Verdict.ERROR); detail says what was not seen."""
    return Outcome(check, Verdict.ERROR, detail, figures)


def worst(outcomes: list[Outcome]) -> Verdict:
    order = [Verdict.FAIL, Verdict.ERROR, Verdict.WARN, Verdict.PASS, Verdict.SKIP]
    for v in order:
        if any(o.verdict is v for o in outcomes):
            return v
    return Verdict.PASS
