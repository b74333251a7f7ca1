"""HealthCheckProgram: what slurmd runs at start (before it registers) and every
HealthCheckInterval.

Slurm gives it only SLURMD_NODENAME: no PATH, no SLURM_CONF, no arguments; the config path comes
from $AIRLOCK_CONFIG or /etc/airlock/airlock.toml; airlock.slurm finds the Slurm binaries.

* A new boot, or a node with no Airlock record: drain it with "airlock: pending <level> check",
  start the registration suite detached (own session, own hard timeout, log file) and return.
* Otherwise: run the quick level (NVML, system; never torch) and drain with the failing check.

Slurm ignores the exit code (it only logs it); we exit 0 when the node was handled and 1 when
something prevented a decision, so slurmd's log says so.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

from airlock.hooks.common import log

from airlock import config as config_mod
from airlock import finish, paths, reasons
from airlock.errors import AirlockError


def start_registration(cfg, node: str, run_id: str, trigger: str) -> int:
    """Start the registration suite in its own session; return its PID without waiting."""
    folder = paths.expand(cfg.log_dir, node)
    os.makedirs(folder, exist_ok=True)
    env = dict(os.environ)
    env[config_mod.ENV_VAR] = cfg.path
    env.setdefault("PATH", "/usr/bin:/bin:/usr/sbin:/sbin")
    argv = [sys.executable, "-m", "airlock.runner", "registration", "--node", node,
            "--run-id", run_id, "--trigger", trigger]
    with open(os.path.join(folder, f"registration-{run_id}.log"), "ab") as log:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env,
                                start_new_session=True, close_fds=True)
    return proc.pid


def quarantine(cfg, slurm, node: str, boot: float, trigger: str) -> str:
    from airlock.nodestate import NodeState
    from airlock.results import new_run_id

    level = cfg.registration.level
    result = slurm.drain(node, reasons.pending(level, trigger))
    run_id = new_run_id(node)
    pid = start_registration(cfg, node, run_id, trigger)
    NodeState(cfg, node).start(run_id, boot, pid, level, trigger)
    held = "drained" if result.changed else result.why
    return f"{trigger}: {held}; registration suite {run_id} pid {pid}"


def check_registration_alive(cfg, slurm, node: str, record: dict) -> str | None:
    """A registration suite that died without a verdict must not leave the node pending forever."""
    from airlock.nodestate import NodeState, pid_alive

    if record.get("status") != "running":
        return None
    age = time.time() - float(record.get("started_at", 0))
    alive = pid_alive(int(record.get("pid", 0)))
    grace = cfg.registration.suite_timeout + 60
    if alive and age < grace:
        return None
    why = "timeout" if alive else "died without a verdict"
    current = slurm.node(node)
    parsed = reasons.parse(current.reason)
    if parsed is not None and parsed.state in ("pending", "checking"):
        slurm.drain(node, reasons.failure("registration", f"suite {why}"))
    NodeState(cfg, node).finish(record.get("run_id", ""), "fail", error=f"suite {why}")
    return f"registration suite {why}"


def periodic(cfg, slurm, node: str) -> str:
    from airlock.runner import failure_reason, run_level, summarize

    started = time.time()
    deadline = time.monotonic() + cfg.healthcheck.budget
    records, ctx = run_level(cfg, node, "quick", deadline=deadline)
    run = summarize(node, "quick", "periodic", records, started, ctx)
    for problem in finish.record_run(cfg, node, run, history=run["verdict"] == "fail"):
        log(cfg, node, "healthcheck", problem)
    if run["verdict"] != "fail":
        return f"quick {run['verdict']} in {run['duration_s']:.2f}s"
    current = slurm.node(node)
    parsed = reasons.parse(current.reason)
    if parsed is not None and (parsed.is_failure or parsed.state == "recover"):
        return f"quick fail ({run['failed_check']}); kept earlier {current.reason!r}"
    res = slurm.drain(node, failure_reason(run))
    return f"quick fail {run['failed_check']}: {'drained' if res.changed else res.why}"


def handle(cfg, node: str) -> str:
    from airlock.nodestate import NodeState, boot_time
    from airlock.slurm import Slurm

    slurm = Slurm.from_config(cfg)
    state = NodeState(cfg, node)
    record = state.load()
    boot = boot_time()
    if cfg.registration.enabled:
        if record is None:
            return quarantine(cfg, slurm, node, boot, "new")
        if abs(float(record.get("boot_time", 0)) - boot) > cfg.registration.boot_tolerance:
            return quarantine(cfg, slurm, node, boot, "boot")
        stale = check_registration_alive(cfg, slurm, node, record)
        if stale:
            return stale
    return periodic(cfg, slurm, node)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    node = os.environ.get("SLURMD_NODENAME") or (argv[0] if argv else "")
    cfg = None
    started = time.monotonic()
    try:
        if not node:
            raise AirlockError("SLURMD_NODENAME is not set and no node name was given")
        cfg = config_mod.load()
        msg = handle(cfg, node)
        log(cfg, node, "healthcheck", f"{msg} ({time.monotonic() - started:.2f}s)")
        return 0
    except AirlockError as exc:
        log(cfg, node or "?", "healthcheck", f"error: {exc}")
        return 1


if __name__ == "__main__":
    sys.exit(main())
