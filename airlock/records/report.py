"""Plain-text rendering for people: tables and terminal progress."""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from typing import Any


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    cells = [[str(h) for h in headers]] + [["" if c is None else str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = []
    for n, r in enumerate(cells):
        lines.append("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def key_figure(record: dict[str, Any]) -> str:
    figs = record.get("figures") or {}
    for key in ("busbw_gbps", "min_tflops", "found"):
        if key in figs:
            floor = figs.get("floor") or figs.get("expected")
            return f"{figs[key]}" + (f" / {floor}" if floor not in (None, "") else "")
    return ""


def run_table(run: dict[str, Any]) -> str:
    rows = [
        (r["check"], r["verdict"].upper(), r.get("detail", ""), key_figure(r),
         f"{r.get('duration_s', 0):.2f}s")
        for r in run.get("checks", [])
    ]
    head = table(("check", "verdict", "detail", "figure/floor", "duration"), rows)
    tail = (f"\n{run['node']}: {run['verdict'].upper()} at level {run['level']} "
            f"in {run['duration_s']:.2f}s")
    if run.get("profile"):
        tail += f" (profile {run['profile']})"
    return head + tail


_starts: dict[str, float] = {}


def terminal_progress(check: str, event: str, info: dict[str, Any]) -> None:
    if event == "progress":
        elapsed, remaining = info.get("elapsed"), info.get("remaining")
        parts = [f"{info['phase']}" if info.get("phase") else ""]
        if elapsed is not None:
            parts.append(f"elapsed {float(elapsed):.0f}s")
        if remaining is not None:
            parts.append(f"remaining {float(remaining):.0f}s")
        sys.stderr.write(f"  {check:<16} running {' '.join(p for p in parts if p):<40}\r")
        sys.stderr.flush()
        return
    if event == "start":
        _starts[check] = time.monotonic()
        sys.stderr.write(f"  {check:<16} running (timeout {info['timeout']:.0f}s)\r")
    else:
        took = time.monotonic() - _starts.pop(check, time.monotonic())
        sys.stderr.write(f"  {check:<16} {info['verdict'].upper():<5} {took:6.2f}s"
                         f"  {info.get('detail', '')}\n")
    sys.stderr.flush()
