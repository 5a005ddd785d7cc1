"""Execution rows: inserting one with its `execution.started` event, reading it, and
the orchestration lock on it."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection, select

from noetl_celery.constants import EV_EXECUTION_STARTED, EV_ITEM_REDRIVEN, RUNNING
from noetl_celery.store.rows import CatalogEntry, ExecutionRow
from noetl_celery.store.schema import events, executions
from noetl_celery.store.statements import (
    EXECUTION_COLUMNS,
    LOCK_TRY,
    LOCK_WAIT,
    STATE_OF,
    STATUS_OF,
)


def _execution(row: Any) -> ExecutionRow:
    return ExecutionRow(**row._mapping)


def insert_execution(
    conn: Connection,
    execution_id: str,
    entry: CatalogEntry,
    payload: dict[str, Any] | None,
    *,
    parent_execution_id: str | None,
    parent_command_id: str | None,
    trigger: str,
    rerun_of: str | None,
    trigger_detail: dict[str, Any] | None,
    owner: str | None,
    now: dt.datetime,
    redriven: Sequence[tuple[str, int, int]] = (),
) -> None:
    """A RUNNING execution and its `execution.started` event; `redriven`: the quarantined
    items (step, epoch, iteration) of `rerun_of` it runs again, each marked there with an
    `item.redriven` event in the same transaction (a second mark of one item violates
    ux_events_item_redriven: the start is refused)."""
    if redriven:
        assert rerun_of is not None
        conn.execute(
            events.insert(),
            [
                {
                    "execution_id": rerun_of,
                    "type": EV_ITEM_REDRIVEN,
                    "step": step,
                    "epoch": epoch,
                    "iteration": iteration,
                    "payload": {"execution_id": execution_id},
                    "created_at": now,
                }
                for step, epoch, iteration in redriven
            ],
        )
    conn.execute(
        executions.insert().values(
            execution_id=execution_id,
            catalog_id=entry.catalog_id,
            path=entry.path,
            status=RUNNING,
            parent_execution_id=parent_execution_id,
            parent_command_id=parent_command_id,
            trigger=trigger,
            rerun_of=rerun_of,
            trigger_detail=trigger_detail,
            owner=owner,
            payload=payload or {},
            state=None,
            passes=0,
            created_at=now,
            updated_at=now,
        )
    )
    conn.execute(
        events.insert().values(
            execution_id=execution_id,
            type=EV_EXECUTION_STARTED,
            payload={
                "path": entry.path,
                "version": entry.version,
                "catalog_id": entry.catalog_id,
            },
            created_at=now,
        )
    )


def execution(conn: Connection, execution_id: str) -> ExecutionRow | None:
    row = conn.execute(
        select(*EXECUTION_COLUMNS).where(executions.c.execution_id == execution_id)
    ).first()
    return None if row is None else _execution(row)


def execution_status(conn: Connection, execution_id: str) -> str | None:
    status = conn.execute(STATUS_OF, {"b_eid": execution_id}).scalar()
    return None if status is None else str(status)


def execution_state(conn: Connection, execution_id: str) -> dict[str, Any] | None:
    value = conn.execute(STATE_OF, {"b_eid": execution_id}).scalar()
    return dict(value) if value else None


def lock_execution(conn: Connection, execution_id: str, *, wait: bool) -> ExecutionRow | None:
    """The orchestration lock on the execution's row; None when another pass holds it
    (without `wait`)."""
    row = conn.execute(LOCK_WAIT if wait else LOCK_TRY, {"b_eid": execution_id}).first()
    return None if row is None else _execution(row)
