"""`store.notifications`: the notification outbox (engine.notify); the SQL is
`store.queries.notifications`.

Which targets want an event is the engine's call (a playbook's `metadata.notify`, the
engine's NOETL_NOTIFY_*): the composition root installs it as `rule`. `enqueue_in` is
called inside the transaction that ends an execution (the orchestration pass's terminal
write, store.termination's cancel and timeout) or records a deadline event, so the
notification exists exactly when the event does. Only top-level executions notify (a
child's failure reaches its parent, which notifies)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any, Protocol

from sqlalchemy import Connection

from noetl_celery.constants import RUNNING
from noetl_celery.models.notify import notification_id
from noetl_celery.orchestrator.decisions import EngineEvent
from noetl_celery.store import queries
from noetl_celery.store.database import Database
from noetl_celery.store.queries import notifications as sql
from noetl_celery.store.rows import DeadlineCandidate, NotificationRow
from noetl_celery.store.schema import utcnow

__all__ = ["NotificationRow", "NotificationsManager", "NotifyRule"]


class NotifyRule(Protocol):
    def targets(self, catalog_id: int, event: str) -> list[str]:
        """The targets (models.notify.TARGET_*) that want `event` of a run of
        `catalog_id`."""
        ...


class NotificationsManager:
    def __init__(self, db: Database) -> None:
        self.db = db
        self.rule: NotifyRule | None = None  # None: nobody is notified

    def enqueue_in(
        self,
        conn: Connection,
        execution_id: str,
        catalog_id: int,
        parent_execution_id: str | None,
        event: str,
        now: dt.datetime,
    ) -> int:
        """In the caller's transaction: a row per target that wants `event`."""
        if self.rule is None or parent_execution_id is not None:
            return 0
        targets = self.rule.targets(catalog_id, event)
        if targets:
            rows = [
                (notification_id(execution_id, event, t), execution_id, event, t) for t in targets
            ]
            sql.enqueue(conn, rows, now)
        return len(targets)

    def any_due(self, targets: Sequence[str]) -> bool:
        with self.db.read() as conn:
            return sql.any_due(conn, utcnow(), targets)

    def claim(
        self, seconds: float, targets: Sequence[str], limit: int = 50
    ) -> list[NotificationRow]:
        now = utcnow()
        with self.db.write() as conn:
            return sql.claim(conn, now, now + dt.timedelta(seconds=seconds), limit, targets)

    def skipped(self, notification_id: str, reason: str) -> None:
        with self.db.write() as conn:
            sql.skipped(conn, notification_id, reason, utcnow())

    def delivered(self, notification_id: str) -> None:
        with self.db.write() as conn:
            sql.delivered(conn, notification_id, utcnow())

    def failed(self, notification_id: str, error: str, retry_in: float) -> None:
        with self.db.write() as conn:
            sql.failed(conn, notification_id, error, utcnow() + dt.timedelta(seconds=retry_in))

    def of_execution(self, execution_id: str) -> list[NotificationRow]:
        with self.db.read() as conn:
            return sql.of_execution(conn, execution_id)

    def deadline_events(self, execution_id: str) -> list[tuple[str, Any, dt.datetime]]:
        with self.db.read() as conn:
            return sql.deadline_events(conn, execution_id)

    def deadline_candidates(self, limit: int = 1000) -> list[DeadlineCandidate]:
        with self.db.read() as conn:
            return sql.deadline_candidates(conn, limit)

    def record_deadline(self, execution_id: str, event: str, payload: dict[str, Any]) -> bool:
        """The deadline event (once per execution: a unique index) and its notifications,
        in one transaction, while the execution still runs. False when it ended
        meanwhile or the event is there already."""
        now = utcnow()
        with self.db.write() as conn:
            row = queries.lock_execution(conn, execution_id, wait=True)
            if row is None or row.status != RUNNING:
                return False
            if sql.has_event(conn, execution_id, event):
                return False
            queries.insert_events(conn, execution_id, [EngineEvent(event, payload=payload)], now)
            self.enqueue_in(conn, execution_id, row.catalog_id, row.parent_execution_id, event, now)
            return True
