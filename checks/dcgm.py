"""DCGM diagnostics as a check: `dcgmi diag -r <level> -j`, parsed into per-test, per-GPU results
with DCGM's own messages in the detail.

Which DCGM level runs at which Airlock level is config ([dcgm] quick_level, standard_level,
deep_level; 0 = not at that level), with AWS PCS's QUICK/MEDIUM/LONG (DCGM levels 1-3) as the
model: standard (registration) runs level 2, deep runs level 3, the quick level none (the
periodic hook's 30 s budget cannot hold even level 1 on every SKU).

What is whose fault, read from DCGM's own numeric classification of each finding where the
document has it (4.x: error_severity, error_category, error_id; dcgm_errors.h), never from prose:
* a test DCGM reports as Fail is the node's: FAIL, naming the GPU, the test and DCGM's message
  (a test listed in [dcgm] warn_tests only warns);
* unless every finding of that Fail is one DCGM calls a configuration (severity
  DCGM_ERROR_CONFIG, e.g. persistence mode disabled: id 29, category SOFTWARE_OTHER): the node
  is held with a reason naming the setting, typed Outcome.finding = "config", which recovery
  leaves to an operator (a reboot or a new node fixes no setting); one DCGM files as its own
  internal trouble (category INTERNAL_OTHER) is inconclusive;
* a hardware test (any outside the Deployment category) of which no result ran (every one
  Skip or Not Run: DCGM gated the plugin off on this SKU) proves nothing: inconclusive, naming
  the tests that never ran, so the suite lists dcgm as unseen, never a pass;
* a document that carries a runtime_error did not finish: inconclusive, whatever results it
  holds;
* DCGM that hangs past its time, cannot reach its host engine, or answers with something that
  is not a result document did not look at the node: the check is inconclusive
  (Verdict.ERROR: Airlock's own trouble, retried, never a hardware verdict);
* no dcgmi on the node: skipped with the reason, and the torch checks stand.

dcgmi exits non-zero when a test fails (226 is DCGM_ST_NVVS_ERROR as an unsigned byte), so the
exit code alone decides nothing: the document does. The parser reads the document shapes of
DCGM 1.7 to 4.x (tests/data/dcgm/ holds recorded ones and says where each came from): under
"DCGM GPU Diagnostic" (up to 3.x) or "DCGM Diagnostic" (4.x), categories of tests, each test's
results per entity (4.x "entity_group"/"entity_id", 3.x "gpu_id"/"gpu_ids", or none for a
node-wide result), warnings as objects or plain strings, `null` entries skipped, and any banner
text before the JSON ignored. A status word it does not know is never read as a pass.

Killing dcgmi on a timeout stops the client only: the run itself belongs to nv-hostengine and
may go on (a later run then reports "already running", which is inconclusive too).
"""

from __future__ import annotations

import json
import os
from typing import Any, NamedTuple

from airlock.checks.base import (
    CONFIG,
    Outcome,
    Verdict,
    failed,
    inconclusive,
    passed,
    skipped,
    warned,
)

CHECK = "dcgm"
SEARCH_PATH = "/usr/bin:/usr/local/bin:/usr/sbin:/opt/nvidia/dcgm/bin"
NAMES = ("DCGM Diagnostic", "DCGM GPU Diagnostic")  # 4.x, then 1.x-3.x
STATUSES = {"pass": "pass", "fail": "fail", "warn": "warn", "warning": "warn", "skip": "skip",
            "skipped": "skip", "not run": "not_run", "not_run": "not_run"}
MAX_MESSAGE = 120


class DcgmParseError(ValueError):
    """dcgmi's output is not a DCGM result document."""


# DCGM's classification of a finding (dcgmlib/dcgm_errors.h, DCGM 4.x).
SEVERITY_CONFIG = 5  # DCGM_ERROR_CONFIG: "This error can be configured"
CATEGORY_INTERNAL = 16  # DCGM_FR_EC_INTERNAL_OTHER: DCGM's own trouble
DEPLOYMENT = "deployment"  # the category of software/setup tests; every other one is hardware


