"""`/api/v1/catalog` and `/api/v1/schedules`: what `noetl-celery catalog` and `schedule`
do, over HTTP (included by `api_native.router`, which carries the prefix)."""

from __future__ import annotations

import json
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Query, Request, Response, status
from pydantic import BaseModel, ConfigDict, ValidationError, model_validator
from starlette.concurrency import run_in_threadpool
from typing_extensions import TypedDict

from noetl_celery.constants import MAX_PLAYBOOK_BYTES
from noetl_celery.engine.catalog import CatalogShow
from noetl_celery.errors import ConfigurationError
from noetl_celery.models.schedule import check_cron
from noetl_celery.store.rows import CatalogSummaryJSON, ScheduleJSON
from noetl_celery.web.deps import EngineDep
from noetl_celery.web.guard import YAML_TYPES, media_type
from noetl_celery.web.inputs import INT_MAX, BigIdPath, CheckedRoute

router = APIRouter(route_class=CheckedRoute)


class Registered(TypedDict):
    path: str
    version: int
    catalog_id: int
    name: str
    created: bool  # false: the same content was registered already (this version)


class ScheduleRemoved(TypedDict):
    schedule_id: int
    removed: bool


class ScheduleChanged(ScheduleJSON):
    changed: bool  # false: it was paused (resumed) already


class ScheduleTriggered(TypedDict):
    schedule_id: int
    execution_id: str


# ---- catalog ---------------------------------------------------------------------------------
@router.get("/catalog", summary="Every catalog path with its latest version")
def catalog_list(engine: EngineDep) -> list[CatalogSummaryJSON]:
    return [s.to_json() for s in engine.catalog.listing()]


@router.get("/catalog/{path:path}", summary="One registered playbook")
def catalog_show(
    path: str,
    engine: EngineDep,
    version: Annotated[
        int | None, Query(ge=1, le=INT_MAX, description="Default: the latest")
    ] = None,
) -> CatalogShow:
    """Its metadata, every version of the path, and its YAML `content`."""
    return engine.catalog.show(path, version)


class RegisterRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    content: str


def _content_of(body: bytes, content_type: str) -> str:
    """The YAML text of a register request: `{"content": ...}` as JSON, or the raw body
    as YAML (the guard, web.guard, let in no other content type). A 422 for a body
    that is neither."""
    if len(body) > 2 * MAX_PLAYBOOK_BYTES:  # the validator names the exact limit below it
        raise HTTPException(413, f"the request is larger than {2 * MAX_PLAYBOOK_BYTES} bytes")
    kind = media_type(content_type)
    try:
        if kind == "application/json":
            return RegisterRequest.model_validate(json.loads(body)).content
        if kind in YAML_TYPES:
            return body.decode()
    except (ValueError, ValidationError, UnicodeDecodeError):
        raise HTTPException(
            422, 'the body must be JSON {"content": "<playbook YAML>"} or UTF-8 YAML text'
        ) from None
    raise HTTPException(
        415, f"send application/json or application/yaml, not {kind or 'no content type'}"
    )


@router.post(
    "/catalog",
    summary="Register a playbook",
    status_code=status.HTTP_201_CREATED,
    response_model=Registered,
    responses={200: {"model": Registered, "description": "The same content: its version"}},
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {
                "application/json": {"schema": RegisterRequest.model_json_schema()},
                "application/yaml": {"schema": {"type": "string"}},
            },
        }
    },
)
async def catalog_register(request: Request, response: Response, engine: EngineDep) -> Registered:
    """A new version of its path (201), or the latest one when the content is the same
    (200); its `metadata.schedule` is installed as `catalog register` does. An invalid
    playbook is a 422 with its `problems`."""
    text = _content_of(await request.body(), request.headers.get("content-type", ""))
    _, entry = await run_in_threadpool(engine.register_text, text, None, install_schedule=True)
    response.status_code = status.HTTP_201_CREATED if entry.created else status.HTTP_200_OK
    return {
        "path": entry.path,
        "version": entry.version,
        "catalog_id": entry.catalog_id,
        "name": entry.name,
        "created": entry.created,
    }


# ---- schedules -------------------------------------------------------------------------------
class ScheduleRequest(BaseModel):
    """What `schedule add` takes: a catalog path (or a playbook's YAML, registered on the
    way), a cron expression, its timezone, a payload for every run."""

    model_config = ConfigDict(extra="forbid")

    path: str | None = None
    playbook: str | None = None
    cron: str
    timezone: str = "UTC"
    payload: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _one_target(self) -> ScheduleRequest:
        if (self.path is None) == (self.playbook is None):
            raise ValueError("give either `path` (a catalog path) or `playbook` (YAML text)")
        return self


@router.get("/schedules", summary="Every schedule")
def schedules(engine: EngineDep) -> list[ScheduleJSON]:
    return [s.to_json() for s in engine.schedules.all()]


@router.post("/schedules", status_code=status.HTTP_201_CREATED, summary="Add a schedule")
def schedule_add(body: ScheduleRequest, engine: EngineDep) -> ScheduleJSON:
    """Checked before anything is written: the cron and timezone, the payload, the
    playbook (then registered), the catalog path."""
    try:
        check_cron(body.cron, body.timezone)
    except ConfigurationError as exc:  # bad input here, not a misconfigured server
        raise HTTPException(422, str(exc)) from None
    engine.check_payload(body.payload)
    path = body.path
    if body.playbook is not None:
        path = engine.register_text(body.playbook)[1].path
    assert path is not None
    row = engine.schedules.add(path, body.cron, timezone=body.timezone, payload=body.payload)
    return row.to_json()


@router.delete("/schedules/{schedule_id}", summary="Remove a schedule")
def schedule_remove(schedule_id: BigIdPath, engine: EngineDep) -> ScheduleRemoved:
    """Runs it started are not touched."""
    engine.schedules.get(schedule_id)  # ScheduleNotFound: 404
    return {"schedule_id": schedule_id, "removed": engine.schedules.remove(schedule_id)}


@router.post("/schedules/{schedule_id}/pause", summary="Stop firing a schedule")
def schedule_pause(schedule_id: BigIdPath, engine: EngineDep) -> ScheduleChanged:
    row, changed = engine.schedules.pause(schedule_id)
    return {**row.to_json(), "changed": changed}


@router.post("/schedules/{schedule_id}/resume", summary="Fire a paused schedule again")
def schedule_resume(schedule_id: BigIdPath, engine: EngineDep) -> ScheduleChanged:
    """From its next cron time after now: firings missed while paused are not made up."""
    try:
        row, changed = engine.schedules.resume(schedule_id)
    except ConfigurationError as exc:  # a cron stored before it was checked for a date
        raise HTTPException(409, str(exc)) from None
    return {**row.to_json(), "changed": changed}


@router.post(
    "/schedules/{schedule_id}/trigger",
    status_code=status.HTTP_201_CREATED,
    summary="Start a run of a schedule now",
)
def schedule_trigger(schedule_id: BigIdPath, engine: EngineDep) -> ScheduleTriggered:
    """Paused or not, with its payload; its cadence is untouched."""
    return {"schedule_id": schedule_id, "execution_id": engine.trigger_schedule(schedule_id)}
