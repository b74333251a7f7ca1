"""Attacks on a root-run Airlock (issue 10, docs/security.md), each carried out for real against
the real code: links and foreign files planted in the shared directory, hostile batch documents,
a poisoned fleet, pre-created probe and temporary names, insecure recovery settings, hostile TOML
keys, and network listeners during a standard-level run. Each test names the line of today's
main that the attack got through (so it would pass the attack there)."""

from __future__ import annotations

import datetime
import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
import tomllib
from pathlib import Path

import pytest

from airlock import paths
from airlock.admin import render
from airlock.checks import burnin, fleet, system
from airlock.config import loader as config
from airlock.config.sections.recovery import HttpSettings
from airlock.errors import AirlockError, ConfigError
from airlock.groups.batch import Batch
from airlock.records import results
from airlock.recovery.providers.http import HttpProvider
from tests.unit.fakeslurm import FakeSlurm

NOBODY = 65534


def cfg_for(tmp_path, shared: str = "shared", **extra):
    return config.from_dict({"state_dir": str(tmp_path / "state" / "{node}"),
                             "shared_dir": str(tmp_path / shared), **extra})


def run_doc(node: str, run_id: str, verdict: str = "pass", **kw) -> dict:
    return {"node": node, "run_id": run_id, "level": "standard", "verdict": verdict,
            "checks": [], **kw}


# --- 1. the shared directory: links, foreign owners, strict names --------------------------------
def test_symlinked_shared_results_dir_is_neither_pruned_nor_written(tmp_path):
    """main: Store.write pruned `<shared>/<node>/results/*.json` through the link down to 50
    files and wrote into the target."""
    victim = tmp_path / "victim"
    victim.mkdir()
    for i in range(60):
        (victim / f"{i:03d}.json").write_text("{}")
    (tmp_path / "shared" / "n1").mkdir(parents=True)
    (tmp_path / "shared" / "n1" / "results").symlink_to(victim)
    cfg = cfg_for(tmp_path)
    problems = results.ResultStore(cfg, "n1").write(run_doc("n1", "20260101T000000-1-n1"))
    assert len(problems) == 1 and "is a symbolic link" in problems[0], problems
    assert sorted(p.name for p in victim.iterdir()) == [f"{i:03d}.json" for i in range(60)]
    # the node-local copy, the one that must succeed, is written
    assert (tmp_path / "state" / "n1" / "latest.json").exists()


def test_symlinked_node_dir_and_foreign_owned_dir_are_refused(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "shared").mkdir()
    (tmp_path / "shared" / "n1").symlink_to(elsewhere)
    # a user of the shared filesystem creates the next node's folder before that node does
    (tmp_path / "shared" / "n2").mkdir()
    os.chown(tmp_path / "shared" / "n2", NOBODY, NOBODY)
    cfg = cfg_for(tmp_path)
    p1 = results.ResultStore(cfg, "n1").write(run_doc("n1", "20260101T000000-1-n1"))
    p2 = results.ResultStore(cfg, "n2").write(run_doc("n2", "20260101T000000-1-n2"))
    assert "is a symbolic link" in p1[0] and list(elsewhere.iterdir()) == []
    assert f"owned by uid {NOBODY}, not by root" in p2[0]
    assert list((tmp_path / "shared" / "n2").iterdir()) == []


def test_controller_read_refuses_links_foreign_files_and_other_nodes_documents(tmp_path):
    cfg = cfg_for(tmp_path)
    results.ResultStore(cfg, "n1").write(run_doc("n1", "20260101T000000-1-n1"))
    shared = tmp_path / "shared"
    forged = tmp_path / "forged.json"
    forged.write_text(json.dumps(run_doc("n2", "20260101T000000-1-n2")))
    (shared / "n2").mkdir()
    (shared / "n2" / "latest.json").symlink_to(forged)
    got = results.read_node(cfg, "n2")
    assert got.run is None and "is a symbolic link" in got.problem, got.problem
    (shared / "n2" / "latest.json").unlink()
    (shared / "n2" / "latest.json").write_text(json.dumps(run_doc("n2", "x1")))
    os.chown(shared / "n2" / "latest.json", NOBODY, NOBODY)
    assert f"owned by uid {NOBODY}" in results.read_node(cfg, "n2").problem
    os.chown(shared / "n2" / "latest.json", 0, 0)
    (shared / "n2" / "latest.json").write_text(json.dumps(run_doc("n1", "x1")))
    assert "written for node 'n1', not 'n2'" in results.read_node(cfg, "n2").problem
    # a bad history entry is left out, the good ones are read
    (shared / "n1" / "results" / "20270101T000000-1-n1.json").write_text('{"node": 5}')
    got = results.read_node(cfg, "n1", history=5)
    assert [r["run_id"] for r in got.history] == ["20260101T000000-1-n1"]


