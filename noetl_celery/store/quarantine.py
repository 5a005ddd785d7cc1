"""`store.quarantine`: the quarantined loop items of an execution, each read in a
transaction of its own; the SQL is `store.queries.quarantine`."""

from __future__ import annotations

from noetl_celery.store.database import Database
from noetl_celery.store.queries import quarantine as sql
from noetl_celery.store.rows import QuarantinedItem

__all__ = ["QuarantineManager"]


class QuarantineManager:
    """Quarantined items: listed, filtered by step and error kind."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def items(
        self, execution_id: str, *, step: str | None = None, kind: str | None = None
    ) -> list[QuarantinedItem]:
        with self.db.read() as conn:
            return sql.quarantined_items(conn, execution_id, step=step, kind=kind)
