"""Runs a level's checks with a timeout each and confirms failures.

Checks that import torch or can hang in native code run in a process group of their own
(`python -m airlock.runner one CHECK --node N`, which prints its outcome as an AIRLOCK-RESULT
line), killed whole on timeout; the rest run in a watchdog thread. A failing check is re-run
[checks] confirm_runs times before it counts: fail-then-pass is recorded as a WARN ("flaky")
with both figures, never a drain. What happens to the finished run is airlock.finish's job.
"""

from __future__ import annotations

import importlib
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from airlock import protocol
from airlock.checks import registry
from airlock.checks.base import Outcome, Verdict, failed, inconclusive, timed_out, warned
from airlock.checks.context import Context
from airlock.config import loader as config_mod
from airlock.errors import AirlockError, ConfigError, OwnError, SlurmError, Unmeasured

if TYPE_CHECKING:  # the records' types only; the hooks' pass path loads nothing more
    from airlock.records.types import CheckRecord

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


# What kept Airlock from measuring, by type: the check saw nothing of the node.
UNMEASURED = (Unmeasured, ConfigError, OwnError, SlurmError)
# `python -m airlock.runner one` exits with this when it could not run the check at all (its
# config, an unknown check; argparse's usage error too): Airlock's own trouble.
OWN_EXIT = 2


def _error_outcome(name: str, exc: BaseException) -> Outcome:
    if isinstance(exc, UNMEASURED):
        return inconclusive(name, f"not measured: {exc}"[:200])
    if isinstance(exc, AirlockError):
        return failed(name, str(exc))
    if isinstance(exc, ModuleNotFoundError):  # Airlock's own install: nothing was measured
        return inconclusive(name, f"not measured: {exc.name} not installed")
    return failed(name, f"error {type(exc).__name__}: {exc}"[:160])


class _CheckWorker:
    """One daemon thread that runs in-process checks one at a time (a thread per check cost the
    quick level more than its checks). A check that overruns its timeout strands the worker,
    abandoned as a thread per check was before, and the next check gets a new one."""

    def __init__(self) -> None:
        self._job: tuple | None = None
        self._ready = threading.Event()
        threading.Thread(target=self._loop, name="checks", daemon=True).start()

    def _loop(self) -> None:
        while True:
            self._ready.wait()
            self._ready.clear()
            spec, ctx, box, done = self._job
            try:
                box["out"] = _call_check(spec, ctx)
            except BaseException as exc:  # becomes the check's verdict
                box["out"] = _error_outcome(spec.name, exc)
            done.set()

    def run(self, spec: registry.CheckSpec, ctx: Context, timeout: float) -> Outcome | None:
        box: dict[str, Any] = {}
        done = threading.Event()
        self._job = (spec, ctx, box, done)
        self._ready.set()
        return box["out"] if done.wait(timeout) else None


_WORKER: _CheckWorker | None = None


def run_in_thread(spec: registry.CheckSpec, ctx: Context, timeout: float) -> Outcome:
    global _WORKER
    worker = _WORKER = _WORKER or _CheckWorker()
    out = worker.run(spec, ctx, timeout)
    if out is None:
        _WORKER = None  # stuck in that check: never hand it another
        return timed_out(spec.name, timeout)
    return out


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
    import subprocess  # the quick level runs every check in a thread: no process to start

    from airlock.forkserver import Unavailable

    args = ["one", spec.name, "--node", ctx.node, "--level", ctx.level,
            "--attempt", str(ctx.attempt)]
    env = dict(os.environ)
    env[config_mod.ENV_VAR] = ctx.cfg.path
    env.setdefault("PATH", "/usr/bin:/bin:/usr/sbin:/sbin")
    started = time.monotonic()
    try:
        # its pipes are read as they come (progress), so only its kill goes through kill_group
        proc = _start(args, env, ctx.cfg.checks.fork_server, timeout)
    except subprocess.TimeoutExpired:  # the fork server hung in its imports: so would the check
        _drop_server()
        return timed_out(spec.name, timeout)
    except OSError as exc:  # no process, no measurement
        return inconclusive(spec.name, f"not measured: could not start its process: "
                            f"{exc.strerror or exc}")
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
        proc.wait(timeout=max(0.1, timeout - (time.monotonic() - started)))
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        return timed_out(spec.name, timeout)
    except Unavailable as exc:  # its server died under it: the check was killed, unreported
        _drop_server()
        return inconclusive(spec.name, f"not measured: {exc}")
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
                           dict(d.get("figures") or {}), str(d.get("remediation", "")),
                           d.get("timed_out") is True, str(d.get("finding") or ""))
        except (ValueError, KeyError, TypeError):
            pass
    tail = (err or out).strip().splitlines()
    why = tail[-1][:120] if tail else f"exit {proc.returncode}"
    if proc.returncode == OWN_EXIT:  # it said so itself: it never ran the check
        return inconclusive(spec.name, f"not measured: {why}")
    return failed(spec.name, f"died: {why}")


