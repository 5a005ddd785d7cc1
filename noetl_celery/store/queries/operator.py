"""Reads for operators through the façade: an execution's events, command counts,
loop rows, commands in flight."""

from __future__ import annotations

from sqlalchemy import Connection, func, select

from noetl_celery.constants import CMD_ISSUED, CMD_RUNNING
from noetl_celery.store.rows import CommandCounts, EventRow, InFlight, LoopRow
from noetl_celery.store.schema import commands, events, loops


def events_of(conn: Connection, execution_id: str) -> list[EventRow]:
    rows = conn.execute(
        select(events).where(events.c.execution_id == execution_id).order_by(events.c.event_id)
    ).all()
    return [EventRow(**r._mapping) for r in rows]


def command_counts(conn: Connection, execution_id: str) -> CommandCounts:
    rows = conn.execute(
        select(commands.c.status, func.count())
        .where(commands.c.execution_id == execution_id)
        .group_by(commands.c.status)
    ).all()
    return CommandCounts(**{status: count for status, count in rows})


def loops_of(conn: Connection, execution_id: str) -> list[LoopRow]:
    rows = conn.execute(
        select(
            loops.c.step,
            loops.c.epoch,
            loops.c.mode,
            loops.c.total,
            loops.c.issued,
            loops.c.succeeded,
            loops.c.failed,
            loops.c.quarantined,
            loops.c.done,
            loops.c.started_at,
            loops.c.updated_at,
        )
        .where(loops.c.execution_id == execution_id)
        .order_by(loops.c.step, loops.c.epoch)
    ).all()
    return [LoopRow(**r._mapping) for r in rows]


def in_flight(conn: Connection, execution_id: str) -> list[InFlight]:
    """Per step: commands issued (waiting for a worker) and running (claimed)."""
    rows = conn.execute(
        select(
            commands.c.step,
            commands.c.status,
            func.count(),
            func.min(commands.c.issued_at),
        )
        .where(
            commands.c.execution_id == execution_id,
            commands.c.status.in_((CMD_ISSUED, CMD_RUNNING)),
        )
        .group_by(commands.c.step, commands.c.status)
    ).all()
    return [InFlight(r[0], r[1], r[2], r[3]) for r in rows]