class Finding(NamedTuple):
    """One warning of a result, with DCGM's numbers when the document has them (4.x)."""

    text: str
    error_id: int | None = None
    severity: int | None = None
    category: int | None = None

    @property
    def kind(self) -> str:
        """"config" (a setting to fix), "internal" (DCGM's own trouble) or "hardware" (the
        default: a finding without DCGM's numbers keeps its Fail, as before 4.x)."""
        if self.severity == SEVERITY_CONFIG:
            return "config"
        if self.category == CATEGORY_INTERNAL:
            return "internal"
        return "hardware"


class DiagResult(NamedTuple):
    """One test's result on one entity (a GPU, several GPUs in older shapes, or the node)."""

    test: str
    category: str
    entity: str  # "gpu3", "gpu0,gpu1", "cpu0", "switch1", "" (node-wide)
    status: str  # pass, fail, warn, skip, not_run, or the raw word when unknown
    messages: tuple[str, ...] = ()
    findings: tuple[Finding, ...] = ()

    @property
    def kind(self) -> str:
        """What a Fail found, by DCGM's classification: hardware when any finding is (or none
        is classified), else config when any is, else internal."""
        kinds = {f.kind for f in self.findings}
        if not kinds or "hardware" in kinds:
            return "hardware"
        return "config" if "config" in kinds else "internal"


class Report(NamedTuple):
    version: str = ""
    driver: str = ""
    results: tuple[DiagResult, ...] = ()
    runtime_error: str = ""


# --- the parser (pure) -----------------------------------------------------------------------
def parse(text: str) -> Report:
    """The result document in dcgmi's stdout; DcgmParseError when there is none."""
    start = text.find("{")
    if start < 0:
        raise DcgmParseError("no JSON document in dcgmi's output")
    try:
        doc, _end = json.JSONDecoder().raw_decode(text, start)
    except ValueError as exc:
        raise DcgmParseError(f"dcgmi's JSON does not parse: {exc}") from None
    if not isinstance(doc, dict):
        raise DcgmParseError("dcgmi's JSON is not an object")
    body = next((doc[n] for n in NAMES if isinstance(doc.get(n), dict)), None)
    if body is None:
        raise DcgmParseError(f"no {NAMES[0]!r} or {NAMES[1]!r} in dcgmi's JSON")
    meta = doc.get("metadata") if isinstance(doc.get("metadata"), dict) else {}
    version = _text(meta.get("version") or body.get("version") or doc.get("version"))
    driver = _text(meta.get("Driver Version Detected") or body.get("Driver Version Detected")
                   or doc.get("Driver Version Detected"))
    results: list[DiagResult] = []
    for cat in _items(body.get("test_categories")):
        category = _text(cat.get("category"))
        for test in _items(cat.get("tests")):
            name = _text(test.get("name"))
            if not name:
                continue
            entries = _items(test.get("results"))
            summary = test.get("test_summary") if isinstance(test.get("test_summary"), dict) \
                else None
            for res in entries:
                results.append(DiagResult(name, category, _entity(res), _status(res.get("status")),
                                          _messages(res), _findings(res)))
            if not entries and summary is not None:  # a test with only its summary
                results.append(DiagResult(name, category, "", _status(summary.get("status")),
                                          _messages(summary), _findings(summary)))
    return Report(version, driver, tuple(results), _text(body.get("runtime_error")))


def _items(value: Any) -> list[dict[str, Any]]:
    """A JSON list's objects; DCGM 3.x writes `null` between tests (seen in real output)."""
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def _text(value: Any) -> str:
    return value.strip() if isinstance(value, str) else ""


def _status(value: Any) -> str:
    word = _text(value).lower()
    return STATUSES.get(word, word or "missing")


def _entity(res: dict[str, Any]) -> str:
    group = _text(res.get("entity_group")).lower()
    if "entity_id" in res and isinstance(res["entity_id"], int):
        return f"{group or 'gpu'}{res['entity_id']}"
    for key in ("gpu_id", "gpu_ids"):  # 3.x: an int, or a string "0" / "0,1,2,3"
        value = res.get(key)
        if isinstance(value, bool):
            continue
        if isinstance(value, int):
            return f"gpu{value}"
        if isinstance(value, str) and value.strip():
            ids = [p.strip() for p in value.split(",") if p.strip()]
            return ",".join(f"gpu{p}" for p in ids)
    return ""


