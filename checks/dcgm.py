"""DCGM diagnostics as a check: `dcgmi diag -r <level> -j`, parsed into per-test, per-GPU results
with DCGM's own messages in the detail.

Which DCGM level runs at which Airlock level is config ([dcgm] quick_level, standard_level,
deep_level; 0 = not at that level), with AWS PCS's QUICK/MEDIUM/LONG (DCGM levels 1-3) as the
model: standard (registration) runs level 2, deep runs level 3, the quick level none (the
periodic hook's 30 s budget cannot hold even level 1 on every SKU).

What is whose fault:
* a test DCGM reports as Fail is the node's: FAIL, naming the GPU, the test and DCGM's message
  (a test listed in [dcgm] warn_tests only warns);
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

from airlock.checks.base import Outcome, failed, inconclusive, passed, skipped, warned

CHECK = "dcgm"
SEARCH_PATH = "/usr/bin:/usr/local/bin:/usr/sbin:/opt/nvidia/dcgm/bin"
NAMES = ("DCGM Diagnostic", "DCGM GPU Diagnostic")  # 4.x, then 1.x-3.x
STATUSES = {"pass": "pass", "fail": "fail", "warn": "warn", "warning": "warn", "skip": "skip",
            "skipped": "skip", "not run": "not_run", "not_run": "not_run"}
MAX_MESSAGE = 120


class DcgmParseError(ValueError):
    """dcgmi's output is not a DCGM result document."""


class DiagResult(NamedTuple):
    """One test's result on one entity (a GPU, several GPUs in older shapes, or the node)."""

    test: str
    category: str
    entity: str  # "gpu3", "gpu0,gpu1", "cpu0", "switch1", "" (node-wide)
    status: str  # pass, fail, warn, skip, not_run, or the raw word when unknown
    messages: tuple[str, ...] = ()


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
                                          _messages(res)))
            if not entries and summary is not None:  # a test with only its summary
                results.append(DiagResult(name, category, "", _status(summary.get("status")),
                                          _messages(summary)))
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


# --- the verdict (pure) ----------------------------------------------------------------------
def verdict(report: Report, level: int, warn_tests: list[str] | tuple[str, ...] = ()) -> Outcome:
    figures: dict[str, Any] = {"level": level, "version": report.version,
                               "driver": report.driver, "tests": {}}
    for r in report.results:
        figures["tests"].setdefault(r.test, {})[r.entity or "node"] = r.status
    if report.runtime_error and not report.results:
        return inconclusive(CHECK, f"DCGM did not run: {_short(report.runtime_error)}", **figures)
    if not report.results:
        return inconclusive(CHECK, "DCGM reported no test results", **figures)
    fails = [r for r in report.results if r.status == "fail" and r.test not in warn_tests]
    soft = [r for r in report.results if r.status == "warn"
            or (r.status == "fail" and r.test in warn_tests)]
    unknown = [r for r in report.results if r.status not in STATUSES.values()]
    figures["failed"] = [_line(r) for r in fails]
    figures["warned"] = [_line(r) for r in soft]
    if fails:
        more = f" (+{len(fails) - 1} more)" if len(fails) > 1 else ""
        return failed(CHECK, f"{_line(fails[0])}{more}", **figures)
    if unknown:
        r = unknown[0]
        return inconclusive(CHECK, f"DCGM status {r.status!r} of {r.test} not understood",
                            **figures)
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
    """Run dcgmi in a session of its own; on timeout the whole session is killed."""
    import signal
    import subprocess
    import time

    started = time.monotonic()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL, text=True, errors="replace",
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            out, err = proc.communicate(timeout=5)
        except subprocess.TimeoutExpired:  # a child holds the pipes open: give up on them
            out, err = "", ""
        return Ran(out, err, None, True, time.monotonic() - started)
    except BaseException:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        raise
    return Ran(out, err, proc.returncode, False, time.monotonic() - started)


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
    return Outcome(out.check, out.verdict, out.detail, figures, out.remediation)


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
