"""The figures `/metrics` exports, read per scrape in one read transaction.

Everything is counted in SQL over indexed columns, bounded by what is live: commands are
counted for RUNNING executions only (terminal executions have none in flight), and the
state snapshots read are those of RUNNING executions (their running loop epochs live
there; the `loops` table is written at epoch start and end).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import func, select

from noetl_celery.constants import CMD_DELAYED, CMD_ISSUED, CMD_RUNNING, RUNNING
from noetl_celery.store.children import WAITING as CMD_WAITING
from noetl_celery.store.schema import commands, counters, executions, loops

IN_FLIGHT = (CMD_ISSUED, CMD_RUNNING, CMD_WAITING, CMD_DELAYED)


@dataclass(frozen=True)
class LoopTotals:
    path: str
    step: str
    succeeded: int
    failed: int


@dataclass
class MetricsSnapshot:
    executions_by_status: dict[str, int] = field(default_factory=dict)
    # finished loop epochs, summed per playbook path and step
    finished_loops: list[LoopTotals] = field(default_factory=list)
    # (path, state) of every RUNNING execution: their running epochs' live counts
    running_states: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    commands_by_status: dict[str, int] = field(default_factory=dict)
    oldest_issued_at: datetime | None = None
    counters: dict[str, int] = field(default_factory=dict)


def read_snapshot(db: Any) -> MetricsSnapshot:
    """`db` is the store's `Database`."""
    snap = MetricsSnapshot()
    running = executions.c.status == RUNNING
    with db.read() as conn:
        for status, count in conn.execute(
            select(executions.c.status, func.count()).group_by(executions.c.status)
        ):
            snap.executions_by_status[status] = int(count)
        totals = conn.execute(
            select(
                executions.c.path,
                loops.c.step,
                func.sum(loops.c.succeeded),
                func.sum(loops.c.failed),
            )
            .select_from(loops.join(executions, executions.c.execution_id == loops.c.execution_id))
            .where(loops.c.done.is_(True))
            .group_by(executions.c.path, loops.c.step)
        )
        snap.finished_loops = [
            LoopTotals(path, step, int(ok or 0), int(bad or 0)) for path, step, ok, bad in totals
        ]
        snap.running_states = [
            (path, state or {})
            for path, state in conn.execute(
                select(executions.c.path, executions.c.state).where(running)
            )
        ]
        in_flight = commands.join(executions, executions.c.execution_id == commands.c.execution_id)
        for status, count in conn.execute(
            select(commands.c.status, func.count())
            .select_from(in_flight)
            .where(running, commands.c.status.in_(IN_FLIGHT))
            .group_by(commands.c.status)
        ):
            snap.commands_by_status[status] = int(count)
        snap.oldest_issued_at = conn.execute(
            select(func.min(commands.c.issued_at))
            .select_from(in_flight)
            .where(running, commands.c.status == CMD_ISSUED)
        ).scalar()
        snap.counters = {
            name: int(value)
            for name, value in conn.execute(select(counters.c.name, counters.c.value))
        }
    return snap