def _messages(res: dict[str, Any]) -> tuple[str, ...]:
    out = []
    for w in res.get("warnings") or ():
        if isinstance(w, str):
            text, code = w, None
        elif isinstance(w, dict):
            # 3.x dcgmi wrote a deployment test's message under "warnings" (sic)
            text = w.get("warning") if isinstance(w.get("warning"), str) else w.get("warnings")
            code = w.get("error_id")
        else:
            continue
        if isinstance(text, str) and text.strip():
            text = " ".join(text.split())
            out.append(f"{text} (DCGM error {code})" if isinstance(code, int) else text)
    return tuple(out)


def _findings(res: dict[str, Any]) -> tuple[Finding, ...]:
    out = []
    for w in res.get("warnings") or ():
        if isinstance(w, str) and w.strip():
            out.append(Finding(" ".join(w.split())))
        elif isinstance(w, dict):
            text = w.get("warning") if isinstance(w.get("warning"), str) else w.get("warnings")
            if isinstance(text, str) and text.strip():
                out.append(Finding(" ".join(text.split()), _int(w.get("error_id")),
                                   _int(w.get("error_severity")), _int(w.get("error_category"))))
    return tuple(out)


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def never_ran(results: tuple[DiagResult, ...]) -> list[str]:
    """Hardware tests (outside the Deployment category) with no result that ran: DCGM skipped
    every one of them (a plugin gated off on this SKU, a test not run)."""
    by_test: dict[str, set[str]] = {}
    for r in results:
        if r.category.lower() != DEPLOYMENT:
            by_test.setdefault(r.test, set()).add(r.status)
    return sorted(t for t, st in by_test.items() if st <= {"skip", "not_run"})


# --- the verdict (pure) ----------------------------------------------------------------------
def verdict(report: Report, level: int, warn_tests: list[str] | tuple[str, ...] = ()) -> Outcome:
    figures: dict[str, Any] = {"level": level, "version": report.version,
                               "driver": report.driver, "tests": {}}
    for r in report.results:
        figures["tests"].setdefault(r.test, {})[r.entity or "node"] = r.status
    if report.runtime_error:  # did not run, or did not finish: what it holds is partial
        what = "did not finish" if report.results else "did not run"
        return inconclusive(CHECK, f"DCGM {what}: {_short(report.runtime_error)}", **figures)
    if not report.results:
        return inconclusive(CHECK, "DCGM reported no test results", **figures)
    fails = [r for r in report.results if r.status == "fail" and r.test not in warn_tests]
    hardware = [r for r in fails if r.kind == "hardware"]
    config = [r for r in fails if r.kind == "config"]
    internal = [r for r in fails if r.kind == "internal"]
    soft = [r for r in report.results if r.status == "warn"
            or (r.status == "fail" and r.test in warn_tests)]
    unknown = [r for r in report.results if r.status not in STATUSES.values()]
    missing = never_ran(report.results)
    figures["failed"] = [_line(r) for r in hardware]
    figures["warned"] = [_line(r) for r in soft]
    if config:
        figures["config"] = [_line(r) for r in config]
    if missing:
        figures["never_ran"] = missing
    if hardware:
        more = f" (+{len(hardware) - 1} more)" if len(hardware) > 1 else ""
        return failed(CHECK, f"{_line(hardware[0])}{more}", **figures)
    if config:  # hold the node, naming the setting; an operator's, never a reboot's
        more = f" (+{len(config) - 1} more)" if len(config) > 1 else ""
        return Outcome(CHECK, Verdict.FAIL, f"config: {_line(config[0])}{more}", figures,
                       finding=CONFIG)
    if internal:
        return inconclusive(CHECK, f"DCGM's own trouble: {_line(internal[0])}", **figures)
    if unknown:
        r = unknown[0]
        return inconclusive(CHECK, f"DCGM status {r.status!r} of {r.test} not understood",
                            **figures)
    if missing:
        return inconclusive(CHECK, f"DCGM level {level}: {', '.join(missing)} never ran "
                                   "(no result of theirs ran)", **figures)
    ran = [r for r in report.results if r.status in ("pass", "warn", "fail")]
    if not ran:
        why = next((m for r in report.results for m in r.messages), "")
        return skipped(CHECK, f"DCGM level {level} skipped every test" +
                       (f": {_short(why)}" if why else ""))
    if soft:
        more = f" (+{len(soft) - 1} more)" if len(soft) > 1 else ""
        return warned(CHECK, f"{_line(soft[0])}{more}", **figures)
    tests = len({r.test for r in ran})
    gpus = len({e for r in ran for e in r.entity.split(",") if e.startswith("gpu")})
    on = f" on {gpus} GPUs" if gpus else ""
    return passed(CHECK, f"level {level}: {tests} tests passed{on} (DCGM {report.version or '?'})",
                  **figures)


