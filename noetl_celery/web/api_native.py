"""The native JSON API under `/api/v1`: executions (list, detail, graph, failed items,
quarantined items and their redrive, events, logs, start, cancel, rerun) and the keyed
rate limits here; catalog and schedules in `api_manage`.

Response models: each handler's return annotation (FastAPI takes it as the route's
response model, so the OpenAPI document declares every answer). The read models'
shapes are the engine's TypedDicts (engine.readmodels, engine.summaries), the same that
`--json` prints; the answers made here are declared here.

Every handler is a plain `def`: FastAPI runs it on its thread pool, where the engine's
blocking database calls belong. What an operation means is what the CLI command of the
same name does (cli.inspect, cli.history, cli.rerun, cli.run).
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Query, status
from pydantic import BaseModel, ConfigDict, Field, model_validator
from typing_extensions import TypedDict

from noetl_celery.constants import TERMINAL_STATUSES, TRIGGERS
from noetl_celery.engine import ratelimits
from noetl_celery.engine.ratelimits import RateLimitsPage
from noetl_celery.engine.readmodels import (
    EventsPage,
    ExecutionDetail,
    ExecutionGraph,
    ExecutionsPage,
    FailedItemsPage,
    LogsPage,
    QuarantinePage,
)
from noetl_celery.models.filters import ExecutionFilter
from noetl_celery.store.schema import utcnow
from noetl_celery.web import api_manage
from noetl_celery.web.deps import EngineDep
from noetl_celery.web.inputs import BIGINT_MAX, INT_MAX, BigInt, CheckedRoute

router = APIRouter(prefix="/api/v1", tags=["native"], route_class=CheckedRoute)

MAX_EXECUTIONS_PAGE = 500
MAX_FAILED_ITEMS_PAGE = 500
MAX_EVENTS_PAGE = 1000
STATUSES = ("RUNNING", *sorted(TERMINAL_STATUSES))


def _one_of(value: str | None, allowed: tuple[str, ...], what: str) -> str | None:
    """`value` normalised, or a 422 naming what is allowed (the store matches exactly)."""
    if value is None:
        return None
    wanted = value.upper() if what == "status" else value.lower()
    if wanted not in allowed:
        raise HTTPException(422, f"unknown {what} {value!r} (one of: {', '.join(allowed)})")
    return wanted


# ---- executions ------------------------------------------------------------------------------
@router.get("/executions", summary="List executions, newest first")
def executions(
    engine: EngineDep,
    status_: Annotated[
        str | None, Query(alias="status", description="RUNNING, COMPLETED, FAILED, CANCELLED")
    ] = None,
    path: Annotated[str | None, Query(description="Catalog path (exact)")] = None,
    trigger: Annotated[str | None, Query(description="manual, schedule, rerun, parent")] = None,
    parent: Annotated[str | None, Query(description="Children of this execution")] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_EXECUTIONS_PAGE)] = 50,
    offset: BigInt = 0,
) -> ExecutionsPage:
    """A page of executions with `total` matching; each line carries `items_done` (loop
    iterations finished, failed ones included), `items_succeeded` and `items_failed`."""
    return engine.executions_page(
        ExecutionFilter(
            status=_one_of(status_, STATUSES, "status"),
            path=path,
            trigger=_one_of(trigger, tuple(sorted(TRIGGERS)), "trigger"),
            parent=parent,
            limit=limit,
            offset=offset,
        )
    )


@router.get("/executions/{execution_id}", summary="One execution in detail")
def execution(execution_id: str, engine: EngineDep) -> ExecutionDetail:
    """Steps, loops (progress, start, rate, ETA), errors as `run --json` lists them, the
    state's raw `failures`, commands in flight, child executions."""
    return engine.detail(execution_id)


@router.get("/executions/{execution_id}/graph", summary="The flow with each step's status")
def graph(execution_id: str, engine: EngineDep) -> ExecutionGraph:
    """Nodes (`step`, `status`, `tool`) and edges (`from`, `to`, `when`) of the playbook's
    `next` arcs; steps the execution has not reached are `pending`."""
    return engine.graph(execution_id)


