"""`airlock status`: every node's Slurm state and Airlock verdict, from one Slurm call plus the
results store (and the recovery service's database when there is one).

Slurm is the source of truth for the node's state and reason; the results store adds the last
run's verdict, timings and history. A node whose results cannot be read is still shown, from
Slurm, with the problem named. The JSON document is described in docs/status-schema.md and
docs/status-schema.json; tests validate real output against it, so keep them in step.

`airlock serve` (airlock/serve/) answers through the same code: collect() for its node list,
node_detail() for one node's record and its timeline (built by timeline() from the node's runs,
the recovery service's history and Slurm's reason in force), recovery_view() for the recovery
page.
"""

from __future__ import annotations

import time
from typing import Any

from airlock import fanout
from airlock.errors import ConfigError, NodeNotFound, NotFound, SlurmError
from airlock.paths import SafeDir, split_template
from airlock.records import incidents
from airlock.records import proof as nodestate
from airlock.records.report import table
from airlock.records.results import KEEP, NodeResults, local_readable, read_many, read_node
from airlock.recovery.machine import CLOSED, IN_FLIGHT, Obs, parse_slurm_time, stuck_nodes
from airlock.recovery.store import RecoveryStore
from airlock.slurm import reasons
from airlock.slurm.client import Node, Slurm

SCHEMA = 1
STUCK_GRACE_S = 300.0  # [recovery] stuck_grace's default
# Every value `airlock` (the node's Airlock state) can take; summary always carries all of them.
STATES = ("healthy", "quarantined", "failed", "own-error", "recovering", "drained-other", "down",
          "future", "unknown")
# `condition`: the same view, finer, as the console and API show it (HyperPod's InstanceStatus):
# quarantined splits into pending and checking; Airlock's own trouble ("error": an own-error
# drain, a hook that failed, a last run that did not see the node) is its own state, never a
# pass or a failure of the node; an adopted boot (first seen running jobs) is named; a node in
# service without a readable latest result is "not-seen": nothing the controller can read says
# it passed (a broken or missing document, an unreachable shared folder), so it is not healthy.
CONDITIONS = ("healthy", "pending", "checking", "failed", "error", "recovering", "adopted",
              "not-seen", "drained-other", "down", "future", "unknown")
# The triggers of a registration suite (hooks/gate.py): it isolates the node first.
REGISTRATION_TRIGGERS = ("new", "boot", "record", "adopt")


def classify(node: Node) -> str:
    # Only the reason in force counts: a node in service that kept an old reason (23.11+
    # without an accounting plugin keeps it after a resume) is healthy, not failed.
    parsed = reasons.parse(node.reason_in_force)
    if parsed is None:
        if node.state == "FUTURE":
            return "future"
        if node.state in ("DOWN", "UNKNOWN") or "NOT_RESPONDING" in node.flags:
            return "down"
        if node.drained:
            return "drained-other"  # an admin's, Slurm's or another tool's drain: not ours
        return "healthy"
    if parsed.state in ("pending", "checking"):
        return "quarantined"
    if parsed.state == "recover":
        return "recovering"
    if parsed.own_error:
        return "own-error"  # Airlock's own trouble: an operator fixes it, recovery never acts
    if parsed.state == "FAIL":
        return "failed"
    return "unknown"


