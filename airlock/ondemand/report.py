"""What an on-demand check found, node by node: GroupTarget, GroupReport and the exit codes
(airlock.cli.check prints the report; airlock.serve reads its JSON)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

EXIT_PASS, EXIT_FAIL, EXIT_PARTIAL = 0, 1, 3
GROUP_CHECK = "group_allreduce"  # --only name of the multi-node test


@dataclass
class GroupTarget:
    """One node of an on-demand check and what became of it."""

    name: str
    addr: str
    status: str = "pending"  # pass | fail | skipped | inconclusive
    why: str = ""
    run: dict[str, Any] | None = None
    failed_check: str = ""
    detail: str = ""
    group: str = "n/a"
    figures: dict[str, Any] = field(default_factory=dict)
    duration_s: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"node": self.name, "status": self.status, "why": self.why,
                "failed_check": self.failed_check or None, "detail": self.detail,
                "group": self.group, "figures": self.figures, "duration_s": self.duration_s,
                "checks": (self.run or {}).get("checks", [])}


@dataclass
class GroupReport:
    """What an on-demand check found, node by node (airlock.cli.check prints it)."""

    level: str
    started_at: float
    finished_at: float
    targets: list[GroupTarget]

    @property
    def exit_code(self) -> int:
        statuses = {t.status for t in self.targets}
        if "fail" in statuses:
            return EXIT_FAIL
        return EXIT_PARTIAL if statuses & {"skipped", "inconclusive"} else EXIT_PASS

    def to_dict(self) -> dict[str, Any]:
        return {"schema": 1, "level": self.level, "started_at": self.started_at,
                "finished_at": self.finished_at, "exit_code": self.exit_code,
                "nodes": [t.to_dict() for t in self.targets]}
