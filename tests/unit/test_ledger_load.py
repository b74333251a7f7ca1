"""The ledger's reading side (airlock/ledger/load.py) against a real results store, a real
recovery database and a Slurm without slurmdbd: gaps and a missing slurmdbd are one line."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from airlock.config import loader as config
from airlock.ledger import load
from airlock.ledger.history import History
from airlock.records.results import KEEP, ResultStore
from airlock.recovery.store import RecoveryStore
from airlock.slurm.client import Slurm

DOCS = Path(__file__).resolve().parents[2] / "docs"
T0 = 1_800_000_000.0


def _cfg(tmp_path, **ledger):
    return config.from_dict({"state_dir": str(tmp_path / "state" / "{node}"),
                             "recovery": {"db": str(tmp_path / "recovery.db")},
                             "ledger": ledger})


def _write(cfg, node, count, first, step=60.0, verdict="fail"):
    store = ResultStore(cfg, node)
    for i in range(count):
        at = first + i * step
        store.write({"node": node, "run_id": f"20270115T08{i // 60:02d}{i % 60:02d}-1-{node}",
                     "level": "quick", "trigger": "periodic", "started_at": at - 1,
                     "finished_at": at, "duration_s": 1.0, "verdict": verdict,
                     "failed_check": "nvml", "detail": "x", "checks": []})


def test_a_history_pruned_inside_the_window_is_a_gap_named_in_one_line(tmp_path):
    cfg = _cfg(tmp_path)
    _write(cfg, "n1", KEEP + 5, T0)
    h = History(T0 - 86400, T0 + 86400, nodes={"n1": None})
    with pytest.raises(load.HistoryGap) as exc:
        load._results(cfg, h)
    msg = str(exc.value)
    assert msg.startswith("the history of n1 has a gap") and "--since" in msg and "\n" not in msg
    # a window inside what is kept is no gap
    h = History(T0 + 5 * 60, T0 + 86400, nodes={"n1": None})
    load._results(cfg, h)
    assert len(h.runs) == KEEP


def test_no_slurmdbd_is_one_line_when_sacct_is_asked_for_and_a_note_otherwise(tmp_path):
    empty = tmp_path / "bin"
    empty.mkdir()
    slurm = Slurm(bin_dir=str(empty))
    h = History(T0, T0 + 3600)
    with pytest.raises(load.NoSlurmdbd) as exc:
        load._jobs(slurm, "sacct", h)
    assert str(exc.value).startswith("no slurmdbd:") and "\n" not in str(exc.value)
    load._jobs(slurm, "auto", h)
    assert h.jobs is None and h.jobs_note.startswith("no slurmdbd")


def test_recovery_actions_and_a_persons_resume_are_read_but_not_a_foreign_drain(tmp_path):
    cfg = _cfg(tmp_path)
    store = RecoveryStore(cfg.recovery.db)
    with store.tx() as db:
        aid, _ = store.add_action(db, "n1", "reboot", "slurm", "", T0 + 10)
        store.set_action(db, aid, "done", "new boot seen", T0 + 20)
        aid, _ = store.add_action(db, "n2", "replace", "http", "", T0 + 10)
        store.set_action(db, aid, "refused", "no", T0 + 20)
        store.add_event(db, "n3", "released", "a person returned the node to service", T0 + 30)
        store.add_event(db, "n4", "released", "foreign reason 'x': hands off", T0 + 30)
    store.close()
    h = History(T0, T0 + 3600)
    load._recovery(cfg, h)
    assert [(a.node, a.kind) for a in h.actions] == [("n1", "reboot")]
    assert [r.node for r in h.releases] == ["n3"]


def test_the_release_events_the_machine_writes_are_told_apart():
    """load.FOREIGN_RELEASE is read from recovery.machine's event text: if the machine's
    wording changes, this fails rather than the ledger silently miscounting."""
    source = (Path(load.__file__).parents[1] / "recovery" / "machine.py").read_text()
    released = re.findall(r'\("released", f?"([^"]*)"', source)
    assert released, "recovery.machine writes no released events any more"
    foreign = [r for r in released if r.startswith(load.FOREIGN_RELEASE)]
    assert len(foreign) == 1 and "foreign" in foreign[0]


def test_sacct_lines_that_do_not_parse_are_skipped():
    text = ("billing=8,cpu=8,gres/gpu=8,mem=1G,node=1|1|7200\n"
            "cpu=2,node=2|2|3600\n"
            "garbage\n|x|1\n")
    jobs = load.parse_sacct(text)
    assert [(j.gpus, j.nodes, j.hours) for j in jobs] == [(8, 1, 2.0), (0, 2, 1.0)]


def test_gpu_count_from_gres():
    assert load.gpu_count("gpu:8") == 8
    assert load.gpu_count("gpu:h100:8(S:0-1)") == 8
    assert load.gpu_count("gpu:a100:4,gpu:t4:2") == 6
    assert load.gpu_count("") == 0


def test_every_ledger_metric_is_documented():
    from airlock.ledger import report

    src = Path(report.__file__).read_text()
    names = set(re.findall(r'Gauge\("(airlock_ledger_\w+)"', src))
    documented = set(re.findall(r"^\| `(airlock_ledger_\w+)` \|",
                                (DOCS / "ledger.md").read_text(), re.M))
    assert names and names == documented
