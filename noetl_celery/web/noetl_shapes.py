"""Pure mapping between noetl-celery's read models and the JSON NoETL's CLI (5.3.x) and
GUI expect (shapes: shared spec `noetl-server-api.md`, NoETL's pydantic models under
`noetl/server/api`). No I/O here: `api_noetl` reads, these functions shape.

Status. NoETL's CLI shows a status from two booleans only (`completed && failed` ->
FAILED, `completed` -> COMPLETED, else RUNNING), so:

    RUNNING    completed=false failed=false
    COMPLETED  completed=true  failed=false
    FAILED     completed=true  failed=true   error="<what failed>"
    CANCELLED  completed=true  failed=false  (status "CANCELLED" says which)

(NoETL's Python server sends `completed=false` on failure, which its own CLI shows as
RUNNING; we do not copy that.)

Events. noetl-celery's event types are renamed to NoETL's where one means the other;
the native type stays in `context.native_type`:

    execution.started    -> playbook.initialized   status STARTED
    command.completed    -> step.exit              COMPLETED (a step run or a loop item)
    command.failed       -> call.error             FAILED    (a tool call that failed)
    loop.done            -> loop.done              COMPLETED
    step.failed          -> step.failed            FAILED    (unhandled: the run fails)
    execution.completed  -> playbook.completed     COMPLETED
    execution.failed     -> playbook.failed        FAILED
    execution.cancelled  -> execution.cancelled    CANCELLED
    pass.failed, cursor.unfinished                 unchanged

The renaming is one to one, so an `event_type` filter in either vocabulary works.

Shapes. Each answer is a TypedDict here (gui_shapes for the GUI's): the routes declare
them as their response models, so the OpenAPI document shows NoETL's shapes. FastAPI
keeps only the declared keys of an answer: a key missing here would vanish from it
(mypy checks every literal these functions build against its TypedDict). What is open
by nature (a step's result, a playbook's parsed YAML, an event's payload) is `Any` or
`dict[str, Any]`, never a closed shape.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

from typing_extensions import TypedDict

from noetl_celery.constants import (
    COMPLETED,
    FAILED,
    TERMINAL_STATUSES,
    StepStatus,
)
from noetl_celery.models.yaml_safe import safe_load
from noetl_celery.store.rows import ExecutionRow
from noetl_celery.web.noetl_events import (
    EventEntry,
    EventsSlice,
    Pagination,
    error_text,
    iso,
)

KIND = "Playbook"

# failures `status` names in its one `error` line
ERRORS_SHOWN = 3


# ---- time ------------------------------------------------------------------------------------


def duration_human(seconds: float | None) -> str | None:
    """`0.4s`, `12.0s`, `3m 5s`, `2h 0m 7s`."""
    if seconds is None:
        return None
    if seconds < 60:
        return f"{seconds:.1f}s"
    whole = int(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h {minutes}m {secs}s" if hours else f"{minutes}m {secs}s"


# ---- catalog -------------------------------------------------------------------------------
class CatalogLike(Protocol):
    """A catalog version with its YAML (engine.compat.CatalogRow)."""

    @property
    def catalog_id(self) -> int: ...
    @property
    def path(self) -> str: ...
    @property
    def version(self) -> int: ...
    @property
    def name(self) -> str: ...
    @property
    def content(self) -> str: ...
    @property
    def content_sha256(self) -> str: ...
    @property
    def created_at(self) -> dt.datetime: ...


class RegisterBody(TypedDict):
    status: str
    message: str
    path: str
    version: int
    catalog_id: str
    kind: str


class BatchResult(TypedDict):
    index: int
    status: str
    path: str | None
    version: int | None
    catalog_id: str | None
    error: str | None


class BatchBody(TypedDict):
    registered: int
    failed: int
    results: list[BatchResult]


class CatalogMeta(TypedDict):
    name: str
    content_sha256: str
    registered_at: str | None


class CatalogEntryJSON(TypedDict):
    """NoETL's `CatalogEntry` (`catalog_entry`)."""

    catalog_id: str
    path: str
    version: int
    kind: str
    content: str
    layout: None
    # the parsed playbook: any mapping its author wrote (YAML keys need not be strings)
    payload: dict[Any, Any]
    meta: CatalogMeta
    created_at: str | None


