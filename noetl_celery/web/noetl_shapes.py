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

import base64
import binascii
import datetime as dt
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

from typing_extensions import TypedDict

from noetl_celery.constants import (
    CANCELLED,
    COMPLETED,
    EV_COMMAND_COMPLETED,
    EV_COMMAND_FAILED,
    EV_CURSOR_UNFINISHED,
    EV_EXECUTION_CANCELLED,
    EV_EXECUTION_COMPLETED,
    EV_EXECUTION_FAILED,
    EV_EXECUTION_STARTED,
    EV_LOOP_DONE,
    EV_PASS_FAILED,
    EV_STEP_FAILED,
    EV_STEP_SKIPPED,
    FAILED,
    TERMINAL_STATUSES,
    StepStatus,
)
from noetl_celery.errors import InputInvalid
from noetl_celery.models.yaml_safe import safe_load
from noetl_celery.store.rows import ExecutionRow
from noetl_celery.web.inputs import BIGINT_MAX, INT_MAX, digits

KIND = "Playbook"

EVENT_NAMES: dict[str, str] = {
    EV_EXECUTION_STARTED: "playbook.initialized",
    EV_COMMAND_COMPLETED: "step.exit",
    EV_COMMAND_FAILED: "call.error",
    EV_LOOP_DONE: "loop.done",
    EV_STEP_FAILED: "step.failed",
    EV_STEP_SKIPPED: "step.skipped",
    EV_EXECUTION_COMPLETED: "playbook.completed",
    EV_EXECUTION_FAILED: "playbook.failed",
    EV_EXECUTION_CANCELLED: "execution.cancelled",
    EV_PASS_FAILED: "pass.failed",
    EV_CURSOR_UNFINISHED: "cursor.unfinished",
}
NATIVE_TYPES: dict[str, str] = {name: native for native, name in EVENT_NAMES.items()}

EVENT_STATUS: dict[str, str] = {
    EV_EXECUTION_STARTED: "STARTED",
    EV_COMMAND_COMPLETED: COMPLETED,
    EV_COMMAND_FAILED: FAILED,
    EV_LOOP_DONE: COMPLETED,
    EV_STEP_FAILED: FAILED,
    EV_STEP_SKIPPED: "SKIPPED",  # NoETL's status of its step.skipped
    EV_EXECUTION_COMPLETED: COMPLETED,
    EV_EXECUTION_FAILED: FAILED,
    EV_EXECUTION_CANCELLED: CANCELLED,
    EV_PASS_FAILED: FAILED,
    EV_CURSOR_UNFINISHED: CANCELLED,
}

# failures `status` names in its one `error` line
ERRORS_SHOWN = 3


class ShapeError(InputInvalid):
    """A request value that cannot be used (answered 422 with the message: web.problems)."""


# ---- request values ------------------------------------------------------------------------
def decode_content(value: str) -> str:
    """The YAML of a register request: NoETL's CLI sends it base64-encoded, its GUI as
    text. Base64 that decodes to UTF-8 is taken decoded, anything else as it is (YAML
    text always holds characters base64 does not: spaces, colons, newlines in between)."""
    compact = "".join(value.split())
    if not compact:
        return value
    try:
        return base64.b64decode(compact, validate=True).decode("utf-8")
    except (binascii.Error, ValueError):  # UnicodeDecodeError is a ValueError
        return value


def parse_version(value: Any) -> int | None:
    """A catalog version from a request: an int, its digits, or "latest"/empty (None)."""
    if value is None or (isinstance(value, str) and value.strip().lower() in ("", "latest")):
        return None
    number = _integer(value)
    if number is None:
        raise ShapeError("version", f"must be an integer or 'latest', not {_shown(value)}")
    return _within(number, "version", INT_MAX)


def parse_catalog_id(value: Any) -> int | None:
    if value is None or value == "":
        return None
    number = _integer(value)
    if number is None:
        raise ShapeError("catalog_id", f"must be a catalog id (digits), not {_shown(value)}")
    return _within(number, "catalog_id", BIGINT_MAX)


def _integer(value: Any) -> int | None:
    """An int, or a string of ASCII digits, as an int; None for anything else."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    return digits(value) if isinstance(value, str) else None


def _within(number: int, field: str, high: int) -> int:
    """`number` when it can be a row's id or version (1 to the column's maximum)."""
    if not 1 <= number <= high:
        raise ShapeError(field, f"must be from 1 to {high}, not {number}")
    return number


def _shown(value: Any) -> str:
    """A request value in a message: its repr, shortened to one short line."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def execute_workload(body: Mapping[str, Any]) -> dict[str, Any]:
    """The payload of an execute request: `payload` (NoETL's field name) overlaid with
    `workload` (the alias its CLI and GUI send)."""
    merged: dict[str, Any] = {}
    for key in ("payload", "workload"):
        value = body.get(key)
        if value is None:
            continue
        if not isinstance(value, dict):
            raise ShapeError(key, f"must be a JSON object, not {type(value).__name__}")
        merged.update(value)
    return merged


def check_kind(value: Any, field: str) -> None:
    """Only playbooks exist here; NoETL's other resource kinds are refused by name."""
    if value is not None and str(value).lower() != "playbook":
        raise ShapeError(field, f"{value!r} is not supported: only playbooks can be used")


# ---- time ------------------------------------------------------------------------------------
def iso(value: dt.datetime | None) -> str | None:
    return None if value is None else value.isoformat() + "Z"


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


