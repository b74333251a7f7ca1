"""The recovery state machine and its safety rails, pure: no Slurm, no clock, no database.

One failed node is one *case*. A poll turns each node's Slurm record into an Obs; `plan` moves
the node's case one step and may *want* an action; `decide` runs every node through `plan`,
trips the circuit breaker, and lets the rails pick which wanted actions start now. The service
persists what `decide` returns and carries out the starts.

    detected --reboot--> reboot_requested --new boot--> rebooted --pass--> healthy --window--> done
        ^                                                   | fail              | fail again
        +------------------ escalate (next rung) <----------+-------------------+
    detected --replace--> replace_requested --new boot--> replaced --pass--> healthy
    no rung left, a refusal, or a timeout waiting for a replacement: manual (stays drained)
    a human resumes the node or sets a foreign drain: released (hands off)

"New boot" means a BootTime, parsed as a time, that moved by more than `boot_shift_min` and is
no older than the request (minus `boot_skew`): a slurmd restart or `scontrol reconfigure` makes
slurmd recompute BootTime from the clock and the uptime, which moves it by a second or so.

Nodes stuck in `airlock: pending|checking` past the suite's time limit are only reported
(`stuck`), never acted on: the node-side hook re-runs or fails them. Nor is a node drained for
Airlock's own trouble (reasons.OWN_ERRORS: `FAIL config`, `FAIL suite`, ...): it opens no case,
and a case waiting for a re-check that hits one waits for a person; `airlock status`, the
metrics and `recover --show` list it as needing an operator.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import NamedTuple

from airlock.slurm import reasons

DETECTED = "detected"
REBOOT_REQUESTED = "reboot_requested"
REBOOTED = "rebooted"
REPLACE_REQUESTED = "replace_requested"
REPLACED = "replaced"
HEALTHY = "healthy"
MANUAL = "manual"
DONE = "done"
RELEASED = "released"

REQUESTED = {"reboot": REBOOT_REQUESTED, "replace": REPLACE_REQUESTED}
AWAITING_BOOT = (REBOOT_REQUESTED, REPLACE_REQUESTED)
AWAITING_VERDICT = (REBOOTED, REPLACED)
IN_FLIGHT = AWAITING_BOOT + AWAITING_VERDICT  # counted by max_in_flight
CLOSED = (DONE, RELEASED)
REBOOT_FLAGS = frozenset({"REBOOT", "REBOOT_REQUESTED", "REBOOT_ISSUED"})
# A node in these states is not running its suite, so a long pending/checking is not "stuck".
NOT_RUNNING_FLAGS = REBOOT_FLAGS | {"NOT_RESPONDING", "POWERED_DOWN", "POWERING_DOWN",
                                    "POWER_DOWN", "POWERING_UP", "POWER_UP"}
SLURM_TIME_FORMATS = ("%Y-%m-%dT%H:%M:%S", "%Y-%m-%dT%H:%M", "%Y-%m-%d %H:%M:%S")


def parse_slurm_time(text: str) -> float | None:
    """A Slurm timestamp (BootTime, the reason's [user@time]) as epoch seconds, or None.

    scontrol prints them in the local time of the host it runs on, which is where the recovery
    service runs, so local time is the right reading."""
    text = (text or "").strip()
    for fmt in SLURM_TIME_FORMATS:
        try:
            return time.mktime(time.strptime(text, fmt))
        except (ValueError, OverflowError):
            continue
    return None


def format_slurm_time(epoch: float) -> str:
    return time.strftime(SLURM_TIME_FORMATS[0], time.localtime(epoch))


def is_new_boot(boot_time: str, boot_before: str, requested_at: float, limits) -> bool:
    """Whether boot_time proves that the node booted after an action requested at requested_at.

    A BootTime that cannot be read proves nothing (the case then times out to its next rung
    or a person); an unknown boot before the request (a replacement that was missing from
    Slurm) leaves the request time as the only test."""
    new = parse_slurm_time(boot_time)
    if new is None or new < requested_at - limits.boot_skew:
        return False
    old = parse_slurm_time(boot_before)
    return old is None or abs(new - old) > limits.boot_shift_min


class Obs(NamedTuple):
    """What one poll says about one node (from airlock.slurm.client.Node). A NamedTuple: a poll
    builds one per node, 20,000 at a time, and a frozen dataclass costs several times more."""

    name: str
    reason: str = ""
    drained: bool = False
    busy: bool = False
    boot_time: str = ""
    flags: frozenset[str] = frozenset()
    state: str = ""
    reason_time: str = ""  # when the reason was set, as Slurm prints it
    # the failure's kind as the node's own run document types its failed check (policy.KINDS;
    # read by the service only for a node whose failure is about to be decided)
    kind: str = ""

    @classmethod
    def from_node(cls, node) -> Obs:
        # The reason in force only: on 23.11+ without an accounting plugin a node resumed into
        # service keeps its old reason, which must not read as a claim or keep it from "free".
        reason = node.reason_in_force
        return cls(node.name, reason, node.drained, node.busy, node.boot_time, node.flags,
                   node.state, node.reason_time if reason else "")

    @property
    def parsed(self) -> reasons.Reason | None:
        return reasons.parse(self.reason)

    @property
    def failing(self) -> bool:
        """Drained for a failure of the node: Airlock's own errors (reasons.OWN_ERRORS: a config
        that does not load, a suite that crashed, a state_dir that cannot be written) are not
        the node's, and a reboot or a replacement fixes none of them."""
        r = self.parsed
        return self.drained and r is not None and r.is_failure and not r.own_error

    @property
    def own_error(self) -> bool:
        """Drained for Airlock's own trouble: the node needs an operator, never an action."""
        r = self.parsed
        return self.drained and r is not None and r.own_error

    @property
    def free(self) -> bool:
        """No reason and no drain: the node is in service."""
        return not self.drained and not self.reason


