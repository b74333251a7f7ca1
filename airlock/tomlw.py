"""Just enough TOML writing for the files Airlock generates (tomllib only reads)."""

from __future__ import annotations

import json
from typing import Any

from airlock.errors import AirlockError


def value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{json.dumps(str(k))} = {value(x)}" for k, x in v.items()) + "}"
    raise AirlockError(f"cannot write {type(v).__name__} as TOML")


def document(data: dict[str, Any]) -> str:
    """Top-level keys, then one [table] per dict (and [table.sub] for dicts inside it)."""
    lines = [f"{k} = {value(v)}" for k, v in data.items() if not isinstance(v, dict)]
    for name, table in data.items():
        if not isinstance(table, dict):
            continue
        lines.append(f"\n[{name}]")
        lines.extend(f"{k} = {value(v)}" for k, v in table.items() if not isinstance(v, dict))
        for k, v in table.items():
            if isinstance(v, dict):
                lines.append(f"\n[{name}.{k}]")
                lines.extend(f"{kk} = {value(vv)}" for kk, vv in v.items())
    return "\n".join(lines) + "\n"
