"""Runs a level's checks with a timeout each, confirms failures, and records the run.

Checks that import torch or can hang in native code run in a process group of their own
(`python -m airlock.runner one CHECK`), killed whole on timeout; the rest run in a watchdog
thread. A failing check is re-run [checks] confirm_runs times before it counts: fail-then-pass
is recorded as a WARN ("flaky") with both figures, never a drain.

`python -m airlock.runner registration --node N` is the detached deep suite the
HealthCheckProgram hook starts at boot: it runs the registration level, then resumes the node
(pass, and only while Airlock's pending reason is still in force) or sets
"airlock: FAIL <check> <detail>".
"""

from __future__ import annotations

import argparse
import importlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from airlock import config as config_mod
from airlock import finish, paths, protocol, reasons
from airlock.checks import registry
from airlock.checks.base import Outcome, Verdict, failed, passed, warned, worst
from airlock.checks.context import Context
from airlock.errors import AirlockError
from airlock.results import new_run_id

Progress = Callable[[str, str, dict[str, Any]], None]


def _call_check(spec: registry.CheckSpec, ctx: Context) -> Outcome:
    if ctx.fault("hang_check") == spec.name:
        while True:  # the documented hang switch: only the timeout gets us out
            time.sleep(3600)
    if ctx.fault("fail_check") == spec.name:
        raise RuntimeError("injected failure (fail_check)")
    if ctx.fault("flaky_check") == spec.name and ctx.attempt == 1:
        return failed(spec.name, "injected flaky failure (flaky_check)")
    module, _, fn = spec.target.partition(":")
    return getattr(importlib.import_module(module), fn)(ctx)


def _error_outcome(name: str, exc: BaseException) -> Outcome:
    if isinstance(exc, AirlockError):
        return failed(name, str(exc))
    if isinstance(exc, ModuleNotFoundError):
        return failed(name, f"{exc.name} not installed")
    return failed(name, f"error {type(exc).__name__}: {exc}"[:160])


def run_in_thread(spec: registry.CheckSpec, ctx: Context, timeout: float) -> Outcome:
    box: dict[str, Any] = {}

    def work() -> None:
        try:
            box["out"] = _call_check(spec, ctx)
        except BaseException as exc:  # noqa: BLE001 - becomes the check's verdict
            box["out"] = _error_outcome(spec.name, exc)

    t = threading.Thread(target=work, name=f"check-{spec.name}", daemon=True)
    t.start()
    t.join(timeout)
    if t.is_alive():
        return failed(spec.name, f"timeout after {timeout:g}s")
    return box["out"]


def _relay(stream, sink: list[str], check: str, progress: Progress | None) -> None:
    """Collect a child's stderr, passing its progress lines on as they arrive."""
    for line in stream:
        if line.startswith(protocol.PROGRESS):
            found = protocol.parse(line, protocol.PROGRESS, tagged=True)
            if found is not None and progress is not None:
                progress(check, "progress", found[1])
            continue
        sink.append(line)


def run_isolated(spec: registry.CheckSpec, ctx: Context, timeout: float,
                 progress: Progress | None = None) -> Outcome:
    argv = [sys.executable, "-m", "airlock.runner", "one", spec.name, "--node", ctx.node,
            "--level", ctx.level, "--attempt", str(ctx.attempt)]
    env = dict(os.environ)
    env[config_mod.ENV_VAR] = ctx.cfg.path
    env.setdefault("PATH", "/usr/bin:/bin:/usr/sbin:/sbin")
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env, start_new_session=True, stdin=subprocess.DEVNULL)
    err_lines: list[str] = []
    out_lines: list[str] = []
    readers = [
        threading.Thread(target=_relay, args=(proc.stderr, err_lines, spec.name, progress),
                         daemon=True),
        threading.Thread(target=_relay, args=(proc.stdout, out_lines, spec.name, None),
                         daemon=True),
    ]
    for t in readers:
        t.start()
    try:
        proc.wait(timeout=max(0.1, timeout))
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        return failed(spec.name, f"timeout after {timeout:g}s")
    except BaseException:
        _kill_group(proc)
        raise
    for t in readers:
        t.join(5)
    out, err = "".join(out_lines), "".join(err_lines)
    d = protocol.last(out, protocol.RESULT)
    if d is not None:
        try:
            return Outcome(str(d["check"]), Verdict(d["verdict"]), str(d.get("detail", "")),
                           dict(d.get("figures") or {}), str(d.get("remediation", "")))
        except (ValueError, KeyError, TypeError):
            pass
    tail = (err or out).strip().splitlines()
    why = tail[-1][:120] if tail else f"exit {proc.returncode}"
    return failed(spec.name, f"died: {why}")


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass


def run_check(spec: registry.CheckSpec, ctx: Context, timeout: float,
              progress: Progress | None = None) -> Outcome:
    if spec.isolated:
        return run_isolated(spec, ctx, timeout, progress)
    return run_in_thread(spec, ctx, timeout)


def run_level(cfg, node: str, level: str, only: list[str] | None = None,
              deadline: float | None = None, progress: Progress | None = None,
              ctx: Context | None = None, before_check: Callable[[str], None] | None = None,
              ) -> tuple[list[dict[str, Any]], Context]:
    """Run the checks of a level; return (check records, context)."""
    ctx = ctx or Context.create(cfg, node, level)
    records = []
    confirm = cfg.checks.confirm_runs
    for spec in registry.for_level(level, only):
        if before_check:
            before_check(spec.name)
        timeout = registry.timeout_for(spec, cfg)
        suite_limited = False
        if deadline is not None:
            left = deadline - time.monotonic()
            if left < timeout:
                timeout, suite_limited = max(left, 0.5), True
        if progress:
            progress(spec.name, "start", {"timeout": timeout})
        started = time.monotonic()
        ctx.attempt = 1
        outcome = run_check(spec, ctx, timeout, progress)
        attempts = [outcome]
        while outcome.failed and len(attempts) <= confirm and "timeout" not in outcome.detail:
            ctx.attempt += 1
            outcome = run_check(spec, ctx, timeout, progress)
            attempts.append(outcome)
        if len(attempts) > 1 and not outcome.failed:
            first = attempts[0]
            outcome = warned(spec.name, f"flaky: failed then passed ({first.detail})",
                             first_figures=first.figures, figures=outcome.figures)
        if outcome.failed and suite_limited and "timeout" in outcome.detail:
            outcome = failed(spec.name, f"timeout (suite budget) after {timeout:.0f}s")
        record = outcome.to_dict()
        record["duration_s"] = round(time.monotonic() - started, 3)
        record["attempts"] = len(attempts)
        records.append(record)
        if progress:
            progress(spec.name, "done", record)
    return records, ctx


def summarize(node: str, level: str, trigger: str, records: list[dict[str, Any]],
              started: float, ctx: Context | None, run_id: str | None = None) -> dict[str, Any]:
    outcomes = [Outcome(r["check"], Verdict(r["verdict"]), r.get("detail", "")) for r in records]
    verdict = worst(outcomes) if outcomes else Verdict.PASS
    first_fail = next((r for r in records if r["verdict"] == "fail"), None)
    profile = ""
    if ctx is not None and ctx._profile is not None:
        profile = ctx._profile.name
    return {
        "node": node,
        "run_id": run_id or new_run_id(node),
        "level": level,
        "trigger": trigger,
        "started_at": started,
        "finished_at": time.time(),
        "duration_s": round(time.time() - started, 3),
        "verdict": verdict.value if verdict is not Verdict.SKIP else "pass",
        "failed_check": first_fail["check"] if first_fail else None,
        "detail": first_fail["detail"] if first_fail else "",
        "profile": profile,
        "checks": records,
    }


def failure_reason(run: dict[str, Any]) -> reasons.Reason:
    return reasons.failure(run["failed_check"] or "suite", run["detail"])