@dataclass(frozen=True)
class Case:
    node: str
    state: str
    failure_class: str
    ladder: tuple[str, ...]
    step: int  # index into ladder of the next (or current) action
    check: str
    detail: str
    opened: float
    since: float  # when the current state was entered (for *_requested: the request time)
    boot_before: str = ""  # the node's boot time when the current action was requested
    action: str = ""  # the action of the current rung, once requested
    action_id: int = 0  # the store's id of that action
    note: str = ""  # why the case is where it is (for people)
    # earlier reboots, within the policy's window, that did not clear this check on this node
    # or its hardware (the escalation memory; airlock status shows it)
    not_cleared: int = 0
    hardware: tuple[str, ...] = ()  # the node's hardware identity when the case opened

    def to(self, state: str, now: float, **changes) -> Case:
        return replace(self, state=state, since=now, **changes)

    @property
    def next_action(self) -> str | None:
        return self.ladder[self.step] if self.step < len(self.ladder) else None


@dataclass
class Step:
    case: Case | None
    events: list[tuple[str, str]] = field(default_factory=list)
    want: str | None = None
    new: bool = False  # a new failure was detected (counts towards the breaker)


class Reboot(NamedTuple):
    """A reboot the service did for a failing check (its new boot seen): the memory's unit."""

    node: str
    check: str
    at: float
    keys: frozenset[str] = frozenset()  # the hardware's identity then: "instance:..", "gpu:.."


# Identities firmware ships unfilled: thousands of boards carry them, so they identify nothing.
PLACEHOLDER_IDS = frozenset({"03000200-0400-0500-0006-000700080009", "not specified",
                             "to be filled by o.e.m.", "default string", "none", "n/a"})


def is_placeholder(value: str) -> bool:
    """A DMI UUID or serial known to be a placeholder: a known string (case-insensitive), all
    zeros or all F (a UUID's dashes aside), or empty."""
    v = value.strip().lower()
    return v in PLACEHOLDER_IDS or not v.strip("0-") or not v.strip("f-")


