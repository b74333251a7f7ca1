"""Registration batches (airlock/groups/batch.py) with real Batch objects coordinating through a
real
shared directory, one thread per node; the all-reduce itself is a stand-in (a function that
answers each round), except in the suite test, which runs the real registration suite against
a fake Slurm (tests/unit/fakeslurm.py) and a real all-reduce launcher.

Issue 17: a whole-round timeout is no verdict on the round's members; a member fails only on its
own failing result, in rounds with members Slurm knows; the group rounds end within the suite's
own deadline."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from airlock.checks import groupcheck
from airlock.config import loader as config
from airlock.dev.cluster import healthy_gpus
from airlock.groups.batch import Batch
from airlock.hw import boot
from airlock.records import proof as nodestate
from tests.unit.fakeslurm import FakeSlurm

TIMEOUT_AS_A_WHOLE = {"ok": False, "inconclusive": True,
                      "detail": "timeout after 2s (all ranks stuck at verify 256K)"}
PASS = {"ok": True, "detail": "busbw 0.5 GB/s at 1M, 4 ranks", "figures": {}}


def known_all(names):
    return set(names)


def make(tmp_path, node, seen, window=0.4, round_timeout=3.0, known=known_all, **kw):
    b = Batch(tmp_path / "shared", node, "127.0.0.1", window, round_timeout,
              report=lambda msg, n=node: seen.append(f"{n}: {msg}"), **kw)
    b.known = known  # set as an attribute: what Slurm lists (the suite asks Slurm)
    return b


def run_window(tmp_path, names, answer, **kw):
    """Every node arrives (the first one first, so it leads), forms and runs the batch; each
    node's answer to a round is answer(node, nodes). Returns {node: verdict}, the reports."""
    seen: list[str] = []
    batches = {n: make(tmp_path, n, seen, **kw) for n in names}
    for n in names:
        batches[n].arrive(f"20260101T000000-1-{n}")
        time.sleep(0.02)
    verdicts: dict[str, dict] = {}

    def one(n):
        doc = batches[n].form()
        assert doc is not None, f"{n} was not batched"
        verdicts[n] = batches[n].run(doc, lambda nodes, *rest, n=n: dict(answer(n, nodes)))

    threads = [threading.Thread(target=one, args=(n,)) for n in names]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    return verdicts, seen


def rounds_run(tmp_path) -> list[list[str]]:
    root = tmp_path / "shared" / ".batches"
    out = []
    for folder in root.iterdir():
        if folder.name.startswith("batch-"):
            for f in sorted(folder.glob("round-*.json"),
                            key=lambda p: int(p.stem.split("-")[1])):
                out.append(json.loads(f.read_text())["nodes"])
    return out


# --- (d) a round that times out as a whole blames nobody -----------------------------------------
def test_a_round_that_times_out_as_a_whole_blames_nobody_and_is_retried_smaller(tmp_path):
    """Every member of a round with ccc in it reports a timeout with every rank stuck in the same
    collective (the whole round timed out: an overloaded machine, a slow fabric): no verdict on
    anyone. main read each such round as a failure, bisected down to [ccc, aaa], failed that
    pairing twice and drained ccc as FAIL group_allreduce."""
    names = ["aaa", "bbb", "ccc", "ddd"]
    verdicts, _ = run_window(tmp_path, names,
                             lambda n, nodes: TIMEOUT_AS_A_WHOLE if "ccc" in nodes else PASS)
    for n in names:
        assert n not in verdicts[n]["bad"], (n, verdicts[n])
    assert "ccc" in verdicts["ccc"]["inconclusive"]
    for n in ("aaa", "bbb", "ddd"):
        assert n in verdicts[n]["good"], (n, verdicts[n])
    with_ccc = [r for r in rounds_run(tmp_path) if "ccc" in r]
    assert len(with_ccc[0]) == 4 and min(len(r) for r in with_ccc) == 2  # retried smaller


def report(node, offset, progress, world=4, timed_out=True, **kw):
    """A launcher's report (airlock.collective.launch) for one rank at offset."""
    return {"node": node, "rank_offset": offset, "local_ranks": 1, "world_size": world,
            "backend": "gloo", "timeout": 2.0, "ranks": [], "errors": {}, "timed_out": timed_out,
            "progress": progress, "leftover": [], **kw}


