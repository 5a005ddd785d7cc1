"""The figures `/metrics` exports (`store.metrics` reads them all in one transaction).

Everything is counted in SQL over indexed columns, bounded by what is live: commands are
counted for RUNNING executions only (terminal executions have none in flight), and the
state snapshots read are those of RUNNING executions (their running loop epochs live
there; the `loops` table is written at epoch start and end).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Connection, func, select

from noetl_celery.constants import CMD_DELAYED, CMD_ISSUED, CMD_RUNNING, RUNNING
from noetl_celery.store.queries._common import WAITING_FOR_CHILD
from noetl_celery.store.schema import commands, counters, executions, loops

IN_FLIGHT = (CMD_ISSUED, CMD_RUNNING, WAITING_FOR_CHILD, CMD_DELAYED)

_running = executions.c.status == RUNNING
_in_flight = commands.join(executions, executions.c.execution_id == commands.c.execution_id)


def executions_by_status(conn: Connection) -> dict[str, int]:
    rows = conn.execute(select(executions.c.status, func.count()).group_by(executions.c.status))
    return {status: int(count) for status, count in rows}


def finished_loops(conn: Connection) -> list[tuple[str, str, int, int, int]]:
    """(path, step, succeeded, failed, quarantined) of the finished loop epochs, summed
    per playbook path and step."""
    totals = conn.execute(
        select(
            executions.c.path,
            loops.c.step,
            func.sum(loops.c.succeeded),
            func.sum(loops.c.failed),
            func.sum(loops.c.quarantined),
        )
        .select_from(loops.join(executions, executions.c.execution_id == loops.c.execution_id))
        .where(loops.c.done.is_(True))
        .group_by(executions.c.path, loops.c.step)
    )
    return [
        (path, step, int(ok or 0), int(bad or 0), int(aside or 0))
        for path, step, ok, bad, aside in totals
    ]


def running_states(conn: Connection) -> list[tuple[str, dict[str, Any]]]:
    """(path, state) of every RUNNING execution: their running epochs' live counts."""
    rows = conn.execute(select(executions.c.path, executions.c.state).where(_running))
    return [(path, state or {}) for path, state in rows]


def commands_by_status(conn: Connection) -> dict[str, int]:
    """Commands in flight (IN_FLIGHT) of RUNNING executions, by status."""
    rows = conn.execute(
        select(commands.c.status, func.count())
        .select_from(_in_flight)
        .where(_running, commands.c.status.in_(IN_FLIGHT))
        .group_by(commands.c.status)
    )
    return {status: int(count) for status, count in rows}


def oldest_issued_at(conn: Connection) -> datetime | None:
    """When the oldest issued command of a RUNNING execution was issued."""
    value: datetime | None = conn.execute(
        select(func.min(commands.c.issued_at))
        .select_from(_in_flight)
        .where(_running, commands.c.status == CMD_ISSUED)
    ).scalar()
    return value


def counter_values(conn: Connection) -> dict[str, int]:
    """The engine-wide counters (store.counters)."""
    return {
        name: int(value) for name, value in conn.execute(select(counters.c.name, counters.c.value))
    }