def hardware_keys(node: str, keys) -> tuple[frozenset[str], tuple[str, ...]]:
    """The memory's keys for a node's published identity ("instance:..", "gpu:.."), and the
    placeholders among them. A placeholder is never a key of its own: it is kept only scoped
    by the node name ("instance:<uuid>@node"), so boards that share it share no memory while a
    name that keeps showing it still counts. Idempotent (a scoped key is no placeholder)."""
    out, found = set(), []
    for key in keys:
        _kind, _, value = key.partition(":")
        if is_placeholder(value):
            found.append(key)
            out.add(f"{key}@{node}")
        else:
            out.add(key)
    return frozenset(out), tuple(sorted(found))


def _shown(keys: frozenset[str]) -> str:
    """An identity in a history row: its instance, else its first two keys."""
    inst = sorted(k for k in keys if k.startswith("instance:"))
    if inst:
        return ",".join(inst)
    return ",".join(sorted(keys)[:2]) + ("..." if len(keys) > 2 else "")


class Memory(NamedTuple):
    """What the service remembers across cases (rebuilt from the store each poll): the reboots
    within the policy's window, when each node was last replaced, each node's hardware
    identity as its latest document gives it (placeholders scoped by name: hardware_keys), and
    the placeholders found in those identities."""

    reboots: tuple[Reboot, ...] = ()
    replaced: dict[str, float] = {}
    identity: dict[str, frozenset[str]] = {}
    placeholders: dict[str, tuple[str, ...]] = {}

    @classmethod
    def build(cls, reboots, replaced: dict[str, float],
              identity: dict[str, frozenset[str]]) -> Memory:
        """The memory with every key passed through hardware_keys (rows recorded before
        placeholders were scoped included)."""
        scoped = tuple(r._replace(keys=hardware_keys(r.node, r.keys)[0]) for r in reboots)
        ident, found = {}, {}
        for node, keys in identity.items():
            ident[node], placeholders = hardware_keys(node, keys)
            if placeholders:
                found[node] = placeholders
        return cls(scoped, dict(replaced), ident, found)

    def _counted(self, node: str, check: str, now: float, window: float):
        """(reboots that count, reboots under this name on other hardware). With an identity
        known on both sides, a reboot counts only on the same hardware, wherever it ran: a
        name whose hardware changed (swapped outside the service too) starts afresh. Where
        either side has none, a reboot of this name since its last replacement counts."""
        keys = self.identity.get(node, frozenset())
        since = self.replaced.get(node, float("-inf"))
        counted, other = [], []
        for r in self.reboots:
            if r.check != check or not now - window <= r.at <= now:
                continue
            if keys and r.keys:
                if r.keys & keys:
                    counted.append(r)
                elif r.node == node and r.at > since:
                    other.append(r)
            elif r.node == node and r.at > since:
                counted.append(r)
        return counted, other

    def not_cleared(self, node: str, check: str, now: float, window: float) -> int:
        """Reboots within the window that did not clear `check`: every earlier reboot for it
        (the check has failed again since, or this question would not be asked) on this node's
        current hardware wherever it ran, or on this node by name where no identity tells."""
        return len(self._counted(node, check, now, window)[0])

    def notes(self, node: str, check: str, now: float, window: float) -> list[str]:
        """Why this node's memory is not what its name alone would give (for its history)."""
        out = []
        found = self.placeholders.get(node)
        if found:
            out.append(f"placeholder identity {', '.join(found)} is no hardware key: counted "
                       f"with the node name {node}")
        other = self._counted(node, check, now, window)[1]
        if other:
            was = frozenset().union(*(r.keys for r in other))
            out.append(f"the hardware under {node} changed since {len(other)} earlier "
                       f"reboot{'s' if len(other) > 1 else ''} for {check} (was {_shown(was)}, "
                       f"now {_shown(self.identity[node])}): its memory starts afresh")
        return out


def open_case(obs: Obs, now: float, policy) -> Case:
    r = obs.parsed
    cls = policy.classify(r.subject, r.detail, obs.kind)
    return Case(obs.name, DETECTED, cls.name, cls.ladder, 0, r.subject, r.detail, now, now)


