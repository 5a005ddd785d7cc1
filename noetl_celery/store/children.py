"""Child executions (sub-playbooks): spawning them and handing their result back.

A waiting parent command and its child are created in one transaction, so a child can
only finish while its parent is already waiting; the child's terminal pass resumes the
parent (status back to `issued`, the child's summary in `resume.child`) in the same
transaction that ends the child. The spawn key makes a child unique per parent task, so
a parent command that runs again finds its child instead of starting another.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy import Connection

from noetl_celery.constants import TERMINAL_STATUSES
from noetl_celery.errors import CatalogNotFound
from noetl_celery.models.summary import execution_summary
from noetl_celery.store import queries
from noetl_celery.store.database import Database
from noetl_celery.store.queries import ResultCache
from noetl_celery.store.rows import CatalogEntry, ClaimedCommand, ExecutionRow, SpawnRequest
from noetl_celery.store.schema import utcnow


def child_summary(conn: Connection, child: ExecutionRow, results: ResultCache) -> dict[str, Any]:
    """What a waiting parent receives as `resume.child` (the `run --json` shape)."""
    return execution_summary(
        child.execution_id,
        child.status,
        child.result,
        child.error,
        child.duration_seconds,
        child.state,
        lambda step, epoch: queries.cached_result(conn, results, child.execution_id, step, epoch),
    )


def resume_parent(conn: Connection, child: ExecutionRow, results: ResultCache) -> str | None:
    """Give the child's summary to its waiting parent command and issue it again.
    Returns the parent command id to publish (None if no parent is waiting)."""
    if not child.parent_command_id:
        return None
    resume = queries.waiting_parent_resume(conn, child.parent_command_id)
    if resume is None:
        return None
    if resume.get("spawn") != child.spawn_key:
        return None  # the parent waits for another child (a later spawn of its task)
    resume["child"] = child_summary(conn, child, results)
    queries.reissue_parent(conn, child.parent_command_id, resume, utcnow())
    return child.parent_command_id


class ChildrenManager:
    """`store.children`: starting child executions (sub-playbooks)."""

    def __init__(
        self,
        db: Database,
        results: ResultCache,
        resolve_catalog: Callable[[str, int | None], CatalogEntry],
    ) -> None:
        self.db = db
        self.results = results
        # the façade's lookup (CatalogNotFound names the path and version)
        self._resolve = resolve_catalog

    def suspend_and_spawn(
        self,
        command: ClaimedCommand,
        continuation: dict[str, Any],
        request: SpawnRequest,
        child_id: str,
    ) -> tuple[str | None, bool]:
        """Park `command` as waiting and create its child, atomically. Returns (child id
        or None when the command is no longer ours, whether the parent was resumed at
        once because that child had already finished)."""
        # raises CatalogNotFound before anything is written
        entry = self._resolve(request.path, request.version)
        with self.db.write() as conn:
            if not queries.park_for_child(conn, command.command_id, continuation, request.key):
                return None, False
            child = queries.insert_child(conn, child_id, entry, request, command, utcnow())
            row = queries.execution(conn, child)
            if row is not None and row.status in TERMINAL_STATUSES:
                # the child of an earlier run of this command already ended: resume now
                resume_parent(conn, row, self.results)
                return child, True
        return child, False

    def spawn_detached(self, command: ClaimedCommand, request: SpawnRequest, child_id: str) -> str:
        """Fire-and-forget: start a linked child; the parent does not wait for it."""
        entry = self._resolve(request.path, request.version)
        with self.db.write() as conn:
            return queries.insert_child(conn, child_id, entry, request, command, utcnow())


__all__ = [
    "CatalogNotFound",
    "ChildrenManager",
    "child_summary",
    "resume_parent",
]
