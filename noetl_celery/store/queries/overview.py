"""The executions listed (the short list, and the page with its loop totals: both read
one `ExecutionFilter`), and failed loop items paged: the reads behind the CLI, the HTTP
API and the pages (`store.overview` opens their transactions). Every listing is a
bounded page (the page with a count), never a whole table: an engine database holds
thousands of executions and 100,000-item loops.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from sqlalchemy import ColumnElement, Connection, case, func, select

from noetl_celery.constants import EV_COMMAND_FAILED
from noetl_celery.models.filters import ExecutionFilter
from noetl_celery.store.queries.quarantine import not_quarantined
from noetl_celery.store.rows import ExecutionRow, FailedItem, LoopTotals
from noetl_celery.store.schema import commands, events, executions, loops
from noetl_celery.store.statements import EXECUTION_COLUMNS

# the listing leaves the state snapshot out: it is the one large column
_LINE_COLUMNS = [c for c in EXECUTION_COLUMNS if c.name != "state"]


def filter_clauses(match: ExecutionFilter) -> list[ColumnElement[bool]]:
    """The WHERE clauses of a filter's fields (its page, limit and offset, aside)."""
    where = []
    if match.status is not None:
        where.append(executions.c.status == match.status.upper())
    if match.path is not None:
        where.append(executions.c.path == match.path)
    if match.trigger is not None:
        where.append(executions.c.trigger == match.trigger.lower())
    if match.parent is not None:
        where.append(executions.c.parent_execution_id == match.parent)
    return where


def list_executions(conn: Connection, match: ExecutionFilter) -> list[ExecutionRow]:
    """Recent executions, newest first (the state snapshot is left out)."""
    query = (
        select(*_LINE_COLUMNS)
        .where(*filter_clauses(match))
        .order_by(executions.c.created_at.desc())
        .limit(match.limit)
        .offset(match.offset)
    )
    return [ExecutionRow(state=None, **r._mapping) for r in conn.execute(query).all()]


def executions_page(conn: Connection, match: ExecutionFilter) -> tuple[list[ExecutionRow], int]:
    """(executions newest first, state left out; how many match the filters)."""
    where = filter_clauses(match)
    limit, offset = match.limit, match.offset
    query = (
        select(*_LINE_COLUMNS)
        .where(*where)
        # the id breaks ties of equal timestamps: pages neither repeat nor skip rows
        .order_by(executions.c.created_at.desc(), executions.c.execution_id.desc())
        .limit(limit)
        .offset(offset)
    )
    rows = conn.execute(query).all()
    if offset == 0 and len(rows) < limit:
        total = len(rows)  # the whole result is on this page: no count needed
    else:
        count = select(func.count()).select_from(executions).where(*where)
        total = int(conn.execute(count).scalar_one())
    return [ExecutionRow(state=None, **r._mapping) for r in rows], total


def loop_totals(conn: Connection, execution_ids: Collection[str]) -> dict[str, LoopTotals]:
    """Per execution: finished epochs' succeeded and failed iterations summed, and how
    many epochs are open (one aggregate over the ids, not a query per execution)."""
    finished = loops.c.done.is_(True)
    query = (
        select(
            loops.c.execution_id,
            func.sum(case((finished, loops.c.succeeded), else_=0)),
            func.sum(case((finished, loops.c.failed), else_=0)),
            func.sum(case((finished, 0), else_=1)),
        )
        .where(loops.c.execution_id.in_(sorted(execution_ids)))
        .group_by(loops.c.execution_id)
    )
    rows = conn.execute(query).all()
    return {str(r[0]): LoopTotals(int(r[1] or 0), int(r[2] or 0), int(r[3] or 0)) for r in rows}


def step_states(conn: Connection, execution_ids: Collection[str]) -> dict[str, dict[str, Any]]:
    """Per execution: the `steps` of its state snapshot (live loop counters)."""
    query = select(executions.c.execution_id, executions.c.state["steps"]).where(
        executions.c.execution_id.in_(sorted(execution_ids))
    )
    rows = conn.execute(query).all()
    return {str(r[0]): dict(r[1]) if isinstance(r[1], dict) else {} for r in rows}


def _failed_where(execution_id: str, step: str, epoch: int | None) -> list[Any]:
    # the exact predicate of the partial index ix_events_failed_iterations; a
    # quarantined item is not a failed one (ux_events_item_quarantined answers that)
    where = [
        events.c.execution_id == execution_id,
        events.c.step == step,
        events.c.type == EV_COMMAND_FAILED,
        events.c.iteration.is_not(None),
        not_quarantined(),
    ]
    if epoch is not None:
        where.append(events.c.epoch == epoch)
    return where


def failed_iterations(
    conn: Connection, execution_id: str, step: str, *, epoch: int | None, offset: int, limit: int
) -> list[FailedItem]:
    """Failed iterations of `step` (of `epoch`, or of every epoch) in (epoch, iteration)
    order from `offset`, with their items, through the partial index."""
    query = (
        select(events.c.epoch, events.c.iteration, events.c.payload, commands.c.item)
        .select_from(events.join(commands, commands.c.command_id == events.c.command_id))
        .where(*_failed_where(execution_id, step, epoch))
        .order_by(events.c.epoch, events.c.iteration, events.c.event_id)
        .limit(limit)
        .offset(offset)
    )
    rows = conn.execute(query).all()
    return [
        FailedItem(r.iteration, (r.payload or {}).get("error"), r.item, epoch=r.epoch) for r in rows
    ]


def count_failed_iterations(
    conn: Connection, execution_id: str, step: str, *, epoch: int | None
) -> int:
    """How many iterations of `step` failed (an index-only count)."""
    query = (
        select(func.count()).select_from(events).where(*_failed_where(execution_id, step, epoch))
    )
    return int(conn.execute(query).scalar_one())
