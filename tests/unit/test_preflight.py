"""Job preflight (airlock/preflight/): which jobs qualify, the plan every member computes alike,
the meeting in a real shared directory, one member's outcome, its run document and totals; and
the real prolog: a job that does not qualify pays nothing (no Slurm call, no torch, no batch
code), and a preflight that sees nothing drains no one."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time

import pytest

from airlock.config import loader as config_mod
from airlock.paths import valid_batch_id
from airlock.preflight import judge as judge_mod
from airlock.preflight import record
from airlock.preflight.meet import Meeting, Missed, members_problem
from airlock.preflight.plan import PlanError, make_plan
from airlock.preflight.policy import Job, count_nodes, qualifies
from airlock.records import results


def section(**kw):
    return config_mod.from_dict({"preflight": {"enabled": True, **kw}}).preflight


def job(nodelist="n[1-4]", num=0, partition="gpu", qos="", constraints="", comment=""):
    return Job("42", nodelist, num, partition, qos, constraints, comment)


def test_the_job_as_slurmd_describes_it_to_the_prolog():
    """slurmd gives the prolog SLURM_NODELIST, not the job's SLURM_JOB_NODELIST (seen on 22.05:
    a preflight reading only the latter found no allocation)."""
    j = Job.from_env({"SLURM_JOB_ID": "7", "SLURM_NODELIST": "n[1-2]", "SLURM_JOB_NUM_NODES": "2",
                      "SLURM_JOB_RESTART_COUNT": "1"})
    assert (j.nodelist, j.num_nodes, j.restarts) == ("n[1-2]", 2, "1")
    assert Job.from_env({"SLURM_JOB_NUM_NODES": "x"}).num_nodes == 0


# --- policy -----------------------------------------------------------------------------------
def test_count_nodes_reads_hostlists_without_expanding():
    assert count_nodes("n[1-3,7],g01") == 5
    assert count_nodes("gpu-a[01-02]-b[1-3]") == 6
    assert count_nodes("node1") == 1
    assert count_nodes("") == 0
    assert count_nodes("n[3-1]") == 0  # not a range this counter trusts


def test_policy_known_answers():
    assert qualifies(config_mod.from_dict({}).preflight, job()) == (False, "preflight off")
    assert qualifies(section(), job()) == (True, "4 nodes")
    assert qualifies(section(), job("n1"))[0] is False
    assert qualifies(section(min_nodes=8), job(num=8)) == (True, "8 nodes")  # slurmd's count
    assert qualifies(section(min_nodes=5), job())[1] == "4 node(s) < min_nodes 5"
    assert qualifies(section(partitions=["big"]), job())[1] == "partition gpu not in big"
    assert qualifies(section(partitions=["big", "gpu"]), job())[0] is True
    # A QOS filter never matches a job whose prolog was not told its QOS.
    assert qualifies(section(qos=["high"]), job())[0] is False
    assert qualifies(section(qos=["high"]), job(qos="high"))[0] is True


def test_policy_opt_in_by_feature_or_comment():
    s = section(opt_in_feature="preflight", opt_in_comment="preflight")
    assert qualifies(s, job())[1] == "the job did not opt in"
    assert qualifies(s, job(constraints="a100&preflight"))[0] is True
    assert qualifies(s, job(constraints="preflightX"))[0] is False
    assert qualifies(s, job(comment="run preflight please"))[0] is True
    assert qualifies(section(opt_in_feature="ib"), job(comment="ib"))[0] is False


def test_preflight_section_is_validated_at_load():
    for bad, key in [({"min_nodes": 1}, "min_nodes"), ({"budget": 10}, "budget"),
                     ({"round_timeout": 0}, "round_timeout"),
                     ({"partitions": ["a b"]}, "partitions"),
                     ({"opt_in_comment": "two words"}, "opt_in_comment"),
                     ({"on_inconclusive": "pause"}, "on_inconclusive"),
                     ({"level": "gemm"}, "level")]:
        with pytest.raises(config_mod.ConfigError, match=rf"\[preflight\] {key}"):
            config_mod.from_dict({"preflight": bad})


# --- plan -------------------------------------------------------------------------------------
def test_every_member_plans_the_same_meeting_and_leader():
    plans = [make_plan("42", "n[3,1-2]", me) for me in ("n1", "n2", "n3")]
    assert {p.leader for p in plans} == {"n3"}  # the allocation's first node, as Slurm lists it
    assert {p.batch_id for p in plans} == {plans[0].batch_id}
    assert valid_batch_id(plans[0].batch_id) and plans[0].members == ["n3", "n1", "n2"]
    assert [p.leading for p in plans] == [False, False, True]
    # Requeued (onto other nodes or the same): a fresh meeting.
    assert make_plan("42", "n[1-2,4]", "n1").batch_id != plans[0].batch_id
    assert make_plan("42", "n[3,1-2]", "n1", restarts="1").batch_id != plans[0].batch_id


def test_plan_refuses_what_it_cannot_trust():
    with pytest.raises(PlanError):
        make_plan("42", "n[1-2]", "n1", restarts="x")
    for args in [("x1", "n[1-2]", "n1"), ("42", "n[1-2]", "n9"), ("42", "n[1-", "n1"),
                 ("42", "n1,../x", "n1")]:
        with pytest.raises(PlanError):
            make_plan(*args)


# --- judge and record -------------------------------------------------------------------------
def test_judge_known_answers():
    bad = {"bad": ["n2"], "good": [], "inconclusive": [], "details": {"n2": "rank 1 sent wrong"}}
    assert judge_mod.judge("n2", bad) == ("culprit", "rank 1 sent wrong")
    good = {"bad": [], "good": ["n1"], "inconclusive": [], "details": {}}
    assert judge_mod.judge("n1", good) == ("pass", "")
    unsure = {"bad": [], "good": [], "inconclusive": ["n3"], "details": {"n3": "timeout"}}
    assert judge_mod.judge("n3", unsure) == ("inconclusive", "timeout")
    assert judge_mod.judge("n1", None).kind == "inconclusive"
    assert judge_mod.judge("n1", good, missed="n4 never arrived") == \
        ("inconclusive", "no meeting: n4 never arrived")
    assert [judge_mod.rc_of(judge_mod.Decision(k, "")) for k in ("pass", "culprit",
                                                                 "inconclusive")] == [0, 1, 0]


def test_run_document_is_a_valid_run_with_timings_and_totals():
    d = judge_mod.Decision("culprit", "rank 1 (n2) sent wrong data")
    totals = record.add_totals({"runs": 3, "culprits": 0, "inconclusive": 1,
                                "seconds_added": 10.0}, d, 2.5)
    assert totals == {"runs": 4, "culprits": 1, "inconclusive": 1, "seconds_added": 12.5}
    assert record.add_totals("garbage", d, 1)["runs"] == 1
    plan = make_plan("42", "n[1-3]", "n2")
    doc = record.run_document("n2", plan, "42", d, {"rendezvous": 1.0, "collective": 3.0,
                                                    "judging": 0.1, "added": 4.1},
                              time.time(), totals, results.new_run_id("n2"))
    assert results.run_problem(doc, "n2") == ""
    assert (doc["level"], doc["verdict"], doc["failed_check"]) == ("preflight", "fail",
                                                                   "preflight")
    figs = doc["checks"][0]["figures"]
    assert (figs["added_s"], figs["culprits_total"], figs["members"]) == (4.1, 1, 3)


# --- the meeting, in a real shared directory --------------------------------------------------
def _meet(root, plan, by, out, delay=0.0):
    time.sleep(delay)
    try:
        out[plan.me] = Meeting(root, plan, "127.0.0.1", time.time(), by, lambda m: None).gather()
    except Missed as exc:
        out[plan.me] = str(exc)


def test_members_meet_and_agree_on_one_document(tmp_path):
    by = time.monotonic() + 10
    out: dict = {}
    threads = [threading.Thread(target=_meet, args=(tmp_path, make_plan("42", "n[1-3]", me),
                                                    by, out, 0.3 * i))
               for i, me in enumerate(("n2", "n3", "n1"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    docs = list(out.values())
    assert all(isinstance(d, dict) for d in docs), out
    assert docs[0] == docs[1] == docs[2] and docs[0]["members"] == ["n1", "n2", "n3"]
    folder = tmp_path / ".batches" / docs[0]["batch"]
    assert (folder.stat().st_mode & 0o777, (folder / "secret").stat().st_mode & 0o777) == \
        (0o700, 0o600)


def test_a_late_member_leaves_everyone_without_a_meeting(tmp_path):
    by = time.monotonic() + 1.0
    out: dict = {}
    threads = [threading.Thread(target=_meet, args=(tmp_path, make_plan("42", "n[1-3]", me),
                                                    by, out)) for me in ("n1", "n2")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert out == {"n1": "1 member(s) never arrived: n3",
                   "n2": "the leader n1 never formed the meeting"}


def test_a_members_document_is_taken_only_for_this_meeting():
    plan = make_plan("42", "n[1-2]", "n2")
    doc = {"batch": plan.batch_id, "leader": "n1", "members": ["n1", "n2"],
           "addrs": {"n1": "127.0.0.1", "n2": "127.0.0.1"}, "time": 100.0}
    assert members_problem(doc, plan, 50.0) == ""
    assert members_problem(doc, plan, 150.0) == "an earlier meeting's"
    assert "differ from the job's allocation" in members_problem(
        {**doc, "members": ["n1", "n9"], "addrs": {"n1": "127.0.0.1", "n9": "127.0.0.1"}},
        plan, 50.0)
    assert members_problem({**doc, "leader": "n2"}, plan, 50.0)


# --- the real prolog --------------------------------------------------------------------------
PREFLIGHT = "[preflight]\nenabled = true\nrendezvous_timeout = 1.0\nround_timeout = 5.0\n"
PROBE = ("import sys, json; from airlock.hooks import prolog; rc = prolog.main(); "
         "print(json.dumps([rc, sorted(m for m in sys.modules if m in ('torch', 'click', "
         "'hostlist', 'airlock.slurm.client', 'airlock.groups.batch', "
         "'airlock.preflight.meet'))]))")


def _prolog(node, **env):
    out = subprocess.run([sys.executable, "-c", PROBE], env=node.env("prolog", job="7", **env),
                         cwd=node.root, capture_output=True, text=True, timeout=90)
    return json.loads(out.stdout.strip().splitlines()[-1]), out.stderr


def test_a_job_that_does_not_qualify_pays_nothing(fake_node):
    node = fake_node(extra=PREFLIGHT)
    node.prove()
    (rc, loaded), err = _prolog(node, SLURM_NODELIST="n1", SLURM_JOB_NUM_NODES="1")
    assert (rc, loaded) == (0, []), err
    assert node.slurm.calls() == []  # no Slurm call
    assert not (node.root / "state" / "latest-preflight.json").exists()


def test_a_preflight_that_never_met_drains_no_one_and_the_job_runs(fake_node, tmp_path):
    node = fake_node(extra=PREFLIGHT)
    node.conf.write_text(f'shared_dir = "{tmp_path}/shared"\n' + node.conf.read_text())
    node.prove()
    (rc, loaded), err = _prolog(node, SLURM_NODELIST="n[1-2]", SLURM_JOB_NUM_NODES="2")
    assert rc == 0 and "torch" not in loaded, err
    assert node.slurm.updates() == []  # no drain
    run = json.loads((node.root / "state" / "latest-preflight.json").read_text())
    assert (run["verdict"], run["unseen"]) == ("error", ["preflight"])
    assert run["detail"] == "no meeting: 1 member(s) never arrived: n2"
    assert "preflight did not see job 7" in node.log("prolog")


# --- doctor -----------------------------------------------------------------------------------
def test_doctor_names_the_slurm_lines_a_preflight_needs():
    from airlock.preflight import doctor

    off = config_mod.from_dict({})
    assert doctor.items({"PrologFlags": "(null)"}, off) == []  # nothing while it is off
    on = config_mod.from_dict({"preflight": {"enabled": True}})  # budget 90 + prolog 10 + 8
    got = doctor.items({"PrologFlags": "(null)", "PrologEpilogTimeout": "60"}, on)
    assert [(s, n) for s, n, _ in got] == [("FAIL", "PrologFlags"), ("WARN", "preflight budget")]
    got = doctor.items({"PrologFlags": "Contain,X11", "PrologEpilogTimeout": "120"}, on)
    assert [s for s, _n, _d in got] == ["OK", "OK"]
    assert doctor.items({"PrologFlags": "Alloc", "PrologEpilogTimeout": "65534"}, on)[1][0] == "OK"


def test_old_meeting_folders_are_swept_and_nothing_else(tmp_path):
    import os

    from airlock.preflight.meet import sweep

    old = make_plan("41", "n[1-2]", "n1").batch_id
    fresh = make_plan("42", "n[1-2]", "n1").batch_id
    for name in (old, fresh, "batch-100-node1"):  # the last: a registration batch
        (tmp_path / ".batches" / name).mkdir(parents=True)
        (tmp_path / ".batches" / name / "members.json").write_text("{}")
    os.utime(tmp_path / ".batches" / old, (0, time.time() - 7 * 3600))
    os.utime(tmp_path / ".batches" / "batch-100-node1", (0, 0))
    assert sweep(tmp_path) == [old]
    assert sorted(p.name for p in (tmp_path / ".batches").iterdir()) == \
        sorted(["batch-100-node1", fresh])


def test_a_culprit_is_drained_even_when_its_totals_cannot_be_kept(fake_node, tmp_path,
                                                                  monkeypatch):
    """The meeting and the rounds are replaced by their outcome (they have tests of their own,
    and the cluster tests run them for real); the rest is the prolog's: its Hook, the drain
    through airlock.slurm.drains to a (fake) scontrol."""
    from airlock.hooks.common import Hook
    from airlock.preflight import entry

    node = fake_node(extra=PREFLIGHT)
    node.conf.write_text(f'shared_dir = "{tmp_path}/shared"\n' + node.conf.read_text())
    (node.root / "state" / "preflight-totals.json").mkdir(parents=True)  # cannot be written
    monkeypatch.setenv("AIRLOCK_CONFIG", str(node.conf))
    hook = Hook("prolog", "n1", job="7")
    hook.load_config()
    monkeypatch.setattr(Meeting, "gather", lambda self: {"members": ["n1", "n2"]})
    monkeypatch.setattr(entry, "_rounds", lambda *a, **k: {
        "bad": ["n1"], "good": [], "inconclusive": [],
        "details": {"n1": "rank 0 (n1) sent wrong data at 1 MiB"}})
    rc, msg = entry.run(hook, Job("7", "n[1-2]", 2, "main", "", "", ""))
    assert rc == 1, msg
    drains = [u for u in node.slurm.updates() if "state=drain" in u]
    assert drains and drains[-1][-1] == \
        "reason=airlock: FAIL preflight rank 0 (n1) sent wrong data at 1 MiB (job 7)", drains


def test_the_members_that_passed_learn_the_culprits_only_from_this_meeting_s_verdict(tmp_path):
    plan = make_plan("42", "n[1-3]", "n1")
    m = Meeting(tmp_path, plan, "127.0.0.1", time.time(), time.monotonic() + 5, lambda s: None)
    folder = tmp_path / ".batches" / plan.batch_id
    folder.mkdir(parents=True)
    assert m.culprits() == []  # no verdict yet
    (folder / "verdict.json").write_text(json.dumps(
        {"bad": ["n3"], "good": ["n1", "n2"], "inconclusive": [], "details": {}}))
    assert m.culprits() == ["n3"]
    (folder / "verdict.json").write_text(json.dumps(
        {"bad": ["n9"], "good": [], "inconclusive": [], "details": {}}))
    assert m.culprits() == []  # blames a node outside the allocation: not this meeting's


# --- the GEMM level ---------------------------------------------------------------------------
def test_gemm_judge_known_answers():
    """Only the node's own wrong result (or a GPU below its floor: the burn-in's FAIL) is a
    culprit; a CPU stand-in below its floor is the burn-in's WARN and passes; a GEMM cut short
    by the preflight's budget or never run is inconclusive."""
    g = judge_mod.judge_gemm
    assert g("fail", "cpu1 fp32 checksum off by 3.1e+00 at (1, 1)") == judge_mod.Decision(
        judge_mod.CULPRIT, "gemm cpu1 fp32 checksum off by 3.1e+00 at (1, 1)")
    assert g("fail", "timeout after 12s", timed_out=True).kind == judge_mod.INCONCLUSIVE
    assert g("warn", "cpu0 fp32 0.01 TFLOPS < floor 0.05") == judge_mod.Decision(
        judge_mod.PASS, "gemm warning: cpu0 fp32 0.01 TFLOPS < floor 0.05")
    assert g("pass", "8 devices") == judge_mod.Decision(judge_mod.PASS, "")
    assert g("error", "not measured: could not start its process").kind == \
        judge_mod.INCONCLUSIVE


