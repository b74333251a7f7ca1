"""What every Slurm hook shares: the run's context, its log line, and the policy for Airlock's
own errors (docs/guide.md, "When Airlock itself fails", has it as a table).

* Unproven boot (no passing registration for this boot, or one that cannot be read): fail closed.
  The node is drained with a reason that names the cause, `airlock: FAIL config <file>: <problem>`
  or `airlock: FAIL <hook> <ExceptionType> <where>`, and the prolog refuses the job.
* Proven boot: fail open. No drain (a typo in airlock.toml must not drain the cluster), but the
  error goes to the hook's log, to errors.json (airlock.records.incidents) and from there to
  `airlock status`, the metrics and `airlock doctor`.

guard() catches every exception type, so no hook ever exits with a traceback (a prolog or
epilog traceback would make Slurm set a "Prolog error" drain that Airlock may never clear).
When the config does not load, config.salvage() still finds the state directory (to read the
proof), the log directory and the Slurm client settings.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from typing import Any, NamedTuple

from airlock import paths
from airlock.config import loader as config_mod
from airlock.errors import ConfigError, OwnError, where
from airlock.hw import boot as boot_mod
from airlock.hw import faults
from airlock.records import incidents
from airlock.records import proof as nodestate
from airlock.slurm import conf as slurmconf


class Hook:
    def __init__(self, name: str, node: str, job: str = ""):
        self.name = name  # healthcheck | prolog | epilog
        self.node = node
        self.job = job
        self.cfg: Any = None  # the loaded config, once it loaded
        self.proof: nodestate.Proof | None = None  # what node.json says of this boot, once read
        self.now: boot_mod.Boot | None = None
        self.started = time.monotonic()
        self._salvaged: dict[str, Any] | None = None
        self._slurm: Any = None
        self._deadline: tuple[float | None] | None = None  # (deadline,) once known

    # --- config, or what can be salvaged of it --------------------------------------------
    def load_config(self) -> Any:
        self.cfg = config_mod.load()
        config_mod.remember(self.cfg)
        # Fault switches come from the environment or the NVML simulation file only.
        switched = self.cfg.nvml.simulate or faults.ENV_VAR in os.environ
        if switched and faults.active(self.cfg, self.node).get("hook_crash") == self.name:
            raise RuntimeError(f"injected failure (hook_crash={self.name})")
        return self.cfg

    def setting(self, key: str) -> Any:
        """A key a hook needs even when the config (or that key's section) does not load."""
        if self.cfg is not None:
            table, _, name = key.rpartition(".")
            try:
                return getattr(self.cfg.section(table) if table else self.cfg, name)
            except ConfigError:
                pass
        if self._salvaged is None:
            self._salvaged = config_mod.salvage(config_mod.config_path()[0])
        return self._salvaged[key]

    def slurm(self):
        """The Slurm client of this run: each call ends by the run's deadline()."""
        if self._slurm is None:
            from airlock.slurm.client import Slurm  # only paths that talk to Slurm pay for it

            self._slurm = Slurm(bin_dir=self.setting("slurm.bin_dir"),
                                conf=self.setting("slurm.conf"),
                                timeout=self.cfg.slurm.timeout if self.cfg is not None else 15.0,
                                deadline=self.deadline())
        return self._slurm

    # --- the time Slurm gives this run ------------------------------------------------------
    def deadline(self) -> float | None:
        """time.monotonic() by which this run must be done with Slurm: the time Slurm gives
        the hook (HealthCheckTimeout, else 60 s; PrologEpilogTimeout), counted from when slurmd
        started this process, less slurmconf.SPARE_S. None: Slurm sets no limit."""
        if self._deadline is None:
            try:
                conf = self.setting("slurm.conf")
            except Exception:  # nothing of the config could be read: Slurm's own search
                conf = ""
            limit = slurmconf.hook_timeout(self.name, conf)
            self._deadline = (None if limit is None
                              else self.started - _age() + limit - slurmconf.SPARE_S,)
        return self._deadline[0]

    def time_left(self) -> float:
        """Seconds left before deadline() (infinite without one)."""
        deadline = self.deadline()
        return float("inf") if deadline is None else deadline - time.monotonic()

    # --- the proof of this boot -------------------------------------------------------------
    def read_proof(self) -> nodestate.Proof:
        if self.proof is None:
            try:
                self.now = boot_mod.current(self.node)
            except OSError as exc:
                self.proof = nodestate.Proof(nodestate.NONE, f"boot id unreadable: {exc}")
                return self.proof
            state = nodestate.NodeState(_Dirs(self.setting("state_dir")), self.node)
            self.proof = state.proof(self.now)
        return self.proof

    def read_proof_again(self) -> nodestate.Proof:
        """After this run changed the record (started a suite, adopted the boot)."""
        self.proof = None
        return self.read_proof()

    def gate_on(self) -> bool:
        return bool(self.setting("registration.enabled"))

    def proven(self) -> bool:
        """Jobs may run on this boot: its registration passed, the gate is off, or it was
        adopted with [registration] adopt = "next-reboot"."""
        if not self.gate_on():
            return True
        proof = self.read_proof()
        if proof.passed:
            return True
        return (proof.state == nodestate.ADOPTED and self.cfg is not None
                and self.cfg.registration.adopt == "next-reboot")

    # --- output ------------------------------------------------------------------------------
    def log(self, msg: str) -> None:
        took = time.monotonic() - self.started
        job = f" job {self.job}" if self.job else ""
        line = (f"{time.strftime('%Y-%m-%dT%H:%M:%S')} {self.node or '?'} {self.name}{job}: "
                f"{msg} ({took:.2f}s)\n")
        sys.stderr.write(line)
        try:
            folder = paths.expand(self.setting("log_dir"), self.node or "unknown")
            os.makedirs(folder, exist_ok=True)
            with open(os.path.join(folder, f"{self.name}.log"), "a") as fh:
                fh.write(line)
        except Exception:  # the log is best effort; stderr already has the line
            pass


def _age() -> float:
    """Seconds since this process started (its start time in /proc, on the boot clock, which
    time namespaces shift alike); 0 when that cannot be read."""
    start = boot_mod.process_start(os.getpid())
    if start is None:
        return 0.0
    age = boot_mod.uptime() - start / os.sysconf("SC_CLK_TCK")
    return age if 0.0 <= age < 60.0 else 0.0


class _Dirs(NamedTuple):
    state_dir: str


def describe(hook: Hook, exc: BaseException) -> tuple[str, str]:
    """(subject, detail) of a drain reason naming what went wrong."""
    if isinstance(exc, ConfigError):
        text = str(exc)
        return "config", text.removeprefix("config ").strip()
    if isinstance(exc, OwnError):
        return exc.subject, exc.detail
    return hook.name, f"{type(exc).__name__} {where(exc)} {exc}".strip()


def fail_closed(hook: Hook, subject: str, detail: str) -> str:
    """Drain with an own-error reason (kept behind a hardware failure already in force)."""
    from airlock.slurm import (
        drains,  # Slurm's client: the pass path never drains
        reasons,
    )

    try:
        res = drains.fail(hook.slurm(), hook.node, reasons.failure(subject, detail))
        return "drained" if res.changed else res.why
    except Exception as exc:  # Slurm unreachable too: the next hook run tries again
        return f"could not drain ({type(exc).__name__}: {exc})"


def guard(hook: Hook, body: Callable[[Hook], tuple[int, str]], open_rc: int,
          closed_rc: int) -> int:
    """Run a hook's body; on any exception apply the policy above. Returns the exit code."""
    try:
        if not hook.node:
            raise ConfigError("SLURMD_NODENAME is not set and no node name was given")
        rc, msg = body(hook)
        hook.log(msg)
        if hook.cfg is not None:
            incidents.clear(hook.cfg.state_dir, hook.cfg.shared_dir, hook.node, hook.name)
        return rc
    except BaseException as exc:  # every type: no hook exits with a traceback
        return _on_error(hook, exc, open_rc, closed_rc)


def _on_error(hook: Hook, exc: BaseException, open_rc: int, closed_rc: int) -> int:
    try:
        subject, detail = describe(hook, exc)
        text = f"{subject} {detail}"
        if not hook.node:
            hook.log(f"error: {text}")
            return closed_rc
        try:
            proven = hook.proven()
        except Exception:  # the proof cannot be read either: unproven
            proven = False
        if proven:
            hook.log(f"error, failing open (this boot passed its registration): {text}")
            verdict, rc = "fail open", open_rc
        else:
            outcome = fail_closed(hook, subject, detail)
            hook.log(f"error on an unproven boot, failing closed: {text}; {outcome}")
            verdict, rc = "fail closed", closed_rc
        problem = incidents.record(hook.setting("state_dir"), hook.setting("shared_dir"),
                                   hook.node, hook.name, f"{verdict}: {text}")
        if problem:
            hook.log(f"could not record the error: {problem}")
        return rc
    except BaseException as inner:  # the last line of defence
        sys.stderr.write(f"airlock {hook.name}: {type(inner).__name__} while handling "
                         f"{type(exc).__name__}: {exc}\n")
        return closed_rc