@pytest.mark.parametrize("name", ["../etc", "a/b", "", ".", "..", "x" * 65, "-lead"])
def test_hostile_node_names_never_become_paths(tmp_path, name):
    cfg = cfg_for(tmp_path / "c", shared="shared/{node}")
    with pytest.raises(OSError, match="not a valid node name"):
        results.ResultStore(cfg, name).write(run_doc("n1", "20260101T000000-1-n1"))
    assert results.read_node(cfg, name).run is None
    assert not (tmp_path / "etc").exists() and not (tmp_path / "c" / "etc").exists()


def test_a_hostile_run_id_never_becomes_a_path(tmp_path):
    with pytest.raises(OSError, match="not a valid name"):
        results.ResultStore(cfg_for(tmp_path), "n1").write(run_doc("n1", "../../../x"))
    assert not (tmp_path / "x.json").exists()


# --- batches: documents from strangers -----------------------------------------------------------
def batch(tmp_path, node: str, window: float = 0.2, **kw) -> tuple[Batch, list[str]]:
    """A batch whose Slurm lists every node named (what Slurm knows is tests/unit/test_batch's
    concern)."""
    seen: list[str] = []
    kw.setdefault("known", set)
    return Batch(tmp_path / "shared", node, "127.0.0.1", window, 5.0,
                 report=seen.append, **kw), seen


def plant(tmp_path, rel: str, doc) -> Path:
    path = tmp_path / "shared" / ".batches" / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return path


def test_batch_arrival_with_a_traversal_name_is_refused(tmp_path):
    """main: the leader wrote assign/<a['node']>.json with a['node'] = '../../../outside/pwned',
    outside .batches, as root."""
    leader, seen = batch(tmp_path, "aaa")
    leader.arrive("20260101T000000-1-aaa")
    plant(tmp_path, "arrivals/pwned.json", {"node": "../../../outside/pwned",
                                            "addr": "127.0.0.1", "time": time.time()})
    assert leader.form() is None  # nobody valid to batch with: go on alone
    assert not (tmp_path / "outside").exists() and not (tmp_path / "shared" / "outside").exists()
    assert any("pwned.json: node '../../../outside/pwned' does not match" in s for s in seen), seen


@pytest.mark.parametrize("doc", [
    {"addr": "127.0.0.1", "time": 1e12},  # main: KeyError 'node' in every registering suite
    {"node": "zzz", "addr": "127.0.0.1", "time": "soon"},
    {"node": "zzz", "addr": "evil.example; rm -rf /", "time": 1e12},
    "[1, 2",
    ["not", "a", "table"],
])
def test_bad_arrivals_are_skipped_and_reported(tmp_path, doc):
    me, seen = batch(tmp_path, "aaa")
    me.arrive("20260101T000000-1-aaa")
    plant(tmp_path, "arrivals/zzz.json", doc)
    assert me.form() is None
    assert any("zzz.json" in s for s in seen), seen


@pytest.mark.parametrize("assign", [{"batch": 5}, {"batch": "../../x"}, {"batch": ["a"]}, {}])
def test_bad_assignment_is_skipped(tmp_path, assign):
    """main: assign["batch"] was used as a path (TypeError for a non-string, traversal else)."""
    me, seen = batch(tmp_path, "bbb")
    plant(tmp_path, "assign/bbb.json", assign)
    assert me._assigned() is None
    assert seen and "assign/bbb.json" in seen[0]


@pytest.mark.parametrize("addrs", [{"aaa": "127.0.0.1"}, {"aaa": "127.0.0.1", "bbb": "x;y"},
                                   "127.0.0.1", {"aaa": "127.0.0.1", "bbb": 7}])
def test_members_with_bad_addrs_are_refused(tmp_path, addrs):
    """main: addrs became the rendezvous address unchecked."""
    me, seen = batch(tmp_path, "bbb")
    plant(tmp_path, "assign/bbb.json", {"batch": "batch-1-aaa"})
    plant(tmp_path, "batch-1-aaa/members.json", {"batch": "batch-1-aaa", "leader": "aaa",
                                                 "members": ["aaa", "bbb"], "addrs": addrs})
    assert me._assigned() is None
    assert any("addrs is not one IP address per member" in s for s in seen), seen
    verdict = me.run({"batch": "batch-1-aaa", "leader": "aaa", "members": ["aaa", "bbb"],
                      "addrs": addrs}, member=None)
    assert verdict["inconclusive"] == ["bbb"]


