"""The notification outbox's statements (store.notifications), and the reads of the
deadline check (engine.deadlines)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection, and_, bindparam, or_, select, update

from noetl_celery.constants import RUNNING
from noetl_celery.store.dialect import insert_ignore
from noetl_celery.store.rows import DeadlineCandidate, NotificationRow
from noetl_celery.store.schema import events, executions, notifications

_COLUMNS = (
    notifications.c.notification_id,
    notifications.c.execution_id,
    notifications.c.event,
    notifications.c.target,
    notifications.c.attempts,
    notifications.c.last_error,
    notifications.c.created_at,
    notifications.c.delivered_at,
    notifications.c.next_at,
    notifications.c.skipped,
)


def _row(r: object) -> NotificationRow:
    return NotificationRow(**r._mapping)  # type: ignore[attr-defined]


def enqueue(conn: Connection, ids: Sequence[tuple[str, str, str, str]], now: dt.datetime) -> None:
    """Rows (id, execution_id, event, target), due now; one already there stays."""
    conn.execute(
        insert_ignore(conn, notifications),
        [
            {
                "notification_id": nid,
                "execution_id": eid,
                "event": event,
                "target": target,
                "created_at": now,
                "next_at": now,
                "claimed_until": None,
                "attempts": 0,
            }
            for nid, eid, event, target in ids
        ],
    )


def _due(now: dt.datetime, targets: Sequence[str]) -> object:
    return and_(
        notifications.c.delivered_at.is_(None),
        notifications.c.target.in_(list(targets)),
        notifications.c.next_at <= now,
        or_(notifications.c.claimed_until.is_(None), notifications.c.claimed_until < now),
    )


# built once: every process's deliverer asks each second
_ANY_DUE = (
    select(notifications.c.notification_id)
    .where(
        notifications.c.delivered_at.is_(None),
        notifications.c.target.in_(bindparam("b_targets", expanding=True)),
        notifications.c.next_at <= bindparam("b_now"),
        or_(
            notifications.c.claimed_until.is_(None),
            notifications.c.claimed_until < bindparam("b_now"),
        ),
    )
    .limit(1)
)


def any_due(conn: Connection, now: dt.datetime, targets: Sequence[str]) -> bool:
    """Whether a row of `targets` is due (what `_due` selects)."""
    params = {"b_now": now, "b_targets": list(targets)}
    return conn.execute(_ANY_DUE, params).first() is not None


def claim(
    conn: Connection,
    now: dt.datetime,
    until: dt.datetime,
    limit: int,
    targets: Sequence[str],
) -> list[NotificationRow]:
    """Take up to `limit` due rows of `targets` until `until` (SKIP LOCKED on Postgres:
    deliverers in parallel take different rows; SQLite's write lock serialises claims)."""
    due = _due(now, targets)
    ids = (
        select(notifications.c.notification_id)
        .where(due)  # type: ignore[arg-type]
        .order_by(notifications.c.next_at)
        .limit(limit)
        .with_for_update(skip_locked=True)
        .scalar_subquery()
    )
    rows = conn.execute(
        update(notifications)
        .where(notifications.c.notification_id.in_(ids), due)  # type: ignore[arg-type]
        .values(claimed_until=until)
        .returning(*_COLUMNS)
    ).all()
    return [_row(r) for r in rows]


def delivered(conn: Connection, notification_id: str, now: dt.datetime) -> None:
    conn.execute(
        update(notifications)
        .where(notifications.c.notification_id == notification_id)
        .values(delivered_at=now, attempts=notifications.c.attempts + 1, claimed_until=None)
    )


def skipped(conn: Connection, notification_id: str, reason: str, now: dt.datetime) -> None:
    conn.execute(
        update(notifications)
        .where(notifications.c.notification_id == notification_id)
        .values(delivered_at=now, skipped=True, last_error=reason, claimed_until=None)
    )


def failed(conn: Connection, notification_id: str, error: str, next_at: dt.datetime) -> None:
    conn.execute(
        update(notifications)
        .where(notifications.c.notification_id == notification_id)
        .values(
            attempts=notifications.c.attempts + 1,
            last_error=error,
            next_at=next_at,
            claimed_until=None,
        )
    )


def of_execution(conn: Connection, execution_id: str) -> list[NotificationRow]:
    rows = conn.execute(
        select(*_COLUMNS)
        .where(notifications.c.execution_id == execution_id)
        .order_by(notifications.c.created_at, notifications.c.notification_id)
    ).all()
    return [_row(r) for r in rows]


def _schedule_of(trigger: str | None, detail: Any) -> int | None:
    if trigger != "schedule" or not isinstance(detail, dict):
        return None
    schedule_id = detail.get("schedule_id")
    return schedule_id if isinstance(schedule_id, int) else None


def has_event(conn: Connection, execution_id: str, event_type: str) -> bool:
    query = (
        select(events.c.event_id)
        .where(events.c.execution_id == execution_id, events.c.type == event_type)
        .limit(1)
    )
    return conn.execute(query).first() is not None


def deadline_events(conn: Connection, execution_id: str) -> list[tuple[str, Any, dt.datetime]]:
    """(type, payload, created_at) of the execution's deadline events, oldest first."""
    rows = conn.execute(
        select(events.c.type, events.c.payload, events.c.created_at)
        .where(
            events.c.execution_id == execution_id,
            events.c.type.in_(["deadline.at_risk", "deadline.missed"]),
        )
        .order_by(events.c.event_id)
    ).all()
    return [(str(r[0]), r[1], r[2]) for r in rows]


def deadline_candidates(conn: Connection, limit: int) -> list[DeadlineCandidate]:
    """Running top-level executions (oldest first) and the deadline events they have."""
    rows = conn.execute(
        select(
            executions.c.execution_id,
            executions.c.catalog_id,
            executions.c.created_at,
            executions.c.trigger,
            executions.c.trigger_detail,
        )
        .where(executions.c.status == RUNNING, executions.c.parent_execution_id.is_(None))
        .order_by(executions.c.created_at)
        .limit(limit)
    ).all()
    if not rows:
        return []
    seen: dict[str, set[str]] = {}
    found = conn.execute(
        select(events.c.execution_id, events.c.type).where(
            events.c.execution_id.in_([r.execution_id for r in rows]),
            events.c.type.in_(["deadline.at_risk", "deadline.missed"]),
        )
    ).all()
    for eid, kind in found:
        seen.setdefault(str(eid), set()).add(str(kind))
    return [
        DeadlineCandidate(
            str(r.execution_id),
            int(r.catalog_id),
            r.created_at,
            frozenset(seen.get(str(r.execution_id), set())),
            _schedule_of(r.trigger, r.trigger_detail),
        )
        for r in rows
    ]


__all__ = [
    "any_due",
    "claim",
    "deadline_candidates",
    "deadline_events",
    "delivered",
    "enqueue",
    "failed",
    "has_event",
    "of_execution",
    "skipped",
]