def _line(r: DiagResult) -> str:
    where = f"{r.entity} " if r.entity else ""
    why = f": {_short(r.messages[0])}" if r.messages else f" {r.status}"
    return f"{where}{r.test}{why}"


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= MAX_MESSAGE else text[:MAX_MESSAGE - 3] + "..."


# --- the gather ------------------------------------------------------------------------------
class Ran(NamedTuple):
    stdout: str
    stderr: str
    returncode: int | None
    timed_out: bool
    seconds: float


def find_dcgmi(name: str) -> str | None:
    """dcgmi's path: an absolute path as given, else looked up in PATH and the usual places
    (the hooks run with no PATH)."""
    import shutil  # not on the quick path, where this check normally only says "not run"

    if os.path.isabs(name):
        return name if os.access(name, os.X_OK) and os.path.isfile(name) else None
    return shutil.which(name, path=os.pathsep.join(
        p for p in (os.environ.get("PATH", ""), SEARCH_PATH) if p))


def run_dcgmi(argv: list[str], timeout: float) -> Ran:
    """Run dcgmi in a session of its own; on timeout the whole session is killed
    (airlock.proc)."""
    from airlock.proc import run

    done = run(argv, timeout)
    return Ran(done.stdout, done.stderr, done.returncode, done.timed_out, done.seconds)

def judge_run(ran: Ran, level: int, timeout: float,
              warn_tests: list[str] | tuple[str, ...] = ()) -> Outcome:
    """The outcome of one dcgmi run (pure): a timeout or an answer that is not a result
    document is inconclusive; a document decides whatever the exit code."""
    if ran.timed_out:
        return inconclusive(CHECK, f"dcgmi diag -r {level} gave no answer within {timeout:g}s "
                                   "(killed; DCGM's trouble, not a verdict on the node)",
                            level=level, timeout_s=timeout)
    try:
        report = parse(ran.stdout)
    except DcgmParseError as exc:
        tail = (ran.stderr.strip() or ran.stdout.strip()).splitlines()
        said = f": {_short(tail[-1])}" if tail else ""
        return inconclusive(CHECK, f"dcgmi exit {ran.returncode}, {exc}{said}", level=level)
    out = verdict(report, level, warn_tests)
    figures = dict(out.figures)
    if out.figures:
        figures.update(exit=ran.returncode, seconds=round(ran.seconds, 1))
    return Outcome(out.check, out.verdict, out.detail, figures, out.remediation,
                   finding=out.finding)


def level_for(section, level: str) -> int:
    return int(getattr(section, f"{level}_level", 0) or 0)


def check_dcgm(ctx) -> Outcome:
    s = ctx.cfg.dcgm
    level = level_for(s, ctx.level)
    if not level:
        return skipped(CHECK, f"not run at level {ctx.level} ([dcgm] {ctx.level}_level = 0)")
    path = find_dcgmi(s.dcgmi)
    if path is None:
        return skipped(CHECK, f"no DCGM on this node ({s.dcgmi} not found)")
    argv = [path, "diag", "-r", str(level), "-j", *(["--host", s.host] if s.host else []),
            *s.args]
    timeout = s.timeout_for(level)
    try:
        ran = run_dcgmi(argv, timeout)
    except OSError as exc:
        return inconclusive(CHECK, f"cannot run {path}: {exc.strerror or exc}")
    return judge_run(ran, level, timeout, s.warn_tests)
