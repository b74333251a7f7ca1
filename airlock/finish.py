"""What happens to every finished run, in one place: store it (node-local, then the shared copy),
then refresh the node's metrics textfile. Every hook, the registration suite, `airlock check` and
the on-demand node worker finish their runs here, with one error policy:

* the node-local write must succeed: its OSError propagates to the caller, which knows whether
  the boot is proven (fail open, visibly) or not (fail closed);
* the shared copy and the metrics textfile are best effort: their problems come back as lines
  for the caller's log, and never cost a verdict.
"""

from __future__ import annotations

from typing import Any

from airlock import metrics
from airlock.results import ResultStore


def record_run(cfg, node: str, run: dict[str, Any], history: bool = True) -> list[str]:
    """Store a run and refresh the metrics; return the best-effort problems."""
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
    try:
        metrics.write_node_textfile(cfg, node, (store or ResultStore(cfg, node)).latest_by_level())
    except Exception as exc:  # metrics must never cost a verdict
        return f"metrics textfile: {exc}"
    return ""
