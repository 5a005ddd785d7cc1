"""An execution's history for operators (events, captured logs), filtered in SQL, and
the insert of captured logs (`store.history` opens the transactions; a command's close
inserts its logs in its own).

A listing is a page: the newest `limit` matching rows, returned oldest first, plus how
many matching rows it left out, so an execution with 100k iterations is never loaded
whole. With `after`, only rows newer than that id are read, oldest first (`--follow`).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

from sqlalchemy import Connection, Table, func, select

from noetl_celery.store.rows import EventRow, LogRow, Page
from noetl_celery.store.schema import command_logs, events, utcnow

# rows read per query when following (a burst of completions arrives in a few reads)
FOLLOW_CHUNK = 1000


def add_logs(conn: Connection, rows: Sequence[LogRow]) -> None:
    """Insert captured logs in the caller's transaction."""
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


def _page(
    conn: Connection,
    table: Table,
    key: Any,
    where: list[Any],
    *,
    after: int | None,
    limit: int | None,
) -> tuple[list[Any], int]:
    """(rows oldest first, rows left out) of `table` matching `where`."""
    query = select(table).where(*where)
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
    conn: Connection, table: Table, key: Any, where: list[Any], *, after: int, limit: int
) -> tuple[list[Any], int]:
    """(the first `limit` rows newer than id `after`, oldest first; how many newer
    matching rows remain after them): a cursor that pages to the end with no gap."""
    query = select(table).where(*where, key > after).order_by(key).limit(limit)
    rows = conn.execute(query).all()
    left_out = 0
    if len(rows) == limit:  # maybe more: count what is past this page
        last = getattr(rows[-1], key.name)
        count = select(func.count()).select_from(table).where(*where, key > last)
        left_out = int(conn.execute(count).scalar_one())
    return list(rows), left_out


def _event_where(execution_id: str, types: Collection[str], step: str | None) -> list[Any]:
    where = [events.c.execution_id == execution_id]
    if types:
        where.append(events.c.type.in_(sorted(types)))
    if step is not None:
        where.append(events.c.step == step)
    return where


def _log_where(execution_id: str, step: str | None) -> list[Any]:
    where = [command_logs.c.execution_id == execution_id]
    if step is not None:
        where.append(command_logs.c.step == step)
    return where


def events_after(
    conn: Connection,
    execution_id: str,
    *,
    types: Collection[str],
    step: str | None,
    after: int,
    limit: int,
) -> Page:
    """The first `limit` events newer than event id `after` (of `types`, of `step`),
    oldest first, and how many newer ones remain (`left_out`)."""
    where = _event_where(execution_id, types, step)
    rows, left_out = _forward(conn, events, events.c.event_id, where, after=after, limit=limit)
    return Page([EventRow(**r._mapping) for r in rows], left_out)


def logs_after(
    conn: Connection, execution_id: str, *, step: str | None, after: int, limit: int
) -> Page:
    """The first `limit` log blocks newer than log id `after` (of `step`), in the order
    they were stored, and how many newer ones remain (`left_out`)."""
    where = _log_where(execution_id, step)
    rows, left_out = _forward(
        conn, command_logs, command_logs.c.log_id, where, after=after, limit=limit
    )
    return Page([LogRow(**r._mapping) for r in rows], left_out)


def events_page(
    conn: Connection,
    execution_id: str,
    *,
    types: Collection[str],
    step: str | None,
    after: int | None,
    limit: int | None,
) -> Page:
    """Events of an execution of any of `types` (all when empty) and of `step`."""
    where = _event_where(execution_id, types, step)
    rows, left_out = _page(conn, events, events.c.event_id, where, after=after, limit=limit)
    return Page([EventRow(**r._mapping) for r in rows], left_out)


def logs_page(
    conn: Connection,
    execution_id: str,
    *,
    step: str | None,
    after: int | None,
    limit: int | None,
) -> Page:
    """Captured logs of an execution (of `step`), in the order they were stored."""
    where = _log_where(execution_id, step)
    rows, left_out = _page(
        conn, command_logs, command_logs.c.log_id, where, after=after, limit=limit
    )
    return Page([LogRow(**r._mapping) for r in rows], left_out)