def test_gemm_and_collective_combine():
    D, c = judge_mod.Decision, judge_mod.combine
    culprit, unseen = D(judge_mod.CULPRIT, "gemm x"), D(judge_mod.INCONCLUSIVE, "gemm y")
    ok, warn = D(judge_mod.PASS, ""), D(judge_mod.PASS, "gemm warning: slow")
    bad = D(judge_mod.CULPRIT, "rank 0 sent wrong data")
    assert c(culprit, ok) == culprit and c(culprit, unseen) == culprit
    assert c(unseen, ok) == unseen  # a pass that did not see the GPUs is not a pass
    assert c(ok, bad) == bad and c(unseen, bad) == bad
    assert c(warn, ok) == warn and c(ok, ok) == ok


def test_the_preflight_gemm_is_short_and_one_dtype():
    from airlock.checks.burnin import PREFLIGHT, PREFLIGHT_GPU_S
    from airlock.checks.burnin import make_plan as burnin_plan

    cfg = config_mod.from_dict({"burnin": {"dtypes": ["bf16", "fp16"], "duration": 30}}).burnin
    gpu = burnin_plan(cfg, True, PREFLIGHT)
    assert (gpu.dtypes, gpu.duration) == (["bf16"], PREFLIGHT_GPU_S)
    assert burnin_plan(cfg, True, "standard").dtypes == ["bf16", "fp16"]
    cpu = burnin_plan(cfg, False, PREFLIGHT)
    assert cpu.dtypes == ["bf16"] and cpu.iterations == cfg.cpu_iterations