def test_a_member_judges_a_timeout_with_its_ranks_waiting_on_the_others_inconclusive():
    """main answered every timeout as a failure of the member, whatever its ranks were doing."""
    waiting = groupcheck.judge(report("bbb", 1, {"1": [2, "verify 4K"]}), 3, "", 0, 0.5, 2)
    assert waiting["ok"] is False and waiting.get("inconclusive") is True, waiting
    # the host sees every rank: the others are behind, not its own
    host = groupcheck.judge(report("aaa", 0, {"0": [2, "verify 4K"], "1": [2, "verify 4K"],
                                              "2": [0, "connected"], "3": [2, "verify 4K"]}),
                            3, "", 0, 0.5, 2)
    assert host.get("inconclusive") is True and "rank 2" in host["detail"], host
    never = groupcheck.judge(None, -signal.SIGKILL, "", 0, 0.5, 2)
    assert never.get("inconclusive") is True, never
    never_met = "rendezvous: the group's host 10.0.0.1:29500 never answered"
    refused = groupcheck.judge(report("bbb", 1, {}, timed_out=False, errors={"1": never_met},
                                      unmeasured=never_met), 1, "", 0, 0.5, 2)
    assert refused.get("inconclusive") is True, refused


def test_a_member_whose_own_rank_is_stuck_fails():
    """A rank that joined the group and never reached its first collective is stuck in its
    own node (group_hang); so is a host's rank that every other rank is waiting for."""
    stuck = groupcheck.judge(report("ccc", 2, {"2": [1, "joined"]}), 3, "", 0, 0.5, 2)
    assert stuck["ok"] is False and not stuck["inconclusive"], stuck
    host = groupcheck.judge(report("aaa", 0, {"0": [0, "connected"], "1": [2, "verify 4K"],
                                              "2": [2, "verify 4K"], "3": [2, "verify 4K"]}),
                            3, "", 0, 0.5, 2)
    assert not host["inconclusive"] and "rank 0 (aaa)" in host["detail"], host
    wrong = groupcheck.judge(report("ccc", 2, {}, timed_out=False, ranks=[{
        "rank": 2, "verify": [{"bytes": 4096, "sent_bad": 1, "sent_first": 3, "bad": 0}],
        "sizes": []}]), 1, "", 0, 0.5, 2)
    assert not wrong["ok"] and not wrong["inconclusive"] and "sent wrong data" in wrong["detail"]


# --- (b) a forged verdict fails nobody ------------------------------------------------------------
def plant(tmp_path, rel: str, doc) -> Path:
    path = tmp_path / "shared" / ".batches" / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc))
    return path


def members(names):
    return {"batch": "batch-1-aaa", "leader": "aaa", "members": names,
            "addrs": {n: "127.0.0.1" for n in names}}


def test_a_verdict_naming_nodes_slurm_does_not_list_is_ignored_and_named(tmp_path):
    """A verdict.json (written by root on another node) blames bbb in a batch with a ghost
    member. main took the leader's verdict as bbb's own FAIL group_allreduce."""
    seen: list[str] = []
    me = make(tmp_path, "bbb", seen, known=lambda names: set(names) - {"ghost1"})
    doc = members(["aaa", "bbb", "ghost1"])
    plant(tmp_path, "batch-1-aaa/members.json", doc)
    plant(tmp_path, "batch-1-aaa/verdict.json",
          {"bad": ["bbb"], "good": ["aaa", "ghost1"], "inconclusive": [],
           "details": {"bbb": "rank 1 (bbb) sent wrong data at 1M"}})
    verdict = me.run(doc, lambda *a: pytest.fail("no round was announced"))
    assert "bbb" not in verdict["bad"] and "bbb" in verdict["inconclusive"], verdict
    assert any("ghost1" in s for s in seen), seen


