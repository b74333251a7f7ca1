"""What happens to every finished run, in one place: summarize the check records into one run
document, store it (node-local, then the shared copy), refresh the node's metrics textfile, and
drain on a failure when the caller asks. Every hook, the registration suite, `airlock check` and
the on-demand node worker finish their runs here, with one error policy:

* a node-local write that fails does not stop the drain: a full or read-only state_dir must not
  hide a failing check; the caller gets `stored=False` and the problem, and decides (an unproven
  boot fails closed, a proven one fails open, visibly);
* the shared copy and the metrics textfile are best effort: their problems come back as lines for
  the caller's log, and never cost a verdict;
* Slurm errors from the drain propagate: the caller knows whether to retry or fail closed.
"""

from __future__ import annotations

import time
from typing import Any, Literal

from airlock.checks.base import Outcome, Verdict, worst
from airlock.errors import OwnError
from airlock.records.results import ResultStore, new_run_id
from airlock.records.types import CheckRecord, RunDoc
from airlock.slurm import reasons

# A run's verdict: a level whose checks all skipped proved nothing wrong, so it passes.
RUN_VERDICT: dict[Verdict, Literal["pass", "warn", "fail", "error"]] = {
    Verdict.PASS: "pass", Verdict.SKIP: "pass", Verdict.WARN: "warn", Verdict.FAIL: "fail",
    Verdict.ERROR: "error"}


def summarize(node: str, level: str, trigger: str, records: list[CheckRecord],
              started: float, profile: str = "", run_id: str | None = None) -> RunDoc:
    """The run document (schema in airlock.records.results) from a level's check records.

    Records marked "observe" (checks in observe mode, airlock.runner.observed) keep their own
    verdict but do not make the run's: they are listed under "observed" instead, so an observed
    failure is seen everywhere and drains nothing."""
    observed = [r for r in records if r.get("observe")]
    gating = [r for r in records if not r.get("observe")]
    outcomes = [Outcome(r["check"], Verdict(r["verdict"]), r.get("detail", "")) for r in gating]
    verdict = worst(outcomes) if outcomes else Verdict.PASS
    first_fail = next((r for r in gating if r["verdict"] == "fail"), None)
    # Checks that did not see the node (Verdict.ERROR): named in the run, so a run that proved
    # less than its level says which part it did not prove.
    unseen = [r for r in gating if r["verdict"] == "error"]
    detail = first_fail["detail"] if first_fail else ""
    if unseen and not first_fail:
        detail = "not seen: " + "; ".join(f"{r['check']} ({r.get('detail', '')})"
                                          for r in unseen)
    flagged = [r for r in observed if r["verdict"] in ("fail", "error", "warn")]
    if flagged and verdict in (Verdict.PASS, Verdict.SKIP, Verdict.WARN):
        # seen, never gating: at most a warning, which never drains
        verdict = Verdict.WARN
        detail = detail or "observe: " + "; ".join(
            f"{r['check']} {r['verdict']} ({r.get('detail', '')})" for r in flagged)
    now = time.time()
    return {
        "node": node,
        "run_id": run_id or new_run_id(node),
        "level": level,
        "trigger": trigger,
        "started_at": started,
        "finished_at": now,
        "duration_s": round(now - started, 3),
        "verdict": RUN_VERDICT[verdict],
        "failed_check": first_fail["check"] if first_fail else None,
        "detail": detail,
        "unseen": [r["check"] for r in unseen],
        "observed": [{"check": r["check"], "verdict": r["verdict"], "detail": r.get("detail", "")}
                     for r in observed],
        "profile": profile,
        "checks": records,
    }


def failure_reason(run: RunDoc, suffix: str = "") -> reasons.Reason:
    detail = f"{run['detail']} {suffix}".strip()
    return reasons.failure(run["failed_check"] or "suite", detail)


class Finished:
    def __init__(self, run: RunDoc):
        self.run = run
        self.stored = True  # the node-local copy was written
        self.problems: list[str] = []
        self.drain: Any = None  # airlock.slurm.client.DrainResult when a drain was asked for

    @property
    def failed(self) -> bool:
        return self.run["verdict"] == "fail"

    def raise_unseen(self, hook: str) -> None:
        """A hook's run that did not see everything it should have (Verdict.ERROR) is Airlock's
        own trouble: raise it for the hook's failure policy (closed on an unproven boot, open
        and visible on a proven one), after the run has been stored."""
        if self.run["verdict"] == "error":
            raise OwnError(hook, self.run["detail"])


def finish_run(cfg, node: str, run: RunDoc, history: bool = True, slurm=None,
               reason_suffix: str = "") -> Finished:
    """Store the run, refresh the metrics, and (with slurm) drain when it failed."""
    done = Finished(run)
    try:
        done.problems += record_run(cfg, node, run, history)
    except OSError as exc:
        done.stored = False
        done.problems.append(f"results not stored in {cfg.state_dir}: {exc.strerror or exc}")
    if slurm is not None and done.failed:
        from airlock.slurm import drains  # the Slurm client: a passing hook run never loads it

        done.drain = drains.fail(slurm, node, failure_reason(run, reason_suffix))
    return done


def record_run(cfg, node: str, run: RunDoc, history: bool = True) -> list[str]:
    """Store a run and refresh the metrics; return the best-effort problems. The node-local
    write's OSError propagates."""
    store = ResultStore(cfg, node)
    problems = store.write(run, history=history)
    problem = refresh_metrics(cfg, node, store)
    if problem:
        problems.append(problem)
    return problems


def refresh_metrics(cfg, node: str, store: ResultStore | None = None) -> str:
    """Rewrite the node's Prometheus textfile when [metrics] textfile_dir is set ("" = done)."""
    if not cfg.metrics.textfile_dir:
        return ""
    from airlock.records import node_metrics  # only when a textfile is configured

    try:
        runs = (store or ResultStore(cfg, node)).latest_by_level()
        node_metrics.write_node_textfile(cfg, node, runs)
    except Exception as exc:  # metrics must never cost a verdict
        return f"metrics textfile: {exc}"
    return ""
