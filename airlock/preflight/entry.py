"""The prolog's one call: after the quick level passed, a qualifying job's preflight.

Cheap until a job qualifies: this module imports only the policy at load, reads only
[preflight] and the prolog's environment, and returns at once for a job that does not qualify
(no Slurm call, no torch, no file). A qualifying job's member asks Slurm once for its own node's
address, meets the others (airlock.preflight.meet), runs the rounds, and:

* a culprit (the batch blames it and its own answer failed): the run is stored and the node is
  drained through airlock.slurm.drains with `airlock: FAIL preflight <what> (job N)`; the prolog
  exits 1,
  so Slurm requeues the job and it runs later on other nodes;
* a member that passed while the verdict blames another requeues the job itself
  (`scontrol requeue`) before its prolog exits 0: Slurm 24.11 was seen starting the batch script
  on the first node, whose prolog passed, before the culprit's failed prolog requeued the job;
  a requeue while the prolog still runs keeps user code off the culprit's set;
* pass: exit 0, the run stored with its timings;
* inconclusive (the meeting never formed, a member came late, a secret could not be read, no
  time left, or Airlock's own trouble here): nobody is drained, and the run document (verdict
  "error", unseen ["preflight"]) says the preflight did not see it. The job runs
  ([preflight] on_inconclusive = "run"), or every member that saw nothing asks Slurm to requeue
  and hold it ("hold"; the prolog still exits 0: a failed prolog would drain its node).

Every exception is caught here: a preflight never turns Airlock's own trouble into a failed prolog.

With [preflight] level = "collective+gemm" each member first runs a short verified GEMM on its
own GPUs (checks/burnin.py at the preflight level, in its own process): a wrong result is this
node's own evidence, so it fails alone ("airlock: FAIL preflight gemm ...") without meeting the
others, and leaves a note in the meeting folder that makes them stop waiting and requeue the job.

Fault switches for tests (airlock/hw/faults.py's sources; read on the node itself):
  preflight_delay = SECONDS     this member's prolog waits SECONDS before it announces itself
  preflight_secret = unreadable this member is handed a secret file it cannot read
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Mapping
from typing import Any

from airlock.preflight.policy import Job, needs_qos, qos_of, qualifies

# Seconds kept back from the time Slurm gives the prolog, for the drain and the run document.
SPARE_S = 8.0
# How long a member that requeued a job with a culprit waits for slurmctld to show it queued.
REQUEUE_WAIT_S = 10.0


def in_prolog(hook, msg: str, env: Mapping[str, str] | None = None) -> tuple[int, str]:
    """(rc, message) for the prolog whose quick level passed with msg."""
    job = Job.from_env(os.environ if env is None else env)
    go, why = qualifies(hook.cfg.preflight, job)
    if not go and needs_qos(hook.cfg.preflight, job):
        qos, problem = _ask_qos(hook, job.job_id)
        if problem:  # cannot tell whether the job qualifies: no preflight, nobody drained
            return 0, f"{msg}; preflight did not see job {job.job_id}: its QOS is unknown " \
                      f"({problem})"
        job = job._replace(qos=qos)
        go, why = qualifies(hook.cfg.preflight, job)
    if not go:
        return 0, msg
    try:
        rc, said = run(hook, job)
    except BaseException as exc:  # Airlock's own trouble is never the node's failure
        return 0, f"{msg}; preflight did not see job {job.job_id}: own error " \
                  f"{type(exc).__name__}: {exc}"
    return rc, f"{msg}; {said}"


def run(hook, job: Job) -> tuple[int, str]:
    from airlock import finish, paths
    from airlock.preflight import judge as judge_mod
    from airlock.preflight import record
    from airlock.preflight.meet import Meeting, Missed
    from airlock.preflight.plan import make_plan
    from airlock.records.results import new_run_id

    cfg, node = hook.cfg, hook.node
    sec = cfg.preflight
    started, t0 = time.time(), time.monotonic()
    deadline = t0 + min(sec.budget, max(0.0, hook.time_left() - SPARE_S))
    rendezvous_by = min(t0 + sec.rendezvous_timeout, deadline)
    plan = None
    verdict: dict[str, Any] | None = None
    blamed: list[str] = []
    missed = ""
    t_met = t_gemm = t0
    gemm = None  # this node's GEMM decision ([preflight] level = "collective+gemm")
    meeting = None
    try:
        plan = make_plan(job.job_id, job.nodelist, node, restarts=job.restarts)
        faults = _faults(cfg, node)
        delay = _seconds(faults.get("preflight_delay"))
        if delay:
            time.sleep(delay)
        if not cfg.shared_dir:
            raise Missed("no shared_dir: the members have nowhere to meet")
        root = paths.shared_root(cfg.shared_dir)
        if sec.level == "collective+gemm":
            gemm = _gemm(cfg, node, deadline - sec.round_timeout)
            t_gemm = time.monotonic()
            # the others wait for this member from the end of its GEMM
            rendezvous_by = min(t_gemm + sec.rendezvous_timeout, deadline)
            if gemm.kind == judge_mod.CULPRIT:  # no meeting: tell the others, fail alone
                try:
                    Meeting(root, plan, "", started, rendezvous_by, hook.log).report_gemm(
                        gemm.detail)
                except OSError as exc:
                    hook.log(f"preflight: the others not told of the GEMM failure: {exc}")
                raise _GemmFailed
        addr = hook.slurm().node(node).address or "127.0.0.1"
        meeting = Meeting(root, plan, addr, started, rendezvous_by, hook.log)
        doc = meeting.gather()
        t_met = time.monotonic()
        verdict = _rounds(cfg, hook, plan, root, addr, doc, deadline,
                          unreadable=faults.get("preflight_secret") == "unreadable")
        blamed = meeting.culprits()
    except _GemmFailed:
        pass
    except Missed as exc:
        missed = str(exc)
    except Exception as exc:  # a plan refused, a Slurm call, a file, the batch code: own trouble
        missed = f"own error {type(exc).__name__}: {exc}"
    if meeting is not None:
        blamed += [n for n in meeting.gemm_failed() if n not in blamed]
    t_coll = time.monotonic()
    if t_met == t0:
        t_met = t_coll
    decision = judge_mod.judge(node, verdict, missed[:200])
    if gemm is not None:
        decision = judge_mod.combine(gemm, decision)
    timings = {"gemm": t_gemm - t0, "rendezvous": t_met - t_gemm,
               "collective": t_coll - t_met} if gemm is not None else \
        {"rendezvous": t_met - t0, "collective": t_coll - t_met}
    try:
        totals = record.bump_totals(cfg, node, decision, time.monotonic() - t0)
    except OSError as exc:  # the totals are a figure: never a reason to spare a culprit's drain
        hook.log(f"preflight totals not kept: {exc}")
        totals = {}
    timings["judging"] = time.monotonic() - t_coll
    timings["added"] = time.monotonic() - t0
    doc_run = record.run_document(node, plan, job.job_id, decision, timings, started, totals,
                                  new_run_id(node))
    culprit = decision.kind == judge_mod.CULPRIT
    try:
        done = finish.finish_run(cfg, node, doc_run, history=True,
                                 slurm=hook.slurm() if culprit else None,
                                 reason_suffix=f"(job {job.job_id})")
        for problem in done.problems:
            hook.log(problem)
        how = ("drained" if done.drain is not None and done.drain.changed
               else getattr(done.drain, "why", ""))
    except BaseException as exc:
        if not culprit:
            raise
        # The culprit's drain did not happen: exit 1 all the same, so Slurm's own prolog-failure
        # drain holds the node and the job is requeued away from it.
        how = f"drain failed ({type(exc).__name__}: {exc}); Slurm drains the node"
    took = f"{timings['added']:.2f}s"
    if culprit:
        return 1, f"FAIL preflight {decision.detail}: {how} ({took})"
    others = [n for n in blamed if n != node]
    if others:  # this member is not the culprit, another is: user code must not start here
        return 0, f"preflight: {', '.join(others[:3])} failed; {_requeue(hook, job.job_id)} " \
                  f"({decision.kind}, {took})"
    if decision.kind == judge_mod.PASS:
        return 0, f"preflight pass with {len(plan.members)} nodes in {took}"
    if sec.on_inconclusive == "hold":
        return 0, f"preflight did not see job {job.job_id} ({decision.detail}); " \
                  f"{_hold(hook, job.job_id)} ({took})"
    return 0, f"preflight did not see job {job.job_id} ({decision.detail}); the job runs " \
              f"([preflight] on_inconclusive = {sec.on_inconclusive}) ({took})"


def _ask_qos(hook, job_id: str) -> tuple[str, str]:
    """(the job's QOS, "") from slurmctld, or ("", why not): Slurm before 26.05 does not give
    the prolog SLURM_JOB_QOS (airlock.preflight.policy)."""
    from airlock.errors import SlurmError

    try:
        return qos_of(hook.slurm().scontrol("-o", "show", "job", job_id)), ""
    except SlurmError as exc:
        return "", str(exc)[:160]


def _requeue(hook, job_id: str) -> str:
    """Requeue the job whose preflight blamed another member, and return only once slurmctld
    shows it back in the queue (the terminate it sends then reaches this node while its prolog
    still runs, before any batch launch here). The culprit's failed prolog may requeue it first:
    the job's state says so, not the refusal's text. A refused or unanswered request is asked
    again until REQUEUE_WAIT_S (slurmctld restarting)."""
    from airlock.errors import SlurmError

    end = time.monotonic() + min(REQUEUE_WAIT_S, max(0.0, hook.time_left() - 1.0))
    asked, problem, state = False, "", "?"
    while True:
        if not asked:
            try:
                hook.slurm().scontrol("requeue", job_id)
                asked = True
            except SlurmError as exc:
                problem = f"; requeue: {exc}"
        try:
            text = hook.slurm().scontrol("-o", "show", "job", job_id)
        except SlurmError:
            text = ""
        m = re.search(r"\bJobState=(\S+)", text)
        state = m.group(1) if m else "?"
        if state not in ("RUNNING", "CONFIGURING", "?"):
            return f"the job is requeued ({state})"
        if time.monotonic() >= end:
            return f"the job is still {state} after {REQUEUE_WAIT_S:g}s{problem}"
        time.sleep(0.2)


def _hold(hook, job_id: str) -> str:
    """Requeue the job held ([preflight] on_inconclusive = "hold"). Every member that saw
    nothing asks; the first one's request holds it, the others' find it pending."""
    from airlock.errors import SlurmError

    try:
        hook.slurm().scontrol("requeuehold", job_id)
    except SlurmError as exc:
        return f"could not hold the job ({exc})"
    return "the job is requeued and held ([preflight] on_inconclusive = hold)"


def _rounds(cfg, hook, plan, root, addr: str, doc: dict[str, Any], deadline: float,
            unreadable: bool) -> dict[str, Any]:
    from airlock.checks.groupcheck import run_member
    from airlock.groups.batch import Batch

    members = set(plan.members)
    batch = Batch(root, plan.me, addr, window=0.0, round_timeout=cfg.preflight.round_timeout,
                  port_range=tuple(cfg.ondemand.port_range),
                  max_tests=cfg.ondemand.max_group_tests, confirm=cfg.checks.confirm_runs,
                  report=hook.log, known=lambda names: members & set(names), deadline=deadline)

    def member(nodes: list[str], master: str, port: int, secret_file: str,
               timeout: float) -> dict[str, Any]:
        if unreadable:
            secret_file += ".unreadable"  # the fault switch: a secret this member cannot read
        return run_member(cfg, plan.me, nodes, master, port, "standard", timeout=timeout,
                          secret_file=secret_file)

    return batch.run(doc, member)


class _GemmFailed(Exception):
    """This member's own GEMM failed: it meets no one."""


def _gemm(cfg, node: str, by: float):
    """This node's GEMM at the preflight level: the burn-in check in its own process (torch is
    imported there, never in the prolog), until `by` (time.monotonic()) at the latest."""
    from airlock.checks import registry
    from airlock.checks.context import Context
    from airlock.preflight import judge as judge_mod
    from airlock.runner import run_isolated

    spec = registry.by_name("burnin")
    timeout = min(registry.timeout_for(spec, cfg), by - time.monotonic())
    if timeout < 1.0:
        return judge_mod.Decision(judge_mod.INCONCLUSIVE,
                                  "gemm not measured: no time left in the preflight's budget")
    out = run_isolated(spec, Context.create(cfg, node, "preflight"), timeout)
    return judge_mod.judge_gemm(out.verdict.value, out.detail, out.timed_out)


def _faults(cfg, node: str) -> dict[str, str]:
    from airlock.hw import faults as faults_mod

    try:
        return faults_mod.active(cfg, node)
    except Exception:  # the switches are for tests: a broken source switches nothing on
        return {}


def _seconds(value: str | None) -> float:
    try:
        return max(0.0, float(value or 0))
    except ValueError:
        return 0.0