def _remembered(new: Case, now: float, policy, memory: Memory | None) -> Step:
    """A new case, its ladder moved past the reboot when the memory says reboots did not
    clear this check before (policy [escalation])."""
    opened = ("detected", f"{new.check} {new.detail} (class {new.failure_class}, ladder "
                          f"{list(new.ladder)})")
    if memory is None:
        return Step(new, [opened], new=True)
    new = replace(new, hardware=tuple(sorted(memory.identity.get(new.node, ()))))
    count = memory.not_cleared(new.node, new.check, now, policy.escalation.window)
    opened = [opened, *(("memory", note) for note in
                        memory.notes(new.node, new.check, now, policy.escalation.window))]
    if not count:
        return Step(new, opened, new=True)
    new = replace(new, not_cleared=count)
    cls = policy.by_name(new.failure_class)
    limit = policy.reboot_limit(cls) if cls is not None else policy.escalation.reboots
    if not limit or count < limit or new.next_action != "reboot":
        return Step(new, opened, new=True)
    step = new.step
    while step < len(new.ladder) and new.ladder[step] == "reboot":
        step += 1
    why = (f"{count} reboots within {policy.escalation.window:g}s did not clear {new.check} "
           f"on this node or its hardware (limit {limit})")
    new = replace(new, step=step)
    if new.next_action is None:
        return Step(new.to(MANUAL, now, note=f"{why}; no action after the reboot"),
                    [*opened, ("manual", f"{why}; ladder {list(new.ladder)} has nothing after "
                                        "the reboot, left drained for a person")], new=True)
    return Step(replace(new, note=why),
                [*opened, ("memory", f"{why}: skipping the reboot; next: {new.next_action}")],
                new=True)


def _needs_operator(case: Case, obs: Obs, now: float, policy) -> Step | None:
    """A failure after an action whose kind the policy leaves to a person (a class for its
    kind with no action: a configuration finding): the case waits for an operator instead of
    escalating to the next rung, because neither rung fixes a setting."""
    if not obs.kind:
        return None
    r = obs.parsed
    cls = policy.classify(r.subject, r.detail, obs.kind)
    if not cls.kinds or cls.ladder:
        return None
    what = f"{r.subject} {r.detail}".strip()
    return Step(case.to(MANUAL, now, note=f"class {cls.name}: {what}"),
                [("manual", f"failed again after {case.action or 'recovery'}: {what} (kind "
                            f"{obs.kind}, class {cls.name}): no automatic action, left drained "
                            "for a person")])


def _escalate(case: Case, now: float, why: str) -> Step:
    nxt = replace(case, step=case.step + 1)
    if nxt.next_action is None:
        return Step(nxt.to(MANUAL, now, note=f"{why}; no automatic action left"),
                    [("manual", f"{why}; ladder {list(case.ladder)} exhausted, left drained")])
    return Step(nxt.to(DETECTED, now, note=why), [("escalate", f"{why}; next: {nxt.next_action}")])


def _boot_timeout(case: Case, now: float, limits) -> Step | None:
    """A reboot or replacement whose new boot never showed up in time."""
    limit = limits.reboot_timeout if case.state == REBOOT_REQUESTED else limits.replace_timeout
    if now - case.since <= limit:
        return None
    if case.state == REBOOT_REQUESTED:
        return _escalate(case, now, f"no new boot {limit:g}s after the reboot request")
    return Step(case.to(MANUAL, now, note="replacement never registered"),
                [("manual", f"no new instance {limit:g}s after the replace request")])


