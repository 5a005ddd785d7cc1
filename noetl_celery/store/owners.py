"""`store.owners`: embedded executions by owner process (see engine.owner); the SQL is
`store.queries.owners`."""

from __future__ import annotations

from noetl_celery.store.database import Database
from noetl_celery.store.queries import owners as sql

__all__ = ["OwnersManager"]


class OwnersManager:
    def __init__(self, db: Database) -> None:
        self.db = db

    def running_owned(self) -> list[tuple[str, str]]:
        """(execution id, owner) of every RUNNING execution that records an owner
        process."""
        with self.db.read() as conn:
            return sql.running_owned(conn)