def _kill_group(proc) -> None:
    from airlock.proc import kill_group  # (the same)

    if hasattr(proc, "kill_group"):  # forked by the server, which reaps it
        proc.kill_group()
    else:
        kill_group(proc)


# The process the isolated checks are forked from (airlock/forkserver.py): torch is imported
# once per suite, not once per check. One per environment; gone with this process.
PRELOAD = ("torch",)
_SERVER = None


def _start(args: list[str], env: dict[str, str], warm: bool, timeout: float):
    """`python -m airlock.runner ARGS`: forked from the warm server ([checks] fork_server), or
    started as a program of its own when there is none (it could not start, or died)."""
    global _SERVER
    if warm:
        from airlock import forkserver

        try:
            if _SERVER is None or _SERVER.env != env:
                _drop_server()
                _SERVER = forkserver.ForkServer(sys.executable, env, PRELOAD)
            return _SERVER.spawn("airlock.runner", args, env, title=f"check {args[1]}",
                                 timeout=timeout)
        except forkserver.Unavailable as exc:
            _log(f"isolated check started on its own: {exc}")
            _drop_server()
    from airlock.proc import spawn

    return spawn([sys.executable, "-m", "airlock.runner", *args], env)


def _drop_server() -> None:
    global _SERVER
    server, _SERVER = _SERVER, None
    if server is not None:
        try:
            server.close()
        except Exception:  # already gone: nothing of it to wait for
            pass


def run_check(spec: registry.CheckSpec, ctx: Context, timeout: float,
              progress: Progress | None = None) -> Outcome:
    if spec.isolated:
        return run_isolated(spec, ctx, timeout, progress)
    return run_in_thread(spec, ctx, timeout)


# Below this many seconds left in the budget a check is not started: it could not conclude.
MIN_SLICE_S = 0.05


def _slice(spec: registry.CheckSpec, cfg, deadline: float | None) -> tuple[float, bool]:
    """(seconds this attempt may take, whether the budget cut it below the check's timeout)."""
    timeout = registry.timeout_for(spec, cfg)
    if deadline is None:
        return timeout, False
    left = deadline - time.monotonic()
    return (left, True) if left < timeout else (timeout, False)


def _run_confirmed(spec: registry.CheckSpec, ctx: Context, cfg, deadline: float | None,
                   confirm: int, progress: Progress | None) -> tuple[Outcome, int]:
    """One check, re-run to confirm a failure; (outcome, attempts made).

    A check only proves what it saw. When the hook's budget is spent before an attempt starts,
    or an attempt runs out of a slice the budget cut short, that attempt has no verdict: the
    check ends "error" (Airlock's own trouble), never a FAIL the recovery service would act
    on, and never a pass."""
    outcomes: list[Outcome] = []
    ctx.attempt = 0
    while True:
        timeout, cut = _slice(spec, cfg, deadline)
        if timeout < MIN_SLICE_S:
            spent = f"not run: budget spent ({_took(deadline)})"
            if outcomes and outcomes[-1].failed:  # a failure the budget left unconfirmed
                spent += f"; first attempt: {outcomes[-1].detail}"
            return inconclusive(spec.name, spent), len(outcomes)
        ctx.attempt += 1
        outcome = run_check(spec, ctx, timeout, progress)
        if outcome.failed and cut and outcome.timed_out:
            return inconclusive(spec.name, f"no verdict: cut to {timeout:.1f}s by the budget "
                                "and ran out of it"), ctx.attempt
        outcomes.append(outcome)
        if not outcome.failed or ctx.attempt > confirm or outcome.timed_out:
            break
    if len(outcomes) > 1 and outcome.verdict is Verdict.ERROR:
        # The confirmation measured nothing: the first failure stands unconfirmed, no verdict.
        return inconclusive(spec.name, f"{outcome.detail}; first attempt: "
                            f"{outcomes[0].detail}"[:200], **outcome.figures), len(outcomes)
    if len(outcomes) > 1 and not outcome.failed:
        first = outcomes[0]
        outcome = warned(spec.name, f"flaky: failed then passed ({first.detail})",
                         first_figures=first.figures, figures=outcome.figures)
    return outcome, len(outcomes)