def plan(case: Case | None, obs: Obs | None, now: float, policy, limits,
         owns_reason: Callable[[str], bool] = lambda _r: False,
         memory: Memory | None = None) -> Step:
    """Move one node's case one step. `limits` is the [recovery] section (timeouts, windows);
    `memory` the reboots remembered across cases (Memory)."""
    if case is None or case.state in CLOSED:
        if obs is not None and obs.failing:
            return _remembered(open_case(obs, now, policy), now, policy, memory)
        return Step(case)
    if obs is None:  # not in Slurm's list (a replacement may re-appear under the same name)
        # ...but one that never does must still time out to a person, not wait forever.
        if case.state in AWAITING_BOOT:
            return _boot_timeout(case, now, limits) or Step(case)
        return Step(case)
    ours = obs.parsed is not None or owns_reason(obs.reason)
    if case.state not in AWAITING_BOOT and obs.drained and obs.reason and not ours:
        return Step(case.to(RELEASED, now, note="foreign drain"),
                    [("released", f"foreign reason {obs.reason!r}: hands off")])
    state = case.state

    if state == DETECTED:
        if obs.free:
            return Step(case.to(RELEASED, now, note="resumed by someone else"),
                        [("released", "node back in service without Airlock: hands off")])
        if not obs.failing and (obs.parsed is None or obs.parsed.state != "recover"):
            return Step(case)  # a check is running on it: wait for the verdict
        action = case.next_action
        if action is None:
            return Step(case.to(MANUAL, now, note=f"class {case.failure_class} has no action"),
                        [("manual", f"class {case.failure_class}: no automatic action, "
                                    "left drained for a person")])
        if obs.busy or not obs.drained:
            return Step(case)  # never act on a node running jobs: wait until drained and idle
        if case.step == 0 and now - case.opened < limits.detect_grace:
            return Step(case)
        return Step(case, want=action)

    if state in AWAITING_BOOT:
        if is_new_boot(obs.boot_time, case.boot_before, case.since, limits):
            nxt = REBOOTED if state == REBOOT_REQUESTED else REPLACED
            return Step(case.to(nxt, now), [("booted", f"new boot {obs.boot_time} after "
                                                        f"{case.action}")])
        # Only a known boot of a responding node shows a person's resume: while a rebooted
        # node registers, Slurm 22.05 can show it for a moment without drain, reason or
        # BootTime, and NOT_RESPONDING (its registration may pass within that second).
        if obs.free and not (obs.flags & REBOOT_FLAGS) and case.action == "reboot" \
                and parse_slurm_time(obs.boot_time) is not None \
                and "NOT_RESPONDING" not in obs.flags:
            return Step(case.to(RELEASED, now, note="resumed by someone else"),
                        [("released", "resumed before the reboot happened: hands off")])
        return _boot_timeout(case, now, limits) or Step(case)

    if state in (*AWAITING_VERDICT, HEALTHY) and obs.failing:
        operator = _needs_operator(case, obs, now, policy)
        if operator is not None:
            return operator

    if state in AWAITING_VERDICT:
        if obs.own_error:  # the re-check could not run: wait for a person, never escalate
            note = f"own error, needs an operator: {obs.parsed.subject} {obs.parsed.detail}"
            return Step(case if case.note == note else replace(case, note=note))
        if obs.failing:
            return _escalate(case, now, f"failed again after {case.action}: "
                                        f"{obs.parsed.subject} {obs.parsed.detail}".strip())
        if obs.free:
            return Step(case.to(HEALTHY, now, note=f"passed after {case.action}"),
                        [("healthy", f"passed the registration checks after {case.action}")])
        if now - case.since > limits.verdict_timeout:
            return _escalate(case, now, f"no verdict {limits.verdict_timeout:g}s after the boot")
        return Step(case)

    if state == HEALTHY:
        if obs.failing:
            return _escalate(case, now, f"failed again within the window: "
                                        f"{obs.parsed.subject} {obs.parsed.detail}".strip())
        if now - case.since > limits.refail_window:
            return Step(case.to(DONE, now), [("done", "stayed healthy through the window")])
        return Step(case)

    if state == MANUAL:
        if obs.free:
            return Step(case.to(RELEASED, now, note="resumed by a person"),
                        [("released", "a person returned the node to service")])
        return Step(case)
    return Step(case)


