"""`store.history`: an execution's history read back for operators (events, captured
logs), each read in a transaction of its own, and captured logs written in one of their
own; the SQL is `store.queries.history`.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Sequence

from sqlalchemy.exc import SQLAlchemyError

from noetl_celery.errors import StoreError
from noetl_celery.store.database import Database
from noetl_celery.store.queries import history as sql
from noetl_celery.store.rows import LogRow, Page

__all__ = ["HistoryManager"]

log = logging.getLogger("noetl_celery.history")


class HistoryManager:
    """Events and captured logs paged (or followed after an id), and logs written."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def write_logs(self, rows: Sequence[LogRow]) -> None:
        """Insert captured logs in a transaction of their own. Logs are what operators
        read, not state: a failure to store them is logged, never raised into the work
        that produced them (a reaper sweep, a parked command)."""
        if not rows:
            return
        try:
            with self.db.write() as conn:
                sql.add_logs(conn, rows)
        except (SQLAlchemyError, StoreError):
            log.warning("could not store %d captured log block(s)", len(rows), exc_info=True)

    def events_after(
        self,
        execution_id: str,
        *,
        types: Collection[str] = (),
        step: str | None = None,
        after: int = 0,
        limit: int = 200,
    ) -> Page:
        """The first `limit` events newer than event id `after` (of `types`, of `step`),
        oldest first, and how many newer ones remain (`left_out`)."""
        with self.db.read() as conn:
            return sql.events_after(
                conn, execution_id, types=types, step=step, after=after, limit=limit
            )

    def logs_after(
        self, execution_id: str, *, step: str | None = None, after: int = 0, limit: int = 200
    ) -> Page:
        """The first `limit` log blocks newer than log id `after` (of `step`), in the
        order they were stored, and how many newer ones remain (`left_out`)."""
        with self.db.read() as conn:
            return sql.logs_after(conn, execution_id, step=step, after=after, limit=limit)

    def events_page(
        self,
        execution_id: str,
        *,
        types: Collection[str] = (),
        step: str | None = None,
        after: int | None = None,
        limit: int | None = None,
    ) -> Page:
        """Events of an execution of any of `types` (all when empty) and of `step`: the
        newest `limit` oldest first, or those newer than `after` (see
        store.queries.history)."""
        with self.db.read() as conn:
            return sql.events_page(
                conn, execution_id, types=types, step=step, after=after, limit=limit
            )

    def logs_page(
        self,
        execution_id: str,
        *,
        step: str | None = None,
        after: int | None = None,
        limit: int | None = None,
    ) -> Page:
        """Captured logs of an execution (of `step`), in the order they were stored."""
        with self.db.read() as conn:
            return sql.logs_page(conn, execution_id, step=step, after=after, limit=limit)
