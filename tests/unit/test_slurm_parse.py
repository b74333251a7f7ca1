"""The node readers on output recorded from real Slurm 22.05, 24.11 and 26.05
(tests/data/<version>/, made by tests/data/record.py), and on generated hostile reasons:
`scontrol -o` text and JSON (24.11's and 26.05's `scontrol --json`, data_parser v0.0.42 and
v0.0.45; 22.05's `sinfo --json`) must give identical Node records."""

import json
import os
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airlock.errors import SlurmError
from airlock.slurm import reasons
from airlock.slurm.client import (
    AmbiguousReason,
    expand,
    parse_node_json,
    parse_node_line,
    parse_show_node,
)

DATA = Path(__file__).parents[1] / "data"
RELEASES = ("22.05", "24.11", "26.05")
JSON_RELEASES = ("24.11", "26.05")  # scontrol --json (23.02+)
HOSTILE = "disk swap [ticket 42] Reason=x k=v [bob@2026-01-01T00:00:00] ünïcode ✓ ]["


@pytest.fixture(autouse=True)
def utc():
    """The recordings were made with TZ=UTC: JSON's epoch times must format as scontrol did."""
    old = os.environ.get("TZ")
    os.environ["TZ"] = "UTC"
    time.tzset()
    yield
    if old is None:
        del os.environ["TZ"]
    else:
        os.environ["TZ"] = old
    time.tzset()


def text_nodes(version: str, name: str = "show-node-o.txt") -> dict:
    return {n.name: n for n in parse_show_node((DATA / version / name).read_text())}


def json_nodes(version: str, name: str) -> dict:
    return {n.name: n for n in parse_node_json((DATA / version / name).read_text())}


def test_recorded_2205_output_parses_every_field_we_use():
    nodes = text_nodes("22.05", "show-node-mixed.txt")
    assert list(nodes) == ["gpu-a01", "node1", "node9", "dgx-017", "dgx-018"]
    a = nodes["gpu-a01"]
    assert (a.state, a.flags, a.reason_user) == ("IDLE", {"DRAIN"}, "root")
    assert a.reason == "airlock: pending standard check new" and a.owned and not a.foreign_drain
    admin = nodes["node1"]
    assert admin.reason == "disk swap [ticket 42] Reason=x"
    assert admin.foreign_drain and admin.reason_time == "2026-11-30T08:39:34"
    future = nodes["node9"]
    assert future.state == "FUTURE" and future.reason == "" and future.boot_time == ""
    busy = nodes["dgx-017"]
    assert busy.busy and busy.drained and busy.owned
    assert busy.features == ("h100", "ib", "rack12") and busy.partitions == ("train", "debug")
    assert busy.gres == "gpu:h100:8(S:0-1)" and busy.cpu_alloc == 224
    assert reasons.parse(busy.reason) == reasons.Reason("FAIL", "nvml.xid",
                                                        "gpu3 xid 79 (fell off bus)")
    down = nodes["dgx-018"]
    assert down.flags == {"DRAIN", "NOT_RESPONDING"} and down.foreign_drain
    assert not down.responding


@pytest.mark.parametrize("version, json_file", [("24.11", "show-node.json"),
                                                ("26.05", "show-node.json"),
                                                ("22.05", "sinfo.json")])
def test_text_and_json_give_identical_nodes(version, json_file):
    text, js = text_nodes(version), json_nodes(version, json_file)
    # 22.05's sinfo --json has no FUTURE nodes; every other node is in both
    assert set(js) == set(text) - ({"node9"} if version == "22.05" else set())
    for name, node in js.items():
        assert node == text[name], name
    assert len(text) == 7


@pytest.mark.parametrize("version", RELEASES)
def test_recorded_states_and_reasons(version):
    n = text_nodes(version)
    assert n["node1"].owned and n["node1"].reason_user == "root"
    assert n["node2"].reason == HOSTILE and n["node2"].foreign_drain
    assert n["node3"].busy and n["node3"].drained and n["node3"].claim.state == "pending"
    assert n["node4"].state == "DOWN" and n["node4"].reason_in_force == "Not responding"
    assert n["node9"].state == "FUTURE" and n["node9"].foreign_drain
    assert n["cloud1"].flags == {"CLOUD", "POWERED_DOWN"}
    # node5 was drained by Airlock, then resumed: in service on every version, no claim
    node5 = n["node5"]
    assert node5.state_text == "IDLE" and not node5.drained
    assert node5.claim is None and not node5.owned and not node5.foreign_drain
    assert node5.reason_in_force == ""
    if version == "24.11":  # no accounting plugin: the old reason stays (Slurm issue 50933)
        assert node5.reason == "airlock: pending standard check new"
    else:  # 22.05, and 26.05 (the fix released) clear it
        assert node5.reason == ""


