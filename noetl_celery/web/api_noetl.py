"""The routes NoETL's own CLI (5.3.x) and GUI call, under `/api` (the shapes are in
`shared/spec/noetl-server-api.md` and NoETL's server code; the mapping itself, with
what NoETL's status booleans and event names mean here, is `noetl_shapes`).

    GET  /health                      liveness: the process answers
    GET  /ready                       readiness: database and broker answer (503 naming which not)
    POST /catalog/register            {content: base64 or raw YAML, resource_type} | raw YAML
    POST /catalog/register/batch      {items: [{content, resource_type}, ...]}
    POST /catalog/list                {resource_type?, path?, versions?} -> {entries: [...]}
    POST /catalog/resource            {path, version?|"latest"} | {catalog_id}
    POST /execute                     {path | catalog_id, version?, workload|payload}
    GET  /executions                  [?page&page_size&status] -> [entry, ...]
    GET  /executions/{id}             entry + events (NoETL names, newest first) + pagination
    GET  /executions/{id}/events      the same events, without the entry fields
    GET  /executions/{id}/status      {completed, failed, current_step, completed_steps, ...}
    POST /executions/{id}/cancel      {cascade, reason?}; 409 once it has ended
    POST /executions/{id}/rerun       {workload}: the same version, payload overridden
    POST /executions/cleanup          {older_than_minutes, dry_run}
    GET  /ehdb/executions[/{id}[/events]]   the read-model queries of `noetl ehdb query`

Differences from NoETL, on purpose: a failed execution's status says `completed: true,
failed: true` (NoETL's CLI would show RUNNING otherwise); cancel always ends the whole
tree (a child cannot report to a cancelled parent), whatever `cascade` says;
`variables` in a status is always `{}` (the payload may hold secrets); registering
installs the playbook's `metadata.schedule` as `noetl-celery catalog register` does.

Each route declares its answer (noetl_shapes' TypedDicts) as its response model: the
OpenAPI document shows NoETL's shapes, and the answers keep exactly those keys.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import JSONResponse

from noetl_celery.constants import MAX_PLAYBOOK_BYTES
from noetl_celery.engine import compat
from noetl_celery.engine.service import Engine
from noetl_celery.errors import ExecutionNotFound, InputInvalid, NoetlError
from noetl_celery.models.filters import ExecutionFilter
from noetl_celery.store.rows import CatalogEntry
from noetl_celery.web import noetl_events, noetl_inputs
from noetl_celery.web import noetl_shapes as shapes
from noetl_celery.web.deps import EngineDep
from noetl_celery.web.inputs import BIGINT_MAX, BigInt, CheckedRoute, check_int, load_json
from noetl_celery.web.noetl_events import EhdbEvents, EhdbExecutions, EhdbState, EventsSlice
from noetl_celery.web.noetl_inputs import ShapeError
from noetl_celery.web.noetl_shapes import (
    AlreadyEnded,
    BatchBody,
    BatchResult,
    CancelBody,
    CatalogEntryJSON,
    CatalogList,
    CleanupBody,
    Executed,
    ExecutionDetailResponse,
    ExecutionEntry,
    ExecutionEvents,
    Health,
    Readiness,
    RegisterBody,
    RerunStarted,
    StatusBody,
)
from noetl_celery.web.problems import body_for

router = APIRouter(prefix="/api", tags=["noetl"], route_class=CheckedRoute)

# a base64 playbook is 4/3 of its size; JSON framing adds a little
MAX_REGISTER_BODY = 2 * MAX_PLAYBOOK_BYTES
MAX_BATCH_ITEMS = 1000
MAX_PAGE_SIZE = 500
# `(page - 1) * page_size` is an offset: it stays a BIGINT
MAX_PAGE = BIGINT_MAX // MAX_PAGE_SIZE
# a cutoff further back than this is before any execution (and past what datetime holds)
MAX_CLEANUP_MINUTES = 100 * 366 * 24 * 60


async def json_object(request: Request) -> dict[str, Any]:
    """The request's JSON object (an empty body is `{}`), whatever its content type
    says, checked as `inputs.load_json` checks every JSON body."""
    raw = await request.body()
    if not raw.strip():
        return {}
    data = load_json(raw, "request body")
    if not isinstance(data, dict):
        raise ShapeError("request body", f"must be a JSON object, not {type(data).__name__}")
    return data


async def register_input(request: Request) -> tuple[str, Any]:
    """(YAML text, resource_type) of a register request: JSON `{content, resource_type}`
    with base64 or raw YAML content, or the YAML itself as the body."""
    raw = await request.body()
    if len(raw) > MAX_REGISTER_BODY:
        raise ShapeError("request body", f"larger than {MAX_REGISTER_BODY} bytes")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ShapeError("request body", "not UTF-8 text") from None
    is_json = "json" in request.headers.get("content-type", "").lower()
    if is_json or text.lstrip().startswith("{"):
        try:
            data = load_json(text, "request body")
        except InputInvalid:
            if is_json:
                raise
            data = None  # YAML text that starts like a flow mapping
        if isinstance(data, dict) and "content" in data:
            content = data["content"]
            if not isinstance(content, str):
                raise ShapeError("content", "must be a string (base64 or YAML text)")
            return noetl_inputs.decode_content(content), data.get("resource_type")
        if is_json:
            raise ShapeError("request body", "expected {content, resource_type}")
    return text, None


JsonBody = Annotated[dict[str, Any], Depends(json_object)]
RegisterInput = Annotated[tuple[str, Any], Depends(register_input)]


# a cancel of an execution that has ended
ALREADY_ENDED: dict[int | str, dict[str, Any]] = {
    409: {"model": AlreadyEnded, "description": "The execution had already ended"}
}


@router.get("/health")
def health() -> Health:
    return {"status": "ok"}


@router.get(
    "/ready",
    response_model=Readiness,
    responses={503: {"model": Readiness, "description": "the database or the broker is not"}},
)
def ready(engine: EngineDep) -> JSONResponse:
    """Readiness: 200 when the engine database (at this engine's schema revision) and
    the broker answer; 503 with one line for the one that does not."""
    checks = engine.readiness()
    ok = checks["database"] == "ok" and checks["broker"] in ("ok", "embedded")
    body: Readiness = {
        "status": "ready" if ok else "not ready",
        "database": checks["database"],
        "broker": checks["broker"],
    }
    return JSONResponse(body, status_code=200 if ok else 503)


# ---- catalog -------------------------------------------------------------------------------
@router.post("/catalog/register")
def register(given: RegisterInput, engine: EngineDep) -> RegisterBody:
    """Register a playbook; 422 names every problem of an invalid one."""
    text, resource_type = given
    noetl_inputs.check_kind(resource_type, "resource_type")
    _, entry = engine.register_text(text, install_schedule=True)
    return shapes.register_body(entry.path, entry.version, entry.catalog_id, entry.created)


@router.post("/catalog/register/batch")
def register_batch(body: JsonBody, engine: EngineDep) -> BatchBody:
    """Register each item on its own: one invalid item fails alone."""
    items = body.get("items")
    if not isinstance(items, list):
        raise ShapeError("items", "must be a list of {content, resource_type}")
    if len(items) > MAX_BATCH_ITEMS:
        raise ShapeError("items", f"at most {MAX_BATCH_ITEMS} per request")
    results: list[BatchResult] = []
    for index, item in enumerate(items):
        try:
            if not isinstance(item, dict) or not isinstance(item.get("content"), str):
                raise ShapeError(f"items[{index}]", "expected {content, resource_type}")
            noetl_inputs.check_kind(item.get("resource_type"), "resource_type")
            text = noetl_inputs.decode_content(item["content"])
            _, entry = engine.register_text(text, f"items[{index}]", install_schedule=True)
        except NoetlError as exc:
            detail = body_for(exc)["detail"]
            results.append(shapes.batch_result(index, error=detail))
            continue
        results.append(
            shapes.batch_result(
                index, path=entry.path, version=entry.version, catalog_id=entry.catalog_id
            )
        )
    return shapes.batch_body(results)


@router.post("/catalog/list")
def catalog_list(body: JsonBody, engine: EngineDep) -> CatalogList:
    """Each path's latest version (the GUI's cards); every version of `path` when given,
    or of every path with `versions: true`. Kinds other than Playbook: none."""
    kind = body.get("resource_type")
    if kind is not None and str(kind).lower() != "playbook":
        return {"entries": []}
    path = body.get("path")
    versions = body.get("versions", False)
    if not isinstance(versions, bool):
        raise ShapeError("versions", "must be true or false")
    rows = compat.catalog_rows(engine, str(path) if path else None, latest_only=not versions)
    return {"entries": [shapes.catalog_entry(r) for r in rows]}


@router.post("/catalog/resource")
def catalog_resource(body: JsonBody, engine: EngineDep) -> CatalogEntryJSON:
    path = body.get("path")
    catalog_id = noetl_inputs.parse_catalog_id(body.get("catalog_id"))
    if not path and catalog_id is None:
        raise ShapeError("request body", "give path or catalog_id")
    row = compat.catalog_entry(
        engine,
        path=str(path) if path else None,
        version=noetl_inputs.parse_version(body.get("version")),
        catalog_id=catalog_id,
    )
    return shapes.catalog_entry(row)


# ---- executions ----------------------------------------------------------------------------
@router.post("/execute")
def execute(body: JsonBody, engine: EngineDep) -> Executed:
    """Start a registered playbook: 404 `Playbook not found in catalog: P` when it is
    not registered (NoETL's CLI then exits 1). Unknown keys (`merge`, ...) are ignored."""
    noetl_inputs.check_kind(body.get("resource_kind"), "resource_kind")
    path = body.get("path")
    catalog_id = noetl_inputs.parse_catalog_id(body.get("catalog_id"))
    if not path and catalog_id is None:
        raise ShapeError("request body", "give path or catalog_id")
    workload = noetl_inputs.execute_workload(body)
    row = compat.catalog_entry(
        engine,
        path=str(path) if path and catalog_id is None else None,
        version=noetl_inputs.parse_version(body.get("version")) if catalog_id is None else None,
        catalog_id=catalog_id,
    )
    entry = CatalogEntry(row.catalog_id, row.path, row.version, row.name)
    execution_id = engine.start_entry(entry, workload)
    return {
        "execution_id": execution_id,
        "status": "started",
        "commands_generated": compat.commands_made(engine, execution_id),
    }


Page = Annotated[int, Query(ge=1, le=MAX_PAGE)]
PageSize = Annotated[int, Query(ge=1, le=MAX_PAGE_SIZE)]
EventId = Annotated[int | None, Query(ge=0, le=BIGINT_MAX)]


@router.get("/executions")
def executions(
    engine: EngineDep, page: Page = 1, page_size: PageSize = 100, status: str | None = None
) -> list[ExecutionEntry]:
    """Executions newest first, NoETL's `ExecutionEntryResponse` each (a JSON array)."""
    match = ExecutionFilter(status=status, offset=(page - 1) * page_size, limit=page_size)
    rows = compat.executions_page(engine, match)
    return [shapes.execution_entry(r.row, r.version, r.progress) for r in rows]


def _events(
    engine: EngineDep,
    execution_id: str,
    page: int,
    page_size: int,
    since_event_id: int | None,
    event_type: str | None,
) -> EventsSlice:
    types = noetl_events.native_types(event_type.split(",")) if event_type else set()
    rows, total = compat.events_slice(
        engine,
        execution_id,
        types=types,
        after=since_event_id,
        offset=(page - 1) * page_size,
        limit=page_size,
        newest_first=True,
    )
    return {
        "events": [noetl_events.event_entry(e.to_json()) for e in rows],
        "pagination": noetl_events.pagination(page, page_size, total),
    }


@router.get("/executions/{execution_id}")
def execution(
    execution_id: str,
    engine: EngineDep,
    page: Page = 1,
    page_size: PageSize = 100,
    since_event_id: EventId = None,
    event_type: str | None = None,
    include_events: bool = True,
) -> ExecutionDetailResponse:
    """NoETL's `ExecutionDetailResponse`: the entry, then a page of its events newest
    first (see `noetl_shapes` for the event names); from `since_event_id`, the
    `page_size` oldest past it, newest first (the GUI prepends them and keeps the
    largest id as its cursor)."""
    row = engine.store.execution(execution_id)  # ExecutionNotFound: 404
    entry = shapes.execution_entry(
        row, compat.version_of(engine, row.catalog_id), compat.progress(engine, execution_id)
    )
    endpoint = f"/api/executions/{execution_id}/events"
    if not include_events:
        return {
            **entry,
            "events_included": False,
            "events_endpoint": endpoint,
            "events": [],
            "pagination": None,
        }
    found = _events(engine, execution_id, page, page_size, since_event_id, event_type)
    return {
        **entry,
        "events_included": True,
        "events_endpoint": endpoint,
        "events": found["events"],
        "pagination": found["pagination"],
    }


@router.get("/executions/{execution_id}/events")
def execution_events(
    execution_id: str,
    engine: EngineDep,
    page: Page = 1,
    page_size: PageSize = 100,
    since_event_id: EventId = None,
    event_type: str | None = None,
) -> ExecutionEvents:
    row = engine.store.execution(execution_id)
    return {
        "execution_id": execution_id,
        "path": row.path,
        "status": row.status,
        **_events(engine, execution_id, page, page_size, since_event_id, event_type),
    }


@router.get("/executions/{execution_id}/status")
def execution_status(execution_id: str, engine: EngineDep) -> StatusBody:
    parts = compat.status_parts(engine, execution_id)
    return shapes.status_body(parts.view, parts.errors, parts.order, parts.last_step)


@router.post("/executions/cleanup")
def cleanup(body: JsonBody, engine: EngineDep) -> CleanupBody:
    """Cancel top-level executions RUNNING for more than `older_than_minutes` (5)."""
    minutes = body.get("older_than_minutes", 5)
    if not isinstance(minutes, int) or isinstance(minutes, bool):
        raise ShapeError("older_than_minutes", "must be an integer of at least 1")
    check_int(minutes, "older_than_minutes", high=MAX_CLEANUP_MINUTES)
    dry_run = bool(body.get("dry_run", False))
    ids = compat.cleanup(engine, minutes, dry_run=dry_run)
    verb = "Would cancel" if dry_run else "Cancelled"
    return {
        "cancelled_count": 0 if dry_run else len(ids),
        "execution_ids": ids,
        "message": f"{verb} {len(ids)} execution(s) running for more than {minutes} minute(s)",
    }


@router.post(
    "/executions/{execution_id}/cancel", response_model=CancelBody, responses=ALREADY_ENDED
)
def cancel(execution_id: str, body: JsonBody, engine: EngineDep) -> CancelBody | JSONResponse:
    """End the execution CANCELLED with its running children; 409 `already_completed`
    once it has ended, 404 for an unknown id."""
    reason = body.get("reason")
    return cancel_answer(engine, execution_id, str(reason) if reason else None)


def cancel_answer(
    engine: Engine, execution_id: str, reason: str | None
) -> CancelBody | JSONResponse:
    """What cancel (and the GUI's stop) answers."""
    ended = engine.cancel_tree(execution_id, reason or "cancelled through the NoETL API")
    if ended is None:
        status = engine.store.execution_status(execution_id)
        return JSONResponse(shapes.already_ended_body(execution_id, status), status_code=409)
    cancelled = [ended.execution_id, *(t.execution_id for t in ended.descendants())]
    return shapes.cancel_body(execution_id, cancelled, reason)


@router.post("/executions/{execution_id}/rerun")
def rerun(execution_id: str, body: JsonBody, engine: EngineDep) -> RerunStarted:
    """A new execution of the version the original ran, its payload overridden by
    `workload`; 409 while the original still runs."""
    noetl_inputs.check_kind(body.get("resource_kind"), "resource_kind")
    workload = noetl_inputs.execute_workload(body)
    new_id = engine.rerun(execution_id, overrides=workload)
    return {"execution_id": new_id, "source_execution_id": execution_id, "status": "started"}


# ---- ehdb (NoETL's read-model queries) ---------------------------------------------------------
@router.get("/ehdb/executions")
def ehdb_executions(
    engine: EngineDep,
    status: str | None = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 50,
    offset: BigInt = 0,
) -> EhdbExecutions:
    rows = compat.executions_page(
        engine, ExecutionFilter(status=status, offset=offset, limit=limit)
    )
    return {"executions": [noetl_events.ehdb_line(r.row, r.event_count) for r in rows]}


@router.get("/ehdb/executions/{execution_id}")
def ehdb_execution(execution_id: str, engine: EngineDep) -> EhdbState:
    try:
        parts = compat.status_parts(engine, execution_id)
        row = engine.store.execution(execution_id)
    except ExecutionNotFound:
        return {"exists": False, "execution_id": execution_id, "state": None}
    current = shapes.current_node(parts.view, parts.last_step)
    return noetl_events.ehdb_state(row, compat.event_count(engine, execution_id), current)


@router.get("/ehdb/executions/{execution_id}/events")
def ehdb_events(
    execution_id: str,
    engine: EngineDep,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    after: Annotated[int | None, Query(ge=0, le=BIGINT_MAX)] = None,
) -> EhdbEvents:
    try:
        engine.store.execution(execution_id)
    except ExecutionNotFound:
        return {"exists": False, "execution_id": execution_id, "events": [], "next_cursor": None}
    rows, _ = compat.events_slice(engine, execution_id, after=after, limit=limit)
    events = [noetl_events.ehdb_event(e.to_json()) for e in rows]
    return {
        "exists": True,
        "execution_id": execution_id,
        "events": events,
        "next_cursor": events[-1]["event_id"] if len(events) == limit else None,
    }