# --- the detached registration suite -------------------------------------------------------
def registration(cfg, node: str, run_id: str, trigger: str = "boot") -> int:
    from airlock import nodestate
    from airlock.slurm import Slurm

    slurm = Slurm.from_config(cfg)
    level = cfg.registration.level
    deadline = time.monotonic() + cfg.registration.suite_timeout
    started = time.time()
    state = nodestate.NodeState(cfg, node)

    def superseded() -> bool:
        # A newer boot of this node started its own suite: this one must not touch Slurm.
        return (state.load() or {}).get("run_id") not in (None, run_id)

    def keep_isolated(_check: str) -> None:
        if superseded():
            return
        # A reboot with nextstate=resume clears DRAIN when the node registers; put ours back.
        try:
            n = slurm.node(node)
            if not n.reason:
                slurm.drain(node, reasons.pending(level, trigger))
        except AirlockError as exc:
            _log(f"could not verify isolation: {exc}")

    records, ctx = run_level(cfg, node, level, deadline=deadline, before_check=keep_isolated)
    if cfg.registration.group_window > 0 and cfg.shared_dir and \
            not any(r["verdict"] == "fail" for r in records):
        group = _batch_group(cfg, slurm, node, run_id, level)
        if group is not None:
            records.append(group)
    run = summarize(node, level, trigger, records, started, ctx, run_id)
    problems = finish.record_run(cfg, node, run)
    for p in problems:
        _log(p)
    verdict = run["verdict"]
    if superseded():
        _log(f"{node}: {verdict}, but a newer registration took over; Slurm left alone")
        return 0
    keep_isolated("")
    try:
        if verdict == "fail":
            res = _apply_failure(slurm, node, run)
        else:
            res = slurm.resume(node, only_if=lambda r: r.state in ("pending", "checking"))
        _log(f"{node}: {verdict} -> {'changed' if res.changed else 'unchanged'} {res.why}")
    except AirlockError as exc:
        _log(f"{node}: {verdict}, but Slurm update failed: {exc}")
        state.finish(run_id, verdict, error=str(exc))
        return 1
    state.finish(run_id, verdict)
    return 0 if verdict != "fail" else 1


def _batch_group(cfg, slurm, node: str, run_id: str, level: str) -> dict[str, Any] | None:
    """Join this registration window's batch; the group all-reduce's record, or None if alone."""
    from airlock.batch import Batch
    from airlock.checks.groupcheck import run_member

    reg = cfg.registration
    started = time.monotonic()
    try:
        addr = slurm.node(node).address or "127.0.0.1"
    except AirlockError:
        addr = "127.0.0.1"
    batch = Batch(paths.shared_root(cfg.shared_dir), node, addr, reg.group_window,
                  reg.group_timeout, tuple(cfg.ondemand.port_range),
                  confirm=cfg.checks.confirm_runs)
    batch.arrive(run_id)
    doc = batch.form()
    if doc is None:
        _log(f"{node}: no other node registered within {reg.group_window:g}s; no batch test")
        return None

    def member(nodes: list[str], master: str, port: int, secret_file: str) -> dict[str, Any]:
        return run_member(cfg, node, nodes, master, port, level, timeout=reg.group_timeout,
                          secret_file=secret_file)

    verdict = batch.run(doc, member)
    members = ",".join(doc["members"])
    if node in verdict.get("good", []):
        outcome = passed("group_allreduce", f"batch {members}")
    elif node in verdict.get("bad", []):
        outcome = failed("group_allreduce", verdict["details"].get(node, "failed"),
                         members=members)
    else:
        why = verdict.get("details", {}).get(node, "")
        outcome = failed("group_allreduce", f"inconclusive in batch {members}: {why}".strip())
    record = outcome.to_dict()
    record["duration_s"] = round(time.monotonic() - started, 3)
    record["attempts"] = 1
    return record


def _apply_failure(slurm, node: str, run: dict[str, Any]):
    from airlock.slurm import DrainResult

    current = slurm.node(node)
    parsed = reasons.parse(current.reason)
    if parsed is not None and parsed.is_failure:
        return DrainResult(node, False, f"kept earlier failure {current.reason!r}")
    return slurm.drain(node, failure_reason(run))


def _log(msg: str) -> None:
    print(time.strftime("%Y-%m-%dT%H:%M:%S ") + msg, file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m airlock.runner")
    sub = p.add_subparsers(dest="cmd", required=True)
    one = sub.add_parser("one")
    one.add_argument("check")
    one.add_argument("--node", required=True)
    one.add_argument("--level", default="standard")
    one.add_argument("--attempt", type=int, default=1)
    reg = sub.add_parser("registration")
    reg.add_argument("--node", required=True)
    reg.add_argument("--run-id", required=True)
    reg.add_argument("--trigger", default="boot")
    args = p.parse_args(argv)
    try:
        cfg = config_mod.load()
    except AirlockError as exc:
        print(f"airlock: {exc}", file=sys.stderr)
        return 2
    if args.cmd == "one":
        ctx = Context.create(cfg, args.node, args.level)
        ctx.attempt = args.attempt
        spec = registry.by_name(args.check)
        try:
            outcome = _call_check(spec, ctx)
        except BaseException as exc:  # noqa: BLE001 - reported as the check's verdict
            outcome = _error_outcome(spec.name, exc)
        protocol.emit(protocol.RESULT, outcome.to_dict())
        return 0
    return registration(cfg, args.node, args.run_id, args.trigger)


if __name__ == "__main__":
    sys.exit(main())
