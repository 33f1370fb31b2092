"""Regenerate openapi_subset.json from GitHub's official REST description (npm @octokit/openapi).

    cd "$(mktemp -d)" && npm pack @octokit/openapi && tar xzf octokit-openapi-*.tgz
    python tests/fakegithub/derive_openapi_subset.py package/generated/api.github.com.json

Keeps, for each route the fake server serves: method, path, operationId, the success status, the
response schema's name, and the request body's property names; and for each schema reachable from
those responses: the required fields with their types. That is what the fake is checked against.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROUTES = [
    ("get", "/repos/{owner}/{repo}"),
    ("get", "/repos/{owner}/{repo}/pulls"),
    ("get", "/repos/{owner}/{repo}/pulls/{pull_number}"),
    ("patch", "/repos/{owner}/{repo}/pulls/{pull_number}"),
    ("put", "/repos/{owner}/{repo}/pulls/{pull_number}/merge"),
    ("get", "/repos/{owner}/{repo}/labels"),
    ("post", "/repos/{owner}/{repo}/labels"),
    ("get", "/repos/{owner}/{repo}/issues/{issue_number}/labels"),
    ("post", "/repos/{owner}/{repo}/issues/{issue_number}/labels"),
    ("delete", "/repos/{owner}/{repo}/issues/{issue_number}/labels/{name}"),
    ("get", "/repos/{owner}/{repo}/issues/{issue_number}/comments"),
    ("post", "/repos/{owner}/{repo}/issues/{issue_number}/comments"),
    ("patch", "/repos/{owner}/{repo}/issues/comments/{comment_id}"),
    ("post", "/repos/{owner}/{repo}/check-runs"),
    ("get", "/repos/{owner}/{repo}/check-runs/{check_run_id}"),
    ("patch", "/repos/{owner}/{repo}/check-runs/{check_run_id}"),
    ("post", "/repos/{owner}/{repo}/statuses/{sha}"),
    ("get", "/repos/{owner}/{repo}/branches/{branch}"),
    ("get", "/repos/{owner}/{repo}/commits/{ref}"),
    ("get", "/repos/{owner}/{repo}/git/ref/{ref}"),
    ("post", "/repos/{owner}/{repo}/git/refs"),
    ("post", "/repos/{owner}/{repo}/git/trees"),
    ("post", "/repos/{owner}/{repo}/git/commits"),
    ("put", "/repos/{owner}/{repo}/contents/{path}"),
    ("get", "/repos/{owner}/{repo}/collaborators/{username}/permission"),
]


def _resolve(spec: dict, node: dict) -> dict:
    while "$ref" in node:
        parts = node["$ref"].lstrip("#/").split("/")
        node = spec
        for part in parts:
            node = node[part]
    return node


def _ref_name(node: dict) -> str | None:
    ref = node.get("$ref", "")
    return ref.rsplit("/", 1)[-1] if ref.startswith("#/components/schemas/") else None


def _type_of(spec: dict, node: dict, schemas: dict, inline_name: str) -> object:
    name = _ref_name(node)
    if name:
        target = _resolve(spec, node)
        if target.get("type", "object") != "object":  # e.g. author-association: a string enum
            return {"type": target["type"], "nullable": bool(target.get("nullable"))}
        _collect(spec, name, target, schemas)
        return {"ref": name, "nullable": bool(target.get("nullable"))}
    for key in ("anyOf", "oneOf", "allOf"):
        if key in node:
            options = [o for o in node[key] if _ref_name(o) or o.get("type")]
            if options:
                return _type_of(spec, options[0], schemas, inline_name)
    kind = node.get("type", "object")
    if kind == "object" and node.get("required"):
        _collect(spec, inline_name, node, schemas)
        return {"ref": inline_name, "nullable": bool(node.get("nullable"))}
    if kind == "array":
        items = node.get("items", {})
        return {"array": _type_of(spec, items, schemas, inline_name + "[]") if _ref_name(items) or items.get("required") else items.get("type", "object"),
                "nullable": bool(node.get("nullable"))}
    return {"type": kind, "nullable": bool(node.get("nullable"))}


def _collect(spec: dict, name: str, node: dict, schemas: dict) -> None:
    if name in schemas:
        return
    schemas[name] = {}  # reserve first: schemas refer to themselves
    props = node.get("properties", {})
    required = {}
    for field in node.get("required", []):
        required[field] = _type_of(spec, props.get(field, {}), schemas, f"{name}.{field}")
    schemas[name] = {"required": required}


def derive(spec: dict) -> dict:
    operations, schemas = [], {}
    for method, path in ROUTES:
        op = spec["paths"][path][method]
        success = sorted(code for code in op["responses"] if code.startswith("2"))[0]
        response = _resolve(spec, op["responses"][success])
        schema_node = response.get("content", {}).get("application/json", {}).get("schema")
        schema = None
        if schema_node:
            name = _ref_name(schema_node) or (_ref_name(schema_node.get("items", {})) and "[]" + _ref_name(schema_node["items"]))
            if name:
                bare = name.lstrip("[]")
                _collect(spec, bare, _resolve(spec, {"$ref": "#/components/schemas/" + bare}), schemas)
                schema = name
        body = op.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema", {})
        body = _resolve(spec, body) if body else {}
        operations.append({
            "method": method.upper(), "path": path, "operationId": op["operationId"], "status": int(success),
            "schema": schema, "errors": sorted(int(c) for c in op["responses"] if c[0] in "45"),
            "request_properties": sorted(body.get("properties", {})), "request_required": sorted(body.get("required", [])),
        })
    return {"source": f"@octokit/openapi {spec['info']['version']} api.github.com.json (MIT)", "operations": operations, "schemas": schemas}


if __name__ == "__main__":
    source = json.loads(Path(sys.argv[1]).read_text())
    out = Path(__file__).with_name("openapi_subset.json")
    out.write_text(json.dumps(derive(source), indent=1, sort_keys=True) + "\n")
    print(f"wrote {out} ({out.stat().st_size} bytes)")
