"""Children (sub-playbooks): parking the parent command, inserting the child
execution, resuming the parent when the child ends."""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import Connection, select, update

from noetl_celery.constants import (
    CMD_ISSUED,
    CMD_RUNNING,
    EV_EXECUTION_STARTED,
    RUNNING,
    TRIGGER_PARENT,
)
from noetl_celery.store.dialect import insert_ignore
from noetl_celery.store.queries._common import WAITING_FOR_CHILD
from noetl_celery.store.rows import CatalogEntry, ClaimedCommand, SpawnRequest
from noetl_celery.store.schema import commands, events, executions


def park_for_child(
    conn: Connection, command_id: str, continuation: dict[str, Any], spawn_key: str
) -> bool:
    """A running parent command starts waiting for its child; False when it is no
    longer running."""
    parked = conn.execute(
        update(commands)
        .where(commands.c.command_id == command_id, commands.c.status == CMD_RUNNING)
        .values(status=WAITING_FOR_CHILD, resume={"continuation": continuation, "spawn": spawn_key})
        .returning(commands.c.command_id)
    ).first()
    return parked is not None


def insert_child(
    conn: Connection,
    child_id: str,
    entry: CatalogEntry,
    request: SpawnRequest,
    parent: ClaimedCommand,
    now: dt.datetime,
) -> str:
    """Insert the child execution (or find the one this key already made); its id."""
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


def waiting_parent_resume(conn: Connection, parent_command_id: str) -> dict[str, Any] | None:
    """The `resume` of a parent command waiting for a child, locked; None when the
    command does not wait."""
    parent = conn.execute(
        select(commands.c.resume)
        .where(commands.c.command_id == parent_command_id, commands.c.status == WAITING_FOR_CHILD)
        .with_for_update()
    ).first()
    return None if parent is None else dict(parent.resume or {})


def reissue_parent(
    conn: Connection, parent_command_id: str, resume: dict[str, Any], now: dt.datetime
) -> None:
    conn.execute(
        update(commands)
        .where(commands.c.command_id == parent_command_id)
        .values(status=CMD_ISSUED, resume=resume, issued_at=now)
    )