def condition(node: Node, run: dict[str, Any] | None,
              errors: dict[str, dict[str, Any]] | None = None,
              record: dict[str, Any] | None = None, problem: str = "") -> tuple[str, str]:
    """(condition, message): the node's state in CONDITIONS and one line for people saying why.
    record is the node's boot record (node.json) when this host can read it, else None: then
    "checking" and "adopted" are told from Slurm's reason alone. run is the node's readable
    latest run (None when there is none: problem says why)."""
    state = classify(node)
    claim = reasons.parse(node.reason_in_force)
    if state == "quarantined":
        running = record is not None and record.get("status") == "running"
        if claim.state == "checking" or (running and record.get("phase") == "checking"):
            return "checking", f"{claim.subject} check running"
        return "pending", f"isolated until its {claim.subject} check passes " \
                          f"({claim.detail.removeprefix('check').strip() or 'registration'})"
    if state == "own-error":
        return "error", (f"Airlock's own error ({claim.subject}): {claim.detail}; needs an "
                         "operator (the recovery service does not act on it)")
    if state == "failed":
        return "failed", f"{claim.subject}: {claim.detail}".rstrip(": ")
    if state == "healthy":
        if errors:
            hooks = ", ".join(sorted(errors))
            first = str(next(iter(errors.values())).get("message", ""))
            return "error", f"in service, but Airlock's own {hooks} failed: {first}"
        if run is not None and run.get("verdict") == "error":
            return "error", (f"in service, but its last {run.get('level', '')} run did not see "
                             f"the node: {run.get('detail', '')}")
        if record is not None and record.get("status") == "adopted":
            return "adopted", f"adopted: {record.get('detail') or 'first seen running jobs'}"
        if run is None:
            return "not-seen", ("in service, but no readable result says it passed: "
                                f"{problem or 'none recorded'}")
        return "healthy", ""
    if state == "recovering":
        return state, f"recovery: {claim.subject} {claim.detail}".strip()
    if state == "drained-other":
        return state, f"drained by someone else: {node.reason}"
    if state == "down":
        return state, f"{node.state_text}" + (f": {node.reason}" if node.reason else "")
    if state == "future":
        return state, "declared in Slurm, not joined yet"
    return state, node.reason


def _recovery_store(cfg):
    """The recovery service's database, read-only, or None when there is none (yet)."""
    import os

    try:
        path = cfg.section("recovery").db
    except Exception:  # no recovery section registered: no recovery shown
        return None
    if not path or not os.path.exists(path):
        return None
    try:

        return RecoveryStore(path, readonly=True)
    except Exception:  # a broken recovery DB must not break status
        return None


def recovery_states(cfg) -> dict[str, str]:
    """Each node's open recovery case state ({} when no recovery database exists).

    Closed cases (done, released) are history, not a state: `airlock recover --history` has them.
    """
    store = _recovery_store(cfg)
    if store is None:
        return {}
    try:

        return {node: case.state for node, case in store.cases().items()
                if case.state not in CLOSED}
    except Exception:  # gracefully empty, like a missing database
        return {}
    finally:
        store.close()


def recovery_memory(cfg) -> dict[str, dict[str, int]]:
    """{node: {check: reboots that did not clear it}} for the nodes whose open recovery case the
    escalation memory counted (policy [escalation]); {} without a recovery database."""
    store = _recovery_store(cfg)
    if store is None:
        return {}
    try:
        return {node: {case.check: case.not_cleared} for node, case in store.cases().items()
                if case.state not in CLOSED and case.not_cleared}
    except Exception:  # gracefully empty, like a missing database
        return {}
    finally:
        store.close()


def recovery_metrics(cfg) -> dict[str, Any]:
    """{"actions": {(action, status): count}, "breaker_open": bool, "in_flight": int,
    "refailed": [(node, check, action)], "heartbeat": the service's last poll (epoch seconds;
    None before its first)}, or {} without a recovery database."""
    store = _recovery_store(cfg)
    if store is None:
        return {}
    try:

        actions: dict[tuple[str, str], int] = {}
        for a in store.actions():
            key = (str(a["kind"]), str(a["status"]))
            actions[key] = actions.get(key, 0) + 1
        cases = store.cases().values()
        beat = store.heartbeat()
        return {"actions": actions, "breaker_open": bool(store.breaker()["open"]),
                "in_flight": sum(c.state in IN_FLIGHT for c in cases),
                "refailed": refailed(cases),
                "heartbeat": float(beat["last_poll"]) if beat["polls"] else None}
    except Exception:  # gracefully empty, like a missing database
        return {}
    finally:
        store.close()


REFAILED = "failed again after "  # how the state machine says why it escalated (machine.plan)


def refailed(cases) -> list[tuple[str, str, str]]:
    """[(node, check, action)] for open cases whose node failed the check it was detected with
    again after a reboot or replacement of its ladder (a reboot that did not help)."""
    out = []
    for c in cases:
        if c.state in CLOSED or c.step < 1 or not c.note.startswith(REFAILED):
            continue
        action, _, rest = c.note[len(REFAILED):].partition(": ")
        if rest.split(" ", 1)[0] == c.check:
            out.append((c.node, c.check, action))
    return sorted(out)


