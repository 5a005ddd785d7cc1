"""`store.compat`: reads NoETL's server API needs (web.api_noetl) and the engine's own
reads do not (catalog rows with their content, events by offset, progress and event
counts per page, stuck executions), each in a read transaction of its own; the SQL is
`store.queries.compat`.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection, Sequence

from noetl_celery.store.database import Database
from noetl_celery.store.queries import compat as sql
from noetl_celery.store.rows import CatalogRow, EventRow

__all__ = ["CatalogRow", "CompatManager"]


class CompatManager:
    """What `engine.compat` reads for NoETL's API."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def catalog_rows(self, path: str | None = None) -> list[CatalogRow]:
        """Every registered version (of `path`), newest first (as NoETL lists them)."""
        with self.db.read() as conn:
            return sql.catalog_rows(conn, path)

    def latest_catalog_rows(self) -> list[CatalogRow]:
        """Each path's latest version, the most recently registered first."""
        with self.db.read() as conn:
            return sql.latest_catalog_rows(conn)

    def status_counts(self) -> dict[str, int]:
        """How many executions (children included) are in each status."""
        with self.db.read() as conn:
            return sql.status_counts(conn)

    def catalog_counts(self) -> tuple[int, int]:
        """(catalog paths, registered versions)."""
        with self.db.read() as conn:
            return sql.catalog_counts(conn)

    def catalog_row(
        self,
        *,
        path: str | None = None,
        version: int | None = None,
        catalog_id: int | None = None,
    ) -> CatalogRow | None:
        """The version `catalog_id`, or `path`'s `version` (latest when None); None:
        absent."""
        with self.db.read() as conn:
            return sql.catalog_row(conn, path=path, version=version, catalog_id=catalog_id)

    def catalog_versions(self, catalog_ids: Collection[int]) -> dict[int, int]:
        """catalog_id -> version, for the ids given."""
        if not catalog_ids:
            return {}
        with self.db.read() as conn:
            return sql.catalog_versions(conn, catalog_ids)

    def command_progress(self, execution_ids: Sequence[str]) -> dict[str, tuple[int, int]]:
        """execution_id -> (commands ended, commands made), for the ids given."""
        if not execution_ids:
            return {}
        with self.db.read() as conn:
            return sql.command_progress(conn, execution_ids)

    def event_counts(self, execution_ids: Sequence[str]) -> dict[str, int]:
        if not execution_ids:
            return {}
        with self.db.read() as conn:
            return sql.event_counts(conn, execution_ids)

    def events_slice(
        self,
        execution_id: str,
        *,
        types: Collection[str] = (),
        after: int | None = None,
        offset: int = 0,
        limit: int = 100,
        newest_first: bool = False,
    ) -> tuple[list[EventRow], int]:
        """Events oldest first (newest first with `newest_first`) of `types` when
        given, newer than event id `after`, `limit` of them after skipping `offset`,
        and how many match in all."""
        with self.db.read() as conn:
            return sql.events_slice(
                conn,
                execution_id,
                types=types,
                after=after,
                offset=offset,
                limit=limit,
                newest_first=newest_first,
            )

    def stuck_executions(self, started_before: dt.datetime, limit: int = 1000) -> list[str]:
        """Top-level executions still RUNNING that started before `started_before`,
        oldest first (children end with their parent)."""
        with self.db.read() as conn:
            return sql.stuck_executions(conn, started_before, limit)
