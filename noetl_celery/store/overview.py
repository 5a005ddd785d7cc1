"""Reads behind the HTTP API and the pages: executions paged with their loop totals,
failed loop items paged. Every listing is a bounded page plus a count, never a whole
table: an engine database holds thousands of executions and 100,000-item loops.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy import case, func, select

from noetl_celery.constants import EV_COMMAND_FAILED
from noetl_celery.store.rows import ExecutionRow, FailedItem
from noetl_celery.store.schema import commands, events, executions, loops
from noetl_celery.store.statements import EXECUTION_COLUMNS

if TYPE_CHECKING:
    from noetl_celery.store.repository import Store

# the listing leaves the state snapshot out: it is the one large column
_LINE_COLUMNS = [c for c in EXECUTION_COLUMNS if c.name != "state"]


@dataclass(frozen=True)
class LoopTotals:
    """Loop iterations of one execution over its finished epochs, and how many of its
    epochs are still open (their live counters are in the state snapshot only)."""

    succeeded: int = 0
    failed: int = 0
    open_epochs: int = 0


def executions_page(
    store: Store,
    *,
    status: str | None = None,
    path: str | None = None,
    trigger: str | None = None,
    parent: str | None = None,
    limit: int = 50,
    offset: int = 0,
) -> tuple[list[ExecutionRow], int]:
    """(executions newest first, state left out; how many match the filters)."""
    where = []
    if status is not None:
        where.append(executions.c.status == status.upper())
    if path is not None:
        where.append(executions.c.path == path)
    if trigger is not None:
        where.append(executions.c.trigger == trigger.lower())
    if parent is not None:
        where.append(executions.c.parent_execution_id == parent)
    query = (
        select(*_LINE_COLUMNS)
        .where(*where)
        # the id breaks ties of equal timestamps: pages neither repeat nor skip rows
        .order_by(executions.c.created_at.desc(), executions.c.execution_id.desc())
        .limit(limit)
        .offset(offset)
    )
    with store.db.read() as conn:
        rows = conn.execute(query).all()
        if offset == 0 and len(rows) < limit:
            total = len(rows)  # the whole result is on this page: no count needed
        else:
            count = select(func.count()).select_from(executions).where(*where)
            total = int(conn.execute(count).scalar_one())
    return [ExecutionRow(state=None, **r._mapping) for r in rows], total


def loop_totals(store: Store, execution_ids: Collection[str]) -> dict[str, LoopTotals]:
    """Per execution: finished epochs' succeeded and failed iterations summed, and how
    many epochs are open (one aggregate over the ids, not a query per execution)."""
    if not execution_ids:
        return {}
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
    with store.db.read() as conn:
        rows = conn.execute(query).all()
    return {str(r[0]): LoopTotals(int(r[1] or 0), int(r[2] or 0), int(r[3] or 0)) for r in rows}


def step_states(store: Store, execution_ids: Collection[str]) -> dict[str, dict[str, Any]]:
    """Per execution: the `steps` of its state snapshot (live loop counters), read only
    for the executions asked for (those with open loop epochs)."""
    if not execution_ids:
        return {}
    query = select(executions.c.execution_id, executions.c.state["steps"]).where(
        executions.c.execution_id.in_(sorted(execution_ids))
    )
    with store.db.read() as conn:
        rows = conn.execute(query).all()
    return {str(r[0]): dict(r[1]) if isinstance(r[1], dict) else {} for r in rows}


def _failed_where(execution_id: str, step: str, epoch: int | None) -> list[Any]:
    # the exact predicate of the partial index ix_events_failed_iterations
    where = [
        events.c.execution_id == execution_id,
        events.c.step == step,
        events.c.type == EV_COMMAND_FAILED,
        events.c.iteration.is_not(None),
    ]
    if epoch is not None:
        where.append(events.c.epoch == epoch)
    return where


def failed_iterations(
    store: Store,
    execution_id: str,
    step: str,
    *,
    epoch: int | None = None,
    offset: int = 0,
    limit: int = 50,
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
    with store.db.read() as conn:
        rows = conn.execute(query).all()
    return [
        FailedItem(r.iteration, (r.payload or {}).get("error"), r.item, epoch=r.epoch) for r in rows
    ]


def count_failed_iterations(
    store: Store, execution_id: str, step: str, *, epoch: int | None = None
) -> int:
    """How many iterations of `step` failed (an index-only count)."""
    query = (
        select(func.count()).select_from(events).where(*_failed_where(execution_id, step, epoch))
    )
    with store.db.read() as conn:
        return int(conn.execute(query).scalar_one())