def _run_summary(run: dict[str, Any]) -> dict[str, Any]:
    return {
        "run_id": run.get("run_id", ""),
        "level": run.get("level", ""),
        "trigger": run.get("trigger", ""),
        "verdict": run.get("verdict", ""),
        "failed_check": run.get("failed_check"),
        "detail": run.get("detail", ""),
        "finished_at": run.get("finished_at"),
        "duration_s": run.get("duration_s"),
    }


def stuck(node: Node, limit_s: float, now: float | None = None) -> str:
    """Why a node held for its registration looks stuck ("" when it does not), by the recovery
    service's rule (airlock.recovery.machine.stuck_nodes): Airlock's pending or checking claim in
    force for longer than limit_s, on a node that is up and runs no job. The node's own hook
    re-runs or fails such a suite; this shows it on the controller even when that hook cannot
    run."""
    at = now if now is not None else time.time()
    found = stuck_nodes([Obs.from_node(node)], at, limit_s)
    if node.name not in found:
        return ""
    claim = node.claim
    age = at - found[node.name][1]
    return f"{claim.state} for {age / 60:.0f} min (limit {limit_s / 60:.0f} min)"


def node_status(node: Node, res: NodeResults, recovery: str = "", stuck_why: str = "",
                errors: dict[str, dict[str, Any]] | None = None,
                record: dict[str, Any] | None = None,
                not_cleared: dict[str, int] | None = None) -> dict[str, Any]:
    run = res.run or {}
    parsed = reasons.parse(node.reason_in_force)
    state = classify(node)
    cond, message = condition(node, res.run, errors, record, res.problem)
    # The reason in force is what drained the node; the last run may be a later periodic pass.
    if parsed is not None and parsed.is_failure:
        failed_check, detail = parsed.subject, parsed.detail
    elif run.get("verdict") == "fail":
        failed_check, detail = run.get("failed_check"), run.get("detail", "")
    else:
        failed_check, detail = None, ""
    return {
        "node": node.name,
        "slurm_state": node.state_text,
        "reason": node.reason,
        "reason_owner": "airlock" if reasons.is_owned(node.reason) else (
            "other" if node.reason else ""),
        "airlock": state,
        "verdict": run.get("verdict"),
        "failed_check": failed_check,
        "detail": detail,
        "last_check_at": run.get("finished_at"),
        "last_level": run.get("level"),
        "last_trigger": run.get("trigger"),
        "duration_s": run.get("duration_s"),
        "results_source": res.source,
        "results_problem": res.problem,
        "recovery": recovery,
        "stuck": stuck_why,
        "errors": {hook: str(e.get("message", "")) for hook, e in (errors or {}).items()},
        "observed": observed_of(run),
        "not_cleared": dict(not_cleared or {}),
        "history": [_run_summary(r) for r in res.history],
        "condition": cond,
        "message": message,
        "partitions": list(node.partitions),
        "features": list(node.features),
        "profile": run.get("profile") or None,
    }


def observed_of(run: dict[str, Any]) -> dict[str, str]:
    """{check: "verdict: detail"} for the last run's checks in observe mode (they never drain;
    this is where they are seen). The document may come from the shared directory: only
    well-formed entries count."""
    out = {}
    for item in run.get("observed") or ():
        if isinstance(item, dict) and all(isinstance(item.get(k), str)
                                          for k in ("check", "verdict", "detail")):
            out[item["check"]] = f"{item['verdict']}: {item['detail']}"[:200]
    return out


def collect(cfg, names: str | None = None, history: int = 0,
            timeout: float | None = None) -> dict[str, Any]:
    """The status document. timeout: how long the results store may take for all the nodes
    together (default results.READ_TIMEOUT); a node not read by then is shown from Slurm."""
    slurm = Slurm.from_config(cfg)
    nodes = slurm.nodes(names) if names else slurm.nodes()
    names_ = [n.name for n in nodes]
    results = read_many(cfg, names_, history, **({"timeout": timeout} if timeout else {}))
    records = boot_records(cfg, names_, timeout)
    recovery = recovery_states(cfg)
    memory = recovery_memory(cfg)
    limit = cfg.registration.suite_timeout + _stuck_grace(cfg)
    rows = [node_status(n, results[n.name], recovery.get(n.name, ""), stuck(n, limit),
                        _errors(cfg, n.name), records.get(n.name), memory.get(n.name))
            for n in nodes]
    return document(rows)