def not_called_for(obs: Obs | None) -> str | None:
    """Why Slurm's view of a node no longer calls for an action on it, or None: an action
    reaches a node only while Airlock's failure of it is in force (drained with Airlock's FAIL
    of the node, or with a recover mark, which an action sets in its place) and the node is
    idle. Asked when an old intent is re-decided and, by the providers that act through Slurm,
    right before a request."""
    if obs is None:
        return "the node is not in Slurm's list"
    r = obs.parsed
    if not (obs.failing or (obs.drained and r is not None and r.state == "recover")):
        if not obs.drained:
            held = "the node is in service"
        elif not obs.reason:
            held = "drained without a reason"
        else:
            held = f"drained for {obs.reason!r}"
        return f"Airlock's failure is no longer in force ({held})"
    if obs.busy:
        return "the node runs a job"
    return None


def intent_unwanted(case: Case | None, obs: Obs | None, action_id: int, kind: str,
                    created: float, now: float, limits) -> str | None:
    """Why an intent journalled by a process that died before sending it must not be sent now,
    or None to send it. Re-decided on Slurm's current view, never resent blindly: its case is
    still waiting for this action, Airlock's failure is still in force and the node idle
    (not_called_for), and the intent is younger than its action's timeout. (Whether the action
    already happened is the provider's question, asked before this one.)"""
    if case is None or case.action_id != action_id or case.state not in AWAITING_BOOT:
        return "its case no longer waits for it"
    why = not_called_for(obs)
    if why:
        return why
    limit = limits.reboot_timeout if kind == "reboot" else limits.replace_timeout
    if now - created > limit:
        return f"the intent is {now - created:.0f}s old ({kind}_timeout {limit:g}s)"
    return None


# --- nodes stuck in a check ------------------------------------------------------------------
def stuck_nodes(observations: Iterable[Obs], now: float,
                after: float) -> dict[str, tuple[str, float]]:
    """{node: (reason, since)} for nodes drained with Airlock's pending/checking reason whose
    reason was set more than `after` seconds ago ([registration] suite_timeout plus
    [recovery] stuck_grace). A node that is busy, rebooting, powered down or not responding is
    not running a suite, so it is not counted; nor is one whose reason time cannot be read."""
    out = {}
    for o in observations:
        r = o.parsed
        if not o.drained or r is None or r.state not in ("pending", "checking"):
            continue
        if o.busy or o.flags & NOT_RUNNING_FLAGS or o.state in ("DOWN", "FUTURE", "UNKNOWN"):
            continue
        since = parse_slurm_time(o.reason_time)
        if since is not None and now - since > after:
            out[o.name] = (o.reason, since)
    return out


def own_error_nodes(observations: Iterable[Obs], now: float) -> dict[str, tuple[str, float]]:
    """{node: (reason, since)} for nodes drained for Airlock's own trouble: they need an
    operator (a config to fix, a directory to free), never a reboot or a replacement. Reported
    beside the stuck nodes; `since` is when the reason was set (now when unreadable)."""
    out = {}
    for o in observations:
        if o.own_error:
            since = parse_slurm_time(o.reason_time)
            out[o.name] = (o.reason, now if since is None else since)
    return out


# --- safety rails ----------------------------------------------------------------------------
@dataclass
class Ledger:
    """What the rails need to know about the past (rebuilt from the store each poll)."""

    action_times: list[float] = field(default_factory=list)  # starts within the rate window
    last_action: dict[str, float] = field(default_factory=dict)  # per node
    detections: list[tuple[str, str, float]] = field(default_factory=list)  # node, check, time
    breaker_open: bool = False
    breaker_why: str = ""
    breaker_reset_at: float = 0.0  # the last operator reset, as read with the rest


def rate_used(times: Iterable[float], now: float, window: float) -> int:
    return sum(1 for t in times if now - t < window)


