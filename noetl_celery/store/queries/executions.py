"""Execution rows: inserting one with its `execution.started` event, reading it, and
the orchestration lock on it."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection, column, select, text

from noetl_celery.constants import EV_EXECUTION_STARTED, EV_ITEM_REDRIVEN, RUNNING
from noetl_celery.orchestrator.decisions import Completion
from noetl_celery.store.queries.inbox import completion_of
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


# The orchestration lock that also reads the inbox the pass folds (Postgres; a pass's
# inbox read and its deferral's count per epoch were two round trips of a batch's ten:
# bench.embedded_fanout's threads worker). The read is the statement's snapshot, taken
# before the lock: valid only if no pass committed in between, so it is made only when
# the snapshot's pass count is the locked row's (the latest, read again after a wait), as
# the locking close does (queries.commands._close_lock); more than PREFETCH_LIMIT entries
# are not read either. Otherwise the pass reads them itself.
PREFETCH_LIMIT = 1000
_LOCK_READ = """
    SELECT {columns},
        CASE WHEN x.passes = (SELECT s.passes FROM executions s WHERE s.execution_id = :b_eid)
        THEN (SELECT coalesce(json_agg(w ORDER BY w.event_id), '[]')
           FROM (SELECT e.event_id, e.command_id, e.step, e.epoch, e.iteration, e.payload,
                        e.type
                   FROM inbox i JOIN events e ON e.event_id = i.event_id
                  WHERE i.execution_id = :b_eid
                  ORDER BY i.event_id LIMIT :b_limit) w) END AS inbox_rows
    FROM executions x
    WHERE x.execution_id = :b_eid
    FOR UPDATE OF x{skip}
"""


def _lock_read(skip: str) -> Any:
    columns = ", ".join(f"x.{c.name}" for c in EXECUTION_COLUMNS)
    return text(_LOCK_READ.format(columns=columns, skip=skip)).columns(
        *EXECUTION_COLUMNS, column("inbox_rows")
    )


_LOCK_READ_WAIT = _lock_read("")
_LOCK_READ_TRY = _lock_read(" SKIP LOCKED")


def lock_and_read(
    conn: Connection, execution_id: str, *, wait: bool
) -> tuple[ExecutionRow, list[Completion] | None] | None:
    """lock_execution, with the inbox as the pass reads it first (every entry, in order;
    None: the pass reads it itself). SQLite: lock_execution, the inbox not read."""
    if conn.dialect.name != "postgresql":
        locked = lock_execution(conn, execution_id, wait=wait)
        return None if locked is None else (locked, None)
    statement = _LOCK_READ_WAIT if wait else _LOCK_READ_TRY
    found = conn.execute(statement, {"b_eid": execution_id, "b_limit": PREFETCH_LIMIT + 1})
    row = found.first()
    if row is None:
        return None
    execution = ExecutionRow(**{c.name: row._mapping[c.name] for c in EXECUTION_COLUMNS})
    rows = row.inbox_rows
    if rows is None or len(rows) > PREFETCH_LIMIT:
        return execution, None
    return execution, [completion_of(r) for r in rows]
