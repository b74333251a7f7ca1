"""The API's response schemas, as JSON Schema (OpenAPI 3.1 speaks it), and the OpenAPI document.

The node list is `airlock status --json` itself: its schema is docs/status-schema.json (the
package reaches it through serve/status-schema.json, a link to that file), embedded here under
components.schemas with its $defs renamed Status<Name>, never a second copy. The other
documents are described below; tests validate real answers against the served document, and
docs/openapi.json is that document, committed (a test keeps the two equal).
"""

from __future__ import annotations

import copy
import json
from importlib import resources
from typing import Any

STATUS_FILE = "status-schema.json"
KINDS = ("registration", "isolated", "check", "drain", "resume", "admin-drain", "recovery")
CHECK_STATES = ("running", "done", "refused", "error")


def ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def status_schema() -> dict[str, Any]:
    return json.loads(resources.files("airlock.serve").joinpath(STATUS_FILE).read_text())


def status_components() -> dict[str, Any]:
    """docs/status-schema.json as components: the document as StatusDocument, each $def as
    Status<Def>, their $refs rewritten."""
    doc = status_schema()
    defs = doc.pop("$defs", {})
    for key in ("$schema", "$id"):
        doc.pop(key, None)

    def name(d: str) -> str:
        return "Status" + d[:1].upper() + d[1:]

    def rewrite(node: Any) -> Any:
        if isinstance(node, dict):
            out = {}
            for k, v in node.items():
                if k == "$ref" and isinstance(v, str) and v.startswith("#/$defs/"):
                    out[k] = f"#/components/schemas/{name(v[len('#/$defs/'):])}"
                else:
                    out[k] = rewrite(v)
            return out
        if isinstance(node, list):
            return [rewrite(v) for v in node]
        return node

    out = {"StatusDocument": rewrite(doc)}
    out.update({name(k): rewrite(v) for k, v in defs.items()})
    return out


NUM = {"type": "number"}
NUM_OR_NULL = {"type": ["number", "null"]}
STR = {"type": "string"}
STR_OR_NULL = {"type": ["string", "null"]}

