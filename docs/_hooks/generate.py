"""MkDocs hook (mkdocs.yml `hooks:`): pages generated from the code at build time, so
they cannot drift from it.

- `reference/cli.md`: every command's `--help`, walked from the click group
  (`noetl_celery.cli.docgen`).
- `reference/rest-api.md` and `reference/openapi.json`: the OpenAPI document of
  `noetl-celery serve`'s FastAPI app, and a plain rendering of its paths, methods,
  summaries and parameters (offline: no CDN, no JavaScript).
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
    codes = ", ".join(
        f"`{c}` {_cell(r.get('description', ''))}" for c, r in op["responses"].items()
    )
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
