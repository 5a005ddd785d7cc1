"""An execution's history read back for operators (events, captured logs), filtered in
SQL, and the writes of captured logs.

A listing is a page: the newest `limit` matching rows, returned oldest first, plus how
many matching rows it left out, so an execution with 100k iterations is never loaded
whole. With `after`, only rows newer than that id are read, oldest first (`--follow`).
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, Table, func, select
from sqlalchemy.exc import SQLAlchemyError

from noetl_celery.errors import StoreError
from noetl_celery.store.rows import EventRow, LogRow, Page
from noetl_celery.store.schema import command_logs, events, utcnow

if TYPE_CHECKING:
    from noetl_celery.store.repository import Store

log = logging.getLogger("noetl_celery.history")

# rows read per query when following (a burst of completions arrives in a few reads)
FOLLOW_CHUNK = 1000


def add_logs(conn: Connection, rows: Sequence[LogRow]) -> None:
    """Insert captured logs in the caller's transaction (a command's close)."""
    if not rows:
        return
    now = utcnow()
    conn.execute(
        command_logs.insert(),
        [
            {
                "execution_id": r.execution_id,
                "command_id": r.command_id,
                "step": r.step,
                "iteration": r.iteration,
                "text": r.text,
                "truncated": r.truncated,
                "created_at": now,
            }
            for r in rows
        ],
    )


def write_logs(store: Store, rows: Sequence[LogRow]) -> None:
    """Insert captured logs in a transaction of their own. Logs are what operators
    read, not state: a failure to store them is logged, never raised into the work that
    produced them (a reaper sweep, a parked command)."""
    if not rows:
        return
    try:
        with store.db.write() as conn:
            add_logs(conn, rows)
    except (SQLAlchemyError, StoreError):
        log.warning("could not store %d captured log block(s)", len(rows), exc_info=True)


def _page(
    store: Store,
    table: Table,
    key: Any,
    where: list[Any],
    *,
    after: int | None,
    limit: int | None,
) -> tuple[list[Any], int]:
    """(rows oldest first, rows left out) of `table` matching `where`."""
    query = select(table).where(*where)
    with store.db.read() as conn:
        if after is not None:
            chunk = limit or FOLLOW_CHUNK
            rows = conn.execute(query.where(key > after).order_by(key).limit(chunk)).all()
            return list(rows), 0
        if not limit:
            return list(conn.execute(query.order_by(key)).all()), 0
        newest = conn.execute(query.order_by(key.desc()).limit(limit)).all()
        left_out = 0
        if len(newest) == limit:  # maybe more: count them (no payload leaves the server)
            total = conn.execute(select(func.count()).select_from(table).where(*where))
            left_out = int(total.scalar_one()) - limit
    return list(reversed(newest)), left_out


def _forward(
    store: Store, table: Table, key: Any, where: list[Any], *, after: int, limit: int
) -> tuple[list[Any], int]:
    """(the first `limit` rows newer than id `after`, oldest first; how many newer
    matching rows remain after them): a cursor that pages to the end with no gap."""
    query = select(table).where(*where, key > after).order_by(key).limit(limit)
    with store.db.read() as conn:
        rows = conn.execute(query).all()
        left_out = 0
        if len(rows) == limit:  # maybe more: count what is past this page
            last = getattr(rows[-1], key.name)
            count = select(func.count()).select_from(table).where(*where, key > last)
            left_out = int(conn.execute(count).scalar_one())
    return list(rows), left_out


def event_where(
    execution_id: str, types: Collection[str] = (), step: str | None = None
) -> list[Any]:
    where = [events.c.execution_id == execution_id]
    if types:
        where.append(events.c.type.in_(sorted(types)))
    if step is not None:
        where.append(events.c.step == step)
    return where


def events_after(
    store: Store,
    execution_id: str,
    *,
    types: Collection[str] = (),
    step: str | None = None,
    after: int = 0,
    limit: int = 200,
) -> Page:
    """The first `limit` events newer than event id `after` (of `types`, of `step`),
    oldest first, and how many newer ones remain (`left_out`)."""
    where = event_where(execution_id, types, step)
    rows, left_out = _forward(store, events, events.c.event_id, where, after=after, limit=limit)
    return Page([EventRow(**r._mapping) for r in rows], left_out)


def logs_after(
    store: Store,
    execution_id: str,
    *,
    step: str | None = None,
    after: int = 0,
    limit: int = 200,
) -> Page:
    """The first `limit` log blocks newer than log id `after` (of `step`), in the order
    they were stored, and how many newer ones remain (`left_out`)."""
    where = [command_logs.c.execution_id == execution_id]
    if step is not None:
        where.append(command_logs.c.step == step)
    rows, left_out = _forward(
        store, command_logs, command_logs.c.log_id, where, after=after, limit=limit
    )
    return Page([LogRow(**r._mapping) for r in rows], left_out)


def events_page(
    store: Store,
    execution_id: str,
    *,
    types: Collection[str] = (),
    step: str | None = None,
    after: int | None = None,
    limit: int | None = None,
) -> Page:
    """Events of an execution of any of `types` (all when empty) and of `step`."""
    where = event_where(execution_id, types, step)
    rows, left_out = _page(store, events, events.c.event_id, where, after=after, limit=limit)
    return Page([EventRow(**r._mapping) for r in rows], left_out)


def logs_page(
    store: Store,
    execution_id: str,
    *,
    step: str | None = None,
    after: int | None = None,
    limit: int | None = None,
) -> Page:
    """Captured logs of an execution (of `step`), in the order they were stored."""
    where = [command_logs.c.execution_id == execution_id]
    if step is not None:
        where.append(command_logs.c.step == step)
    rows, left_out = _page(
        store, command_logs, command_logs.c.log_id, where, after=after, limit=limit
    )
    return Page([LogRow(**r._mapping) for r in rows], left_out)