@router.get("/executions/{execution_id}/failed-items", summary="Failed items of a loop step")
def failed_items(
    execution_id: str,
    engine: EngineDep,
    step: Annotated[str, Query(description="The loop step")],
    epoch: Annotated[
        int | None, Query(ge=1, le=INT_MAX, description="One epoch (default: all)")
    ] = None,
    offset: BigInt = 0,
    limit: Annotated[int, Query(ge=1, le=MAX_FAILED_ITEMS_PAGE)] = 50,
) -> FailedItemsPage:
    """A page of the step's failed iterations in iteration order (`value`: a preview
    of the item), with `total`."""
    return engine.failed_items(execution_id, step, epoch=epoch, offset=offset, limit=limit)


@router.get("/executions/{execution_id}/quarantine", summary="Quarantined loop items")
def quarantine(
    execution_id: str,
    engine: EngineDep,
    step: Annotated[str | None, Query(description="Only this loop step's items")] = None,
    kind: Annotated[str | None, Query(description="Only items of this error kind")] = None,
) -> QuarantinePage:
    """The items a quarantine set aside (`noetl-celery quarantine list`): `id`
    (`step:epoch:iteration`), the item, its error and runs; 422 for an unknown step or
    error kind."""
    return engine.quarantine(execution_id, step=step, kind=kind)


@router.get("/executions/{execution_id}/events", summary="Events after a cursor")
def events(
    execution_id: str,
    engine: EngineDep,
    type_: Annotated[
        list[str] | None, Query(alias="type", description="Any of these types (repeatable)")
    ] = None,
    step: str | None = None,
    failed: Annotated[bool, Query(description="Failures only (as `events --failed`)")] = False,
    since: Annotated[int, Query(ge=0, le=BIGINT_MAX, description="Events after this event id")] = 0,
    limit: Annotated[int, Query(ge=1, le=MAX_EVENTS_PAGE)] = 200,
) -> EventsPage:
    """Events oldest first after `since`; pass `next_since` back to continue (no gap, no
    repeat); `left_out` counts the matching events past this page (0: the end, for now)."""
    return engine.events_since(
        execution_id, types=type_ or (), failed=failed, step=step, since=since, limit=limit
    )


@router.get("/executions/{execution_id}/logs", summary="Captured output after a cursor")
def logs(
    execution_id: str,
    engine: EngineDep,
    step: str | None = None,
    since: Annotated[
        int, Query(ge=0, le=BIGINT_MAX, description="Log blocks after this log id")
    ] = 0,
    limit: Annotated[int, Query(ge=1, le=MAX_EVENTS_PAGE)] = 200,
) -> LogsPage:
    """What the commands printed and logged (redacted), paged like `events`."""
    return engine.logs_since(execution_id, step=step, since=since, limit=limit)


class Started(TypedDict):
    execution_id: str


class Cancelled(TypedDict):
    execution_id: str
    cancelled: bool
    # per cursor step: the rows it had claimed and will not process ({epoch, rows, ...})
    unfinished_rows: dict[str, dict[str, Any]]
    child_unfinished_rows: dict[str, dict[str, dict[str, Any]]]  # the same, per child


class Rerun(TypedDict):
    execution_id: str
    rerun_of: str


class StartRequest(BaseModel):
    """A registered playbook (`path`, `version`) or a playbook's YAML (`playbook`,
    registered on the way), with a payload merged over its workload."""

    model_config = ConfigDict(extra="forbid")

    path: str | None = None
    version: int | None = Field(None, ge=1, le=INT_MAX)
    playbook: str | None = None
    payload: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _one_source(self) -> StartRequest:
        if (self.path is None) == (self.playbook is None):
            raise ValueError("give either `path` (a catalog path) or `playbook` (YAML text)")
        if self.version is not None and self.path is None:
            raise ValueError("`version` goes with `path`")
        return self