def test_single_node_query_matches_the_full_listing():
    for version in RELEASES:
        (one,) = parse_show_node((DATA / version / "show-node2-o.txt").read_text())
        assert one == text_nodes(version)["node2"]
    for version in JSON_RELEASES:
        (js,) = parse_node_json((DATA / version / "show-node2.json").read_text())
        assert js == text_nodes(version)["node2"]


@pytest.mark.parametrize("version", RELEASES)
def test_reason_with_line_break(version):
    """`-o` shows "first [user@time]   second": not parsed as if it were certain."""
    text = (DATA / version / "newline-reason-o.txt").read_text()
    with pytest.raises(AmbiguousReason, match="cannot show on one line"):
        parse_show_node(text)
    (lenient,) = parse_show_node(text, strict=False)
    assert lenient.reason == "first line\nsecond line"  # as --json reads it, line break and all
    assert lenient.drained and lenient.foreign_drain and not lenient.owned
    if version in JSON_RELEASES:
        (exact,) = parse_node_json((DATA / version / "newline-reason.json").read_text())
        assert exact.reason == "first line\nsecond line" and exact.foreign_drain


@pytest.mark.parametrize("version", RELEASES)
def test_a_reason_with_a_line_break_is_never_airlock_s(version):
    """docs/guide.md, Supported Slurm: a reason with a line break is a foreign reason, which
    Airlock never touches, even when its first line starts with `airlock:` (someone pasted
    one): Airlock's own reasons are one line (reasons.clean), so it is not Airlock's claim,
    and a passing registration must not resume it. Read with `-o` (22.05: the line break
    shows as the reason's stamp in the middle) and, where there is one, with --json."""
    from airlock.slurm import drains

    pasted = "airlock: pending standard check boot"
    text = (DATA / version / "newline-reason-o.txt").read_text().replace("first line", pasted)
    nodes = list(parse_show_node(text, strict=False))
    if version in JSON_RELEASES:
        nodes += parse_node_json((DATA / version / "newline-reason.json").read_text()
                                 .replace("first line", pasted))
    for n in nodes:
        assert n.drained and n.foreign_drain and not n.owned and n.claim is None, n
        assert not drains.releasable(n.claim)
        assert n.reason == pasted + "\nsecond line", n.reason  # its text, line break and all
    assert not reasons.is_owned(pasted + "\nsecond line")


@pytest.mark.parametrize("version", JSON_RELEASES)
def test_sinfo_json_from_24_11_is_grouped_and_refused(version):
    with pytest.raises(SlurmError, match="grouped form"):
        parse_node_json((DATA / version / "sinfo.json").read_text())


def test_recorded_versions_and_data_parsers():
    """What was recorded is what the directory says: the daemons' version on every node line,
    the data_parser of the JSON (26.05 moved on to v0.0.45; the reader needs no change)."""
    for version in RELEASES:
        lines = (DATA / version / "show-node-o.txt").read_text().splitlines()
        seen = {t.split("=", 1)[1] for line in lines for t in line.split()
                if t.startswith("Version=")}
        assert {v.rsplit(".", 1)[0] for v in seen} == {version}, seen
    parsers = {v: json.loads((DATA / v / "show-node.json").read_text())["meta"]["plugin"]
               ["data_parser"] for v in JSON_RELEASES}
    assert parsers == {"24.11": "data_parser/v0.0.42", "26.05": "data_parser/v0.0.45"}


@pytest.mark.parametrize("line", ["", "garbage", "Node=x State=IDLE", "NodeName=x Arch=y",
                                  "NodeName= Arch=x State=IDLE", "NodeName=x State=",
                                  "NodeName=   State=IDLE"])
