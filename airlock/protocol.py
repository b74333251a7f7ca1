"""Marked lines: how Airlock's child processes hand structured answers to their parents.

A child prints one JSON object per line after a fixed mark; the parent reads the lines with that
mark and ignores everything else (library noise, tracebacks, other marks). A damaged or non-object
payload is dropped, never trusted: the parent then treats the child as having given no answer.

    AIRLOCK-RESULT {...}           stdout  `python -m airlock.runner one CHECK`: the check's outcome
    AIRLOCK-PROGRESS CHECK {...}   stderr  an isolated check's progress, relayed live
    AIRLOCK-NODE {...}             stdout  `python -m airlock.ondemand node-worker`: the node's run
    AIRLOCK-GROUP {...}            stdout  an on-demand group member's answer
    AIRLOCK-DIST {...}             stdout  `python -m airlock.collective worker`: the node's report

A line longer than MAX_LINE bytes goes out in parts, `<MARK>-PART <id> <i>/<n> <piece>`, each
under MAX_LINE, which the readers join again. srun merges its tasks' stdout in messages of at
most 1 KiB (slurmstepd's MAX_MSG_LEN): a longer line written by two nodes at the same moment
comes out interleaved, and both answers were lost. A line under that size arrives whole.
"""

from __future__ import annotations

import json
import os
import sys
from collections import deque
from collections.abc import Iterator, Mapping
from typing import Any, TextIO

RESULT = "AIRLOCK-RESULT "
PROGRESS = "AIRLOCK-PROGRESS "
NODE = "AIRLOCK-NODE "
GROUP = "AIRLOCK-GROUP "
DIST = "AIRLOCK-DIST "
MAX_LINE = 1000  # bytes with the newline; slurmstepd forwards task output in 1024-byte messages


def line(mark: str, payload: Mapping[str, Any], tag: str = "") -> str:
    """One marked line (no newline); tag goes between the mark and the JSON (PROGRESS)."""
    return mark + (f"{tag} " if tag else "") + json.dumps(payload)


def emit(mark: str, payload: Mapping[str, Any], stream: TextIO | None = None,
         tag: str = "") -> None:
    """Write one marked line, or its parts when it is longer than MAX_LINE (untagged marks)."""
    out = stream if stream is not None else sys.stdout
    text = line(mark, payload, tag)
    if len(text) < MAX_LINE or tag:
        out.write(text + "\n")
    else:
        out.write("".join(part + "\n" for part in parts(mark, json.dumps(payload))))
    out.flush()


def part_mark(mark: str) -> str:
    return mark.rstrip() + "-PART "


def parts(mark: str, body: str) -> list[str]:
    """The part lines that carry body (ASCII JSON, so a character is a byte)."""
    pid = os.urandom(6).hex()  # one answer's parts, told from another task's on the same stream
    head = len(part_mark(mark)) + len(pid) + 2 * 6 + 4  # "<id> <i>/<n> ", up to 999999 parts
    size = MAX_LINE - 1 - head
    pieces = [body[i:i + size] for i in range(0, len(body), size)] or [""]
    n = len(pieces)
    return [f"{part_mark(mark)}{pid} {i}/{n} {piece}" for i, piece in enumerate(pieces, 1)]


def parse(text_line: str, mark: str, tagged: bool = False) -> tuple[str, dict[str, Any]] | None:
    """(tag, payload) from one line carrying mark, else None (other line, or damaged)."""
    if not text_line.startswith(mark):
        return None
    rest = text_line[len(mark):].rstrip("\n")
    tag = ""
    if tagged:
        tag, _, rest = rest.partition(" ")
    try:
        payload = json.loads(rest)
    except ValueError:
        return None
    return (tag, payload) if isinstance(payload, dict) else None


def answers(text: str, mark: str) -> Iterator[dict[str, Any] | None]:
    """Every answer with mark in text, in the order each was complete; None for a damaged one
    (a line that does not parse, parts that do not join or never all came)."""
    pmark = part_mark(mark)
    pending: dict[str, dict[int, str]] = {}
    sizes: dict[str, int] = {}
    for ln in text.splitlines():
        if ln.startswith(mark):
            found = parse(ln, mark)
            yield found[1] if found else None
            continue
        if not ln.startswith(pmark):
            continue
        pid, _, rest = ln[len(pmark):].partition(" ")
        seq, _, piece = rest.partition(" ")
        i, _, n = seq.partition("/")
        if not (i.isdigit() and n.isdigit() and 1 <= int(i) <= int(n)) or \
                sizes.setdefault(pid, int(n)) != int(n):
            yield None
            continue
        got = pending.setdefault(pid, {})
        got[int(i)] = piece
        if len(got) == sizes[pid]:
            del pending[pid]
            found = parse(mark + "".join(got[k] for k in range(1, sizes[pid] + 1)), mark)
            yield found[1] if found else None
    for _ in pending:  # parts that never all came: a damaged answer, last in order
        yield None


def all_of(text: str, mark: str) -> list[dict[str, Any]]:
    """Every well-formed payload with mark in text, in order."""
    return [p for p in answers(text, mark) if p is not None]


def last(text: str, mark: str) -> dict[str, Any] | None:
    """The last answer with mark, when it is well-formed; None when absent or damaged (a damaged
    last answer is not replaced by an older one)."""
    tail = deque(answers(text, mark), maxlen=1)
    return tail[0] if tail else None