@router.post("/executions", status_code=status.HTTP_201_CREATED, summary="Start an execution")
def start(body: StartRequest, engine: EngineDep) -> Started:
    """Start it and answer at once with its id (the workers run it)."""
    if body.playbook is not None:
        execution_id = engine.start_text(body.playbook, body.payload)
    else:
        assert body.path is not None
        execution_id = engine.start_path(body.path, body.payload, body.version)
    return {"execution_id": execution_id}


@router.post("/executions/{execution_id}/cancel", summary="Cancel a running execution")
def cancel(execution_id: str, engine: EngineDep) -> Cancelled:
    """End it CANCELLED with its children (409 when it had already ended);
    `unfinished_rows`: per cursor step, rows it had claimed and will not process."""
    ended = engine.cancel_tree(execution_id, "cancelled through the HTTP API")
    if ended is None:
        now = engine.store.execution_status(execution_id)
        raise HTTPException(409, f"execution {execution_id} had already ended: {now}")
    return {
        "execution_id": execution_id,
        "cancelled": True,
        "unfinished_rows": ended.unfinished_rows,
        "child_unfinished_rows": {
            child.execution_id: child.unfinished_rows
            for child in ended.descendants()
            if child.unfinished_rows
        },
    }


class RerunRequest(BaseModel):
    """What `noetl-celery rerun` takes: `--from`, `--failed-items`, `--set` (here a
    payload merged over the original's)."""

    model_config = ConfigDict(extra="forbid")

    from_step: str | None = None
    failed_items: bool = False
    payload: dict[str, Any] | None = None


@router.post(
    "/executions/{execution_id}/rerun",
    status_code=status.HTTP_201_CREATED,
    summary="Run an ended execution again",
)
def rerun(execution_id: str, engine: EngineDep, body: RerunRequest | None = None) -> Rerun:
    """A new execution of the same catalog version: from the start, from `from_step`, or
    over the failed loop items (409 when it cannot be made: still running, no such
    step, no failed items)."""
    body = body or RerunRequest()
    new_id = engine.rerun(
        execution_id,
        from_step=body.from_step,
        failed_items=body.failed_items,
        overrides=body.payload,
    )
    return {"execution_id": new_id, "rerun_of": execution_id}


class RedriveRequest(BaseModel):
    """What `noetl-celery quarantine redrive` takes: `--step`, `--kind`, the item ids,
    `--set` (here a payload merged over the original's)."""

    model_config = ConfigDict(extra="forbid")

    step: str | None = None
    kind: str | None = None
    items: list[Annotated[str, Field(max_length=1000)]] = Field(
        default_factory=list, max_length=10000
    )
    payload: dict[str, Any] | None = None


@router.post(
    "/executions/{execution_id}/quarantine/redrive",
    status_code=status.HTTP_201_CREATED,
    summary="Run quarantined items again",
)
def redrive(execution_id: str, engine: EngineDep, body: RedriveRequest | None = None) -> Rerun:
    """A new execution linked to this one (`rerun_of`) running exactly the quarantined
    items chosen (`items`: ids `step:epoch:iteration`; else every one of `step` / `kind`
    not yet redriven), each marked redriven here (409 when it cannot be made: still
    running, nothing left to redrive, an item unknown or redriven already)."""
    body = body or RedriveRequest()
    new_id = engine.redrive(
        execution_id,
        step=body.step,
        kind=body.kind,
        items=body.items,
        overrides=body.payload,
    )
    return {"execution_id": new_id, "rerun_of": execution_id}


router.include_router(api_manage.router)


# ---- keyed rate limits -----------------------------------------------------------------------
@router.get("/rate-limits", summary="Keyed rate limits: declared, limit, rate, in flight, waiting")
def rate_limits(engine: EngineDep) -> RateLimitsPage:
    """Every `rate_limit` key the fleet has paced or is running (DSL §1.9): its declared
    `per_second`, the rate it is paced at now (learned below the declared one from
    429s), its runs in the last second, its run slots held and its commands parked for
    a turn or a slot."""
    return ratelimits.read(engine.store, utcnow())
