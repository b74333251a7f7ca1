"""Finding the bad node(s) behind a failed group test, without blaming the whole group.

A collective over N nodes fails as a whole when one member is slow or corrupts data. We split
the suspects and test the parts (each part padded with a known-good node when it would be alone,
since a collective needs two members); a part that passes clears all its members. A node is
blamed only when a test it shares with nothing but known-good nodes fails. When no known-good
node exists to pair with, the remaining suspects are reported as inconclusive, never drained.

A test may also answer None: no verdict (a member never reported: a launch failure, an srun
error). That says nothing about any node, so the search stops there: nodes already cleared stay
good, nodes already blamed (on verdicts) stay bad, and every other suspect is inconclusive.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

# True when the collective over these nodes passes, False when it fails, None: no verdict.
GroupTest = Callable[[list[str]], "bool | None"]


@dataclass
class Search:
    bad: list[str] = field(default_factory=list)
    good: list[str] = field(default_factory=list)
    inconclusive: list[str] = field(default_factory=list)
    tests: list[tuple[list[str], bool | None]] = field(default_factory=list)
    no_verdict: bool = False  # the search stopped at a test without a verdict


class _NoVerdict(Exception):
    pass


def find_culprits(suspects: Sequence[str], test: GroupTest,
                  known_good: Sequence[str] = (), max_tests: int = 64,
                  confirm: int = 1) -> Search:
    """confirm: re-runs of a failing pairing before its suspect is blamed (a loaded network or
    a slow rendezvous must not get a healthy node drained)."""
    s = Search(good=list(known_good))
    try:
        _search(s, list(suspects), test, max_tests, confirm)
    except _NoVerdict:
        s.no_verdict = True
        decided = set(s.good) | set(s.bad)
        s.inconclusive = [n for n in suspects if n not in decided]
    return s


def _search(s: Search, suspects: list[str], test: GroupTest, max_tests: int,
            confirm: int) -> None:
    def run(nodes: list[str]) -> bool:
        ok = test(nodes)
        s.tests.append((list(nodes), ok))
        if ok is None:
            raise _NoVerdict
        return ok

    def reference() -> str | None:
        return s.good[0] if s.good else None

    def blame(node: str, ref: str) -> None:
        for _ in range(1 + confirm):
            if run([node, ref]):
                s.good.append(node)
                return
            if len(s.tests) >= max_tests:
                s.inconclusive.append(node)
                return
        s.bad.append(node)

    pending = [suspects]
    while pending:
        part = pending.pop(0)
        if len(s.tests) >= max_tests:
            s.inconclusive.extend(part)
            continue
        if len(part) == 1:
            ref = reference()
            if ref is None:
                # Nothing proven good yet: wait until some other part clears a node.
                if any(len(p) > 1 for p in pending):
                    pending.append(part)
                else:
                    s.inconclusive.extend(part)
                continue
            blame(part[0], ref)
            continue
        if run(part):
            s.good.extend(part)
            continue
        half = len(part) // 2
        pending.extend([part[:half], part[half:]])
    if s.inconclusive and not s.good:
        # Every part failed (e.g. one bad node in each half): look for any passing pair among
        # the suspects to serve as the reference.
        stuck = s.inconclusive
        for i, a in enumerate(stuck):
            for b in stuck[i + 1:]:
                if s.good or len(s.tests) >= max_tests:
                    break
                if run([a, b]):
                    s.good.extend([a, b])
        s.inconclusive = [n for n in stuck if n not in s.good]
    # A suspect left inconclusive may be resolvable now that more nodes are known good.
    retry, s.inconclusive = s.inconclusive, []
    for node in retry:
        ref = reference()
        if ref is None or len(s.tests) >= max_tests:
            s.inconclusive.append(node)
        else:
            blame(node, ref)