SCHEMAS: dict[str, Any] = {
    "Error": {
        "type": "object", "required": ["error"], "additionalProperties": False,
        "properties": {"error": {"type": "string", "description": "one line: what was wrong"}},
    },
    "Health": {
        "type": "object", "required": ["ok", "status_age_s", "status_error"],
        "properties": {"ok": {"type": "boolean"}, "status_age_s": NUM_OR_NULL,
                       "status_error": STR, "check_running": STR_OR_NULL},
    },
    "CheckRecord": {
        "type": "object", "required": ["check", "verdict"],
        "properties": {
            "check": STR, "verdict": {"enum": ["pass", "warn", "fail", "skip", "error"]},
            "detail": STR, "figures": {"type": "object"}, "duration_s": NUM,
            "attempts": {"type": "integer"}, "remediation": STR},
    },
    "Run": {
        "description": "one recorded run, as the node wrote it (airlock/records/results.py, "
                       "schema 1)",
        "type": "object",
        "required": ["node", "run_id", "level", "trigger", "verdict", "checks"],
        "properties": {
            "schema": {"const": 1}, "node": STR, "run_id": STR, "level": STR, "trigger": STR,
            "started_at": NUM_OR_NULL, "finished_at": NUM_OR_NULL, "duration_s": NUM_OR_NULL,
            "verdict": {"enum": ["pass", "warn", "fail", "error"]},
            "failed_check": STR_OR_NULL, "detail": STR, "profile": STR,
            "unseen": {"type": "array", "items": STR},
            "checks": {"type": "array", "items": ref("CheckRecord")}},
    },
    "TimelineEntry": {
        "type": "object", "required": ["at", "kind", "summary", "source"],
        "properties": {
            "at": {"type": "number", "description": "epoch seconds"},
            "kind": {"enum": list(KINDS)},
            "summary": {"type": "string", "description": "one line for people"},
            "source": {"enum": ["run", "recovery", "slurm", "node"],
                       "description": "run: a recorded run; recovery: the recovery database; "
                                      "slurm: the reason in force now; node: the boot record"},
            "run_id": STR, "level": STR, "trigger": STR,
            "verdict": {"enum": ["pass", "warn", "fail", "error", None]},
            "failed_check": STR_OR_NULL, "detail": STR, "duration_s": NUM_OR_NULL,
            "checks": {"type": "array", "items": ref("CheckRecord")},
            "reason": {"type": "string", "description": "the Slurm reason set or seen"},
            "action": {"type": "string", "description": "recovery: the history event "
                                                        "(detected, request, issued, booted, "
                                                        "replaced, healthy, ...)"},
            "recovery_action": {"enum": ["reboot", "replace"]},
        },
    },
    "NodeDetail": {
        "type": "object",
        "required": ["schema", "generated_at", "node", "runs", "next_before", "runs_total",
                     "timeline", "slurm_stale"],
        "properties": {
            "schema": {"const": 1}, "generated_at": NUM,
            "node": ref("StatusNode"),
            "runs": {"type": "array", "items": ref("StatusRun"),
                     "description": "this page of the recorded runs, newest first"},
            "next_before": {"type": ["string", "null"],
                            "description": "pass as ?before= for the next (older) page"},
            "runs_total": {"type": "integer"},
            "slurm_stale": {
                "description": "null when Slurm answered; else the node's Slurm fields are "
                               "those of the last status read, age_s seconds old, and error "
                               "says why they were not refreshed",
                "anyOf": [{"type": "null"}, {
                    "type": "object", "required": ["age_s", "error"],
                    "properties": {"age_s": NUM, "error": STR}}]},
            "timeline": {"type": "array", "items": ref("TimelineEntry"),
                         "description": "oldest first: this page's runs and what recovery and "
                                        "Slurm saw in the same span"}},
    },
    "RecoveryCase": {
        "type": "object", "required": ["node", "state", "failure_class", "ladder", "step"],
        "properties": {
            "node": STR, "state": STR, "failure_class": STR,
            "ladder": {"type": "array", "items": STR}, "step": {"type": "integer"},
            "check": STR, "detail": STR, "opened": NUM, "since": NUM, "boot_before": STR,
            "action": STR, "action_id": {"type": "integer"}, "note": STR,
            "next_action": STR_OR_NULL},
    },
    "Recovery": {
        "type": "object",
        "required": ["schema", "generated_at", "available", "problem", "breaker", "heartbeat",
                     "cases", "closed", "stuck", "actions", "events"],
        "properties": {
            "schema": {"const": 1}, "generated_at": NUM, "available": {"type": "boolean"},
            "problem": STR,
            "breaker": {"type": ["object", "null"], "properties": {
                "open": {"type": "boolean"}, "why": STR, "changed": NUM_OR_NULL,
                "reset_at": NUM_OR_NULL}},
            "heartbeat": {"type": ["object", "null"], "properties": {
                "pid": {"type": "integer"}, "started": NUM, "polls": {"type": "integer"},
                "last_poll": NUM, "age_s": NUM_OR_NULL}},
            "cases": {"type": "array", "items": ref("RecoveryCase")},
            "closed": {"type": "array", "items": ref("RecoveryCase")},
            "stuck": {"type": "array", "items": {"type": "object"}},
            "actions": {"type": "array", "items": {"type": "object", "properties": {
                "id": {"type": "integer"}, "node": STR, "kind": STR, "via": STR,
                "request_id": STR_OR_NULL, "status": STR, "created": NUM, "updated": NUM,
                "message": STR}}},
            "events": {"type": "array", "items": {"type": "object", "properties": {
                "id": {"type": "integer"}, "ts": NUM, "node": STR, "event": STR,
                "detail": STR, "action_id": {"type": ["integer", "null"]}}}}},
    },
    "FleetNode": {
        "type": "object", "required": ["node", "verdict", "run_id"],
        "properties": {"node": STR, "tflops": NUM, "busbw_gbps": NUM,
                       "verdict": {"enum": ["pass", "warn", "fail", "skip", "error", None]},
                       "run_id": STR_OR_NULL, "at": NUM_OR_NULL},
    },
    "Fleet": {
        "type": "object",
        "required": ["schema", "generated_at", "profiles", "fleet_min_nodes", "ignored"],
        "properties": {
            "schema": {"const": 1}, "generated_at": NUM,
            "fleet_min_nodes": {"type": "integer"}, "fleet_fraction": NUM,
            "ignored": {"type": "array", "items": STR},
            "profiles": {"type": "array", "items": {
                "type": "object", "required": ["profile", "burnin", "allreduce"],
                "properties": {
                    "profile": STR,
                    "burnin": {"type": "array", "items": {
                        "type": "object",
                        "required": ["dtype", "floor", "fleet_median", "fleet_nodes", "nodes"],
                        "properties": {
                            "dtype": STR, "floor": NUM_OR_NULL,
                            "fleet_median": {"type": ["number", "null"], "description":
                                             "the fleet comparison's reference (null: fewer "
                                             "than fleet_min_nodes passing nodes)"},
                            "fleet_nodes": {"type": "integer"},
                            "nodes": {"type": "array", "items": ref("FleetNode")}}}},
                    "allreduce": {"type": ["object", "null"], "properties": {
                        "floor": NUM_OR_NULL, "median": NUM_OR_NULL,
                        "fleet_nodes": {"type": "integer"},
                        "nodes": {"type": "array", "items": ref("FleetNode")}}}}}}},
    },
    "GroupReport": {
        "description": "what `airlock check --nodes ... --json` prints",
        "type": "object", "required": ["level", "exit_code", "nodes"],
        "properties": {
            "schema": {"const": 1}, "level": STR, "started_at": NUM, "finished_at": NUM,
            "exit_code": {"type": "integer"},
            "nodes": {"type": "array", "items": {
                "type": "object", "required": ["node", "status"],
                "properties": {
                    "node": STR,
                    "status": {"enum": ["pass", "fail", "skipped", "inconclusive"]},
                    "why": STR, "failed_check": STR_OR_NULL, "detail": STR, "group": STR,
                    "figures": {"type": "object"}, "duration_s": NUM,
                    "checks": {"type": "array", "items": ref("CheckRecord")}}}}},
    },
    "Check": {
        "type": "object",
        "required": ["id", "state", "request", "targets", "submitted_at", "finished_at",
                     "exit_code", "error", "progress", "result"],
        "properties": {
            "id": STR,
            "state": {"enum": list(CHECK_STATES),
                      "description": "refused: another on-demand check holds the Slurm "
                                     "reservation (the cluster-wide lock)"},
            "request": {"type": "object"}, "targets": {"type": "array", "items": STR},
            "submitted_at": NUM, "finished_at": NUM_OR_NULL,
            "exit_code": {"type": ["integer", "null"],
                          "description": "airlock check's: 0 all passed, 1 some failed, 3 "
                                         "skipped or inconclusive nodes, 4 refused, 2 error"},
            "error": STR,
            "progress": {"type": "array", "items": {"type": "object", "properties": {
                "at": NUM, "line": STR}}},
            "result": {"anyOf": [ref("GroupReport"), {"type": "null"}]}},
    },
    "CheckList": {
        "type": "object", "required": ["checks", "running"],
        "properties": {"checks": {"type": "array", "items": ref("Check")},
                       "running": STR_OR_NULL},
    },
}


def components() -> dict[str, Any]:
    return {**status_components(), **copy.deepcopy(SCHEMAS)}


def validator(document: dict[str, Any], name: str):
    """A jsonschema validator for components.schemas[name] of an OpenAPI document (tests)."""
    import jsonschema

    schema = {"$ref": f"#/components/schemas/{name}",
              "components": document["components"]}
    return jsonschema.Draft202012Validator(schema)