class CatalogList(TypedDict):
    entries: list[CatalogEntryJSON]


def register_body(path: str, version: int, catalog_id: int, created: bool) -> RegisterBody:
    said = "registered" if created else "already registered (same content)"
    return {
        "status": "success",
        "message": f"Resource '{path}' version '{version}' {said}.",
        "path": path,
        "version": version,
        "catalog_id": str(catalog_id),
        "kind": KIND,
    }


def batch_result(
    index: int,
    *,
    path: str | None = None,
    version: int | None = None,
    catalog_id: int | None = None,
    error: str | None = None,
) -> BatchResult:
    return {
        "index": index,
        "status": "failed" if error is not None else "registered",
        "path": path,
        "version": version,
        "catalog_id": None if catalog_id is None else str(catalog_id),
        "error": error,
    }


def batch_body(results: list[BatchResult]) -> BatchBody:
    failed = sum(1 for r in results if r["status"] != "registered")
    return {"registered": len(results) - failed, "failed": failed, "results": results}


def catalog_entry(row: CatalogLike) -> CatalogEntryJSON:
    """NoETL's `CatalogEntry`; `payload` is the parsed playbook (the GUI reads
    `payload.metadata.name/description`)."""
    try:
        document = safe_load(row.content)
    except Exception:  # registered content always parsed; never fail a listing on it
        document = None
    return {
        "catalog_id": str(row.catalog_id),
        "path": row.path,
        "version": row.version,
        "kind": KIND,
        "content": row.content,
        "layout": None,
        "payload": document if isinstance(document, dict) else {},
        "meta": {
            "name": row.name,
            "content_sha256": row.content_sha256,
            "registered_at": iso(row.created_at),
        },
        "created_at": iso(row.created_at),
    }


# ---- executions ----------------------------------------------------------------------------
def status_flags(status: str) -> tuple[bool, bool]:
    """(completed, failed) as NoETL's CLI reads them (see the module docstring)."""
    return status in TERMINAL_STATUSES, status == FAILED


def error_line(errors: Iterable[Mapping[str, Any]], fallback: str | None = None) -> str | None:
    """One line naming what failed: `step 'x': message` (first few, then `+N more`)."""
    parts: list[str] = []
    count = 0
    for error in errors:
        count += 1
        if len(parts) >= ERRORS_SHOWN:
            continue
        where = f"step '{error['step']}'" if error.get("step") else ""
        if error.get("item") is not None:
            where += f" item {error['item']}"
        message = str(error.get("message") or error.get("kind") or "failed")
        parts.append(f"{where}: {message}" if where else message)
    if not parts:
        return fallback
    more = f" (+{count - len(parts)} more)" if count > len(parts) else ""
    return "; ".join(parts) + more


class StatusBody(TypedDict):
    """`GET /api/executions/{id}/status` (`status_body`)."""

    execution_id: str
    path: str | None
    status: str
    current_step: str | None
    completed_steps: list[str]
    completed: bool
    failed: bool
    completion_inferred: bool
    error: str | None
    start_time: str | None
    end_time: str | None
    duration_seconds: float | None
    duration_human: str | None
    variables: dict[str, Any]  # always {} (see status_body)


def status_body(
    view: Mapping[str, Any],
    errors: Sequence[Mapping[str, Any]],
    order: Sequence[str] = (),
    last_step: str | None = None,
) -> StatusBody:
    """`GET /api/executions/{id}/status` from `Engine.status` (view) and the failures
    of `Engine.summary` (errors). `order` is the playbook's step order (completed steps
    are listed in it), `last_step` the last step that completed. `variables` stays
    empty: the engine's variables start from the payload, which may hold secrets."""
    status = str(view["status"])
    completed, failed = status_flags(status)
    steps = view.get("steps") or []
    done = sorted(
        (s["step"] for s in steps if s.get("status") == StepStatus.COMPLETED),
        key=lambda name: (order.index(name) if name in order else len(order), name),
    )
    current_step = current_node(view, last_step)
    seconds = view.get("duration_seconds")
    return {
        "execution_id": str(view["execution_id"]),
        "path": view.get("path"),
        "status": status,
        "current_step": current_step,
        "completed_steps": done,
        "completed": completed,
        "failed": failed,
        "completion_inferred": False,
        "error": error_line(errors, view.get("error")) if status != COMPLETED else None,
        "start_time": view.get("created_at"),
        "end_time": view.get("finished_at"),
        "duration_seconds": seconds,
        "duration_human": duration_human(seconds),
        "variables": {},
    }


