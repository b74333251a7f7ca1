"""The docs stay true: every config key in the code is in docs/config.md and every key there is
in the code; every metric the code defines is in docs/metrics.md; every status field is in
docs/status-schema.md; the example config covers every key with its default."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

from airlock.admin import render
from airlock.config import loader as config_mod
from airlock.config.sections import is_section, settings_of

DOCS = Path(__file__).resolve().parents[2] / "docs"


def code_keys() -> dict[str, set[str]]:
    """{table: keys}; "" is the top level, nested dataclasses are "section.sub" tables."""
    out = {"": set(config_mod.TOP_LEVEL)}

    def walk(name: str, cls: type) -> None:
        out[name] = set()
        for f in settings_of(cls):
            default = f.initial()
            if is_section(default):
                walk(f"{name}.{f.name}", type(default))
            else:
                out[name].add(f.name)

    for name, spec in config_mod.SECTIONS.items():
        walk(name, config_mod._resolve(spec))
    return out


def doc_keys() -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    table = None
    for line in (DOCS / "config.md").read_text().splitlines():
        m = re.match(r"^## (?:\[(?P<name>[\w.]+)\]|Top level)\s*$", line)
        if m:
            table = m.group("name") or ""
            out.setdefault(table, set())
            continue
        m = re.match(r"^\| `(\w+)` \|", line)
        if m and table is not None:
            out[table].add(m.group(1))
    return out


def test_config_reference_matches_code_both_ways():
    code, docs = code_keys(), doc_keys()
    missing = sorted(f"[{t}] {k}" for t, keys in code.items() for k in keys - docs.get(t, set()))
    stale = sorted(f"[{t}] {k}" for t, keys in docs.items() for k in keys - code.get(t, set()))
    assert not missing, f"keys in the code but not in docs/config.md: {missing}"
    assert not stale, f"keys in docs/config.md that the code does not have: {stale}"


def test_config_reference_defaults_match_code():
    model = {(t["name"], k["key"]): k["value"] for t in render.config_model() for k in t["keys"]}
    wrong = []
    table = None
    for line in (DOCS / "config.md").read_text().splitlines():
        m = re.match(r"^## (?:\[(?P<name>[\w.]+)\]|Top level)\s*$", line)
        if m:
            table = m.group("name") or ""
        m = re.match(r"^\| `(\w+)` \| `(.*?)` \|", line)
        if m and (table, m.group(1)) in model \
                and m.group(2).replace("\\|", "|") != model[(table, m.group(1))]:
            wrong.append(f"[{table}] {m.group(1)}: docs {m.group(2)}, code "
                         f"{model[(table, m.group(1))]}")
    assert not wrong, wrong


def test_example_config_has_every_key_at_its_default(tmp_path):
    text = render.example_config()
    raw = tomllib.loads(text)
    for table, keys in code_keys().items():
        node = raw
        for part in filter(None, table.split(".")):
            node = node[part]
        present = {k for k, v in node.items() if not (isinstance(v, dict) and k not in keys)}
        assert present == keys, table
    path = tmp_path / "airlock.toml"
    path.write_text(text)
    cfg = config_mod.load(path)
    for name, spec in config_mod.SECTIONS.items():
        cls = config_mod._resolve(spec)
        assert cfg.section(name) == cls(), name  # every value is the code's default


def test_every_metric_is_documented():
    from airlock.records import node_metrics
    from airlock.status import collect as status
    from airlock.status import metrics

    run = {"verdict": "fail", "duration_s": 1.0, "finished_at": 2.0,
           "checks": [{"check": "c", "verdict": "fail", "duration_s": 1.0, "attempts": 1,
                       "figures": {"x": 1}}]}
    row = {"node": "n", "airlock": "failed", "last_check_at": 1.0, "duration_s": 1.0,
           "results_source": "shared", "stuck": "", "errors": {"prolog": "fail open: x"}}
    regs = [node_metrics.node_registry("n", {"quick": run}),
            metrics.controller_registry(
                {"nodes": [row], "summary": dict.fromkeys(status.STATES, 0),
                 "conditions": dict.fromkeys(status.CONDITIONS, 0), "generated_at": 1.0},
                {"actions": {("reboot", "done"): 1}, "breaker_open": False, "in_flight": 0,
                 "refailed": [("n", "gpu_count", "reboot")], "heartbeat": 1.0})]
    names = {s.name for reg in regs for fam in reg.collect() for s in fam.samples}
    documented = set(re.findall(r"^\| `(airlock_\w+)` \|", (DOCS / "metrics.md").read_text(),
                                re.M))
    assert names == documented


def test_every_status_field_is_documented():
    schema = json.loads((DOCS / "status-schema.json").read_text())
    fields = (set(schema["properties"]) | set(schema["$defs"]["node"]["properties"])
              | set(schema["$defs"]["run"]["properties"]))
    documented = set(re.findall(r"^\| `(\w+)` \|", (DOCS / "status-schema.md").read_text(),
                                re.M))
    assert fields <= documented, fields - documented
    from airlock.status import collect as status

    section = (DOCS / "status-schema.md").read_text().split("## States", 1)[1]
    assert set(re.findall(r"^\| `([\w-]+)` \|", section, re.M)) == set(status.STATES)


def test_rendered_fragment_lines_are_explained_in_the_guide():
    guide = (DOCS / "guide.md").read_text()
    for line in render.slurm_conf("26.05").splitlines():
        if line and not line.startswith("#"):
            assert f"`{line.split('=')[0]}" in guide, line


def test_config_reference_meanings_are_the_code_s_own():
    """docs/config.md, `airlock render config` and the code say the same: each key's meaning on
    the page is its field's `doc` metadata, word for word."""
    page: dict[tuple[str, str], str] = {}
    table = None
    for line in (DOCS / "config.md").read_text().splitlines():
        m = re.match(r"^## (?:\[(?P<name>[\w.]+)\]|Top level)\s*$", line)
        if m:
            table = m.group("name") or ""
            continue
        m = re.match(r"^\| `(\w+)` \| `.*` \| (.*) \|$", line)
        if m and table is not None:
            page[(table, m.group(1))] = m.group(2).replace("\\|", "|")
    code = {(t["name"], k["key"]): k["comment"] for t in render.config_model() for k in t["keys"]}
    differ = sorted(f"[{t}] {k}" for (t, k), text in code.items() if page.get((t, k)) != text)
    assert not differ, f"meaning in docs/config.md differs from the code's doc: {differ}"
    assert all(code.values()), [k for k, v in code.items() if not v]


