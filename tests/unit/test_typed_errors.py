"""Airlock's own trouble and Slurm's answers are typed where they happen (airlock/errors.py),
never read back from an error's message text (CONTRIBUTING.md). A caller that decides by
`"words" in str(exc)` breaks silently when the words change (another Slurm release, a reworded
message of ours); this holds the rule over the product's code."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EXC = r"(?:exc|err|error|ex|e)"
# Deciding by an exception's text: `"..." in str(exc)`, `str(exc) == / .startswith(...)`, a
# regular expression over it, or its args.
READS = re.compile(
    rf"\bin\s+str\({EXC}\)|str\({EXC}\)\s*(?:==|!=|\.(?:startswith|endswith|find|index|count|"
    rf"lower)\()|re\.(?:search|match|fullmatch)\([^\n]*str\({EXC}\)|\bin\s+{EXC}\.args\b")


def test_no_caller_decides_by_an_error_s_message_text():
    hits = []
    for folder in ("airlock", "hooks", "checks"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            for no, line in enumerate(path.read_text().splitlines(), 1):
                if READS.search(line):
                    hits.append(f"{path.relative_to(ROOT)}:{no}: {line.strip()}")
    assert not hits, "decided by message text, not by type:\n" + "\n".join(hits)


def test_the_pattern_sees_what_it_must():
    assert READS.search('if "Duplicate reservation name" in str(exc):')
    assert READS.search("if str(err).startswith('slurm_update error')")
    assert not READS.search('detail = " ".join(str(exc).split())')
