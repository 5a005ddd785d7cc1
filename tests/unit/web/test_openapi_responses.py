"""Issue 33, typed responses: serve's OpenAPI document declares a schema for every 2xx
answer of every route (a JSON answer: fields, not `{}` or a bare `object`; anything else:
its own media type), and the read models' TypedDicts behind those schemas are exact
(tests.support.shapes)."""

from __future__ import annotations

import dataclasses
import types
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.responses import HTMLResponse, JSONResponse
from fastapi.routing import APIRoute, iter_route_contexts

from noetl_celery.engine.summaries import ExecutionLine
from noetl_celery.settings import Settings
from noetl_celery.store.rows import CommandCounts, CommandCountsJSON
from noetl_celery.web import api_gui, api_native, api_noetl, metrics
from noetl_celery.web.app import create_app
from noetl_celery.web.noetl_shapes import StatusBody
from tests.support.shapes import exact

# operations of serve's API (47 when this was written): fewer means routes went missing
# from the document, and the walk below would check less than it should
MIN_OPERATIONS = 40


def document(app: FastAPI) -> dict[str, Any]:
    return app.openapi()


def serve_app() -> FastAPI:
    return create_app(types.SimpleNamespace(), Settings())  # type: ignore[arg-type]


def says_something(schema: Mapping[str, Any], components: Mapping[str, Any]) -> bool:
    """Whether a schema declares what the answer holds: a `$ref` to a component with
    fields, an object with `properties`, an array of such, a scalar type. `{}` and a
    bare `object` (what `dict[str, Any]` and `Any` give) say nothing."""
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        return says_something(components[name], components)
    if "properties" in schema:
        return bool(schema["properties"])
    for key in ("anyOf", "oneOf", "allOf"):
        if key in schema:
            return all(says_something(s, components) for s in schema[key])
    kind = schema.get("type")
    if kind == "array":
        return says_something(schema.get("items") or {}, components)
    if kind == "object":
        extra = schema.get("additionalProperties")
        return isinstance(extra, dict) and says_something(extra, components)
    return kind is not None


def answers(doc: Mapping[str, Any]) -> Iterator[tuple[str, str, Mapping[str, Any]]]:
    """(`METHOD /path`, status, response) of every 2xx answer in the document."""
    for path, operations in doc["paths"].items():
        for method, operation in operations.items():
            for status, response in operation["responses"].items():
                if status.startswith("2"):
                    yield f"{method.upper()} {path}", status, response


def untyped(doc: Mapping[str, Any]) -> list[str]:
    """The 2xx answers whose schema says nothing, one line each."""
    components = doc.get("components", {}).get("schemas", {})
    found = []
    for operation, status, response in answers(doc):
        content = response.get("content") or {}
        if not content:
            found.append(f"{operation} {status}: no content declared")
        for media, body in content.items():
            schema = body.get("schema") or {}
            if media == "application/json" and not says_something(schema, components):
                found.append(f"{operation} {status}: {media} {schema}")
            elif media != "application/json" and not schema:
                found.append(f"{operation} {status}: {media} without a schema")
    return found


def test_every_2xx_answer_of_serve_declares_its_schema() -> None:
    doc = document(serve_app())
    operations = sum(len(ops) for ops in doc["paths"].values())
    assert operations >= MIN_OPERATIONS, operations
    assert len(list(answers(doc))) >= operations - 2  # only the two 405 refusals lack a 2xx
    assert untyped(doc) == []
    # two shapes of one name get their module path as a name: rename one
    assert [n for n in doc["components"]["schemas"] if "__" in n] == []


def test_the_walk_finds_an_untyped_route() -> None:
    """The check above can fail: a throwaway app with serve's routers and four routes
    that declare nothing useful is reported, those four and nothing else."""
    app = FastAPI()
    for router in (api_native.router, api_noetl.router, api_gui.router, metrics.router):
        app.include_router(router)

    @app.get("/loose")
    def loose() -> dict[str, Any]:
        return {}

    @app.get("/anything")
    def anything() -> Any:
        return {}

    @app.get("/objects")
    def objects() -> list[dict[str, Any]]:
        return []

    @app.get("/undeclared", response_model=None)
    def undeclared() -> JSONResponse:
        return JSONResponse({})

    found = untyped(document(app))
    assert [line.split(":")[0] for line in found] == [
        "GET /loose 200",
        "GET /anything 200",
        "GET /objects 200",
        "GET /undeclared 200",
    ], found


def test_non_json_answers_name_their_media_type() -> None:
    doc = document(serve_app())
    content = doc["paths"]["/metrics"]["get"]["responses"]["200"]["content"]
    [(media, body)] = content.items()
    assert media.startswith("text/plain") and body["schema"] == {"type": "string"}


def test_error_answers_are_declared_too() -> None:
    """The refusals a route makes itself (not FastAPI's 422) have their shape."""
    paths = document(serve_app())["paths"]
    assert "$ref" in str(paths["/api/ready"]["get"]["responses"]["503"])
    for path in ("/api/executions/{execution_id}/cancel", "/api/executions/{execution_id}/stop"):
        assert "AlreadyEnded" in str(paths[path]["post"]["responses"]["409"])
    assert "TokenRefused" in str(paths["/api/auth/validate"]["post"]["responses"]["401"])


def test_routes_outside_the_document_are_not_json() -> None:
    """The pages and the API docs are left out of the document; each still declares
    what it answers (HTML, a redirect, a static file), never JSON by default."""
    hidden = [
        c.route
        for c in iter_route_contexts(serve_app().routes)
        if isinstance(c.route, APIRoute) and not c.route.include_in_schema
    ]
    assert len(hidden) >= 12
    for route in hidden:
        assert not issubclass(route.response_class, JSONResponse), route.path  # type: ignore[arg-type]
    pages = {r.path: r.response_class for r in hidden}
    assert pages["/executions"] is HTMLResponse and pages["/docs"] is HTMLResponse


def test_command_counts_json_has_every_counter() -> None:
    """`to_json` spells the counters out for its TypedDict: a counter added to the
    dataclass and not there would be missing from `status --json` and the API."""
    fields = [f.name for f in dataclasses.fields(CommandCounts)]
    assert list(CommandCountsJSON.__annotations__) == fields
    assert list(CommandCounts().to_json()) == fields


LINE = {
    "execution_id": "1",
    "path": "p",
    "status": "COMPLETED",
    "parent_execution_id": None,
    "trigger": "manual",
    "rerun_of": None,
    "trigger_detail": None,
    "created_at": "2026-01-01T00:00:00Z",
    "finished_at": None,
    "duration_seconds": 0.5,
    "error": None,
}


def test_exact_accepts_the_shape_and_refuses_a_drift() -> None:
    exact(ExecutionLine, LINE)
    with pytest.raises(AssertionError, match=r"\$.extra: not declared"):
        exact(ExecutionLine, {**LINE, "extra": 1})
    with pytest.raises(ValueError, match="error"):  # pydantic's ValidationError
        exact(ExecutionLine, {k: v for k, v in LINE.items() if k != "error"})
    with pytest.raises(AssertionError, match="duration_seconds"):
        exact(ExecutionLine, {**LINE, "duration_seconds": "0.5"})  # a string is not a number
    with pytest.raises(ValueError):
        exact(StatusBody, {**LINE})