# --- docs/claims.md: each claim's tests exist ----------------------------------------------------
TEST_REF = re.compile(r"`(tests/(?:unit|cluster)/[\w/]+\.py)::(\w+)`")


def claims_rows() -> list[tuple[str, list[tuple[str, str]]]]:
    """(claim number, [(test file, test function), ...]) for each row of the claims table."""
    rows = []
    for line in (DOCS / "claims.md").read_text().splitlines():
        m = re.match(r"^\| (\d+) \|", line)
        if m:
            rows.append((m.group(1), TEST_REF.findall(line)))
    return rows


def test_every_test_docs_claims_names_exists():
    """docs/claims.md maps each main claim of the README, the guide and the security page to
    the tests that fail when it breaks: every one it names is a test function in that file,
    and every row names at least one."""
    import ast

    root = DOCS.parent
    rows = claims_rows()
    assert len(rows) >= 50, len(rows)
    numbers = [n for n, _ in rows]
    assert numbers == [str(i) for i in range(1, len(rows) + 1)], numbers  # numbered in order
    defined: dict[str, set[str]] = {}
    missing = []
    for number, refs in rows:
        if not refs:
            missing.append(f"claim {number}: names no test")
        for path, name in refs:
            if path not in defined:
                file = root / path
                tree = ast.parse(file.read_text()) if file.is_file() else ast.Module([], [])
                defined[path] = {n.name for n in tree.body
                                 if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}
            if name not in defined[path] or not name.startswith("test_"):
                missing.append(f"claim {number}: {path}::{name}")
    assert not missing, missing
