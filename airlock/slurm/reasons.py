"""The drain-reason protocol.

Every reason Airlock writes starts with PREFIX; Airlock rewrites or clears a reason only when it
carries that prefix. The state word comes first after the prefix because `sinfo -R` shows only
20 characters by default: "airlock: FAIL gemm ..." stays readable there.

    airlock: pending <level> check [<why>]
    airlock: checking <level> [<why>]
    airlock: FAIL <check> <detail>
    airlock: recover <action> [<detail>]
"""

from __future__ import annotations

import re
from typing import NamedTuple

PREFIX = "airlock:"
STATES = ("pending", "checking", "FAIL", "recover")
# FAIL subjects that name Airlock's own trouble, not the node's hardware: a config that does not
# load, a hook that crashed, a state or log directory that cannot be written. They close an
# unproven boot, but no recovery action follows (a reboot fixes none of them), and the next run
# that works replaces them.
OWN_ERRORS = frozenset({"config", "healthcheck", "prolog", "epilog", "suite", "state_dir",
                        "log_dir"})
MAX_LEN = 220
_CONTROL = re.compile(r"[\x00-\x1f\x7f]+")
_SPACES = re.compile(r"\s+")
_CHECK_NAME = re.compile(r"^[A-Za-z0-9_.:-]+$")


class Reason(NamedTuple):
    state: str
    subject: str  # the level for pending/checking, the check for FAIL, the action for recover
    detail: str = ""

    def format(self) -> str:
        parts = [PREFIX, self.state, self.subject]
        if self.detail:
            parts.append(self.detail)
        return clean(" ".join(parts))

    @property
    def is_failure(self) -> bool:
        return self.state == "FAIL"

    @property
    def own_error(self) -> bool:
        """A FAIL for Airlock's own trouble (see OWN_ERRORS)."""
        return self.state == "FAIL" and self.subject in OWN_ERRORS


def clean(text: str) -> str:
    """Make text safe as one Slurm reason: one line, no control characters, bounded length."""
    text = _CONTROL.sub(" ", text)
    text = _SPACES.sub(" ", text).strip()
    if len(text) > MAX_LEN:
        text = text[: MAX_LEN - 3].rstrip() + "..."
    return text


def is_owned(reason: str | None) -> bool:
    """Airlock's reasons start with PREFIX and are one line (clean()): a reason with a line
    break was set by someone else, whatever it starts with."""
    return bool(reason) and reason.startswith(PREFIX) and "\n" not in reason


def parse(reason: str | None) -> Reason | None:
    """Return the parsed reason when Airlock owns it, else None (foreign or empty)."""
    if not is_owned(reason):
        return None
    rest = reason[len(PREFIX) :].split(None, 2)
    state = rest[0] if rest and rest[0] else "unknown"
    subject = rest[1] if len(rest) > 1 else ""
    detail = rest[2] if len(rest) > 2 else ""
    return Reason(state=state, subject=subject, detail=detail)


def pending(level: str, why: str = "") -> Reason:
    return Reason("pending", level, f"check {why}".strip())


def checking(level: str, why: str = "") -> Reason:
    return Reason("checking", level, why)


def failure(check: str, detail: str) -> Reason:
    if not _CHECK_NAME.match(check or ""):
        check = re.sub(r"[^A-Za-z0-9_.:-]", "_", check or "x")
    return Reason("FAIL", check, detail or "failed")


def recover(action: str, detail: str = "") -> Reason:
    return Reason("recover", action, detail)