def test_garbage_is_a_clear_error(line):
    with pytest.raises(SlurmError) as exc:
        parse_node_line(line)
    assert "scontrol output" in str(exc.value) and "\n" not in str(exc.value)


RECORD = json.loads((DATA / "24.11" / "show-node2.json").read_text())["nodes"][0]


@pytest.mark.parametrize("doc", [
    "", "not json", "[]", "{}", '{"nodes": 5}', '{"nodes": [5]}', '{"nodes": [{}]}',
    json.dumps({"nodes": [{**RECORD, "name": ""}]}),
    json.dumps({"nodes": [{**RECORD, "name": "a b"}]}),
    json.dumps({"nodes": [{**RECORD, "state": []}]}),
    json.dumps({"nodes": [{**RECORD, "state": [7]}]}),
    json.dumps({"nodes": [{**RECORD, "boot_time": {"set": True, "number": "x"}}]}),
    json.dumps({"nodes": [{**RECORD, "alloc_cpus": "many"}]}),
    json.dumps({"nodes": [], "errors": [{"description": "Unable to contact\nslurm controller"}]}),
])
def test_json_garbage_is_a_clear_error(doc):
    with pytest.raises(SlurmError) as exc:
        parse_node_json(doc)
    assert "\n" not in str(exc.value)


def test_no_nodes_message_is_empty_list():
    assert parse_show_node("No nodes in the system\n") == []
    assert parse_node_json('{"nodes": []}') == []


# --- hostile reasons through both readers ---------------------------------------------------
def _template(version: str) -> tuple[str, dict]:
    """node2's recorded line up to its reason, and its JSON record (24.11, 26.05) or a v0.0.38
    one (22.05's sinfo)."""
    line = (DATA / version / "show-node2-o.txt").read_text().strip()
    head = line[: line.index("Reason=")]
    if version in JSON_RELEASES:
        rec = json.loads((DATA / version / "show-node2.json").read_text())["nodes"][0]
    else:
        recs = json.loads((DATA / "22.05" / "sinfo.json").read_text())["nodes"]
        rec = next(r for r in recs if r["name"] == "node2")
    return head, rec


TEMPLATES = {v: _template(v) for v in RELEASES}
PIECES = ["[", "]", "][", "Reason=", "Reason=x", "k=v", "Key=Value", "[root@2026-11-30T08:00:00]",
          "[bob@2026-01-01T00:00:00] State=IDLE", "@", "airlock:", "airlock: FAIL", "ünïcode",
          "✓", "日本語", "\u2028", "\u2029", "\x85", "\x0b", "\x0c", "\x1c", "\r", "(null)", "None",
          "N/A", "  ", "=", "==", '"', "'", "\\", "NodeName=evil"]
hostile = st.lists(st.one_of(st.sampled_from(PIECES),
                             st.text(alphabet=st.characters(blacklist_characters="\n",
                                                            blacklist_categories=("Cs",)),
                                     max_size=12)),
                   min_size=1, max_size=8).map(" ".join).filter(bool)


@settings(max_examples=300, deadline=None)
@given(reason=hostile, version=st.sampled_from(RELEASES))
def test_hostile_reasons_round_trip_through_both_readers(reason, version):
    head, rec = TEMPLATES[version]
    user, when = "root", "2026-12-01T00:58:51"
    text = parse_node_line(f"{head}Reason={reason} [{user}@{when}]")
    epoch = int(time.mktime(time.strptime(when, "%Y-%m-%dT%H:%M:%S")))
    changed = {"set": True, "infinite": False, "number": epoch} if version in JSON_RELEASES \
        else epoch
    (js,) = parse_node_json(json.dumps({"nodes": [{**rec, "reason": reason,
                                                   "reason_set_by_user": user,
                                                   "reason_changed_at": changed}]}))
    assert text.reason == reason and (text.reason_user, text.reason_time) == (user, when)
    assert js == text
    assert text.owned == reason.startswith(reasons.PREFIX)


def test_expand_uses_hostlist_and_rejects_bad_expressions():
    assert expand("node[1-3],gpu-a[01-02]") == ["node1", "node2", "node3", "gpu-a01", "gpu-a02"]
    with pytest.raises(SlurmError):
        expand("node[1-")