def current_node(view: Mapping[str, Any], last_step: str | None = None) -> str | None:
    """The step running (or waiting for a worker), else the last step that completed."""
    current = list(view.get("current") or []) + [w["step"] for w in view.get("waiting") or []]
    if current:
        return str(current[0])
    if last_step:
        return last_step
    steps = view.get("steps") or []
    return str(steps[-1]["step"]) if steps else None


def progress_percent(status: str, ended: int, made: int) -> int:
    """0..100: an ended execution 100, a running one its share of ended commands (at
    most 99: more commands may follow)."""
    if status in TERMINAL_STATUSES:
        return 100
    if made <= 0:
        return 0
    return min(99, math.floor(100 * ended / made))


class ExecutionEntry(TypedDict):
    """NoETL's `ExecutionEntryResponse` (`execution_entry`)."""

    execution_id: str
    catalog_id: str
    path: str
    version: int | None
    status: str
    start_time: str | None
    end_time: str | None
    duration_seconds: float
    duration_human: str | None
    progress: int
    result: Any  # the playbook's own result: any JSON
    error: str | None
    parent_execution_id: str | None


def execution_entry(
    row: ExecutionRow, version: int | None, progress: tuple[int, int]
) -> ExecutionEntry:
    """NoETL's `ExecutionEntryResponse` (the GUI's execution list). `result` only for a
    COMPLETED execution (the engine stored it redacted)."""
    seconds = round(row.duration_seconds, 3)
    return {
        "execution_id": row.execution_id,
        "catalog_id": str(row.catalog_id),
        "path": row.path,
        "version": version,
        "status": row.status,
        "start_time": iso(row.created_at),
        "end_time": iso(row.finished_at),
        "duration_seconds": seconds,
        "duration_human": duration_human(seconds),
        "progress": progress_percent(row.status, *progress),
        "result": row.result if row.status == COMPLETED else None,
        "error": error_text(row.error),
        "parent_execution_id": row.parent_execution_id,
    }


class ExecutionDetailResponse(ExecutionEntry):
    """NoETL's `ExecutionDetailResponse`: the entry, then a page of its events."""

    events_included: bool
    events_endpoint: str
    events: list[EventEntry]
    pagination: Pagination | None  # None without events


class ExecutionEvents(EventsSlice):
    """`GET /api/executions/{id}/events`: the events without the entry's fields."""

    execution_id: str
    path: str
    status: str


class Executed(TypedDict):
    execution_id: str
    status: str
    commands_generated: int


class RerunStarted(TypedDict):
    execution_id: str
    source_execution_id: str
    status: str


class CleanupBody(TypedDict):
    cancelled_count: int
    execution_ids: list[str]
    message: str


class CancelBody(TypedDict):
    status: str
    execution_id: str
    cancelled_executions: list[str]
    message: str


def cancel_body(execution_id: str, cancelled: list[str], reason: str | None) -> CancelBody:
    message = f"Cancelled {len(cancelled)} execution(s)"
    if reason:
        message += f": {reason}"
    return {
        "status": "cancelled",
        "execution_id": execution_id,
        "cancelled_executions": cancelled,
        "message": message,
    }


class AlreadyEnded(TypedDict):
    status: str
    execution_id: str
    message: str


def already_ended_body(execution_id: str, status: str) -> AlreadyEnded:
    return {
        "status": "already_completed",
        "execution_id": execution_id,
        "message": f"Execution {execution_id} already ended {status}",
    }


class Health(TypedDict):
    status: str


class Readiness(TypedDict):
    """`/api/ready`: "ready" or "not ready", and each check's one line."""

    status: str
    database: str
    broker: str
