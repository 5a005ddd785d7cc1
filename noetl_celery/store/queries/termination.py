"""Ending an execution from outside a pass: cancel its unfinished commands, report
unfinished cursor rows, clear its inbox, find its running children; and the
record of passes that crashed."""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import Connection, and_, delete, select, update

from noetl_celery.constants import (
    CMD_CANCELLED,
    CMD_ISSUED,
    CMD_RUNNING,
    EV_COMMAND_COMPLETED,
    EV_CURSOR_UNFINISHED,
    EV_PASS_FAILED,
    KIND_CLAIM,
    KIND_ITERATION,
    RUNNING,
)
from noetl_celery.store.queries._common import UNFINISHED, WAITING_FOR_CHILD
from noetl_celery.store.schema import commands, cursor_rows, events, executions, inbox, loops


def set_ended(
    conn: Connection, execution_id: str, status: str, error: dict[str, Any], now: dt.datetime
) -> None:
    conn.execute(
        update(executions)
        .where(executions.c.execution_id == execution_id)
        .values(status=status, error=error, finished_at=now, updated_at=now)
    )


def lock_live_commands(conn: Connection, execution_id: str) -> None:
    """Row locks on the execution's issued, running and waiting commands: a claim or a
    close of one of them waits for this transaction."""
    conn.execute(
        select(commands.c.command_id)
        .where(
            commands.c.execution_id == execution_id,
            commands.c.status.in_((CMD_ISSUED, CMD_RUNNING, WAITING_FOR_CHILD)),
        )
        .with_for_update()
    ).all()


def unfinished_cursor_bodies(conn: Connection, execution_id: str) -> list[Any]:
    """(step, epoch, status, item, meta) of the unfinished body commands of cursor epochs
    (`loops.mode`), in claim order."""
    return list(
        conn.execute(
            select(commands.c.step, commands.c.epoch, commands.c.status, commands.c.item)
            .add_columns(commands.c.meta)
            .select_from(
                commands.join(
                    loops,
                    and_(
                        loops.c.execution_id == commands.c.execution_id,
                        loops.c.step == commands.c.step,
                        loops.c.epoch == commands.c.epoch,
                    ),
                )
            )
            .where(
                commands.c.execution_id == execution_id,
                commands.c.kind == KIND_ITERATION,
                commands.c.status.in_(UNFINISHED),
                loops.c.mode == "cursor",
            )
            .order_by(commands.c.step, commands.c.epoch, commands.c.iteration)
        )
    )


def unfinished_recorded_claims(conn: Connection, execution_id: str) -> list[Any]:
    """(step, epoch, resume) of the unfinished cursor claims whose rows are recorded on
    them (worker.frames: the claiming worker runs the frame's body)."""
    return list(
        conn.execute(
            select(commands.c.step, commands.c.epoch, commands.c.resume)
            .where(
                commands.c.execution_id == execution_id,
                commands.c.kind == KIND_CLAIM,
                commands.c.status.in_(UNFINISHED),
                commands.c.resume.is_not(None),
            )
            .order_by(commands.c.step, commands.c.epoch)
        )
    )


def unfolded_completions(conn: Connection, execution_id: str) -> list[Any]:
    """(event_id, command_id, step, epoch, payload) of the successful completions in the
    inbox, in order."""
    return list(
        conn.execute(
            select(events.c.event_id, events.c.command_id, events.c.step, events.c.epoch)
            .add_columns(events.c.payload)
            .select_from(inbox.join(events, events.c.event_id == inbox.c.event_id))
            .where(inbox.c.execution_id == execution_id, events.c.type == EV_COMMAND_COMPLETED)
            .order_by(events.c.event_id)
        )
    )


def claimed_row_keys(
    conn: Connection, execution_id: str, step: str, epoch: int, keys: list[str]
) -> set[str]:
    """Which of `keys` the epoch's claims recorded before."""
    return set(
        conn.execute(
            select(cursor_rows.c.row_key).where(
                cursor_rows.c.execution_id == execution_id,
                cursor_rows.c.step == step,
                cursor_rows.c.epoch == epoch,
                cursor_rows.c.row_key.in_(keys),
            )
        ).scalars()
    )


def cancel_unfinished(conn: Connection, execution_id: str, now: dt.datetime) -> None:
    conn.execute(
        update(commands)
        .where(commands.c.execution_id == execution_id, commands.c.status.in_(UNFINISHED))
        .values(status=CMD_CANCELLED, finished_at=now)
    )


def clear_inbox(conn: Connection, execution_id: str) -> None:
    conn.execute(delete(inbox).where(inbox.c.execution_id == execution_id))


def running_children(conn: Connection, execution_id: str) -> list[str]:
    rows = conn.execute(
        select(executions.c.execution_id).where(
            executions.c.parent_execution_id == execution_id,
            executions.c.status == RUNNING,
        )
    ).scalars()
    return [str(c) for c in rows]


def cursor_unfinished_reports(conn: Connection, execution_id: str) -> dict[str, dict[str, Any]]:
    """The `cursor.unfinished` reports of an execution, by step."""
    rows = conn.execute(
        select(events.c.step, events.c.payload)
        .where(events.c.execution_id == execution_id, events.c.type == EV_CURSOR_UNFINISHED)
        .order_by(events.c.event_id)
    ).all()
    return {str(step): payload or {} for step, payload in rows}


def status_and_passes(conn: Connection, execution_id: str) -> Any:
    """(status, passes) of the execution, or None."""
    return conn.execute(
        select(executions.c.status, executions.c.passes).where(
            executions.c.execution_id == execution_id
        )
    ).first()


def insert_pass_failed(
    conn: Connection, execution_id: str, payload: dict[str, Any], now: dt.datetime
) -> None:
    conn.execute(
        events.insert().values(
            execution_id=execution_id, type=EV_PASS_FAILED, payload=payload, created_at=now
        )
    )


def pass_failed_payloads(conn: Connection, execution_id: str) -> list[Any]:
    return list(
        conn.execute(
            select(events.c.payload).where(
                events.c.execution_id == execution_id, events.c.type == EV_PASS_FAILED
            )
        ).scalars()
    )
