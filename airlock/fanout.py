"""Read many nodes' files at once, within a deadline for all.

Plain daemon threads, not an executor: a read stuck in the kernel on a hung shared filesystem
must hold up neither the caller nor the interpreter's exit."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

WORKERS = 8


def each(fn: Callable[[str], Any], items: list[str], timeout: float,
         name: str = "fanout") -> dict[str, Any]:
    """{item: fn(item)} for the items done within timeout seconds; those whose fn raised or
    returned None are left out too (one node's bad file must not hide the rest)."""
    out: dict[str, Any] = {}
    if not items:
        return out
    lock = threading.Lock()

    def work(chunk: list[str]) -> None:
        for item in chunk:
            try:
                value = fn(item)
            except Exception:
                value = None
            if value is not None:
                with lock:
                    out[item] = value

    workers = min(WORKERS, len(items))
    threads = [threading.Thread(target=work, args=(items[i::workers],), daemon=True, name=name)
               for i in range(workers)]
    deadline = time.monotonic() + timeout
    for t in threads:
        t.start()
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    with lock:
        return dict(out)
