"""Retention (`noetl-celery db prune`, NOETL_RETENTION): the executions that ended long
ago, everything linked to them, and deleting their rows a bounded chunk at a time
(`store.retention` opens the transactions; `models.retention` decides what goes).

Every engine table has its place here: rows that belong to an execution are deleted with
it (`EXECUTION_TABLES`, keyed by `execution_id`), the others are never touched
(`KEPT_TABLES`). tests/unit/store/test_prune_tables.py fails for a table that has none.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

from sqlalchemy import (
    ARRAY,
    Connection,
    String,
    Table,
    and_,
    any_,
    bindparam,
    delete,
    func,
    literal_column,
    select,
    tuple_,
)

from noetl_celery.constants import RUNNING, TERMINAL_STATUSES
from noetl_celery.models.rate_limit import KEY_PREFIX
from noetl_celery.models.retention import Lineage
from noetl_celery.store.schema import (
    catalog,
    command_logs,
    commands,
    contexts,
    counters,
    cursor_rows,
    engine_info,
    events,
    executions,
    http_pace,
    inbox,
    leases,
    loops,
    notifications,
    publish_outbox,
    results,
    schedule_firings,
    schedules,
    throttle_slots,
)

# Rows of an execution, deleted with it, in this order (the inbox names events; the
# executions row goes last, so an interrupted prune finds the execution again and
# finishes it). Each is found through an index on `execution_id` (the two tables
# without one are small: the outbox is empty but during a broker outage, firings are one
# row per cron firing).
EXECUTION_TABLES: tuple[Table, ...] = (
    inbox,
    events,
    commands,
    results,
    contexts,
    loops,
    cursor_rows,
    command_logs,
    publish_outbox,
    schedule_firings,
    notifications,  # an ended execution's, delivered (or given up) long before
)
# Never touched, and why.
KEPT_TABLES: dict[str, str] = {
    catalog.name: "playbook versions: executions of later days run them",
    schedules.name: "cron schedules are configuration",
    counters.name: "engine-wide totals for /metrics",
    leases.name: "single-instance duties (the reaper's, the prune's own), not executions",
    # (but a rate_limit key's row idle past the retention age: `delete_idle_keys`)
    http_pace.name: "the http tool's pacing state per host (and per rate_limit key)",
    throttle_slots.name: "rate_limit run slots: a row is free once its command stops running",
    engine_info.name: "the database's identity",
}

_TERMINAL = sorted(TERMINAL_STATUSES)
# when an execution ended: `finished_at`, written by every ending (updated_at for rows
# that might lack it)
_ended = func.coalesce(executions.c.finished_at, executions.c.updated_at)
_LINEAGE = (
    executions.c.execution_id,
    executions.c.status,
    _ended.label("ended_at"),
    executions.c.parent_execution_id,
    executions.c.rerun_of,
)


def _of(column: Any, ids: Sequence[str], dialect: str) -> Any:
    """`column IN ids`; on Postgres `column = ANY(:ids)`, one array parameter (an IN list
    of hundreds of parameters costs more to build and parse than the statement to run)."""
    if dialect == "postgresql":
        return column == any_(bindparam(None, list(ids), type_=ARRAY(String)))
    return column.in_(list(ids))


def _lineage(rows: Sequence[Any]) -> list[Lineage]:
    return [
        Lineage(
            execution_id=str(r.execution_id),
            status=str(r.status),
            ended_at=r.ended_at,
            parent_execution_id=r.parent_execution_id,
            rerun_of=r.rerun_of,
        )
        for r in rows
    ]


def page_query(cutoff: dt.datetime, after: tuple[dt.datetime, str] | None, limit: int) -> Any:
    """`ended_before`'s statement (bench/retention.py prints its plan). An execution
    ends after it starts, so `created_at < cutoff` narrows the scan to the creation-time
    index (`ix_executions_created`, read in order); status and end time are checked on
    its rows."""
    query = (
        select(*_LINEAGE, executions.c.created_at)
        .where(
            executions.c.created_at < cutoff,
            executions.c.status.in_(_TERMINAL),
            _ended < cutoff,
        )
        .order_by(executions.c.created_at, executions.c.execution_id)
        .limit(limit)
    )
    if after is not None:
        query = query.where(
            tuple_(executions.c.created_at, executions.c.execution_id) > tuple_(*after)
        )
    return query


def ended_before(
    conn: Connection, cutoff: dt.datetime, after: tuple[dt.datetime, str] | None, limit: int
) -> list[tuple[Lineage, dt.datetime]]:
    """Up to `limit` executions that ended before `cutoff`, in (created_at, id) order
    after `after` (the keyset of the last one seen), each with its created_at."""
    rows = conn.execute(page_query(cutoff, after, limit)).all()
    return list(zip(_lineage(rows), [r.created_at for r in rows], strict=True))


def children(conn: Connection, ids: Sequence[str]) -> list[Lineage]:
    """The executions whose parent is one of `ids` (ix_executions_parent)."""
    query = select(*_LINEAGE).where(_of(executions.c.parent_execution_id, ids, conn.dialect.name))
    return _lineage(conn.execute(query).all())


def running_reruns(conn: Connection) -> list[Lineage]:
    """Every running rerun (few: RUNNING executions are read through the status index)."""
    query = select(*_LINEAGE).where(
        executions.c.status == RUNNING, executions.c.rerun_of.is_not(None)
    )
    return _lineage(conn.execute(query).all())


def lineage(conn: Connection, ids: Sequence[str]) -> list[Lineage]:
    """The rows of `ids` as they are now (those that still exist)."""
    query = select(*_LINEAGE).where(_of(executions.c.execution_id, ids, conn.dialect.name))
    return _lineage(conn.execute(query).all())


def count_rows(conn: Connection, table: Table, ids: Sequence[str]) -> int:
    """Rows of `table` that belong to `ids` (a dry run's answer)."""
    where = _of(table.c.execution_id, ids, conn.dialect.name)
    query = select(func.count()).select_from(table).where(where)
    return int(conn.execute(query).scalar_one())


def chunk_delete(dialect: str, table: Table, ids: Sequence[str], limit: int) -> Any:
    """`delete_chunk`'s statement (bench/retention.py prints its plan)."""
    # the physical row's address, Postgres' ctid or SQLite's rowid: a chunk is chosen by
    # it, so no table needs a single-column key
    row_id: Any = literal_column("ctid" if dialect == "postgresql" else "rowid")
    chunk = select(row_id).select_from(table).where(_of(table.c.execution_id, ids, dialect))
    chunk = chunk.limit(limit)
    if dialect == "postgresql":
        # `= ANY(ARRAY(...))`: a TID scan of exactly those rows (`IN (subquery)` would be
        # planned as a join over the whole table)
        where = row_id == func.any(func.array(chunk.scalar_subquery()))
    else:
        where = row_id.in_(chunk.scalar_subquery())
    return delete(table).where(where)


def delete_chunk(conn: Connection, table: Table, ids: Sequence[str], limit: int) -> int:
    """Delete up to `limit` rows of `table` that belong to `ids`; how many went."""
    return int(conn.execute(chunk_delete(conn.dialect.name, table, ids, limit)).rowcount)


def delete_executions(conn: Connection, ids: Sequence[str]) -> int:
    """Delete the executions rows of `ids` that are still ended (the last statement of a
    family: their rows are gone already)."""
    query = delete(executions).where(
        _of(executions.c.execution_id, ids, conn.dialect.name),
        executions.c.status.in_(_TERMINAL),
    )
    return int(conn.execute(query).rowcount)


def _idle_keys(idle_before: float) -> Any:
    """A keyed rate_limit's pacing row (`key:<key>`) that booked no send slot, was cut
    by no 429 and is paused by no Retry-After since `idle_before` (epoch seconds): its
    next free slot (`tat`, past every slot booked) is that old too. A host's row (the
    http tool's, NOETL_HTTP_RATE_LIMITS) is never one: few, and declared by settings."""
    c = http_pace.c
    return and_(
        c.host.like(f"{KEY_PREFIX}%"),
        c.tat < idle_before,
        c.bucket_at < idle_before,
        c.last_cut < idle_before,
        c.paused_until < idle_before,
    )


def count_idle_keys(conn: Connection, idle_before: float) -> int:
    return int(
        conn.execute(
            select(func.count()).select_from(http_pace).where(_idle_keys(idle_before))
        ).scalar_one()
    )


def delete_idle_keys(conn: Connection, idle_before: float) -> int:
    """Delete the idle keys' rows (their learned rates are forgotten: the next booking
    of such a key declares it again at its ceiling, tools.keyed_pacing)."""
    return int(conn.execute(delete(http_pace).where(_idle_keys(idle_before))).rowcount or 0)