def test_a_verdict_blaming_a_member_without_a_failing_result_of_its_own_fails_nobody(tmp_path):
    """Every member is a real node, but bbb never took part in a round that failed (here: in no
    round at all). main failed bbb on the leader's word."""
    seen: list[str] = []
    me = make(tmp_path, "bbb", seen)
    doc = members(["aaa", "bbb"])
    plant(tmp_path, "batch-1-aaa/members.json", doc)
    plant(tmp_path, "batch-1-aaa/verdict.json",
          {"bad": ["bbb"], "good": ["aaa"], "inconclusive": [], "details": {}})
    verdict = me.run(doc, lambda *a: pytest.fail("no round was announced"))
    assert "bbb" not in verdict["bad"] and "bbb" in verdict["inconclusive"], verdict
    assert any("no failing result of its own" in s for s in seen), seen


def test_a_member_blamed_on_its_own_failing_result_fails(tmp_path):
    """The other side: bbb took part in a round with known nodes, its own launcher saw its own
    rank send wrong data, and the leader's verdict blames it: bbb fails, in its own words."""
    seen: list[str] = []
    me = make(tmp_path, "bbb", seen)
    doc = members(["aaa", "bbb"])
    plant(tmp_path, "batch-1-aaa/members.json", doc)
    plant(tmp_path, "batch-1-aaa/round-1.json", {"nodes": ["aaa", "bbb"], "port": 29600})
    own = {"ok": False, "detail": "rank 1 (bbb) sent wrong data at 1M (1 elements, first 9)"}

    def leader():
        result = tmp_path / "shared" / ".batches" / "batch-1-aaa" / "result-1-bbb.json"
        end = time.monotonic() + 30
        while not result.exists() and time.monotonic() < end:
            time.sleep(0.05)
        plant(tmp_path, "batch-1-aaa/verdict.json",
              {"bad": ["bbb"], "good": ["aaa"], "inconclusive": [], "details": {}})

    t = threading.Thread(target=leader)
    t.start()
    verdict = me.run(doc, lambda *a: dict(own))
    t.join()
    assert verdict["bad"] == ["bbb"], verdict
    assert verdict["details"]["bbb"] == own["detail"]


# --- (a) the group rounds count in the suite's deadline -------------------------------------------
GRACE_S = 60.0  # hooks/gate.py: the hook kills a suite this long past suite_timeout