def _error_text(error: Any) -> str | None:
    if error is None:
        return None
    if isinstance(error, dict):
        return str(error.get("message") or error)
    return str(error)


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
        "error": _error_text(row.error),
        "parent_execution_id": row.parent_execution_id,
    }


def event_name(native_type: str) -> str:
    return EVENT_NAMES.get(native_type, native_type)


def native_types(names: Iterable[str]) -> set[str]:
    """The native types an `event_type` filter names (NoETL's or our own names)."""
    return {NATIVE_TYPES.get(n, n) for n in names if n}


def _event_error(payload: Any) -> Any:
    if isinstance(payload, dict):
        error = payload.get("error")
        if error is not None:
            return _error_text(error)
        if payload.get("message") is not None and "error" in str(payload.get("kind", "")):
            return str(payload["message"])
    return None


class EventEntry(TypedDict):
    """NoETL's `ExecutionEventResponse` (`event_entry`)."""

    execution_id: str
    event_id: int
    event_type: str
    node_id: str | None
    node_name: str | None
    status: str | None
    created_at: str | None
    timestamp: str | None
    context: dict[str, Any]  # {native_type, command_id, epoch, iteration}
    result: Any
    error: str | None
    duration: None


def event_entry(event: Mapping[str, Any]) -> EventEntry:
    """NoETL's `ExecutionEventResponse` from an `EventRow.to_json()`."""
    native = str(event["type"])
    payload = event.get("payload")
    context = {
        "native_type": native,
        "command_id": event.get("command_id"),
        "epoch": event.get("epoch"),
        "iteration": event.get("iteration"),
    }
    error = _event_error(payload)
    result = None
    if isinstance(payload, dict) and error is None:
        result = payload
    return {
        "execution_id": str(event["execution_id"]),
        "event_id": event["event_id"],
        "event_type": event_name(native),
        "node_id": event.get("step"),
        "node_name": event.get("step"),
        "status": EVENT_STATUS.get(native),
        "created_at": event.get("created_at"),
        "timestamp": event.get("created_at"),
        "context": context,
        "result": result,
        "error": error,
        "duration": None,
    }


class Pagination(TypedDict):
    page: int
    page_size: int
    total_events: int
    total_pages: int
    has_next: bool
    has_prev: bool


def pagination(page: int, page_size: int, total: int) -> Pagination:
    pages = max(1, math.ceil(total / page_size)) if page_size > 0 else 1
    return {
        "page": page,
        "page_size": page_size,
        "total_events": total,
        "total_pages": pages,
        "has_next": page < pages,
        "has_prev": page > 1,
    }


class EventsSlice(TypedDict):
    events: list[EventEntry]
    pagination: Pagination


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


class EhdbLine(TypedDict):
    """An execution as NoETL's event-history listing shows it (`ehdb_line`)."""

    execution_id: str
    status: str
    path: str
    catalog_id: str
    parent_execution_id: str | None
    event_count: int
    started_at: str | None
    completed_at: str | None


def ehdb_line(row: ExecutionRow, event_count: int) -> EhdbLine:
    return {
        "execution_id": row.execution_id,
        "status": row.status,
        "path": row.path,
        "catalog_id": str(row.catalog_id),
        "parent_execution_id": row.parent_execution_id,
        "event_count": event_count,
        "started_at": iso(row.created_at),
        "completed_at": iso(row.finished_at),
    }


class EhdbExecutions(TypedDict):
    executions: list[EhdbLine]


class EhdbStateLine(TypedDict):
    """An execution's state in `ehdb_state`: `ehdb_line`'s fields after three of its own."""

    status: str
    terminal: bool
    current_node: str | None
    path: str
    catalog_id: str
    parent_execution_id: str | None
    event_count: int
    started_at: str | None
    completed_at: str | None


class EhdbState(TypedDict):
    exists: bool
    execution_id: str
    state: EhdbStateLine | None  # None: no such execution


def ehdb_state(row: ExecutionRow, event_count: int, current_node: str | None) -> EhdbState:
    line = ehdb_line(row, event_count)
    return {
        "exists": True,
        "execution_id": row.execution_id,
        "state": {
            "status": row.status,
            "terminal": row.status in TERMINAL_STATUSES,
            "current_node": current_node,
            "path": line["path"],
            "catalog_id": line["catalog_id"],
            "parent_execution_id": line["parent_execution_id"],
            "event_count": line["event_count"],
            "started_at": line["started_at"],
            "completed_at": line["completed_at"],
        },
    }


class EhdbEvent(TypedDict):
    event_id: int
    event_type: str
    node_name: str | None
    status: str | None
    created_at: str | None


def ehdb_event(event: Mapping[str, Any]) -> EhdbEvent:
    native = str(event["type"])
    return {
        "event_id": event["event_id"],
        "event_type": event_name(native),
        "node_name": event.get("step"),
        "status": EVENT_STATUS.get(native),
        "created_at": event.get("created_at"),
    }


class EhdbEvents(TypedDict):
    exists: bool
    execution_id: str
    events: list[EhdbEvent]
    next_cursor: int | None  # the last event's id when the page was full


class Health(TypedDict):
    status: str


class Readiness(TypedDict):
    """`/api/ready`: "ready" or "not ready", and each check's one line."""

    status: str
    database: str
    broker: str
