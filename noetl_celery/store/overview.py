"""`store.overview`: the reads behind the CLI, the HTTP API and the pages (executions
listed, and paged with their loop totals, by one `ExecutionFilter`; failed loop items
paged), each in a read transaction of its own; the SQL is `store.queries.overview`.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from noetl_celery.models.filters import RECENT, ExecutionFilter
from noetl_celery.store.database import Database
from noetl_celery.store.queries import overview as sql
from noetl_celery.store.rows import ExecutionRow, FailedItem, LoopTotals

__all__ = ["LoopTotals", "OverviewManager"]


class OverviewManager:
    """Executions listed and paged, their loop totals, failed loop items paged."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def list_executions(self, match: ExecutionFilter = RECENT) -> list[ExecutionRow]:
        """Recent executions, newest first (the state snapshot is left out)."""
        with self.db.read() as conn:
            return sql.list_executions(conn, match)

    def executions_page(self, match: ExecutionFilter) -> tuple[list[ExecutionRow], int]:
        """(executions newest first, state left out; how many match the filters)."""
        with self.db.read() as conn:
            return sql.executions_page(conn, match)

    def loop_totals(self, execution_ids: Collection[str]) -> dict[str, LoopTotals]:
        """Per execution: finished epochs' succeeded and failed iterations summed, and
        how many epochs are open."""
        if not execution_ids:
            return {}
        with self.db.read() as conn:
            return sql.loop_totals(conn, execution_ids)

    def step_states(self, execution_ids: Collection[str]) -> dict[str, dict[str, Any]]:
        """Per execution: the `steps` of its state snapshot (live loop counters), read
        only for the executions asked for (those with open loop epochs)."""
        if not execution_ids:
            return {}
        with self.db.read() as conn:
            return sql.step_states(conn, execution_ids)

    def failed_iterations(
        self,
        execution_id: str,
        step: str,
        *,
        epoch: int | None = None,
        offset: int = 0,
        limit: int = 50,
    ) -> list[FailedItem]:
        """Failed iterations of `step` (of `epoch`, or of every epoch) in (epoch,
        iteration) order from `offset`, with their items, through the partial index."""
        with self.db.read() as conn:
            return sql.failed_iterations(
                conn, execution_id, step, epoch=epoch, offset=offset, limit=limit
            )

    def count_failed_iterations(
        self, execution_id: str, step: str, *, epoch: int | None = None
    ) -> int:
        """How many iterations of `step` failed (an index-only count)."""
        with self.db.read() as conn:
            return sql.count_failed_iterations(conn, execution_id, step, epoch=epoch)
