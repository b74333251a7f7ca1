"""Marked lines (airlock.protocol): answers of any size come back whole, even when srun
interleaves the lines of several nodes; a damaged answer is never trusted."""

from __future__ import annotations

import io

from hypothesis import given, settings
from hypothesis import strategies as st

from airlock import protocol

# slurmstepd forwards a task's output to srun in messages of at most 1 KiB (MAX_MSG_LEN): a
# longer line from two nodes at once comes out interleaved. Written out, not protocol.MAX_LINE:
# the test must fail if the code's own limit drifts above Slurm's.
SRUN_MESSAGE_BYTES = 1024
SRUN_MARKS = (protocol.NODE, protocol.GROUP, protocol.DIST, protocol.RESULT)


def emitted(mark: str, payload: dict, tag: str = "") -> list[str]:
    buf = io.StringIO()
    protocol.emit(mark, payload, buf, tag=tag)
    return buf.getvalue().splitlines()


def big(node: str, n: int = 300) -> dict:
    return {"node": node, "checks": [{"check": f"c{i}", "detail": "é x" * 20} for i in range(n)]}


def test_a_short_answer_is_one_line():
    lines = emitted(protocol.NODE, {"node": "n1"})
    assert lines == ['AIRLOCK-NODE {"node": "n1"}']
    assert protocol.last("noise\n" + lines[0], protocol.NODE) == {"node": "n1"}


def test_a_long_answer_goes_in_parts_under_srun_s_message_size():
    lines = emitted(protocol.NODE, big("n1"))
    assert len(lines) > 10
    assert all(ln.startswith("AIRLOCK-NODE-PART ") for ln in lines)
    assert max(len((ln + "\n").encode()) for ln in lines) <= SRUN_MESSAGE_BYTES
    assert protocol.all_of("\n".join(lines), protocol.NODE) == [big("n1")]
    assert protocol.last("\n".join(lines), protocol.NODE) == big("n1")


def test_progress_lines_keep_their_tag_and_stay_whole():
    (ln,) = emitted(protocol.PROGRESS, {"i": 1}, tag="burnin")
    assert protocol.parse(ln, protocol.PROGRESS, tagged=True) == ("burnin", {"i": 1})


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 2), min_size=0, max_size=200), st.integers(1, 400))
def test_answers_interleaved_line_by_line_all_come_back(order, size):
    """Three nodes' answers merged line by line in any order, as srun does: each comes back."""
    streams = [emitted(protocol.NODE, big(f"n{k}", size)) for k in range(3)]
    merged, cursor = [], [0, 0, 0]
    for k in order + [0, 1, 2] * max(map(len, streams)):
        if cursor[k] < len(streams[k]):
            merged.append(streams[k][cursor[k]])
            cursor[k] += 1
    got = protocol.all_of("\n".join(merged), protocol.NODE)
    assert sorted(got, key=lambda p: p["node"]) == [big(f"n{k}", size) for k in range(3)]


def test_a_damaged_answer_is_dropped_and_never_replaced_by_an_older_one():
    old = emitted(protocol.NODE, {"node": "n1", "run": 1})
    new = emitted(protocol.NODE, big("n1"))
    missing = old + new[:3] + new[4:]  # one part lost
    assert protocol.all_of("\n".join(missing), protocol.NODE) == [{"node": "n1", "run": 1}]
    assert protocol.last("\n".join(missing), protocol.NODE) is None
    bad_header = [new[0].replace("1/", "0/", 1)] + new[1:]
    assert protocol.last("\n".join(bad_header), protocol.NODE) is None
    garbled = [ln.replace('"node"', '"no', 1) for ln in new]
    assert protocol.last("\n".join(garbled), protocol.NODE) is None


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(SRUN_MARKS), st.text(max_size=2500),
       st.integers(min_value=0, max_value=1100))
def test_every_line_fits_one_srun_message(mark, text, pad):
    """Whatever the answer holds (any Unicode, escaped or not) and whatever its length around
    the limit, every line written, newline included, is at most 1,024 bytes, and the answer
    comes back whole."""
    payload = {"node": "n1", "detail": text, "pad": "x" * pad}
    lines = emitted(mark, payload)
    assert max(len((ln + "\n").encode()) for ln in lines) <= SRUN_MESSAGE_BYTES
    assert protocol.all_of("\n".join(lines), mark) == [payload]


def test_lines_just_under_and_over_the_limit():
    sizes = set()
    for pad in range(900, 1100):
        lines = emitted(protocol.NODE, {"p": "x" * pad})
        sizes.add(len(lines))
        assert all(len((ln + "\n").encode()) <= SRUN_MESSAGE_BYTES for ln in lines)
        assert protocol.last("\n".join(lines), protocol.NODE) == {"p": "x" * pad}
    assert sizes == {1, 2}  # whole while it fits, in parts beyond
