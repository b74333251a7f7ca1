"""Who carries out a reboot or a replacement: one small interface, chosen in [recovery].

    submit(action, targets) -> {node: Result}   send the request(s); never raises for one node
    lookup(action, target, obs) -> bool         after a crash: did this request already happen?
    owns_reason(reason) -> bool                 a reason this provider sets (HyperPod's Action:*)
    progress(case, obs) -> str | None           a follow-up step while waiting (slurm-power)

Results are "issued" (accepted), "refused" (the provider said no: not retried, the node stays
drained with the message) or "error" (retries exhausted: tried again after the cooldown).
Slurm is always called with argv lists, never a shell.
"""


from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

from airlock.recovery import machine
from airlock.recovery.machine import Obs
from airlock.slurm import reasons

ISSUED, REFUSED, ERROR = "issued", "refused", "error"
Recorder = Callable[[str, str, str], None]  # node, event, detail


@dataclass(frozen=True)
class ActionTarget:
    node: str
    request_id: str
    reason: str  # the Airlock reason that marks the action in Slurm


@dataclass(frozen=True)
class Result:
    status: str
    message: str = ""


def no_record(_node: str, _event: str, _detail: str) -> None:
    pass


class Provider:
    name = "none"
    actions: tuple[str, ...] = ()

    def submit(self, action: str, targets: list[ActionTarget]) -> dict[str, Result]:
        return {t.node: Result(REFUSED, f"provider {self.name} cannot {action}") for t in targets}

    def lookup(self, action: str, target: ActionTarget, obs: Obs | None) -> bool:
        return False

    def owns_reason(self, reason: str) -> bool:
        return False

    def progress(self, case, obs: Obs | None) -> str | None:
        return None


def not_called_for(node) -> Result | None:
    """An error result when the node, as Slurm shows it right before the request, no longer
    calls for the action (machine.not_called_for): the case goes back to detected, and the next
    poll releases it or waits."""
    why = machine.not_called_for(Obs.from_node(node))
    return None if why is None else Result(ERROR, f"not sent: {why}")


def mark(slurm, target: ActionTarget) -> None:
    """Put Airlock's recover reason on the node, so that the drain stays owned and says why."""
    slurm.drain(target.node, target.reason)



def recover_reason(action: str, request_id: str) -> str:
    return reasons.recover(action, request_id).format()


def dumps(obj) -> str:
    return json.dumps(obj, sort_keys=True, default=str)
