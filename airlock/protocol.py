"""Marked lines: how Airlock's child processes hand structured answers to their parents.

A child prints one JSON object per line after a fixed mark; the parent reads the lines with that
mark and ignores everything else (library noise, tracebacks, other marks). A damaged or non-object
payload is dropped, never trusted: the parent then treats the child as having given no answer.

    AIRLOCK-RESULT {...}           stdout  `python -m airlock.runner one CHECK`: the check's outcome
    AIRLOCK-PROGRESS CHECK {...}   stderr  an isolated check's progress, relayed live
    AIRLOCK-NODE {...}             stdout  `python -m airlock.ondemand node-worker`: the node's run
    AIRLOCK-GROUP {...}            stdout  an on-demand group member's answer
    AIRLOCK-DIST {...}             stdout  `python -m airlock.dist worker`: the node's report
"""

from __future__ import annotations

import json
import sys
from typing import Any, TextIO

RESULT = "AIRLOCK-RESULT "
PROGRESS = "AIRLOCK-PROGRESS "
NODE = "AIRLOCK-NODE "
GROUP = "AIRLOCK-GROUP "
DIST = "AIRLOCK-DIST "


def line(mark: str, payload: dict[str, Any], tag: str = "") -> str:
    """One marked line (no newline); tag goes between the mark and the JSON (PROGRESS)."""
    return mark + (f"{tag} " if tag else "") + json.dumps(payload)


def emit(mark: str, payload: dict[str, Any], stream: TextIO | None = None, tag: str = "") -> None:
    out = stream if stream is not None else sys.stdout
    out.write(line(mark, payload, tag) + "\n")
    out.flush()


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


def all_of(text: str, mark: str) -> list[dict[str, Any]]:
    """Every well-formed payload with mark in text, in order."""
    found = (parse(ln, mark) for ln in text.splitlines())
    return [p for _tag, p in filter(None, found)]


def last(text: str, mark: str) -> dict[str, Any] | None:
    """The last line with mark, when it is well-formed; None when absent or damaged (a damaged
    last answer is not replaced by an older one)."""
    for ln in reversed(text.splitlines()):
        if ln.startswith(mark):
            found = parse(ln, mark)
            return found[1] if found else None
    return None
