"""`store.reruns`: what a rerun reads from its (ended, hence immutable) original
execution, each read in a transaction of its own; the SQL is `store.queries.reruns`."""

from __future__ import annotations

from typing import Any

from noetl_celery.store.database import Database
from noetl_celery.store.queries import reruns as sql

__all__ = ["RerunsManager"]


class RerunsManager:
    """Failed loops and their items, and the context a step started with."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def failed_loops(self, execution_id: str) -> dict[str, tuple[int, int]]:
        """Loop steps with failed iterations: step -> (how many, first failure's event
        id)."""
        with self.db.read() as conn:
            return sql.failed_loops(conn, execution_id)

    def failed_items(self, execution_id: str, step: str) -> list[Any]:
        """The items of the failed iterations of `step`, in the original order."""
        with self.db.read() as conn:
            return sql.failed_items(conn, execution_id, step)

    def step_context(self, execution_id: str, step: str) -> int | None:
        """The context version `step` started its latest epoch with; None when the step
        never ran."""
        with self.db.read() as conn:
            return sql.step_context(conn, execution_id, step)
