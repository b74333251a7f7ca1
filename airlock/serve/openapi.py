"""The OpenAPI document made exact: what FastAPI generates, corrected to say what the server does
(issue 26; tests/unit/test_serve_schema.py runs schemathesis with every check against it).

* Every error is {"error": "<one line>"} (the Error schema), 422 included: FastAPI documents
  its own {"detail": [...]}, which this service never sends.
* Every status the server can answer is listed on every operation it can answer it for: the
  Guard's (400 a Content-Length that is no number, 413 a body over max_body, 421 a foreign Host
  while reads are open, 503 busy) and the POST's 411, besides each route's own; 500 with one
  line is possible anywhere.
* The patterns the server enforces on names and ids are in the parameters' schemas.
* HEAD is documented beside every GET (the Guard answers it as the GET without a body).
"""

from __future__ import annotations

import copy
from typing import Any

REASONS = {400: "bad request", 401: "no or wrong token", 403: "not allowed here",
           404: "not found", 409: "a check is already running", 411: "length required",
           413: "body too large", 421: "Host not served here", 422: "invalid request",
           429: "rate limit", 500: "the service's own error (one line; details in its log)",
           502: "Slurm did not answer", 503: "not available yet, or busy"}
# What the Guard (airlock.serve.security) may answer before any route, and the service's own
# error: every operation can get these.
EVERYWHERE = (400, 413, 421, 500, 503)
WITH_BODY = (411,)


def exact(doc: dict[str, Any], patterns: dict[str, dict[str, Any]],
          item_patterns: dict[str, str]) -> dict[str, Any]:
    """doc corrected in place (and returned). patterns: {parameter name: what its string value
    must be ({"pattern": ..., "maxLength": ...})}; item_patterns: {parameter name: the pattern
    of each item of an array parameter}."""
    error = {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}
    for ops in doc["paths"].values():
        for method, op in list(ops.items()):
            for param in op.get("parameters", []):
                schema = param.get("schema", {})
                if param["name"] in patterns:
                    for branch in schema.get("anyOf", [schema]):
                        if branch.get("type") == "string":
                            branch.update(patterns[param["name"]])
                if param["name"] in item_patterns:
                    for branch in schema.get("anyOf", [schema]):
                        if branch.get("type") == "array":
                            branch["items"] = {"type": "string",
                                               "pattern": item_patterns[param["name"]]}
            responses = op["responses"]
            codes = EVERYWHERE + (WITH_BODY if method in ("post", "put", "patch") else ())
            if "422" in responses or op.get("parameters") or "requestBody" in op:
                codes += (422,)
            for code in codes:
                responses.setdefault(str(code), {"description": REASONS[code]})
            for code, answer in responses.items():
                if code.startswith(("4", "5")):
                    answer.update(copy.deepcopy(error))
                    answer["description"] = answer.get("description") or REASONS[int(code)]
            if method == "get":
                head = copy.deepcopy(op)
                head["operationId"] = f"{op.get('operationId', 'get')}_head"
                head["summary"] = f"{op.get('summary', '')} (headers only)".strip()
                head.pop("description", None)
                for answer in head["responses"].values():
                    answer.pop("content", None)
                ops["head"] = head
    schemas = doc.get("components", {}).get("schemas", {})
    for unused in ("HTTPValidationError", "ValidationError"):
        schemas.pop(unused, None)
    return doc
