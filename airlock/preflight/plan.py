"""Who meets, where, and who leads: from the allocation alone, so every member computes the same
plan without asking anyone (pure; python-hostlist expands Slurm's node list, as airlock.slurm.client
does, with no Slurm call)."""

from __future__ import annotations

import zlib
from typing import NamedTuple

from airlock.errors import AirlockError
from airlock.paths import valid_batch_id, valid_node_name


class PlanError(AirlockError):
    """The allocation cannot be planned (a node list or job id this plan refuses)."""


class Plan(NamedTuple):
    job_id: str
    members: list[str]  # in Slurm's order
    leader: str
    me: str
    batch_id: str  # the meeting's folder under <shared root>/.batches (airlock.groups.batch)

    @property
    def leading(self) -> bool:
        return self.me == self.leader


def expand(nodelist: str) -> list[str]:
    import hostlist  # pure Python; only a qualifying job gets here

    try:
        return hostlist.expand_hostlist(nodelist)
    except hostlist.BadHostlist as exc:
        raise PlanError(f"bad node list {nodelist!r}: {exc}") from None


def make_plan(job_id: str, nodelist: str, me: str, members: list[str] | None = None,
              restarts: str = "0") -> Plan:
    """The leader is the allocation's first node; the meeting folder is named after the job, its
    restart count and its members, so a requeued job meets afresh."""
    if not job_id.isdigit() or len(job_id) > 12:
        raise PlanError(f"job id {job_id!r} is not a number")
    if not restarts.isdigit() or len(restarts) > 5:
        raise PlanError(f"restart count {restarts!r} is not a number")
    names = list(members) if members is not None else expand(nodelist)
    if len(set(names)) != len(names) or not all(valid_node_name(n) for n in names):
        raise PlanError(f"node list {nodelist!r} holds a repeated or unsafe node name")
    if me not in names:
        raise PlanError(f"{me} is not in the job's node list {nodelist!r}")
    digest = zlib.crc32(",".join(names).encode()) & 0xFFFFFFFF
    batch_id = f"batch-{job_id}-preflight.r{int(restarts)}.{digest:08x}"
    if not valid_batch_id(batch_id):  # the pattern airlock.groups.batch checks every folder against
        raise PlanError(f"no meeting folder for job {job_id}")
    return Plan(job_id, names, names[0], me, batch_id)