def test_a_member_whose_gemm_failed_ends_the_others_wait(tmp_path):
    """Its note in the meeting folder stops the leader and a follower at once (not at the
    rendezvous timeout), and names it as the member the job must be kept from; an earlier
    meeting's note, or another node's in its name, counts for nothing."""
    started = time.time()
    by = time.monotonic() + 30
    m3 = Meeting(tmp_path, make_plan("42", "n[1-3]", "n3"), "", started, by, lambda s: None)
    m3.report_gemm("cpu0 fp32 checksum off by 1e+00 at (1, 1)")
    out: dict = {}
    threads = [threading.Thread(target=_meet, args=(tmp_path, make_plan("42", "n[1-3]", me),
                                                    by, out)) for me in ("n1", "n2")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # (at the rendezvous timeout they would say "never arrived" / "never formed")
    assert out == {"n1": "n3 failed its GEMM", "n2": "n3 failed its GEMM"}
    m1 = Meeting(tmp_path, make_plan("42", "n[1-3]", "n1"), "", started, by, lambda s: None)
    assert m1.gemm_failed() == ["n3"]
    folder = tmp_path / ".batches" / m1.plan.batch_id
    late = Meeting(tmp_path, make_plan("42", "n[1-3]", "n1"), "", time.time() + 60,
                   time.monotonic(), lambda s: None)
    assert late.gemm_failed() == []  # an earlier meeting's
    (folder / "gemm-n2.json").write_text(json.dumps(
        {"node": "n3", "detail": "x", "time": time.time()}))
    assert m1.gemm_failed() == ["n3"]  # n2's file naming n3 is not n2's failure


# --- the QOS filter ---------------------------------------------------------------------------
def test_only_a_job_that_passes_every_other_filter_needs_its_qos_asked():
    from airlock.preflight.policy import needs_qos

    sec = section(qos=["high"], partitions=["gpu"])
    assert needs_qos(sec, job()) is True  # 22.05/24.11: the prolog is not told
    assert needs_qos(sec, job(qos="low")) is False  # 26.05: told, nothing to ask
    assert needs_qos(sec, job("n1")) is False  # too small: no Slurm call
    assert needs_qos(sec, job(partition="cpu")) is False
    assert needs_qos(section(), job()) is False  # no qos filter


def test_qos_of_scontrol_show_job():
    from airlock.preflight.policy import qos_of

    line = "JobId=7 JobName=wrap UserId=root(0) Priority=1 Nice=0 Account=(null) QOS=high " \
           "JobState=CONFIGURING"
    assert qos_of(line) == "high"
    assert qos_of("JobId=7 QOS=(null) JobState=RUNNING") == ""
    assert qos_of("slurm_load_jobs error: Invalid job id specified") == ""


class _Slurm:
    def __init__(self, answer):
        self.answer, self.calls = answer, []

    def scontrol(self, *args):
        from airlock.errors import SlurmError

        self.calls.append(args)
        if isinstance(self.answer, Exception):
            raise SlurmError(str(self.answer))
        return self.answer


class _Hook:
    def __init__(self, cfg, answer):
        self.cfg, self.node, self.slurm_ = cfg, "n1", _Slurm(answer)

    def slurm(self):
        return self.slurm_


def test_a_qos_filter_asks_slurmctld_once_where_the_prolog_is_not_told(monkeypatch):
    """Before 26.05 the prolog has no SLURM_JOB_QOS: a job that passes every other filter has
    its QOS asked once; a QOS outside the filter, or one slurmctld does not tell, is no
    preflight (and no drain); a job told its QOS, or too small, costs no call."""
    from airlock.preflight import entry

    ran = []
    monkeypatch.setattr(entry, "run", lambda hook, j: (ran.append(j.qos), (0, "ran"))[1])
    cfg = config_mod.from_dict({"preflight": {"enabled": True, "qos": ["high"]}})
    env = {"SLURM_JOB_ID": "7", "SLURM_NODELIST": "n[1-2]", "SLURM_JOB_NUM_NODES": "2"}
    hook = _Hook(cfg, "JobId=7 QOS=high JobState=CONFIGURING")
    assert entry.in_prolog(hook, "quick pass", env) == (0, "quick pass; ran")
    assert ran == ["high"] and hook.slurm_.calls == [("-o", "show", "job", "7")]
    hook = _Hook(cfg, "JobId=7 QOS=normal JobState=CONFIGURING")
    assert entry.in_prolog(hook, "quick pass", env) == (0, "quick pass")
    hook = _Hook(cfg, RuntimeError("Unable to contact slurm controller"))
    rc, msg = entry.in_prolog(hook, "quick pass", env)
    assert rc == 0 and "its QOS is unknown (Unable to contact slurm controller)" in msg
    hook = _Hook(cfg, RuntimeError("must not be asked"))
    assert entry.in_prolog(hook, "quick pass", {**env, "SLURM_JOB_QOS": "high"}) == \
        (0, "quick pass; ran")
    assert entry.in_prolog(hook, "quick pass", {**env, "SLURM_NODELIST": "n1",
                                                "SLURM_JOB_NUM_NODES": "1"}) == (0, "quick pass")
    assert hook.slurm_.calls == [] and ran == ["high", "high"]


def test_doctor_says_per_release_what_a_qos_filter_costs():
    from airlock.preflight import doctor

    cfg = config_mod.from_dict({"preflight": {"enabled": True, "qos": ["high"]}})
    conf = {"PrologFlags": "Alloc", "PrologEpilogTimeout": "300"}
    for version, said in [("22.05.8", "does not give"), ("24.11.5", "does not give"),
                          ("26.05.5", "gives the prolog SLURM_JOB_QOS")]:
        got = doctor.items({**conf, "SLURM_VERSION": version}, cfg)
        assert got[-1][1] == "preflight qos" and said in got[-1][2], (version, got)
    assert all(n != "preflight qos" for _s, n, _d in doctor.items(
        {**conf, "SLURM_VERSION": "22.05.8"}, config_mod.from_dict({"preflight": {
            "enabled": True}})))
