"""Providers that act through Slurm itself: `scontrol reboot` (SlurmReboot), HyperPod's exact
`Action:Reboot` / `Action:Replace` reasons (HyperpodSlurm), and power-cycling State=CLOUD nodes
through the site's Suspend/ResumeProgram (SlurmPower)."""

from __future__ import annotations

from airlock.errors import AirlockError
from airlock.recovery.machine import REBOOT_FLAGS, Obs
from airlock.recovery.providers.base import (
    ERROR,
    ISSUED,
    REFUSED,
    ActionTarget,
    Provider,
    Result,
    mark,
    not_called_for,
)


class SlurmReboot(Provider):
    """scontrol reboot through the site's RebootProgram.

    Neither ASAP nor nextstate: both make slurmctld clear DRAIN when the node registers, which
    would hand the node to the scheduler before the registration suite has judged it. The node
    is drained already (Airlock's own reason), so a plain reboot happens at once and the boot
    quarantine of the HealthCheckProgram takes over.
    """

    name = "slurm"
    actions = ("reboot",)

    def __init__(self, slurm):
        self.slurm = slurm

    def submit(self, action: str, targets: list[ActionTarget]) -> dict[str, Result]:
        out = {}
        for t in targets:
            if action != "reboot":
                out[t.node] = Result(REFUSED, f"slurm cannot {action}")
                continue
            try:
                node = self.slurm.node(t.node)
                if node.foreign_drain:
                    out[t.node] = Result(REFUSED, f"foreign drain appeared: {node.reason!r}")
                    continue
                stop = not_called_for(node)
                if stop is not None:
                    out[t.node] = stop
                    continue
                mark(self.slurm, t)
                self.slurm.scontrol("reboot", f"reason={t.reason}", t.node)
                out[t.node] = Result(ISSUED, "scontrol reboot")
            except AirlockError as exc:
                out[t.node] = Result(ERROR, str(exc))
        return out

    def lookup(self, action: str, target: ActionTarget, obs: Obs | None) -> bool:
        return obs is not None and bool(obs.flags & REBOOT_FLAGS)


class HyperpodSlurm(Provider):
    """SageMaker HyperPod's Slurm convention: state=fail with reason exactly Action:Reboot or
    Action:Replace (case-sensitive, nothing after it); HyperPod's agent does the rest."""

    name = "hyperpod-slurm"
    actions = ("reboot", "replace")
    REASONS = {"reboot": "Action:Reboot", "replace": "Action:Replace"}

    def __init__(self, slurm):
        self.slurm = slurm

    def argv(self, action: str, node: str) -> list[str]:
        return ["update", f"nodename={node}", "state=fail", f"reason={self.REASONS[action]}"]

    def submit(self, action: str, targets: list[ActionTarget]) -> dict[str, Result]:
        out = {}
        for t in targets:
            try:
                node = self.slurm.node(t.node)
                if node.foreign_drain and not self.owns_reason(node.reason):
                    out[t.node] = Result(REFUSED, f"foreign drain appeared: {node.reason!r}")
                    continue
                stop = not_called_for(node)
                if stop is not None:
                    out[t.node] = stop
                    continue
                self.slurm.scontrol(*self.argv(action, t.node))
                out[t.node] = Result(ISSUED, f"state=fail reason={self.REASONS[action]}")
            except AirlockError as exc:
                out[t.node] = Result(ERROR, str(exc))
        return out

    def lookup(self, action: str, target: ActionTarget, obs: Obs | None) -> bool:
        return obs is not None and obs.reason == self.REASONS[action]

    def owns_reason(self, reason: str) -> bool:
        return reason in self.REASONS.values()


class SlurmPower(Provider):
    """For State=CLOUD nodes: force a power-down (SuspendProgram releases the instance), then
    power the node up again (ResumeProgram brings a fresh one) once it is down.

    Slurm 22.05 drops DRAIN when the power-down starts and the reason at POWER_UP, so the
    proof of a new instance is its boot time, as for a reboot. The site needs
    PrivateData=cloud: without it a powered-down cloud node vanishes from scontrol's output.
    """

    name = "slurm-power"
    actions = ("replace",)
    DOWN = frozenset({"POWERED_DOWN", "POWER_DOWN", "POWERING_DOWN"})
    # A node powering up (or queued to) after the case opened was powered down since.
    UP = frozenset({"POWER_UP", "POWERING_UP"})

    def __init__(self, slurm):
        self.slurm = slurm

    def submit(self, action: str, targets: list[ActionTarget]) -> dict[str, Result]:
        out = {}
        for t in targets:
            try:
                node = self.slurm.node(t.node)
                if "CLOUD" not in node.flags:
                    out[t.node] = Result(REFUSED, "not a State=CLOUD node: slurm-power cannot "
                                                  "replace it")
                    continue
                stop = not_called_for(node)
                if stop is not None:
                    out[t.node] = stop
                    continue
                mark(self.slurm, t)
                self.slurm.scontrol("update", f"nodename={t.node}", "state=POWER_DOWN_FORCE",
                                    f"reason={t.reason}")
                out[t.node] = Result(ISSUED, "state=POWER_DOWN_FORCE")
            except AirlockError as exc:
                out[t.node] = Result(ERROR, str(exc))
        return out

    def lookup(self, action: str, target: ActionTarget, obs: Obs | None) -> bool:
        return obs is not None and bool(obs.flags & (self.DOWN | self.UP))

    def progress(self, case, obs: Obs | None) -> str | None:
        # POWERED_DOWN+POWER_UP: asked already, the power_save thread has not run ResumeProgram
        if obs is None or "POWERED_DOWN" not in obs.flags or obs.flags & self.UP:
            return None
        self.slurm.scontrol("update", f"nodename={case.node}", "state=POWER_UP")
        return "state=POWER_UP"


