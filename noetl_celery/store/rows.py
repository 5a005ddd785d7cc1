"""Plain row types returned by the store (no SQLAlchemy objects leave `store/`)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from typing_extensions import TypedDict

from noetl_celery.models.json_types import JSONObject
from noetl_celery.tracing import trace_id_of


@dataclass(frozen=True)
class CatalogEntry:
    catalog_id: int
    path: str
    version: int
    name: str
    created: bool = False  # True when this call registered a new version


@dataclass(frozen=True)
class ExecutionRow:
    execution_id: str
    catalog_id: int
    path: str
    status: str
    parent_execution_id: str | None
    parent_command_id: str | None
    payload: JSONObject | None
    state: dict[str, Any] | None
    result: Any
    error: Any
    created_at: dt.datetime
    updated_at: dt.datetime
    finished_at: dt.datetime | None
    passes: int = 0
    spawn_key: str | None = None
    trigger: str = "manual"  # manual | schedule | rerun | parent
    rerun_of: str | None = None
    trigger_detail: dict[str, Any] | None = None

    @property
    def duration_seconds(self) -> float:
        end = self.finished_at or self.updated_at
        return max(0.0, (end - self.created_at).total_seconds())


@dataclass(frozen=True)
class InFlight:
    """Commands of one step in one unfinished status (`issued` or `running`)."""

    step: str
    status: str
    count: int
    oldest_issued_at: dt.datetime | None


@dataclass(frozen=True)
class FailedItem:
    """A loop iteration that failed: its index, its error object and its item."""

    iteration: int
    error: Any
    item: Any
    epoch: int | None = None


@dataclass(frozen=True)
class QuarantinedItem:
    """A loop item the orchestrator set aside (an `item.quarantined` event): where it
    ran, why (its error's kind and message, and the whole error of its command), how
    often its body ran, and the item itself."""

    step: str
    epoch: int
    iteration: int
    command_id: str
    kind: str
    message: str
    runs: int | None
    attempt: int | None
    item: Any
    error: Any
    quarantined_at: dt.datetime | None
    redriven_by: str | None = None  # the execution that ran it again


@dataclass(frozen=True)
class ClaimedCommand:
    command_id: str
    execution_id: str
    catalog_id: int
    step: str
    kind: str
    epoch: int
    iteration: int | None
    attempt: int
    ctx_version: int
    item: Any
    meta: Mapping[str, Any] | None
    resume: Mapping[str, Any] | None = None  # continuation (+ `child` summary) after a wait


@dataclass(frozen=True)
class FrameRows:
    """The rows a cursor claim took that its epoch had not claimed before, and how many
    it took that it had (their bodies belong to the claim that took them first)."""

    rows: list[Any]
    duplicates: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"rows": self.rows, "duplicates": self.duplicates}

    @classmethod
    def of(cls, resume: Mapping[str, Any] | None) -> FrameRows | None:
        """The rows recorded on a claim command (`resume.frame`), if any."""
        frame = (resume or {}).get("frame")
        if not isinstance(frame, dict) or not isinstance(frame.get("rows"), list):
            return None
        return cls(frame["rows"], int(frame.get("duplicates") or 0))


@dataclass(frozen=True)
class SpawnRequest:
    """Start a child execution of the playbook at `path`, linked to a parent command."""

    path: str
    version: int | None
    payload: JSONObject
    key: str  # unique per (parent command, task, spawn number)
    wait: bool


# The `...JSON` TypedDicts are the shapes the read models answer (CLI `--json`, the HTTP
# API's response models, web.api_native): declared once here. typing_extensions'
# TypedDict, not typing's: pydantic reads these for the OpenAPI document and, before
# Python 3.12, only that one carries what it needs.
class EventJSON(TypedDict):
    """An event as the read models answer it (`EventRow.to_json`)."""

    event_id: int
    execution_id: str
    type: str
    step: str | None
    command_id: str | None
    epoch: int | None
    iteration: int | None
    payload: Any
    created_at: str


class LogJSON(TypedDict):
    """A captured output line as the read models answer it (`LogRow.to_json`)."""

    log_id: int
    execution_id: str
    command_id: str | None
    step: str | None
    iteration: int | None
    text: str
    truncated: bool
    created_at: str | None
    trace_id: str  # the execution's OpenTelemetry trace (noetl_celery.tracing)


@dataclass(frozen=True)
class EventRow:
    event_id: int
    execution_id: str
    type: str
    step: str | None
    command_id: str | None
    epoch: int | None
    iteration: int | None
    payload: Any
    created_at: dt.datetime

    def to_json(self) -> EventJSON:
        return {
            "event_id": self.event_id,
            "execution_id": self.execution_id,
            "type": self.type,
            "step": self.step,
            "command_id": self.command_id,
            "epoch": self.epoch,
            "iteration": self.iteration,
            "payload": self.payload,
            "created_at": self.created_at.isoformat() + "Z",
        }


@dataclass(frozen=True)
class CommandCounts:
    planned: int = 0
    issued: int = 0
    running: int = 0
    completed: int = 0
    failed: int = 0
    cancelled: int = 0
    expired: int = 0  # runs lost with their worker (each replaced by a next attempt)
    waiting: int = 0  # parked until a child execution ends (sub-playbooks)
    delayed: int = 0  # parked until a backoff ends (a cursor claim retried)

    def to_json(self) -> CommandCountsJSON:
        return {
            "planned": self.planned,
            "issued": self.issued,
            "running": self.running,
            "completed": self.completed,
            "failed": self.failed,
            "cancelled": self.cancelled,
            "expired": self.expired,
            "waiting": self.waiting,
            "delayed": self.delayed,
        }


class CommandCountsJSON(TypedDict):
    """`CommandCounts.to_json()`: commands of an execution by status."""

    planned: int
    issued: int
    running: int
    completed: int
    failed: int
    cancelled: int
    expired: int
    waiting: int
    delayed: int


@dataclass(frozen=True)
class LoopCounters:
    """What a worker's close reads of its loop epoch's `loops` row (the orchestrator
    writes it with every pass that changes it): whether the epoch is done, its window
    and how many of its commands are in flight (cursor: claims and bodies)."""

    done: bool
    window: int
    in_flight: int


@dataclass(frozen=True)
class LoopRow:
    step: str
    epoch: int
    mode: str
    total: int | None
    issued: int
    succeeded: int
    failed: int
    done: bool
    started_at: dt.datetime | None = None  # null: recorded before migration 0008
    updated_at: dt.datetime | None = None  # a finished epoch's end
    quarantined: int = 0

    @property
    def in_flight(self) -> int:
        return max(0, self.issued - self.succeeded - self.failed - self.quarantined)


@dataclass(frozen=True)
class LogRow:
    """Captured output of one command (command_id None: engine lines about the
    execution, logged outside any command)."""

    execution_id: str
    command_id: str | None
    step: str | None
    iteration: int | None
    text: str
    truncated: bool
    log_id: int = 0  # assigned by the database
    created_at: dt.datetime | None = None

    def to_json(self) -> LogJSON:
        return {
            "log_id": self.log_id,
            "execution_id": self.execution_id,
            "command_id": self.command_id,
            "step": self.step,
            "iteration": self.iteration,
            "text": self.text,
            "truncated": self.truncated,
            "created_at": self.created_at.isoformat() + "Z" if self.created_at else None,
            "trace_id": trace_id_of(self.execution_id),
        }


@dataclass(frozen=True)
class Page:
    """Rows of a listing (oldest first) and how many matching rows it left out."""

    rows: list[Any]
    left_out: int = 0


class ScheduleJSON(TypedDict):
    """A schedule as `schedule list --json` and `/api/v1/schedules` show it."""

    schedule_id: int
    name: str | None
    path: str
    cron: str
    timezone: str
    payload: dict[str, Any]  # the payload its runs get: any JSON object
    enabled: bool
    next_fire_at: str | None
    last_fire_at: str | None
    created_at: str | None
    deadline: str | None


@dataclass(frozen=True)
class ScheduleRow:
    schedule_id: int
    name: str | None
    path: str
    cron: str
    timezone: str
    payload: JSONObject | None
    enabled: bool
    next_fire_at: dt.datetime
    last_fire_at: dt.datetime | None
    created_at: dt.datetime
    deadline: str | None = None  # its runs' deadline (models.deadlines)

    def to_json(self) -> ScheduleJSON:
        def iso(value: dt.datetime | None) -> str | None:
            return None if value is None else value.isoformat() + "Z"

        return {
            "schedule_id": self.schedule_id,
            "name": self.name,
            "path": self.path,
            "cron": self.cron,
            "timezone": self.timezone,
            "payload": self.payload or {},
            "enabled": self.enabled,
            # a paused schedule's stored time is stale: `resume` computes a new one
            "next_fire_at": iso(self.next_fire_at) if self.enabled else None,
            "last_fire_at": iso(self.last_fire_at),
            "created_at": iso(self.created_at),
            "deadline": self.deadline,
        }


@dataclass(frozen=True)
class LostCommand:
    command_id: str
    execution_id: str
    step: str
    kind: str
    epoch: int
    iteration: int | None
    attempt: int
    ctx_version: int
    item: Any
    meta: Mapping[str, Any] | None
    resume: Mapping[str, Any] | None
    lease_until: dt.datetime | None
    deadline_at: dt.datetime | None


def _iso(value: dt.datetime) -> str:
    return value.isoformat() + "Z"


@dataclass(frozen=True)
class LoopTotals:
    """Loop iterations of one execution over its finished epochs, and how many of its
    epochs are still open (their live counters are in the state snapshot only)."""

    succeeded: int = 0
    failed: int = 0
    open_epochs: int = 0


class CatalogVersionJSON(TypedDict):
    """One version of a path (`CatalogVersion.to_json`)."""

    catalog_id: int
    version: int
    name: str
    content_sha256: str
    registered_at: str


class CatalogSummaryJSON(TypedDict):
    """A catalog path with its latest version (`CatalogSummary.to_json`)."""

    path: str
    name: str
    latest_version: int
    versions: int
    catalog_id: int
    registered_at: str
    first_registered_at: str


@dataclass(frozen=True)
class CatalogVersion:
    """One registered version of a path."""

    catalog_id: int
    path: str
    version: int
    name: str
    content_sha256: str
    created_at: dt.datetime

    def to_json(self) -> CatalogVersionJSON:
        return {
            "catalog_id": self.catalog_id,
            "version": self.version,
            "name": self.name,
            "content_sha256": self.content_sha256,
            "registered_at": _iso(self.created_at),
        }


@dataclass(frozen=True)
class CatalogSummary:
    """A catalog path with its latest version."""

    path: str
    name: str  # the latest version's `metadata.name`
    latest_version: int
    versions: int
    catalog_id: int  # of the latest version
    registered_at: dt.datetime  # when the latest version was registered
    first_registered_at: dt.datetime

    def to_json(self) -> CatalogSummaryJSON:
        return {
            "path": self.path,
            "name": self.name,
            "latest_version": self.latest_version,
            "versions": self.versions,
            "catalog_id": self.catalog_id,
            "registered_at": _iso(self.registered_at),
            "first_registered_at": _iso(self.first_registered_at),
        }


@dataclass(frozen=True)
class CatalogRow:
    """One registered version, with its YAML (what NoETL's API lists)."""

    catalog_id: int
    path: str
    version: int
    name: str
    content: str
    content_sha256: str
    created_at: dt.datetime


@dataclass(frozen=True)
class HeldItem:
    """A message the broker could not take (store.outbox): a command's `execute_command`
    (`kind` 'command', `item_id` its id) or an execution's wake-up ('wake', its id)."""

    item_id: str
    kind: str
    execution_id: str


@dataclass(frozen=True)
class NotificationRow:
    """A row of the notification outbox (store.notifications)."""

    notification_id: str
    execution_id: str
    event: str
    target: str
    attempts: int
    last_error: str | None
    created_at: dt.datetime
    delivered_at: dt.datetime | None
    next_at: dt.datetime
    skipped: bool = False


@dataclass(frozen=True)
class DeadlineCandidate:
    """A running top-level execution the deadline check looks at, with the deadline
    events it has recorded already."""

    execution_id: str
    catalog_id: int
    started_at: dt.datetime
    recorded: frozenset[str]
    schedule_id: int | None = None  # the schedule that started it, if one did