def document(rows: list[dict[str, Any]], generated_at: float | None = None) -> dict[str, Any]:
    """The status document around node rows (node_status), with the counts over those rows."""
    summary = dict.fromkeys(STATES, 0)
    conditions = dict.fromkeys(CONDITIONS, 0)
    for r in rows:
        summary[r["airlock"]] = summary.get(r["airlock"], 0) + 1
        conditions[r["condition"]] = conditions.get(r["condition"], 0) + 1
    return {"schema": SCHEMA, "generated_at": generated_at or time.time(), "nodes": rows,
            "summary": summary, "conditions": conditions,
            "stuck": sum(bool(r["stuck"]) for r in rows),
            "errors": sum(bool(r["errors"]) for r in rows)}


def boot_record(cfg, node: str) -> dict[str, Any] | None:
    """The node's boot record (node.json, airlock.records.proof) when this host can read it (the
    same rule as for node-local results), walked without following links; None when there is
    none or it does not validate."""
    if not local_readable(cfg, node):
        return None
    try:
        with SafeDir.open(*split_template(cfg.state_dir, node)) as d:
            data = d.read_json(nodestate.FILE)
    except (OSError, ValueError):
        return None
    if nodestate.validate(data) or data.get("node") != node:
        return None
    return data


def boot_records(cfg, nodes: list[str], timeout: float | None = None) -> dict[str, Any]:
    """boot_record for each node this host can read, within timeout seconds for all."""
    wanted = [n for n in nodes if local_readable(cfg, n)]
    return fanout.each(lambda n: boot_record(cfg, n), wanted, timeout or 5.0,
                       name="status-read")


def _stuck_grace(cfg) -> float:
    try:
        return cfg.recovery.stuck_grace
    except ConfigError:  # a broken [recovery] must not break status: its default
        return STUCK_GRACE_S


def _errors(cfg, node: str) -> dict[str, dict[str, Any]]:
    """A node's recorded own errors (airlock.records.incidents) as the controller sees them: the
    shared
    copy when there is a shared directory, else the node-local file when this host can see it
    (the same rule as for the node's results)."""
    try:
        local = cfg.state_dir if local_readable(cfg, node) else ""
        return incidents.read_node(local, cfg.shared_dir, node)
    except Exception:  # a broken errors file must not break status
        return {}


def _when(ts: float | None) -> str:
    return time.strftime("%m-%d %H:%M:%S", time.localtime(ts)) if ts else ""


def _took(s: float | None) -> str:
    return f"{s:.1f}s" if s is not None else ""


def summary_line(data: dict[str, Any]) -> str:
    s = data["summary"]
    main = ["healthy", "quarantined", "failed", "own-error", "recovering"]
    parts = [f"{s.get(k, 0)} {k}" for k in main]
    parts += [f"{v} {k}" for k, v in s.items() if k not in main and v]
    parts += [f"{data[k]} {k}" for k in ("stuck", "errors") if data.get(k)]
    return f"{len(data['nodes'])} nodes: " + ", ".join(parts)


def render(data: dict[str, Any]) -> str:
    rows = []
    for r in data["nodes"]:
        check = r["failed_check"] or ""
        # a foreign reason explains the state only while the node is out of service
        foreign = r["reason_owner"] == "other" and r["airlock"] != "healthy"
        detail = r["detail"] or (r["reason"] if foreign else "")
        rows.append((r["node"], r["slurm_state"], r["airlock"], check, detail[:60],
                     _when(r["last_check_at"]), _took(r["duration_s"]), r["recovery"]))
    out = [table(("node", "slurm", "airlock", "check", "detail", "last check", "took",
                  "recovery"), rows)]
    notes = [f"  {r['node']}: {r['results_problem']}" for r in data["nodes"]
             if r["results_problem"]]
    if notes:
        out.append("results not read (shown from Slurm only):\n" + "\n".join(notes))
    stuck_rows = [f"  {r['node']}: {r['stuck']}" for r in data["nodes"] if r["stuck"]]
    if stuck_rows:
        out.append("stuck in registration:\n" + "\n".join(stuck_rows))
    errors = [f"  {r['node']} {hook}: {msg}" for r in data["nodes"]
              for hook, msg in sorted(r["errors"].items())]
    if errors:
        out.append("Airlock's own errors (the node kept running jobs):\n" + "\n".join(errors))
    memory = [f"  {r['node']} {check}: {count} reboots did not clear it"
              for r in data["nodes"] for check, count in sorted(r["not_cleared"].items())]
    if memory:
        out.append("Escalation memory (reboots that did not clear the failing check):\n"
                   + "\n".join(memory))
    seen = [f"  {r['node']} {check}: {text}" for r in data["nodes"]
            for check, text in sorted(r["observed"].items())]
    if seen:
        out.append("Checks in observe mode (recorded, never drain):\n" + "\n".join(seen))
    for r in data["nodes"]:
        if r["history"]:
            hist = [(_when(h["finished_at"]), h["level"], h["trigger"], h["verdict"].upper(),
                     h["failed_check"] or "", (h["detail"] or "")[:60], _took(h["duration_s"]))
                    for h in r["history"]]
            out.append(f"{r['node']} history:\n" + table(
                ("finished", "level", "trigger", "verdict", "check", "detail", "took"), hist))
    out.append(summary_line(data))
    return "\n\n".join(out)