def breaker_trip(detections: list[tuple[str, str, float]], fleet: int, now: float,
                 limits) -> str | None:
    """Why the breaker must open, or None: too many nodes failing within the window."""
    recent = [(n, c) for n, c, t in detections if now - t < limits.breaker_window]
    nodes = {n for n, _ in recent}
    need = max(limits.breaker_min_nodes, math.ceil(limits.breaker_share * max(fleet, 1)))
    if len(nodes) >= need:
        return (f"{len(nodes)} of {fleet} nodes failed within {limits.breaker_window:g}s "
                f"(limit {need})")
    by_check: dict[str, set[str]] = {}
    for n, c in recent:
        by_check.setdefault(c, set()).add(n)
    for check, members in sorted(by_check.items()):
        if len(members) >= limits.breaker_same_check:
            return f"{len(members)} nodes failed {check} within {limits.breaker_window:g}s"
    return None


def blocked(node: str, cases: dict[str, Case], ledger: Ledger, now: float, limits,
            in_flight: int | None = None) -> str | None:
    """Why an action on node may not start now, or None. in_flight: the cases in flight, when
    the caller keeps the count (decide does: counting per wanted action was quadratic)."""
    if ledger.breaker_open:
        return f"circuit breaker open ({ledger.breaker_why}); reset with --reset-breaker"
    used = rate_used(ledger.action_times, now, limits.rate_window)
    if used >= limits.max_actions_per_hour:
        return f"rate limit: {used} actions in {limits.rate_window:g}s"
    current = cases.get(node)
    if in_flight is None:
        in_flight = sum(1 for c in cases.values() if c.state in IN_FLIGHT)
    flying = in_flight - (1 if current is not None and current.state in IN_FLIGHT else 0)
    if flying >= limits.max_in_flight:
        return f"{flying} nodes already in flight (max_in_flight {limits.max_in_flight})"
    last = ledger.last_action.get(node)
    if last is not None and now - last < limits.cooldown:
        return f"cooldown: last action {now - last:.0f}s ago (cooldown {limits.cooldown:g}s)"
    if current is not None and current.state in AWAITING_BOOT:
        return "an action is already in flight for this node"
    return None


@dataclass
class Decision:
    cases: dict[str, Case]  # every case after this poll (changed or not)
    changed: set[str]
    events: list[tuple[str, str, str]]  # node, event, detail
    starts: list[tuple[str, str]]  # node, action: may start now (state already *_requested)
    held: list[tuple[str, str, str]]  # node, action, why it waits
    detections: list[tuple[str, str, float]]  # new failures
    trip: str | None  # the breaker opened in this poll, and why


def decide(cases: dict[str, Case], observations: list[Obs], now: float, policy, limits,
           ledger: Ledger, owns_reason: Callable[[str], bool] = lambda _r: False,
           memory: Memory | None = None) -> Decision:
    cases = dict(cases)
    seen = {o.name: o for o in observations}
    events, wants, new = [], [], []
    changed: set[str] = set()
    for name in sorted(set(seen) | set(cases)):
        before = cases.get(name)
        step = plan(before, seen.get(name), now, policy, limits, owns_reason, memory)
        if step.case is not None and step.case != before:
            cases[name] = step.case
            changed.add(name)
        events += [(name, e, d) for e, d in step.events]
        if step.new:
            new.append((name, step.case.check, now))
        if step.want:
            wants.append((step.case.opened, name, step.want))
    trip = None
    if not ledger.breaker_open:
        trip = breaker_trip(ledger.detections + new, len(seen), now, limits)
        if trip:
            ledger = replace(ledger, breaker_open=True, breaker_why=trip)
    starts, held = [], []
    times = list(ledger.action_times)
    last = dict(ledger.last_action)
    in_flight = sum(1 for c in cases.values() if c.state in IN_FLIGHT)
    for _opened, name, action in sorted(wants):
        view = replace(ledger, action_times=times, last_action=last)
        why = blocked(name, cases, view, now, limits, in_flight)
        if why:
            held.append((name, action, why))
            continue
        c = cases[name]
        in_flight += c.state not in IN_FLIGHT  # a requested action is in flight from now
        cases[name] = c.to(REQUESTED[action], now, action=action,
                           boot_before=seen[name].boot_time, note="")
        changed.add(name)
        times.append(now)
        last[name] = now
        starts.append((name, action))
    return Decision(cases, changed, events, starts, held, new, trip)