def test_batch_leader_writes_a_root_only_secret(tmp_path):
    a, _ = batch(tmp_path, "aaa", window=1.0)
    b, _ = batch(tmp_path, "bbb", window=1.0)
    a.arrive("20260101T000000-1-aaa")
    b.arrive("20260101T000000-1-bbb")
    docs = {}
    threads = [threading.Thread(target=lambda x=x: docs.__setitem__(x.node, x.form()))
               for x in (a, b)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert docs["aaa"] == docs["bbb"] and docs["aaa"]["members"] == ["aaa", "bbb"]
    folder = tmp_path / "shared" / ".batches" / docs["aaa"]["batch"]
    assert folder.stat().st_mode & 0o777 == 0o700
    assert (folder / "secret").stat().st_mode & 0o777 == 0o600


# --- fleet poisoning -----------------------------------------------------------------------------
def fleet_doc(node: str, value: float, run_id: str | None = None) -> dict:
    rec = {"check": "burnin", "verdict": "pass", "detail": "",
           "figures": {"profile": "h100", "median_tflops": {"bf16": value}}}
    return run_doc(node, run_id or f"20260101T000000-1-{node}", checks=[rec])


def test_poisoned_fleet_documents_are_ignored(tmp_path):
    """main: read_fleet took any */results/*.json into the median; forged documents made a
    healthy node fail against the fleet."""
    cfg = cfg_for(tmp_path)
    for node, value in (("a", 600.0), ("b", 610.0), ("c", 620.0)):
        results.ResultStore(cfg, node).write(fleet_doc(node, value))
    shared = tmp_path / "shared"
    # a user's forgeries: its own folders and files (owned by the user)
    for i in range(5):
        f = shared / f"fake{i}" / "results"
        f.mkdir(parents=True)
        (f / "20300101T000000-1-x.json").write_text(json.dumps(fleet_doc(f"fake{i}", 1e6)))
        os.chown(f / "20300101T000000-1-x.json", NOBODY, NOBODY)
        os.chown(f, NOBODY, NOBODY)
    # a folder claiming to be another node, a linked results folder, a non-finite value
    (shared / "d" / "results").mkdir(parents=True)
    (shared / "d" / "results" / "20300101T000000-1-a.json").write_text(
        json.dumps(fleet_doc("a", 1e6)))
    (shared / "e").mkdir()
    (shared / "e" / "results").symlink_to(shared / "a" / "results")
    results.ResultStore(cfg, "f").write(fleet_doc("f", float("nan")))
    ignored: list[str] = []
    others = fleet.read_fleet(cfg.shared_dir, "me", "h100", ignored=ignored)
    assert others == {"a": {"bf16": 600.0}, "b": {"bf16": 610.0}, "c": {"bf16": 620.0}}
    assert any("written for node 'a', not 'd'" in i for i in ignored), ignored
    assert any("is a symbolic link" in i for i in ignored), ignored
    assert fleet.fleet_reference(others, "bf16", 3) == 610.0


def test_fleet_reference_is_robust_and_needs_enough_nodes():
    honest = {n: {"bf16": v} for n, v in zip("abcde", (600.0, 610.0, 620.0, 605.0, 615.0),
                                            strict=True)}
    # two compromised nodes report absurd figures: dropped as outliers, not averaged in
    poisoned = {**honest, "x": {"bf16": 1e6}, "y": {"bf16": 5e5}}
    assert fleet.fleet_reference(poisoned, "bf16", 3) == 610.0
    assert fleet.fleet_reference({"a": {"bf16": 600.0}, "b": {"bf16": 1e6}}, "bf16", 3) is None


def test_fleet_alone_never_drains():
    """Fleet documents are a second opinion: below the fleet median is a warning, whatever
    the documents say (issue 17: a re-measurement compared against the same forged median)."""
    low = burnin.verdict_burnin([burnin.DeviceRun("g0", "h", "bf16", tflops=100.0)],
                                fleet={"bf16": 600.0}, fleet_fraction=0.85)
    assert low.verdict.value == "warn" and low.figures["fleet_low"] == ["g0", "bf16"]
    floor = burnin.verdict_burnin([burnin.DeviceRun("g0", "h", "bf16", tflops=100.0)],
                                  {"bf16": 500.0}, fleet={"bf16": 600.0}, fleet_fraction=0.85)
    assert floor.failed and "< floor 500" in floor.detail  # its own floor still fails it


# --- 3. no predictable names ---------------------------------------------------------------------
def test_precreated_probe_names_do_not_fail_the_mounts_check(tmp_path):
    """main: .airlock-write-test-<pid> with O_EXCL; a user pre-created it: `File exists`."""
    for pid in range(os.getpid() - 5, os.getpid() + 5):
        (tmp_path / f".airlock-write-test-{pid}").write_text("planted")
    assert system.try_write(str(tmp_path)) == ""
    assert len(list(tmp_path.iterdir())) == 10  # the probe cleaned up after itself


def test_metrics_textfile_temporary_name_cannot_be_planted(tmp_path):
    """main: prometheus_client's write_to_textfile opened <file>.<pid>.<thread> (following a
    link planted there) before renaming it into place."""
    from airlock.records import node_metrics

    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    folder = tmp_path / "prom"
    folder.mkdir()
    target = folder / node_metrics.NODE_FILE
    planted = Path(f"{target}.{os.getpid()}.{threading.current_thread().ident}")
    planted.symlink_to(victim)
    cfg = config.from_dict({"state_dir": str(tmp_path / "s"),
                            "metrics": {"textfile_dir": str(folder)}})
    node_metrics.write_node_textfile(cfg, "n1", {"quick": run_doc("n1", "r1")})
    assert victim.read_text() == "precious\n"
    assert "airlock_run_failed" in target.read_text()
    assert target.stat().st_mode & 0o777 == 0o644


def test_an_atomic_write_cannot_be_stopped_or_redirected_by_a_guessable_name(tmp_path):
    """docs/security.md: every temporary file of an atomic write (results, node state, metrics,
    rendered files) has a random name created with O_EXCL. Every name a temporary file could be
    guessed to have is planted here, as a link to a victim and as a file a user owns."""
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    folder = tmp_path / "state"
    folder.mkdir()
    pid, tid = os.getpid(), threading.get_ident()
    guesses = [".latest.json.tmp", "latest.json.tmp", "latest.json~", ".latest.json",
               f"latest.json.{pid}", f".latest.json.{pid}", f".latest.json.{pid}.tmp",
               f"latest.json.{pid}.tmp", f"latest.json.{pid}.{tid}", ".latest.json.swp"]
    for i, name in enumerate(guesses):
        if i % 2:
            (folder / name).symlink_to(victim)
        else:
            (folder / name).write_text("planted")
            os.chown(folder / name, NOBODY, NOBODY)
    for n in range(3):
        paths.atomic_write(folder / "latest.json", {"run": n})
    assert json.loads((folder / "latest.json").read_text()) == {"run": 2}
    assert victim.read_text() == "precious\n"
    assert sorted(p.name for p in folder.iterdir()) == sorted([*guesses, "latest.json"])


def test_controller_textfile_dir_is_never_literally_named_node(tmp_path):
    """Issue 12: a directory named {node} was created for the controller's file."""
    from airlock.status import metrics

    cfg = config.from_dict({"state_dir": str(tmp_path / "s"),
                            "metrics": {"textfile_dir": str(tmp_path / "prom" / "{node}")}})
    path = metrics.write_controller_textfile(cfg, {"nodes": [], "summary": {}}, {})
    assert "{node}" not in str(path) and path.exists()


# --- 4. the HTTP provider ------------------------------------------------------------------------
def token(tmp_path, mode: int, owner: int = 0) -> str:
    path = tmp_path / "token"
    path.write_text("secret-token\n")
    path.chmod(mode)
    os.chown(path, owner, owner)
    return str(path)


def test_readable_or_foreign_token_file_is_refused(tmp_path):
    """main: a 0644 token file was read and sent."""
    path = token(tmp_path, 0o644)
    with pytest.raises(ConfigError) as exc:
        HttpProvider(HttpSettings(url="https://api.example", token_file=path), None)
    msg = str(exc.value)
    assert "\n" not in msg and path in msg and "mode 0644 lets group or others read it" in msg
    path = token(tmp_path, 0o600, owner=NOBODY)
    with pytest.raises(ConfigError, match=f"owned by uid {NOBODY}, not root"):
        HttpProvider(HttpSettings(url="https://api.example", token_file=path), None)
    ok = HttpProvider(HttpSettings(url="https://api.example", token_file=token(tmp_path, 0o600)),
                      None)
    assert ok.session.headers["Authorization"] == "Bearer secret-token"


@pytest.mark.parametrize("http, msg", [
    ({"url": "http://nodes.example/api"}, "http:// to nodes.example sends the token"),
    ({"url": "https://nodes.example", "verify": False}, "verify = false: any server"),
])
def test_cleartext_and_unverified_tls_are_refused(http, msg):
    """main: http:// with a bearer token and verify = false were accepted silently."""
    with pytest.raises(ConfigError) as exc:
        config.from_dict({"recovery": {"provider": "http", "http": http}}).recovery  # noqa: B018
    assert msg in str(exc.value) and "allow_insecure = true" in str(exc.value)
    assert "\n" not in str(exc.value)
    loop = config.from_dict({"recovery": {"provider": "http",
                                          "http": {"url": "http://127.0.0.1:8080"}}})
    assert loop.recovery.http.url.startswith("http://127.0.0.1")


def test_allow_insecure_lets_each_through_and_doctor_warns(tmp_path):
    from airlock.admin import doctor

    cfg = config.from_dict({"recovery": {"provider": "http", "http": {
        "url": "http://nodes.example/api", "verify": False, "allow_insecure": True,
        "token_file": token(tmp_path, 0o644)}}})
    HttpProvider(cfg.recovery.http, None)  # accepted
    items = doctor.check_recovery_http(cfg)
    assert [i.status for i in items] == ["WARN", "WARN", "WARN"]
    assert [re.sub(r":.*", "", i.detail.removeprefix("allow_insecure: ")) for i in items] == [
        "url", "verify = false", f"token_file {tmp_path}/token"]
    strict = config.from_dict({"recovery": {"provider": "http", "http": {
        "url": "https://nodes.example", "token_file": token(tmp_path, 0o640)}}})
    assert [i.status for i in doctor.check_recovery_http(strict)] == ["FAIL"]


# --- 5. TOML through tomli-w ---------------------------------------------------------------------
HOSTILE = {"t]\nx": "é😀", "a\"b": ["ü", "\x00\x1f", 'x"]\n[evil]'], "plain": {"k]": 1.5}}


def test_rendered_values_reparse_with_unicode_and_hostile_keys():
    """main: tomlw wrote `"\\ud83d\\ude00"` (invalid TOML) and keys like "t]\\nx" unquoted."""
    for value in (HOSTILE, list(HOSTILE["a\"b"]), "é😀", {"": 1}):
        assert tomllib.loads(f"v = {render.toml_value(value)}") == {"v": value}
    text = render.example_config()
    assert tomllib.loads(text)["state_dir"] == "/var/lib/airlock"


def test_dev_cluster_config_reparses_with_hostile_keys(tmp_path):
    from airlock.dev.cluster import DevCluster

    c = DevCluster(tmp_path, nodes=["n1"], airlock={"nvml": {"simulate": "/x/é😀"},
                                                     "extra": HOSTILE})
    tmp_path.mkdir(exist_ok=True)
    c.write_airlock_config()
    raw = tomllib.loads(c.airlock_conf.read_text())
    assert raw["extra"] == HOSTILE and raw["nvml"]["simulate"] == "/x/é😀"
    assert set(raw) == {"state_dir", "log_dir", "shared_dir", "slurm", "nvml", "registration",
                        "extra"}


# --- 2. rendezvous -------------------------------------------------------------------------------
def test_standard_level_opens_no_listener_beyond_loopback(tmp_path):
    """main: the single-node all-reduce hosted TCPStore("127.0.0.1", 0, ..., True), which
    listens on *:<port> (and gloo picked the host name's address). Every bind() of the level's
    processes is recorded where it happens (tests/unit/bindlog.py), never sampled."""
    import json

    import tomli_w

    from tests.unit import bindlog

    fake = FakeSlurm(tmp_path / "slurm", nodes=["n1"])  # the GRES the standard level reads
    conf = tmp_path / "airlock.toml"
    conf.write_text(tomli_w.dumps({"state_dir": str(tmp_path / "state"),
                                   "log_dir": str(tmp_path / "log"),
                                   "slurm": {"bin_dir": fake.bin_dir}}))
    lib, log = bindlog.build(tmp_path), tmp_path / "binds.log"
    code = ("import json, sys; from airlock.config import loader; "
            "from airlock.runner import run_level; "
            "records, _ = run_level(loader.load(sys.argv[1]), 'n1', 'standard'); "
            "print(json.dumps(records))")
    out = subprocess.run([sys.executable, "-c", code, str(conf)], capture_output=True,
                         text=True, timeout=600,
                         env={**os.environ, "LD_PRELOAD": str(lib), "BIND_LOG": str(log)})
    assert out.returncode == 0, out.stderr[-3000:]
    by_check = {r["check"]: r for r in json.loads(out.stdout.strip().splitlines()[-1])}
    # It must have measured (a pass or a warning): an all-reduce that never ran opens no
    # listener, and the log below would prove nothing.
    assert by_check["allreduce"]["verdict"] in ("pass", "warn"), by_check["allreduce"]
    binds = bindlog.read(log)
    assert binds, "no bind() recorded at all: the log would not see an exposed one either"
    assert bindlog.exposed(binds) == [], binds


def _secret(folder: Path, name: str, value: str) -> str:
    path = folder / name
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.write(fd, value.encode())
    os.close(fd)
    return str(path)


def test_a_member_without_the_secret_cannot_join_or_read_the_store(tmp_path):
    from airlock import collective as dist
    from airlock.collective import rendezvous

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    secret = b"k" * 64
    rv = rendezvous.host("127.0.0.1", port, 2, 20.0, secret)
    try:
        rv.store.set("airlock/x", "trusted")
        # a member with the wrong secret is refused before its first byte of store traffic
        with pytest.raises(rendezvous.RendezvousError, match="refused this node's secret"):
            rendezvous.member("127.0.0.1", port, 5.0, b"w" * 64)
        # a plain torch client (no secret at all) cannot read or write a key
        import torch.distributed as tdist

        with pytest.raises(Exception):  # noqa: B017 - torch raises its own DistStoreError
            c = tdist.TCPStore("127.0.0.1", port, 2, False,
                               timeout=datetime.timedelta(seconds=3))
            c.set("airlock/x", "poisoned")
        assert rv.store.get("airlock/x") == b"trusted" and rv.refused >= 2
        # the right secret gets through, and reaches the real store
        good = rendezvous.member("127.0.0.1", port, 5.0, secret)
        try:
            assert rendezvous.connect(good.spec, 2, 5.0).get("airlock/x") == b"trusted"
        finally:
            good.close()
    finally:
        rv.close()
    # the launcher refuses a multi-node group with no secret at all
    with pytest.raises(rendezvous.RendezvousError, match="needs the run's secret"):
        dist.launch("127.0.0.1", port, 4, 2, 2, dist.SweepParams([1024], timeout=5))


def test_a_member_never_talks_to_an_impostor_host():
    """docs/security.md: the challenge goes both ways, so a member never talks to an impostor
    host. The impostor here speaks the handshake and takes whatever the member proves, but
    cannot prove the run's secret back: the member refuses it before any store traffic."""
    from airlock.collective import rendezvous

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    port = listener.getsockname()[1]
    after_handshake: list[bytes] = []

    def impostor() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with conn:
                conn.settimeout(5)
                try:
                    conn.sendall(rendezvous.HELLO + os.urandom(rendezvous.NONCE))
                    rendezvous._recv_exact(conn, rendezvous.NONCE + 32)  # the member's proof
                    conn.sendall(os.urandom(32))  # a host proof it cannot compute
                    after_handshake.append(conn.recv(4096))  # what a fooled member would send
                except OSError:
                    pass

    t = threading.Thread(target=impostor, daemon=True)
    t.start()
    try:
        with pytest.raises(rendezvous.RendezvousError,
                           match="the group's host could not prove the run's secret"):
            rendezvous.member("127.0.0.1", port, 5.0, b"k" * 64)
    finally:
        try:
            listener.shutdown(socket.SHUT_RDWR)  # wakes the accept
        except OSError:
            pass
        listener.close()
        t.join(10)
    assert after_handshake in ([], [b""])  # the member closed: no store request reached it


def test_secret_file_must_be_root_only(tmp_path):
    from airlock.collective import rendezvous

    path = _secret(tmp_path, "s", "z" * 64)
    assert rendezvous.read_secret_file(path) == b"z" * 64
    os.chmod(path, 0o644)
    with pytest.raises(rendezvous.RendezvousError, match="mode 0644, must be 0600"):
        rendezvous.read_secret_file(path)
    os.chmod(path, 0o600)
    os.chown(path, NOBODY, NOBODY)
    with pytest.raises(rendezvous.RendezvousError, match=f"owned by uid {NOBODY}"):
        rendezvous.read_secret_file(path)
    os.symlink(path, tmp_path / "link")
    with pytest.raises(rendezvous.RendezvousError):
        rendezvous.read_secret_file(str(tmp_path / "link"))


def test_worker_with_a_wrong_secret_is_refused_end_to_end(tmp_path):
    """Two real launchers (`python -m airlock.collective worker`): the member with the wrong secret
    stops at the rendezvous, naming why; the host counts the refused connection."""
    from airlock import collective as dist

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if k not in ("AIRLOCK_CONFIG", "AIRLOCK_FAULTS")}
    env["AIRLOCK_CONFIG"] = "/nonexistent/airlock.toml"
    common = {"master_addr": "127.0.0.1", "master_port": port, "world_size": 2,
              "local_ranks": 1, "sizes": [64 << 10], "iters": 2, "timeout": 8, "faults": ""}
    host = subprocess.Popen(dist.worker_argv(rank_offset=0, host_store=True, node="a",
                                             secret_file=_secret(tmp_path, "a", "r" * 64),
                                             **common),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    member = subprocess.Popen(dist.worker_argv(rank_offset=1, node="b",
                                               secret_file=_secret(tmp_path, "b", "w" * 64),
                                               **common),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    outs = [p.communicate(timeout=180)[0] for p in (host, member)]
    h, m = (dist.parse_report(o) for o in outs)
    assert m["errors"] == {"1": "rendezvous: the group's host refused this node's secret"}
    assert h["timed_out"] and h.get("refused", 0) >= 1 and not h["ranks"]


# --- 7. parse errors are AirlockErrors -----------------------------------------------------------
def test_parse_errors_are_one_line_airlock_errors():
    from airlock import collective as dist

    for bad in ("12Q", "1M,", "big"):
        with pytest.raises(AirlockError) as exc:
            dist.parse_sizes(bad)
        assert "\n" not in str(exc.value)
    with pytest.raises(AirlockError, match="cannot write"):
        render.toml_value(object())


def test_dist_worker_cli_bad_input_is_one_line():
    out = subprocess.run([sys.executable, "-m", "airlock.collective", "worker", "--master-addr",
                          "127.0.0.1", "--master-port", "1", "--world-size", "2",
                          "--rank-offset", "0", "--local-ranks", "1", "--sizes", "x"],
                         capture_output=True, text=True, timeout=120,
                         env={**os.environ, "AIRLOCK_CONFIG": "/nonexistent"})
    # Airlock's own bad arguments: not measured (EXIT_UNMEASURED), never a verdict on the node
    assert out.returncode == 4 and out.stderr.strip().count("\n") == 0, out.stderr
    assert "not a list of sizes" in out.stderr and "Traceback" not in out.stderr


def test_batches_live_under_the_shared_root_never_a_node_placeholder(tmp_path):
    """Issue 12: with shared_dir = <root>/{node}, batches went to a folder literally named
    {node}; they belong beside the nodes' folders, under the configured root."""
    cfg = cfg_for(tmp_path, shared="shared/{node}")
    root = paths.shared_root(cfg.shared_dir)
    assert root == tmp_path / "shared"
    b = Batch(root, "aaa", "127.0.0.1", 0.1, 5.0, report=lambda m: None)
    assert b.arrive("20260101T000000-1-aaa")
    assert (tmp_path / "shared" / ".batches" / "arrivals" / "aaa.json").exists()
    assert not any("{node}" in str(p) for p in tmp_path.rglob("*"))


# --- issue 17, section 4: a planted world-writable directory, oversized documents --------------
def world_writable(path: Path) -> Path:
    """A directory as someone with root elsewhere (another node's root, an NFS export with
    no_root_squash) could plant it: owned by root, writable by everyone."""
    path.mkdir(parents=True, exist_ok=True)
    os.chown(path, 0, 0)
    path.chmod(0o777)
    return path


def test_a_root_owned_world_writable_node_dir_is_refused_and_named(tmp_path):
    cfg = cfg_for(tmp_path)
    planted = world_writable(tmp_path / "shared" / "n1")
    problems = results.ResultStore(cfg, "n1").write(run_doc("n1", "20260101T000000-1-n1"))
    assert len(problems) == 1, problems
    assert problems[0].endswith(f"{planted}: writable by group or others (mode 0777)"), problems
    assert list(planted.iterdir()) == []  # nothing written where anyone could swap it
    assert (tmp_path / "state" / "n1" / "latest.json").exists()  # the node-local copy is
    # The controller reading it refuses it too, and says which directory and why.
    (planted / "latest.json").write_text(json.dumps(run_doc("n1", "20260101T000000-2-n1")))
    got = results.read_node(cfg, "n1")
    assert got.source == "local" and got.run["run_id"] == "20260101T000000-1-n1", got.run
    assert got.problem == f"shared results: {planted}: writable by group or others (mode 0777)"


def test_a_world_writable_results_dir_never_feeds_the_fleet(tmp_path):
    cfg = cfg_for(tmp_path)
    for node, value in (("a", 600.0), ("b", 610.0), ("c", 620.0)):
        results.ResultStore(cfg, node).write(fleet_doc(node, value))
    (tmp_path / "shared" / "d").mkdir()
    planted = world_writable(tmp_path / "shared" / "d" / "results")
    (planted / "20300101T000000-1-d.json").write_text(json.dumps(fleet_doc("d", 1e6)))
    ignored: list[str] = []
    others = fleet.read_fleet(cfg.shared_dir, "me", "h100", ignored=ignored)
    assert "d" not in others and set(others) == {"a", "b", "c"}
    assert any(str(planted) in i and "mode 0777" in i for i in ignored), ignored


def test_a_world_writable_batch_tree_is_refused_and_reported(tmp_path):
    world_writable(tmp_path / "shared" / ".batches")
    b, seen = batch(tmp_path, "n1")
    assert b.arrive("20260101T000000-1-n1") is False
    assert len(seen) == 1 and "cannot announce n1" in seen[0] and "mode 0777" in seen[0], seen
    assert list((tmp_path / "shared" / ".batches").iterdir()) == []


def test_errors_json_is_not_written_into_a_planted_world_writable_dir(tmp_path):
    from airlock.records import incidents

    planted = world_writable(tmp_path / "shared" / "n1")
    problem = incidents.record(str(tmp_path / "state" / "{node}"), str(tmp_path / "shared"),
                               "n1", "prolog", "fail open: config x")
    assert (tmp_path / "state" / "n1" / "errors.json").exists() and problem == ""
    assert list(planted.iterdir()) == []


def padded(doc: dict, size: int) -> str:
    """doc as JSON of exactly size bytes (trailing blanks are valid JSON)."""
    text = json.dumps(doc)
    assert len(text) <= size
    return text + " " * (size - len(text))


def test_oversized_shared_documents_are_refused_at_the_limit(tmp_path):
    cfg = cfg_for(tmp_path)
    folder = tmp_path / "shared" / "n2"
    folder.mkdir(parents=True)
    doc = run_doc("n2", "20260101T000000-1-n2")
    (folder / "latest.json").write_text(padded(doc, paths.MAX_DOC_BYTES))
    assert results.read_node(cfg, "n2").run == doc  # at the limit: read
    (folder / "latest.json").write_text(padded(doc, paths.MAX_DOC_BYTES + 1))
    got = results.read_node(cfg, "n2")
    assert got.run is None and f"larger than {paths.MAX_DOC_BYTES} bytes" in got.problem, \
        got.problem


def test_a_huge_or_endless_shared_document_is_refused_without_reading_it(tmp_path):
    """A sparse 64 GiB latest.json or a FIFO in its place: refused at once, never read whole
    (nor waited on: a FIFO with no writer would block a plain open forever)."""
    cfg = cfg_for(tmp_path)
    folder = tmp_path / "shared" / "n2"
    folder.mkdir(parents=True)
    with open(folder / "latest.json", "wb") as fh:
        fh.truncate(64 << 30)
    got = results.read_node(cfg, "n2")
    assert got.run is None and "larger than" in got.problem, got.problem
    (folder / "latest.json").unlink()
    os.mkfifo(folder / "latest.json")
    got = results.read_node(cfg, "n2")
    assert got.run is None and "not a regular file" in got.problem, got.problem


def test_oversized_documents_from_strangers_are_skipped_and_named(tmp_path):
    cfg = cfg_for(tmp_path)
    for node, value in (("a", 600.0), ("b", 610.0), ("c", 620.0)):
        results.ResultStore(cfg, node).write(fleet_doc(node, value))
    big = tmp_path / "shared" / "d" / "results"
    big.mkdir(parents=True)
    (big / "20300101T000000-1-d.json").write_text(
        padded(fleet_doc("d", 1e6), paths.MAX_DOC_BYTES + 1))
    ignored: list[str] = []
    assert set(fleet.read_fleet(cfg.shared_dir, "me", "h100", ignored=ignored)) == {"a", "b",
                                                                                    "c"}
    assert any("larger than" in i for i in ignored), ignored
    # a batch arrival
    b, seen = batch(tmp_path, "n1", window=0.1)
    assert b.arrive("20260101T000000-1-n1")
    plant(tmp_path, "arrivals/n9.json",
          padded({"node": "n9", "addr": "127.0.0.1", "time": time.time(),
                  "run_id": "20260101T000000-1-n9"}, paths.MAX_DOC_BYTES + 1))
    assert [a["node"] for a in b._arrivals()] == ["n1"]
    assert any("n9.json" in s and "larger than" in s for s in seen), seen


def test_a_huge_node_record_is_read_only_up_to_its_limit(tmp_path):
    """node.json is read up to 1 MiB, never whole: a sparse 64 GiB file in its place is a
    damaged record (no proof: the boot gets its registration), not an out-of-memory hook."""
    from airlock.hw import boot
    from airlock.records import proof as nodestate

    cfg = config.from_dict({"state_dir": str(tmp_path / "state")})
    state = nodestate.NodeState(cfg, "n1")
    state.start("r1", boot.current("n1"), os.getpid(), "standard", "boot")
    state.finish("r1", "pass")
    good = state.load()
    state.path.write_text(padded(good, 1 << 20))
    assert state.proof(boot.current("n1")).passed  # at the limit: read
    with open(state.path, "wb") as fh:
        fh.truncate(64 << 30)
    proof = state.proof(boot.current("n1"))
    assert proof.state == nodestate.NONE and "unreadable" in proof.why, proof


def test_own_errors_are_never_written_through_a_planted_link(tmp_path):
    """Issue 17: incidents.record wrote <shared>/<node>/errors.json through a path that followed
    links and skipped the owner check, so root wrote errors.json wherever a planted link
    pointed. Now the shared copy is refused and named; the node-local copy is still written."""
    from airlock.records import incidents

    shared, target = tmp_path / "shared", tmp_path / "etc"
    shared.mkdir()
    target.mkdir()
    (shared / "n1").symlink_to(target)
    problem = incidents.record(str(tmp_path / "state"), str(shared), "n1", "prolog", "boom")
    assert problem == ""  # written somewhere: the node-local copy
    assert not (target / "errors.json").exists(), "followed the planted link"
    assert incidents.read_node(str(tmp_path / "state"), "", "n1")["prolog"]["message"] == "boom"
    # and nothing is read back through the link either
    (target / "errors.json").write_text('{"prolog": {"message": "forged"}}')
    assert incidents.read_node("", str(shared), "n1") == {}
    incidents.clear(str(tmp_path / "state"), str(shared), "n1", "prolog")
    assert (target / "errors.json").read_text() == '{"prolog": {"message": "forged"}}'
    assert incidents.read_node(str(tmp_path / "state"), "", "n1") == {}
