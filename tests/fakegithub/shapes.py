"""Response shapes derived from GitHub's official REST description (openapi_subset.json).

`shape(name, values)` builds an object with every field the schema requires: the given values,
and type-correct defaults for the rest. `missing_required(name, obj)` checks an object against it.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

SUBSET_PATH = Path(__file__).with_name("openapi_subset.json")
FIXED_TIME = "2025-01-01T00:00:00Z"


@lru_cache(maxsize=1)
def subset() -> dict:
    return json.loads(SUBSET_PATH.read_text())


def operations() -> list[dict]:
    return subset()["operations"]


def _default(field: str, info: dict, base_url: str, depth: int):
    if info.get("nullable"):
        return None
    if "ref" in info:
        return shape(info["ref"], {}, base_url, depth + 1) if depth < 6 else {}
    if "array" in info:
        return []
    kind = info.get("type", "object")
    if kind == "string":
        if field.endswith("_at"):
            return FIXED_TIME
        if field == "url" or field.endswith("_url"):
            return f"{base_url}/fake/{field}"
        return "N_fake" if field == "node_id" else ""
    return {"integer": 0, "number": 0, "boolean": False, "object": {}}.get(kind, None)


def shape(name: str, values: dict, base_url: str = "http://fake", depth: int = 0) -> dict:
    schema = subset()["schemas"].get(name, {"required": {}})
    result: dict = {}
    for field, info in schema["required"].items():
        if field not in values:
            result[field] = _default(field, info, base_url, depth)
            continue
        value = values[field]
        if "ref" in info and isinstance(value, dict):
            value = shape(info["ref"], value, base_url, depth + 1)
        elif "array" in info and isinstance(info["array"], dict) and "ref" in info["array"] and isinstance(value, list):
            value = [shape(info["array"]["ref"], v, base_url, depth + 1) if isinstance(v, dict) else v for v in value]
        result[field] = value
    for field, value in values.items():
        result.setdefault(field, value)
    return result


def missing_required(name: str, obj: object, path: str = "", depth: int = 0) -> list[str]:
    """Every required field (recursively, a few levels deep) that `obj` lacks."""
    if name.startswith("[]"):
        if not isinstance(obj, list):
            return [f"{path or name}: expected a list"]
        return [m for i, item in enumerate(obj) for m in missing_required(name[2:], item, f"{path}[{i}]", depth)]
    if not isinstance(obj, dict):
        return [f"{path or name}: expected an object"]
    missing = []
    for field, info in subset()["schemas"].get(name, {"required": {}})["required"].items():
        where = f"{path}.{field}" if path else field
        if field not in obj:
            missing.append(where)
            continue
        value = obj[field]
        if value is None or depth > 4:
            if value is None and not info.get("nullable"):
                missing.append(f"{where} (null)")
            continue
        if "ref" in info:
            missing += missing_required(info["ref"], value, where, depth + 1)
        elif "array" in info and isinstance(info["array"], dict) and "ref" in info["array"]:
            for i, item in enumerate(value):
                missing += missing_required(info["array"]["ref"], item, f"{where}[{i}]", depth + 1)
    return missing
