"""Child executions (sub-playbooks): spawning them and handing their result back.

A waiting parent command and its child are created in one transaction, so a child can
only finish while its parent is already waiting; the child's terminal pass resumes the
parent (status back to `issued`, the child's summary in `resume.child`) in the same
transaction that ends the child. The spawn key makes a child unique per parent task, so
a parent command that runs again finds its child instead of starting another.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, select, update

from noetl_celery.constants import (
    CMD_ISSUED,
    CMD_RUNNING,
    EV_EXECUTION_STARTED,
    RUNNING,
    TERMINAL_STATUSES,
    TRIGGER_PARENT,
)
from noetl_celery.errors import CatalogNotFound
from noetl_celery.store.dialect import insert_ignore
from noetl_celery.store.rows import CatalogEntry, ClaimedCommand, ExecutionRow, SpawnRequest
from noetl_celery.store.schema import commands, events, executions, utcnow
from noetl_celery.store.statements import EXECUTION_COLUMNS

if TYPE_CHECKING:
    from noetl_celery.store.repository import Store

WAITING = "waiting"


def insert_child(
    conn: Connection,
    child_id: str,
    entry: CatalogEntry,
    request: SpawnRequest,
    parent: ClaimedCommand,
) -> str:
    """Insert the child execution (or find the one this key already made); returns its id."""
    now = utcnow()
    inserted = conn.execute(
        insert_ignore(conn, executions).returning(executions.c.execution_id),
        {
            "execution_id": child_id,
            "catalog_id": entry.catalog_id,
            "path": entry.path,
            "status": RUNNING,
            "parent_execution_id": parent.execution_id,
            "parent_command_id": parent.command_id,
            "spawn_key": request.key,
            "trigger": TRIGGER_PARENT,
            "payload": request.payload,
            "state": None,
            "passes": 0,
            "created_at": now,
            "updated_at": now,
        },
    ).first()
    if inserted is None:
        existing = conn.execute(
            select(executions.c.execution_id).where(executions.c.spawn_key == request.key)
        ).scalar_one()
        return str(existing)
    conn.execute(
        insert_ignore(conn, events),
        {
            "execution_id": child_id,
            "type": EV_EXECUTION_STARTED,
            "payload": {
                "path": entry.path,
                "version": entry.version,
                "parent_execution_id": parent.execution_id,
                "parent_command_id": parent.command_id,
            },
            "created_at": now,
        },
    )
    return child_id


def resolve(store: Store, request: SpawnRequest) -> CatalogEntry:
    return store.resolve_catalog(request.path, request.version)


def suspend_and_spawn(
    store: Store,
    command: ClaimedCommand,
    continuation: dict[str, Any],
    request: SpawnRequest,
    child_id: str,
) -> tuple[str | None, bool]:
    """Park `command` as waiting and create its child, atomically. Returns (child id or
    None when the command is no longer ours, whether the parent was resumed at once
    because that child had already finished)."""
    entry = resolve(store, request)  # raises CatalogNotFound before anything is written
    with store.db.write() as conn:
        parked = conn.execute(
            update(commands)
            .where(commands.c.command_id == command.command_id, commands.c.status == CMD_RUNNING)
            .values(status=WAITING, resume={"continuation": continuation, "spawn": request.key})
            .returning(commands.c.command_id)
        ).first()
        if parked is None:
            return None, False
        child = insert_child(conn, child_id, entry, request, command)
        row = conn.execute(
            select(*EXECUTION_COLUMNS).where(executions.c.execution_id == child)
        ).one()
        if row.status in TERMINAL_STATUSES:
            # the child of an earlier run of this command already ended: resume now
            resume_parent(store, conn, ExecutionRow(**row._mapping))
            return child, True
    return child, False


def resume_parent(store: Store, conn: Connection, child: ExecutionRow) -> str | None:
    """Give the child's summary to its waiting parent command and issue it again.
    Returns the parent command id to publish (None if no parent is waiting)."""
    if not child.parent_command_id:
        return None
    parent = conn.execute(
        select(commands.c.resume)
        .where(commands.c.command_id == child.parent_command_id, commands.c.status == WAITING)
        .with_for_update()
    ).first()
    if parent is None:
        return None
    resume = dict(parent.resume or {})
    if resume.get("spawn") != child.spawn_key:
        return None  # the parent waits for another child (a later spawn of its task)
    resume["child"] = store.summary(child, conn=conn)
    conn.execute(
        update(commands)
        .where(commands.c.command_id == child.parent_command_id)
        .values(status=CMD_ISSUED, resume=resume, issued_at=utcnow())
    )
    return child.parent_command_id


def spawn_detached(
    store: Store, command: ClaimedCommand, request: SpawnRequest, child_id: str
) -> str:
    """Fire-and-forget: start a linked child; the parent does not wait for it."""
    entry = resolve(store, request)
    with store.db.write() as conn:
        return insert_child(conn, child_id, entry, request, command)


__all__ = [
    "CatalogNotFound",
    "resolve",
    "resume_parent",
    "spawn_detached",
    "suspend_and_spawn",
]