def _took(deadline: float | None) -> str:
    over = time.monotonic() - deadline if deadline is not None else 0.0
    return f"{over:.1f}s past the deadline" if over > 0 else "under 0.05s left"


def observed(cfg, ctx: Context) -> set[str]:
    """The checks in observe mode for this node: [checks] observe, plus the profile's `observe`
    list, minus [checks] enforce. Policy as data, applied here and only here: the records of
    these checks carry "observe": true, and airlock.finish leaves them out of the run's
    verdict (so they never drain, never keep a boot closed), while keeping their own verdict
    for status, metrics and history."""
    names = set(cfg.checks.observe)
    profile = None
    # At the quick and epilog levels only a profile the checks already chose is asked (almost
    # every run's NVML checks choose it): choosing one now could cost the hook a Slurm call
    # past its budget.
    if ctx.profile_name or ctx.level in registry.HEAVY:
        try:
            profile = ctx.profile
        except Exception:  # no profile (NVML down, Slurm away): the config's list still holds
            profile = None
    if profile is not None:
        from_profile = set(profile.get("observe", []))
        unknown = sorted(from_profile - registry.names())
        if unknown:
            raise ConfigError(f"profile {profile.origin or profile.name}: observe: unknown "
                              f"check {unknown[0]!r}")
        names |= from_profile
    return names - set(cfg.checks.enforce)


def run_level(cfg, node: str, level: str, only: list[str] | None = None,
              deadline: float | None = None, progress: Progress | None = None,
              ctx: Context | None = None,
              before_check: Callable[[registry.CheckSpec], None] | None = None,
              ) -> tuple[list[CheckRecord], Context]:
    """Run the checks of a level; return (check records, context)."""
    ctx = ctx or Context.create(cfg, node, level)
    for key in ("observe", "enforce"):
        unknown = sorted(set(getattr(cfg.checks, key)) - registry.names())
        if unknown:
            raise ConfigError(f"config {cfg.path}: [checks] {key}: unknown check "
                              f"{unknown[0]!r} (known: {', '.join(sorted(registry.names()))})")
    records = []
    confirm = cfg.checks.confirm_runs
    try:
        for spec in registry.for_level(level, only):
            if before_check:
                before_check(spec)
            if progress:
                progress(spec.name, "start", {"timeout": registry.timeout_for(spec, cfg)})
            started = time.monotonic()
            outcome, attempts = _run_confirmed(spec, ctx, cfg, deadline, confirm, progress)
            record = outcome.to_dict()
            record["duration_s"] = round(time.monotonic() - started, 3)
            record["attempts"] = attempts
            records.append(record)
            if progress:
                progress(spec.name, "done", record)
    finally:
        # the fork server's torch stays in memory no longer than the level's checks need it
        # (a finished suite may go on trying Slurm for minutes)
        _drop_server()
    if records:
        watch = observed(cfg, ctx)
        for record in records:
            if record["check"] in watch:
                record["observe"] = True
    return records, ctx


def _log(msg: str) -> None:
    print(time.strftime("%Y-%m-%dT%H:%M:%S ") + msg, file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    import argparse  # the `one` process only

    p = argparse.ArgumentParser(prog="python -m airlock.runner")
    sub = p.add_subparsers(dest="cmd", required=True)
    one = sub.add_parser("one", help="run one check, print its outcome")
    one.add_argument("check")
    one.add_argument("--node", required=True)
    one.add_argument("--level", default="standard")
    one.add_argument("--attempt", type=int, default=1)
    args = p.parse_args(argv)
    try:
        cfg = config_mod.load()
        spec = registry.by_name(args.check)
    except (AirlockError, KeyError) as exc:
        print(f"airlock: {exc}", file=sys.stderr)
        return OWN_EXIT
    ctx = Context.create(cfg, args.node, args.level)
    ctx.attempt = args.attempt
    try:
        outcome = _call_check(spec, ctx)
    except BaseException as exc:  # reported as the check's verdict
        outcome = _error_outcome(spec.name, exc)
    protocol.emit(protocol.RESULT, outcome.to_dict())
    return 0


if __name__ == "__main__":
    sys.exit(main())