def test_group_rounds_end_within_the_suite_deadline(tmp_path):
    """The real registration suite (quick level, simulated GPUs, a fake Slurm that lists the
    four nodes) leads a batch whose other members never answer. main drove the culprit search
    round after round (each round_timeout + 30 s) far past suite_timeout: the hook kills such a
    suite at suite_timeout + 60 s and fails the node. Now the rounds end by the suite's
    deadline, the group test is inconclusive (Verdict.ERROR) and the run is "error", Airlock's
    own trouble: never a FAIL of the node."""
    names = ["aaa", "bbb", "ccc", "ddd"]
    slurm = FakeSlurm(tmp_path / "slurm", nodes=names, flags=["DRAIN"],
                      reason="airlock: pending quick check new")
    sim = tmp_path / "gpus.json"
    sim.write_text(json.dumps({"nodes": {n: {"gpus": healthy_gpus(8)} for n in names}}))
    suite_timeout = 12.0
    conf = tmp_path / "airlock.toml"
    conf.write_text(
        f'state_dir = "{tmp_path}/state/{{node}}"\nlog_dir = "{tmp_path}/log/{{node}}"\n'
        f'shared_dir = "{tmp_path}/shared"\n'
        f'[slurm]\nbin_dir = "{slurm.bin_dir}"\n[nvml]\nsimulate = "{sim}"\n'
        f'[registration]\nlevel = "quick"\nsuite_timeout = {suite_timeout}\n'
        f'group_window = 1.0\ngroup_timeout = 3.0\n'
        f'[allreduce]\ncpu_sizes_kib = [4]\ncpu_iters = 1\ncpu_warmup = 0\n')
    cfg = config.load(conf)
    run_id = "20260101T000000-1-aaa"
    state = nodestate.NodeState(cfg, "aaa")
    state.start(run_id, boot.current("aaa"), os.getpid(), "quick", "new")
    env = {**os.environ, "AIRLOCK_CONFIG": str(conf),
           "AIRLOCK_RUNTIME_DIR": str(tmp_path / "run")}
    proc = subprocess.Popen([sys.executable, "-m", "airlock.registration", "--node", "aaa",
                             "--run-id", run_id, "--trigger", "new"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    arrivals = tmp_path / "shared" / ".batches" / "arrivals"
    end = time.monotonic() + 60
    while not (arrivals / "aaa.json").exists() and time.monotonic() < end:
        time.sleep(0.05)
    ours = json.loads((arrivals / "aaa.json").read_text())["time"]
    for i, n in enumerate(names[1:]):  # three more nodes arrive just after: aaa leads
        (arrivals / f"{n}.json").write_text(json.dumps(
            {"node": n, "addr": "127.0.0.1", "time": ours + 0.01 * (i + 1), "run_id": "x"}))
    t0 = time.monotonic()
    try:
        out, _ = proc.communicate(timeout=suite_timeout + GRACE_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
        pytest.fail(f"the suite outlived suite_timeout + {GRACE_S:g} s after its checks "
                    f"({time.monotonic() - t0:.0f} s): the hook would kill it and fail the "
                    f"node\n{out[-3000:]}")
    record = state.load()
    assert record["verdict"] == "error", (record, out[-3000:])
    run = json.loads((tmp_path / "state" / "aaa" / "latest.json").read_text())
    group = [c for c in run["checks"] if c["check"] == "group_allreduce"]
    assert group and group[0]["verdict"] == "error", run["checks"]
    drains = slurm.updates()
    assert drains and "reason=airlock: FAIL suite not seen: group_allreduce" in drains[-1][-1], \
        drains


def test_exactly_group_max_arrivals_form_one_group_and_one_more_splits(tmp_path):
    """Issue 25 item 11: the boundary of [registration] group_max. A window of exactly group_max
    nodes is one batch, and its leader reads no topology (a Slurm call it does not need); one
    node more is cut into groups of at most group_max, along the topology."""
    for names, groups, asked in ((["aaa", "bbb", "ccc"], [["aaa", "bbb", "ccc"]], 0),
                                 (["aaa", "bbb", "ccc", "ddd"], [["aaa", "bbb"], ["ccc", "ddd"]],
                                  1)):
        root = tmp_path / f"w{len(names)}"
        seen: list[str] = []
        reads: list[int] = []

        def topology(names=names, reads=reads):
            reads.append(1)
            return [names[:2], names[2:]]

        batches = {n: make(root, n, seen, group_max=3, topology=topology) for n in names}
        for n in names:
            batches[n].arrive(f"20260101T000000-1-{n}")
            time.sleep(0.02)
        leader = batches[names[0]]
        assert leader.form() is not None
        assert [sorted(g["members"]) for g in leader.groups] == groups, seen
        assert len(reads) == asked, seen


def test_a_leader_that_announced_itself_and_died_is_taken_over(tmp_path, monkeypatch):
    """Issue 25 item 3: aaa arrived first and died before assigning anyone. Its arrival stayed
    first in every member's list, so the take-over never ran: bbb and ccc each gave up and
    passed alone, with no group all-reduce. Once the leader is overdue (its window and a grace
    past it), the first live arrival leads the rest, without the dead one."""
    from airlock.groups import batch as batch_mod

    monkeypatch.setattr(batch_mod, "LEAD_GRACE_S", 1.0, raising=False)
    seen: list[str] = []
    names = ["aaa", "bbb", "ccc"]
    batches = {n: make(tmp_path, n, seen) for n in names}
    for n in names:
        batches[n].arrive(f"20260101T000000-1-{n}")
        time.sleep(0.02)
    formed: dict[str, dict | None] = {}
    threads = [threading.Thread(target=lambda n=n: formed.__setitem__(n, batches[n].form()))
               for n in ("bbb", "ccc")]  # aaa never forms: it died
    started = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert formed["bbb"] is not None and formed["ccc"] is not None, seen
    assert formed["bbb"]["leader"] == "bbb" and formed["ccc"]["batch"] == formed["bbb"]["batch"]
    assert sorted(formed["bbb"]["members"]) == ["bbb", "ccc"]
    assert time.monotonic() - started < 10, "the take-over waited out the whole wait"
