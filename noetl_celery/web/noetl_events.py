"""NoETL's event vocabulary and the answers made of events (noetl_shapes has the rest).

noetl-celery's event types are renamed to NoETL's where one means the other (the table
is in noetl_shapes' docstring); `event_entry` is one event as NoETL's CLI and GUI read
it, with `pagination`; the `ehdb_*` shapes are NoETL's execution-history routes. Pure:
no I/O. `iso` and `error_text` are the timestamp and error formats every NoETL answer
uses.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Iterable, Mapping
from typing import Any

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
)
from noetl_celery.store.rows import ExecutionRow


def iso(value: dt.datetime | None) -> str | None:
    return None if value is None else value.isoformat() + "Z"


def error_text(error: Any) -> str | None:
    if error is None:
        return None
    if isinstance(error, dict):
        return str(error.get("message") or error)
    return str(error)


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


def event_name(native_type: str) -> str:
    return EVENT_NAMES.get(native_type, native_type)


def native_types(names: Iterable[str]) -> set[str]:
    """The native types an `event_type` filter names (NoETL's or our own names)."""
    return {NATIVE_TYPES.get(n, n) for n in names if n}


def _event_error(payload: Any) -> Any:
    if isinstance(payload, dict):
        error = payload.get("error")
        if error is not None:
            return error_text(error)
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
