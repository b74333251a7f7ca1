"""What the ledger is computed from: plain data, filled by airlock.ledger.load (or a test)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# The triggers of a run document (airlock.finish.summarize callers) and the stage each is.
STAGES = ("registration", "periodic", "prolog", "epilog", "on-demand", "preflight")
TRIGGER_STAGE = {"new": "registration", "boot": "registration", "record": "registration",
                 "adopt": "registration", "periodic": "periodic", "prolog": "prolog",
                 "epilog": "epilog", "ondemand": "on-demand", "manual": "on-demand",
                 "preflight": "preflight"}
# The registration suite's batch all-reduce (airlock.registration.Suite.batch_group): a group
# test, not one node's own check.
GROUP_CHECKS = frozenset({"group_allreduce"})


def stage_of(run: dict[str, Any]) -> str:
    return TRIGGER_STAGE.get(str(run.get("trigger", "")), "other")


@dataclass(frozen=True)
class NodeView:
    """One node as Slurm shows it now."""

    gpus: int
    in_service: bool  # not drained, not down: it takes jobs
    boot: float | None = None  # BootTime, epoch seconds, when Slurm gave one


@dataclass(frozen=True)
class Action:
    """A reboot or replacement the recovery service sent (its database's actions table)."""

    node: str
    kind: str  # reboot | replace
    at: float


@dataclass(frozen=True)
class Release:
    """The recovery service saw a failed node back in service without its action: a person
    resumed it (recovery.machine's `released` event that is not a foreign drain)."""

    node: str
    at: float


@dataclass(frozen=True)
class Job:
    """One finished job from sacct: its GPUs, nodes and hours."""

    gpus: int
    nodes: int
    hours: float


@dataclass
class History:
    start: float
    end: float
    runs: list[dict[str, Any]] = field(default_factory=list)  # valid run documents
    actions: list[Action] = field(default_factory=list)
    releases: list[Release] = field(default_factory=list)
    nodes: dict[str, NodeView] = field(default_factory=dict)
    # each node's last run of any kind (latest.json: periodic and prolog passes, which the
    # history does not keep, show up here): the samples of unkept runs' durations
    latest: dict[str, dict[str, Any]] = field(default_factory=dict)
    jobs: list[Job] | None = None  # None: no slurmdbd (or not asked)
    jobs_note: str = ""  # where the jobs came from, or why none
    health_check_interval: float = 0.0  # slurm.conf HealthCheckInterval (0: none)
    recovery_note: str = ""  # why the recovery database was not read ("" when it was)
    unread: dict[str, str] = field(default_factory=dict)  # node: why its results were not read
    gpus_per_node: int = 8
