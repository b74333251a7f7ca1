"""Finding the bad node(s) behind a failed group test, without blaming the whole group, in a
number of rounds that grows with the logarithm of the group, not with the group.

Tests run in rounds. The tests of one round are over disjoint nodes, so they can run side by
side (the registration batch's leader and `airlock check` do), and a round takes the time of
one test. Round by round:

* a part (two or more suspects) is tested whole: a pass clears all of it; a failure splits it in
  two halves, both tested the next round (a half of one node becomes a single);
* a single suspect is tested with a node already proven good (a reference; each reference
  serves one test per round): a pass clears it, a failure counts against it, and it is blamed
  after 1 + confirm failures (a loaded network or a slow rendezvous must not get a healthy node
  drained);
* while no reference exists (every part failed down to single nodes, e.g. a bad node in each
  half of a small group), disjoint pairs of suspects are tried until one passes.

A test may also answer None: no verdict (no member could tell: the round timed out as a whole,
a launch failed). That is evidence against nobody: a part without a verdict is split and
retried smaller, like a failed one; a single is retried once, in a later round, then left
inconclusive. Blame comes from verdicts only.

One bad node among n costs 1 + ceil(log2 n) + 1 + confirm rounds (the whole, the halvings, its
pairing and the confirmation) and about two tests per round; a second bad node in the other
half costs no extra round. bench/bench_scale.py --group counts them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

# True when the collective over these nodes passes, False when it fails, None: no verdict.
GroupTest = Callable[[list[str]], "bool | None"]
# One round: the result of every test, in order; the tests are over disjoint nodes.
RoundTest = Callable[[list[list[str]]], "list[bool | None]"]


@dataclass
class Search:
    bad: list[str] = field(default_factory=list)
    good: list[str] = field(default_factory=list)
    inconclusive: list[str] = field(default_factory=list)
    tests: list[tuple[list[str], bool | None]] = field(default_factory=list)
    rounds: int = 0
    no_verdict: bool = False  # some test gave no verdict


_UNSET = object()


@dataclass
class _Single:
    node: str
    fails: int = 0
    nones: int = 0


def find_culprits(suspects: Sequence[str], test: GroupTest | None = None,
                  known_good: Sequence[str] = (), max_tests: int = 64, confirm: int = 1, *,
                  test_round: RoundTest | None = None, max_rounds: int = 0,
                  stop: Callable[[], bool] | None = None, whole: object = _UNSET) -> Search:
    """Search suspects with test (one test at a time) or test_round (a round of disjoint tests
    at once). max_tests, max_rounds (0: no limit) and stop() (asked before each round: True
    ends the search, e.g. out of time) bound the search; whoever is not decided then is
    inconclusive. whole: the result of a test of all suspects together already run (not run
    again; it counts as the first round)."""
    if (test is None) == (test_round is None):
        raise ValueError("give exactly one of test and test_round")
    if test_round is None:
        def test_round(groups: list[list[str]]) -> list[bool | None]:
            return [test(g) for g in groups]

    s = Search(good=list(known_good))
    parts: list[list[str]] = [list(suspects)] if len(suspects) > 1 else []
    singles = [_Single(n) for n in suspects] if len(suspects) == 1 else []
    tried_pairs: set[frozenset[str]] = set()
    if whole is not _UNSET and len(suspects) > 1:
        s.tests.append((list(suspects), whole))  # type: ignore[arg-type]
        s.rounds = 1
        s.no_verdict = whole is None
        if whole:
            s.good.extend(suspects)
            return s
        half = len(suspects) // 2
        parts, singles = [], []
        for piece in (list(suspects[:half]), list(suspects[half:])):
            if len(piece) > 1:
                parts.append(piece)
            else:
                singles.append(_Single(piece[0]))
        if len(suspects) == 2:
            tried_pairs.add(frozenset(suspects))

    def budget() -> int:
        left = max_tests - len(s.tests)
        if (max_rounds and s.rounds >= max_rounds) or (stop is not None and stop()):
            return 0
        return left

    while parts or singles:
        planned: list[tuple[str, list[str], object]] = []
        for part in parts:
            planned.append(("part", part, part))
        parts = []
        refs = iter(s.good)
        waiting: list[_Single] = []
        for one in singles:
            ref = next(refs, None)
            if ref is None:
                waiting.append(one)
            else:
                planned.append(("single", [one.node, ref], one))
        singles = []
        if not planned:
            # No reference anywhere: try disjoint pairs of suspects not paired before.
            free = [w.node for w in waiting]
            taken: set[str] = set()
            for i, a in enumerate(free):
                for b in free[i + 1:]:
                    if a in taken or b in taken or frozenset((a, b)) in tried_pairs:
                        continue
                    planned.append(("pair", [a, b], None))
                    taken.update((a, b))
            if not planned:
                s.inconclusive.extend(free)
                break
        left = budget()
        if left <= 0:
            break  # out of tests or rounds: whoever is undecided is inconclusive (below)
        run, later = planned[:left], planned[left:]
        results = test_round([list(nodes) for _kind, nodes, _item in run])
        s.rounds += 1
        for (kind, nodes, item), ok in zip(run, results, strict=True):
            s.tests.append((list(nodes), ok))
            if ok is None:
                s.no_verdict = True
            if kind == "part":
                if len(nodes) == 2:
                    tried_pairs.add(frozenset(nodes))
                if ok:
                    s.good.extend(nodes)
                    continue
                half = len(nodes) // 2
                for piece in (nodes[:half], nodes[half:]):
                    if len(piece) > 1:
                        parts.append(piece)
                    else:
                        singles.append(_Single(piece[0]))
            elif kind == "single":
                one = item
                if ok:
                    s.good.append(one.node)
                elif ok is None:
                    one.nones += 1
                    (s.inconclusive.append(one.node) if one.nones >= 2 else singles.append(one))
                else:
                    one.fails += 1
                    (s.bad.append(one.node) if one.fails >= 1 + confirm else singles.append(one))
            else:  # a pair of suspects, while no reference exists
                tried_pairs.add(frozenset(nodes))
                if ok:
                    s.good.extend(nodes)
        # Tests cut by the budget this round come first next round.
        for kind, nodes, item in later:
            if kind == "part":
                parts.insert(0, nodes)
            elif kind == "single":
                singles.insert(0, item)
        paired = {n for kind, nodes, _i in run if kind == "pair" and
                  set(nodes) <= set(s.good) for n in nodes}
        singles += [w for w in waiting if w.node not in paired]
    decided = set(s.good) | set(s.bad) | set(s.inconclusive)
    s.inconclusive += [n for n in suspects if n not in decided]
    return s
