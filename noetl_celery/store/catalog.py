"""`store.catalog_reads`: the playbook catalog read for operators (`catalog list | show`,
`run PATH`), each read in a transaction of its own; the SQL is
`store.queries.catalog_reads`.

Registration itself is `Store.register`; catalog rows never change once written, a new
content is a new version of its path.
"""

from __future__ import annotations

from noetl_celery.store.database import Database
from noetl_celery.store.queries import catalog_reads as sql
from noetl_celery.store.rows import CatalogSummary, CatalogVersion

__all__ = ["CatalogReadsManager", "CatalogSummary", "CatalogVersion"]


class CatalogReadsManager:
    """Every path with its latest version, and the versions of one path."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def listing(self) -> list[CatalogSummary]:
        """Every path, sorted, with its latest version."""
        with self.db.read() as conn:
            return sql.listing(conn)

    def versions(self, path: str) -> list[CatalogVersion]:
        """The versions of `path`, oldest first; empty when nothing is registered there."""
        with self.db.read() as conn:
            return sql.versions(conn, path)