# --- one node's story: its record and timeline (airlock serve's node page) --------------------
RECOVERY_WORDS = {
    "detected": "failure detected", "request": "action requested", "issued": "action issued",
    "booted": "new boot", "healthy": "passed its checks after recovery",
    "done": "recovery closed", "escalate": "escalated", "manual": "left for a person",
    "released": "hands off", "refused": "action refused", "action_error": "action failed",
    "resend": "action sent again", "stuck": "stuck in its check", "unstuck": "no longer stuck",
    "lookup_error": "could not ask the provider",
}


def _check_records(run: dict[str, Any]) -> list[dict[str, Any]]:
    keep = ("check", "verdict", "detail", "figures", "duration_s", "attempts", "remediation")
    return [{k: rec[k] for k in keep if k in rec} for rec in run.get("checks", [])]


def run_entries(run: dict[str, Any]) -> list[dict[str, Any]]:
    """What a recorded run says happened: a registration started and isolated the node (its
    suite runs no check before Slurm shows the node drained and idle), the checks' results with
    their figures, then the drain Airlock sets for a failure or the resume after a registration
    that passed. Manual `airlock check` runs change nothing in Slurm."""
    level, trigger, verdict = run.get("level", ""), run.get("trigger", ""), run.get("verdict")
    started, finished = run.get("started_at"), run.get("finished_at")
    base = {"source": "run", "run_id": run.get("run_id", "")}
    out = []
    registration = trigger in REGISTRATION_TRIGGERS
    if registration and started is not None:
        out.append({**base, "at": started, "kind": "registration",
                    "summary": f"registration started ({trigger}), level {level}"})
        out.append({**base, "at": started, "kind": "isolated",
                    "reason": reasons.pending(level, trigger).format(),
                    "summary": "isolated: drained until the checks pass"})
    if finished is None:
        return out
    check = {**base, "at": finished, "kind": "check", "level": level, "trigger": trigger,
             "verdict": verdict, "failed_check": run.get("failed_check"),
             "detail": run.get("detail", ""), "duration_s": run.get("duration_s"),
             "checks": _check_records(run),
             "summary": f"{level} check {str(verdict).upper()} ({trigger})"
                        + (f": {run.get('failed_check') or ''} {run.get('detail', '')}".rstrip()
                           if verdict in ("fail", "error") else "")}
    out.append(check)
    # Airlock drains for a failure (every trigger but a manual run), and for a registration
    # that did not see the node (an own error: FAIL suite); a proven node is never drained for
    # Airlock's own trouble.
    if trigger != "manual" and (verdict == "fail" or (registration and verdict == "error")):
        # finish.failure_reason's reason (status may not import finish: finish -> metrics
        # -> status would close a cycle)
        reason = reasons.failure(run.get("failed_check") or "suite",
                                 run.get("detail", "")).format()
        out.append({**base, "at": finished, "kind": "drain", "reason": reason,
                    "summary": f"drained: {reason}"})
    elif registration and verdict in ("pass", "warn"):
        out.append({**base, "at": finished, "kind": "resume",
                    "summary": "resumed: the registration passed"})
    return out


