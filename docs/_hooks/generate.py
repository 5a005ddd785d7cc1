"""MkDocs hook (mkdocs.yml `hooks:`): pages generated from the code at build time, so
they cannot drift from it.

- `reference/cli.md`: every command's `--help`, walked from the click group
  (`noetl_celery.cli.docgen`).
- `reference/rest-api.md` and `reference/openapi.json`: the OpenAPI document of
  `noetl-celery serve`'s FastAPI app, and a plain rendering of its paths, methods,
  summaries, parameters and answers, with the fields of every answer's shape (offline:
  no CDN, no JavaScript).
"""

from __future__ import annotations

import json
import types
from typing import Any

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files

METHODS = ("get", "post", "put", "patch", "delete")
# the OpenAPI tags of the app's routers, in the page's order, with what they are for
TAGS = {
    "native": "The engine's REST API (`/api/v1`)",
    "noetl": "NoETL's CLI routes (`/api`)",
    "gui": "NoETL's GUI routes (`/api`)",
}


def openapi_document() -> dict[str, Any]:
    """`serve`'s OpenAPI document. The app is built with default settings and no
    engine: building the schema touches neither."""
    from noetl_celery.settings import Settings
    from noetl_celery.web.app import create_app

    app = create_app(types.SimpleNamespace(), Settings())  # type: ignore[arg-type]
    return app.openapi()


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _ref_name(ref: str) -> str:
    return ref.rsplit("/", 1)[-1]


def _type(schema: dict[str, Any]) -> str:
    """A field's type in a few words: `ExecutionLine`, `list of string`, `integer or null`."""
    if "$ref" in schema:
        name = _ref_name(schema["$ref"])
        return f"[{name}](#{name.lower()})"
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return " or ".join(_type(s) for s in schema[key])
    kind = schema.get("type")
    if kind == "array":
        return "list of " + _type(schema.get("items") or {})
    if kind == "object":
        extra = schema.get("additionalProperties")
        return "object of " + _type(extra) if isinstance(extra, dict) and extra else "object"
    if kind is None:
        return "any JSON"
    return str(kind)


def _answer(code: str, response: dict[str, Any]) -> str:
    """`200` Successful Response: `application/json` [Shape](#shape)."""
    text = f"`{code}` {_cell(response.get('description', ''))}"
    shown = [
        f"`{media}` {_type(body['schema'])}"
        for media, body in (response.get("content") or {}).items()
        if body.get("schema")
    ]
    return text + (": " + ", ".join(shown) if shown else "")


def _answer_refs(spec: dict[str, Any]) -> list[str]:
    """The components the answers name, with those they name in turn, in order."""
    components = spec.get("components", {}).get("schemas", {})
    found: list[str] = []

    def visit(value: Any) -> None:
        if isinstance(value, dict):
            ref = value.get("$ref")
            if isinstance(ref, str) and _ref_name(ref) not in found:
                found.append(_ref_name(ref))
                visit(components.get(_ref_name(ref)))
            for item in value.values():
                visit(item)
        elif isinstance(value, list):
            for item in value:
                visit(item)

    for ops in spec["paths"].values():
        for op in ops.values():
            visit(op.get("responses", {}))
    return found


def _shape(name: str, schema: dict[str, Any]) -> list[str]:
    lines = [f"### {name}", ""]
    if schema.get("description"):
        lines += [" ".join(schema["description"].split()), ""]
    required = set(schema.get("required", ()))
    lines += ["| field | type | always there |", "|---|---|---|"]
    for field, about in schema.get("properties", {}).items():
        always = "yes" if field in required else ""
        lines.append(f"| `{field}` | {_cell(_type(about))} | {always} |")
    return [*lines, ""]


def _operation(method: str, path: str, op: dict[str, Any]) -> list[str]:
    lines = [f"### `{method.upper()} {path}`", "", f"**{op.get('summary', '')}**", ""]
    if op.get("description"):
        lines += [op["description"].strip(), ""]
    params = op.get("parameters", [])
    if params:
        lines += ["| parameter | in | required | description |", "|---|---|---|---|"]
        for p in params:
            required = "yes" if p.get("required") else ""
            about = _cell(p.get("description", "") or p.get("schema", {}).get("title", ""))
            lines.append(f"| `{p['name']}` | {p['in']} | {required} | {about} |")
        lines.append("")
    body = op.get("requestBody", {}).get("content", {})
    if body:
        lines += ["Request body: " + ", ".join(f"`{t}`" for t in body), ""]
    codes = "; ".join(_answer(c, r) for c, r in op["responses"].items())
    return [*lines, f"Responses: {codes}", ""]


def rest_markdown(spec: dict[str, Any]) -> str:
    by_tag: dict[str, list[tuple[str, str, dict[str, Any]]]] = {}
    for path, ops in spec["paths"].items():
        for method in METHODS:
            if method in ops:
                tag = (ops[method].get("tags") or ["other"])[0]
                by_tag.setdefault(tag, []).append((method, path, ops[method]))
    lines = [
        "# REST API",
        "",
        f"`noetl-celery serve` (version {spec['info']['version']}): "
        + _cell(spec["info"].get("description", "")),
        "",
        "Generated from the FastAPI app when the docs are built; the machine-readable",
        "document is [openapi.json](openapi.json), and a running `serve` shows it at `/docs`.",
        "Authentication, errors and examples:",
        "[Monitoring, HTTP API](../operations/monitoring.md#http-api) and",
        "[Security](../security.md).",
        "",
    ]
    tags = [t for t in TAGS if t in by_tag] + sorted(t for t in by_tag if t not in TAGS)
    for tag in tags:
        lines += [f"## {TAGS.get(tag, tag)}", "", "| method | path | summary |", "|---|---|---|"]
        for method, path, op in by_tag[tag]:
            lines.append(f"| {method.upper()} | `{path}` | {_cell(op.get('summary', ''))} |")
        lines.append("")
    for tag in tags:
        for method, path, op in by_tag[tag]:
            lines += _operation(method, path, op)
    components = spec.get("components", {}).get("schemas", {})
    lines += [
        "## Answers",
        "",
        "The shapes the operations above answer (each one's `--json` twin prints the same:",
        "`status`, `executions`, `run`, `events`, `logs`, `catalog`, `schedule`). A field",
        "not marked *always there* may be left out.",
        "",
    ]
    for name in _answer_refs(spec):
        lines += _shape(name, components[name])
    return "\n".join(lines).rstrip() + "\n"


def on_files(files: Files, config: MkDocsConfig) -> Files:
    from noetl_celery.cli.docgen import reference_markdown

    spec = openapi_document()
    generated = {
        "reference/cli.md": reference_markdown(),
        "reference/rest-api.md": rest_markdown(spec),
        "reference/openapi.json": json.dumps(spec, indent=2, sort_keys=True) + "\n",
    }
    for uri, content in generated.items():
        files.append(File.generated(config, uri, content=content))
    return files
