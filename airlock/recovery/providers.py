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
import os
import subprocess
from collections.abc import Callable
from dataclasses import dataclass

from airlock import reasons
from airlock.errors import AirlockError, ConfigError
from airlock.recovery.machine import REBOOT_FLAGS, Obs

ISSUED, REFUSED, ERROR = "issued", "refused", "error"
Recorder = Callable[[str, str, str], None]  # node, event, detail


@dataclass(frozen=True)
class Target:
    node: str
    request_id: str
    reason: str  # the Airlock reason that marks the action in Slurm


@dataclass(frozen=True)
class Result:
    status: str
    message: str = ""


def _no_record(_node: str, _event: str, _detail: str) -> None:
    pass


class Provider:
    name = "none"
    actions: tuple[str, ...] = ()

    def submit(self, action: str, targets: list[Target]) -> dict[str, Result]:
        return {t.node: Result(REFUSED, f"provider {self.name} cannot {action}") for t in targets}

    def lookup(self, action: str, target: Target, obs: Obs | None) -> bool:
        return False

    def owns_reason(self, reason: str) -> bool:
        return False

    def progress(self, case, obs: Obs | None) -> str | None:
        return None


def mark(slurm, target: Target) -> None:
    """Put Airlock's recover reason on the node, so that the drain stays owned and says why."""
    slurm.drain(target.node, target.reason)


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

    def submit(self, action: str, targets: list[Target]) -> dict[str, Result]:
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
                if node.busy:
                    out[t.node] = Result(ERROR, "jobs appeared on the node; not rebooted")
                    continue
                mark(self.slurm, t)
                self.slurm.scontrol("reboot", f"reason={t.reason}", t.node)
                out[t.node] = Result(ISSUED, "scontrol reboot")
            except AirlockError as exc:
                out[t.node] = Result(ERROR, str(exc))
        return out

    def lookup(self, action: str, target: Target, obs: Obs | None) -> bool:
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

    def submit(self, action: str, targets: list[Target]) -> dict[str, Result]:
        out = {}
        for t in targets:
            try:
                node = self.slurm.node(t.node)
                if node.foreign_drain and not self.owns_reason(node.reason):
                    out[t.node] = Result(REFUSED, f"foreign drain appeared: {node.reason!r}")
                    continue
                self.slurm.scontrol(*self.argv(action, t.node))
                out[t.node] = Result(ISSUED, f"state=fail reason={self.REASONS[action]}")
            except AirlockError as exc:
                out[t.node] = Result(ERROR, str(exc))
        return out

    def lookup(self, action: str, target: Target, obs: Obs | None) -> bool:
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

    def submit(self, action: str, targets: list[Target]) -> dict[str, Result]:
        out = {}
        for t in targets:
            try:
                node = self.slurm.node(t.node)
                if "CLOUD" not in node.flags:
                    out[t.node] = Result(REFUSED, "not a State=CLOUD node: slurm-power cannot "
                                                  "replace it")
                    continue
                mark(self.slurm, t)
                self.slurm.scontrol("update", f"nodename={t.node}", "state=POWER_DOWN_FORCE",
                                    f"reason={t.reason}")
                out[t.node] = Result(ISSUED, "state=POWER_DOWN_FORCE")
            except AirlockError as exc:
                out[t.node] = Result(ERROR, str(exc))
        return out

    def lookup(self, action: str, target: Target, obs: Obs | None) -> bool:
        return obs is not None and bool(obs.flags & (self.DOWN | self.UP))

    def progress(self, case, obs: Obs | None) -> str | None:
        # POWERED_DOWN+POWER_UP: asked already, the power_save thread has not run ResumeProgram
        if obs is None or "POWERED_DOWN" not in obs.flags or obs.flags & self.UP:
            return None
        self.slurm.scontrol("update", f"nodename={case.node}", "state=POWER_UP")
        return "state=POWER_UP"


class Command(Provider):
    """An admin's executable: `PATH reboot|replace|status NODE --request-id ID`.

    Exit 0: accepted (status: the request is known). Exit 3: refused, the last line of stderr
    says why. Anything else: an error, tried again later with the same request id, so the
    command must treat a repeated request id as the same request.
    """

    name = "command"
    actions = ("reboot", "replace")
    REFUSED_EXIT = 3

    def __init__(self, path: str, timeout: float):
        if not os.access(path, os.X_OK):
            raise ConfigError(f"[recovery.command] path {path!r}: not an executable file")
        self.path = path
        self.timeout = timeout

    def _run(self, verb: str, t: Target) -> tuple[int, str]:
        argv = [self.path, verb, t.node, "--request-id", t.request_id]
        env = dict(os.environ, AIRLOCK_REASON=t.reason)
        try:
            p = subprocess.run(argv, capture_output=True, text=True, timeout=self.timeout,
                               stdin=subprocess.DEVNULL, env=env)
        except subprocess.TimeoutExpired:
            return -1, f"timed out after {self.timeout:g}s"
        except OSError as exc:
            return -1, f"cannot run: {exc.strerror}"
        lines = (p.stderr or p.stdout).strip().splitlines()
        return p.returncode, (lines[-1] if lines else f"exit {p.returncode}")[:300]

    def submit(self, action: str, targets: list[Target]) -> dict[str, Result]:
        out = {}
        for t in targets:
            rc, msg = self._run(action, t)
            status = ISSUED if rc == 0 else REFUSED if rc == self.REFUSED_EXIT else ERROR
            out[t.node] = Result(status, msg if rc else f"{os.path.basename(self.path)} ok")
        return out

    def lookup(self, action: str, target: Target, obs: Obs | None) -> bool:
        return self._run("status", target)[0] == 0


def make(cfg, slurm, record: Recorder = _no_record) -> tuple[Provider, Provider]:
    """(rebooter, replacer) for this config."""
    rc = cfg.recovery
    name = rc.provider
    if name == "http":
        from airlock.recovery.http_provider import HttpProvider

        replacer: Provider = HttpProvider(rc.http, record)
    elif name == "command":
        replacer = Command(rc.command.path, rc.command.timeout)
    elif name == "aws-hyperpod":
        from airlock.recovery.hyperpod import HyperpodProvider

        replacer = HyperpodProvider.from_settings(rc.aws_hyperpod, record)
    elif name == "hyperpod-slurm":
        replacer = HyperpodSlurm(slurm)
    elif name == "slurm-power":
        replacer = SlurmPower(slurm)
    else:
        replacer = Provider()
    rebooter = SlurmReboot(slurm) if rc.reboot_via == "slurm" else replacer
    return rebooter, replacer


def recover_reason(action: str, request_id: str) -> str:
    return reasons.recover(action, request_id).format()


def dumps(obj) -> str:
    return json.dumps(obj, sort_keys=True, default=str)
