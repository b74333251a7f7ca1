"""Every failure the gate found, and what became of it.

A failure is a run whose verdict is "fail": the node's own measurement. Runs that did not see
the node (verdict "error", Airlock's own trouble) are counted apart and never blamed on it.

Per node the timeline (failures, passes, the recovery service's actions, a person's resume) is
walked in time order; each failure opens an *episode* that ends in one of:

  confirmed   replaced, or rebooted and the next check passed (the fault did not return)
  recurred    rebooted, and the same check failed again within recur_window after the reboot
  overturned  the next check passed with no reboot or replacement in between, or a person put
              the node back in service without one: the gate's false-positive estimate
  open        none of these yet

Further failures before any action are the same episode (a drained node whose periodic hook
fails again is one fault, not two).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from airlock.ledger.history import History, stage_of

CONFIRMED, RECURRED, OVERTURNED, OPEN = "confirmed", "recurred", "overturned", "open"
OUTCOMES = (CONFIRMED, RECURRED, OVERTURNED, OPEN)
# Sort order of events at the same instant: a failure, then what answered it, then the pass.
_ORDER = {"fail": 0, "action": 1, "release": 2, "pass": 3}


@dataclass
class Episode:
    node: str
    check: str
    stage: str
    level: str
    at: float  # when the failing run finished
    repeats: int = 0  # later failures before any action (the same fault)
    actions: list[tuple[str, float]] = field(default_factory=list)
    outcome: str = OPEN
    how: str = ""  # what decided the outcome, for people
    closed_at: float | None = None

    @property
    def first_action(self) -> float | None:
        return self.actions[0][1] if self.actions else None

    @property
    def kinds(self) -> set[str]:
        return {k for k, _ in self.actions}

    def close(self, outcome: str, at: float | None, how: str) -> None:
        self.outcome, self.closed_at, self.how = outcome, at, how


def episodes(h: History, recur_window_s: float) -> list[Episode]:
    """Every failure episode of the history, oldest first."""
    timeline: dict[str, list[tuple[float, int, str, Any]]] = {}
    for run in h.runs:
        verdict = run.get("verdict")
        kind = "fail" if verdict == "fail" else "pass" if verdict in ("pass", "warn") else ""
        when = run.get("finished_at")
        if kind and isinstance(when, (int, float)):
            timeline.setdefault(run["node"], []).append((when, _ORDER[kind], kind, run))
    for a in h.actions:
        timeline.setdefault(a.node, []).append((a.at, _ORDER["action"], "action", a))
    for r in h.releases:
        timeline.setdefault(r.node, []).append((r.at, _ORDER["release"], "release", r))
    out: list[Episode] = []
    for node in sorted(timeline):
        out += _walk(node, sorted(timeline[node], key=lambda t: (t[0], t[1])), h,
                     recur_window_s)
    out.sort(key=lambda e: (e.at, e.node))
    return out


def _walk(node: str, items: list[tuple[float, int, str, Any]], h: History,
          recur_window_s: float) -> list[Episode]:
    done: list[Episode] = []
    cur: Episode | None = None
    cleared_by_reboot: Episode | None = None  # the last episode a reboot confirmed
    for when, _o, kind, item in items:
        if kind == "fail":
            check = item.get("failed_check") or "suite"
            if cur is not None and not cur.actions:
                cur.repeats += 1
                continue
            if cur is not None:
                if check == cur.check and "replace" not in cur.kinds:
                    cur.close(RECURRED, when, f"{check} failed again after the reboot")
                else:
                    cur.close(CONFIRMED, when, f"{'/'.join(sorted(cur.kinds))} done; the next "
                                               f"failure was another check ({check})")
                done.append(cur)
            elif cleared_by_reboot is not None and cleared_by_reboot.check == check \
                    and cleared_by_reboot.actions \
                    and when - cleared_by_reboot.actions[-1][1] <= recur_window_s:
                cleared_by_reboot.close(RECURRED, cleared_by_reboot.closed_at,
                                        f"{check} failed again within the recurrence window "
                                        "after the reboot")
            cleared_by_reboot = None
            cur = Episode(node, check, stage_of(item), str(item.get("level", "")), when)
        elif cur is None:
            continue
        elif kind == "action":
            cur.actions.append((item.kind, when))
        elif kind == "release":
            if cur.actions:
                cur.close(CONFIRMED, when, f"{'/'.join(sorted(cur.kinds))} done, then a person "
                                           "resumed the node")
            else:
                cur.close(OVERTURNED, when, "a person resumed the node without a reboot or "
                                            "replacement")
            done.append(cur)
            cur = None
        else:  # a pass
            if not cur.actions:
                cur.close(OVERTURNED, when, "the next check passed with no action in between")
            elif "replace" in cur.kinds:
                cur.close(CONFIRMED, when, "replaced; the replacement passed")
            else:
                cur.close(CONFIRMED, when, "rebooted; the fault did not return")
                cleared_by_reboot = cur
            done.append(cur)
            cur = None
    if cur is not None:
        view = h.nodes.get(node)
        if view is not None and view.in_service and not cur.actions:
            if view.boot is not None and view.boot > cur.at:
                cur.actions.append(("reboot", view.boot))
                cur.close(CONFIRMED, None, "rebooted outside Airlock and back in service "
                                           "(Slurm's view)")
            else:
                cur.close(OVERTURNED, None, "back in service without a reboot, a replacement "
                                            "or a recorded pass (Slurm's view)")
        done.append(cur)
    return done


def held_hours(e: Episode, end: float) -> tuple[float, float]:
    """(node-hours held out by the failed check, by recovery) of one episode: from the failure
    to the first action, then to the end of the episode (or of the window while it is open).
    An episode whose end is unknown (Slurm shows it back, nothing recorded when) counts only
    up to its first action, if any: a lower bound."""
    close = e.closed_at if e.closed_at is not None else (end if e.outcome == OPEN else None)
    first = e.first_action
    if close is None:
        return ((first - e.at) / 3600 if first else 0.0), 0.0
    if first is None or first > close:
        return max(0.0, close - e.at) / 3600, 0.0
    return max(0.0, first - e.at) / 3600, max(0.0, close - first) / 3600


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """The 95% Wilson interval of a proportion k/n ((0, 1) when n is 0)."""
    if n <= 0:
        return 0.0, 1.0
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def summary(eps: list[Episode], h: History) -> dict[str, Any]:
    """The caught section: counts by stage and check and outcome, per-check false-positive
    estimates, own errors apart."""
    by_check: dict[str, dict[str, int]] = {}
    by_stage: dict[str, dict[str, int]] = {}
    for e in eps:
        for table, key in ((by_check, e.check), (by_stage, e.stage)):
            row = table.setdefault(key, dict.fromkeys(OUTCOMES, 0))
            row[e.outcome] += 1
    false_positive = {}
    for check, row in sorted(by_check.items()):
        resolved = row[CONFIRMED] + row[RECURRED] + row[OVERTURNED]
        low, high = wilson(row[OVERTURNED], resolved)
        false_positive[check] = {"overturned": row[OVERTURNED], "resolved": resolved,
                                 "estimate": row[OVERTURNED] / resolved if resolved else None,
                                 "low": round(low, 4), "high": round(high, 4)}
    own_errors: dict[str, int] = {}
    for run in h.runs:
        if run.get("verdict") == "error":
            stage = stage_of(run)
            own_errors[stage] = own_errors.get(stage, 0) + 1
    totals = dict.fromkeys(OUTCOMES, 0)
    for e in eps:
        totals[e.outcome] += 1
    return {
        "failures": len(eps),
        "outcomes": totals,
        "by_check": dict(sorted(by_check.items())),
        "by_stage": dict(sorted(by_stage.items())),
        "false_positive": false_positive,
        "own_errors": dict(sorted(own_errors.items())),
        "episodes": [{"node": e.node, "check": e.check, "stage": e.stage, "level": e.level,
                      "at": e.at, "repeats": e.repeats, "actions": [k for k, _ in e.actions],
                      "outcome": e.outcome, "how": e.how, "closed_at": e.closed_at}
                     for e in eps],
    }