def recovery_entries(rows: list[dict[str, Any]],
                     actions: dict[int, str] | None = None) -> list[dict[str, Any]]:
    """The recovery service's history rows for a node (RecoveryStore.history) as entries. A
    release for a foreign reason is an admin's drain the service saw."""
    actions = actions or {}
    out = []
    for r in rows:
        event, detail = str(r.get("event", "")), str(r.get("detail", ""))
        action = actions.get(r.get("action_id") or 0, "")
        entry = {"at": r.get("ts"), "source": "recovery", "kind": "recovery", "action": event,
                 "detail": detail}
        if event == "booted" and detail.endswith("after replace"):
            entry["action"] = "replaced"
        if action:
            entry["recovery_action"] = action
        if event == "released" and detail.startswith("foreign reason"):
            entry["kind"] = "admin-drain"
            entry["summary"] = f"admin drain seen by recovery: {detail}"
        else:
            word = RECOVERY_WORDS.get(entry["action"], entry["action"])
            if entry["action"] == "replaced":
                word = "replaced: new instance booted"
            entry["summary"] = f"recovery {word}" + (f" ({action})" if action else "") \
                + (f": {detail}" if detail else "")
        out.append(entry)
    return out


def slurm_entries(node: Node, record: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """What Slurm and the boot record say now: a foreign drain in force (an admin's, Slurm's
    own) with its time, and a registration still running (no run document yet)."""
    out = []
    at = parse_slurm_time(node.reason_time)
    reason = node.reason_in_force
    if reason and not reasons.is_owned(reason) and at is not None:
        who = f" by {node.reason_user}" if node.reason_user else ""
        out.append({"at": at, "source": "slurm", "kind": "admin-drain", "reason": reason,
                    "summary": f"drained{who}: {reason}"})
    claim = node.claim
    if record is not None and record.get("status") == "running" and record.get("started_at"):
        out.append({"at": record["started_at"], "source": "node", "kind": "registration",
                    "run_id": record.get("run_id", ""),
                    "summary": f"registration started ({record.get('trigger', '')}), level "
                               f"{record.get('level', '')}; "
                               f"phase {record.get('phase') or 'start'}"})
    if claim is not None and claim.state in ("pending", "checking") and at is not None:
        out.append({"at": at, "source": "slurm", "kind": "isolated", "reason": reason,
                    "summary": f"isolated: {reason}"})
    return out


KIND_ORDER = {"registration": 0, "isolated": 1, "check": 2, "drain": 3, "resume": 4,
              "admin-drain": 5, "recovery": 6}


def timeline(runs: list[dict[str, Any]], recovery: list[dict[str, Any]], node: Node | None,
             record: dict[str, Any] | None = None, actions: dict[int, str] | None = None,
             since: float | None = None, until: float | None = None) -> list[dict[str, Any]]:
    """A node's story, oldest first: its runs (any order), the recovery service's history rows
    and Slurm's view now. since/until bound the entries that do not come from the runs (the
    window of a page of runs)."""
    entries = [e for r in runs for e in run_entries(r)]
    others = recovery_entries(recovery, actions)
    if node is not None:
        others += slurm_entries(node, record)
        if record is not None and any(r.get("run_id") == record.get("run_id") for r in runs):
            others = [e for e in others if e["source"] != "node"]  # the run tells it already
    entries += [e for e in others if isinstance(e.get("at"), (int, float))
                and (since is None or e["at"] >= since) and (until is None or e["at"] < until)]
    entries.sort(key=lambda e: (e["at"], KIND_ORDER.get(e["kind"], 9)))
    return entries


def node_detail(cfg, name: str, limit: int = 20, before: str | None = None,
                last_row: dict[str, Any] | None = None,
                last_at: float | None = None) -> dict[str, Any]:
    """One node: its status row (as collect() gives it), a page of its recorded runs (newest
    first, `limit` of them, older than run id `before`), and the timeline of that page: the
    page's runs with what the recovery service and Slurm saw from the start of its oldest run
    (or ever, on the last page) to the start of the next newer run (or now, on the first).

    When Slurm does not answer (SlurmError, not NodeNotFound) and last_row is the node's row of
    the last status read (made at last_at), the page is still answered from the results store
    and the recovery database: the row is last_row, and slurm_stale says how old it is and why
    it was not refreshed (None when Slurm answered). Without last_row the error propagates."""
    slurm = Slurm.from_config(cfg)
    stale = None
    try:
        node: Node | None = slurm.node(name)
    except NodeNotFound:
        raise
    except SlurmError as exc:
        if last_row is None:
            raise
        node = None
        stale = {"age_s": round(time.time() - (last_at or time.time()), 1),
                 "error": " ".join(str(exc).split())[:300]}
    res = read_node(cfg, name, history=KEEP)
    record = boot_record(cfg, name)
    limit_s = cfg.registration.suite_timeout + _stuck_grace(cfg)
    errors = _errors(cfg, name)
    recovery, history, actions = _recovery_of(cfg, name)
    if node is not None:
        row = node_status(node, res, recovery, stuck(node, limit_s), errors, record)
    else:
        row = dict(last_row or {})
    runs = res.history
    start = 0
    if before:
        ids = [r.get("run_id") for r in runs]
        if before not in ids:
            raise NotFound(f"no recorded run {before} of {name}")
        start = ids.index(before) + 1
    page = runs[start:start + limit]
    newer = runs[start - 1] if start > 0 else None
    older = runs[start + limit] if start + limit < len(runs) else None
    since = _start_of(page[-1]) if page and older is not None else None
    until = _start_of(newer) if newer is not None else None
    if not page and start > 0:
        since = until
    return {"schema": SCHEMA, "generated_at": time.time(), "node": row,
            "runs": [_run_summary(r) for r in page],
            "next_before": page[-1]["run_id"] if page and older is not None else None,
            "runs_total": len(runs),
            "timeline": timeline(page, history, node, record, actions, since, until),
            "slurm_stale": stale}


def _start_of(run: dict[str, Any]) -> float | None:
    value = run.get("started_at", run.get("finished_at"))
    return value if isinstance(value, (int, float)) else None


def _recovery_of(cfg, node: str) -> tuple[str, list[dict[str, Any]], dict[int, str]]:
    """(the open case's state or "", the node's history rows, {action id: kind})."""
    store = _recovery_store(cfg)
    if store is None:
        return "", [], {}
    try:
        case = store.case(node)
        state = case.state if case is not None and case.state not in CLOSED else ""
        return state, store.history(node), {a["id"]: a["kind"] for a in store.actions(node)}
    except Exception:  # a broken recovery DB must not break the node page
        return "", [], {}
    finally:
        store.close()


def recovery_view(cfg, limit: int = 50) -> dict[str, Any]:
    """The recovery page: open cases, the breaker and why, the service's heartbeat, stuck
    nodes, the last `limit` actions and history events (newest first), and the closed cases."""
    out: dict[str, Any] = {"schema": SCHEMA, "generated_at": time.time(), "available": False,
                           "problem": "", "breaker": None, "heartbeat": None, "cases": [],
                           "closed": [], "stuck": [], "actions": [], "events": []}
    try:
        db = cfg.section("recovery").db
    except ConfigError as exc:
        out["problem"] = str(exc)
        return out
    store = _recovery_store(cfg)
    if store is None:
        out["problem"] = f"no recovery database at {db} (airlock recover has not run)"
        return out
    try:
        cases = [{**vars(c), "ladder": list(c.ladder), "next_action": c.next_action}
                 for c in store.cases().values()]
        cases.sort(key=lambda c: c["since"], reverse=True)
        breaker = store.breaker()
        beat = store.heartbeat()
        out.update(
            available=True,
            breaker={"open": bool(breaker["open"]), "why": breaker["why"],
                     "changed": breaker["changed"] or None,
                     "reset_at": breaker["reset_at"] or None},
            heartbeat={**beat, "age_s": (time.time() - beat["last_poll"]) if beat["polls"]
                       else None},
            cases=[c for c in cases if c["state"] not in CLOSED],
            closed=[c for c in cases if c["state"] in CLOSED][:limit],
            stuck=[{"node": n, **{k: v for k, v in row.items() if k != "node"}}
                   for n, row in store.stuck().items()],
            actions=list(reversed(store.actions()))[:limit],
            events=list(reversed(store.history()))[:limit])
    except Exception as exc:  # a damaged database is named, not a crash
        out["problem"] = f"recovery database {db}: {exc}"
    finally:
        store.close()
    return out
