"""Schedules and their firings (exactly once per fire time)."""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import Connection, delete, select, update

from noetl_celery.store.dialect import insert_ignore
from noetl_celery.store.rows import ScheduleRow
from noetl_celery.store.schema import schedule_firings, schedules


def _schedule(row: Any) -> ScheduleRow:
    return ScheduleRow(**row._mapping)


def schedule(conn: Connection, schedule_id: int) -> ScheduleRow | None:
    row = conn.execute(select(schedules).where(schedules.c.schedule_id == schedule_id)).first()
    return None if row is None else _schedule(row)


def schedule_named(conn: Connection, name: str) -> Any:
    """(schedule_id, enabled) of the schedule called `name`, or None."""
    return conn.execute(
        select(schedules.c.schedule_id, schedules.c.enabled).where(schedules.c.name == name)
    ).first()


def insert_schedule(
    conn: Connection, name: str | None, values: dict[str, Any], now: dt.datetime
) -> int:
    return int(
        conn.execute(
            schedules.insert()
            .values(name=name, created_at=now, **values)
            .returning(schedules.c.schedule_id)
        ).scalar_one()
    )


def update_schedule(conn: Connection, schedule_id: int, values: dict[str, Any]) -> None:
    conn.execute(update(schedules).where(schedules.c.schedule_id == schedule_id).values(**values))


def switch_schedule(
    conn: Connection, schedule_id: int, enabled: bool, values: dict[str, Any]
) -> bool:
    """Write `values` when the schedule is not already `enabled`; whether it changed."""
    changed = conn.execute(
        update(schedules)
        .where(schedules.c.schedule_id == schedule_id, schedules.c.enabled.is_(not enabled))
        .values(**values)
        .returning(schedules.c.schedule_id)
    ).first()
    return changed is not None


def delete_schedule(conn: Connection, schedule_id: int) -> bool:
    gone = conn.execute(
        delete(schedules)
        .where(schedules.c.schedule_id == schedule_id)
        .returning(schedules.c.schedule_id)
    ).first()
    return gone is not None


def schedules_all(conn: Connection) -> list[ScheduleRow]:
    rows = conn.execute(select(schedules).order_by(schedules.c.schedule_id)).all()
    return [_schedule(r) for r in rows]


def due_schedules(conn: Connection, now: dt.datetime, limit: int) -> list[ScheduleRow]:
    rows = conn.execute(
        select(schedules)
        .where(schedules.c.enabled.is_(True), schedules.c.next_fire_at <= now)
        .order_by(schedules.c.next_fire_at)
        .limit(limit)
    ).all()
    return [_schedule(r) for r in rows]


def lock_schedule_enabled(conn: Connection, schedule_id: int) -> bool:
    """Lock the schedule's row; whether it exists and is enabled."""
    enabled = conn.execute(
        select(schedules.c.enabled).where(schedules.c.schedule_id == schedule_id).with_for_update()
    ).scalar()
    return bool(enabled)


def insert_firing(
    conn: Connection,
    schedule_id: int,
    fire_time: dt.datetime,
    execution_id: str,
    now: dt.datetime,
) -> bool:
    """The firing row of (schedule, fire time); False when another firer has it."""
    won = conn.execute(
        insert_ignore(conn, schedule_firings).returning(schedule_firings.c.schedule_id),
        {
            "schedule_id": schedule_id,
            "fire_time": fire_time,
            "execution_id": execution_id,
            "created_at": now,
        },
    ).first()
    return won is not None


def move_schedule_on(
    conn: Connection, schedule_id: int, fire_time: dt.datetime, next_fire_at: dt.datetime
) -> None:
    conn.execute(
        update(schedules)
        .where(
            schedules.c.schedule_id == schedule_id,
            schedules.c.next_fire_at < next_fire_at,  # never backwards (a slower firer)
        )
        .values(next_fire_at=next_fire_at, last_fire_at=fire_time)
    )


def schedule_firings_of(conn: Connection, schedule_id: int) -> list[tuple[dt.datetime, str | None]]:
    rows = conn.execute(
        select(schedule_firings.c.fire_time, schedule_firings.c.execution_id)
        .where(schedule_firings.c.schedule_id == schedule_id)
        .order_by(schedule_firings.c.fire_time)
    ).all()
    return [(r[0], r[1]) for r in rows]
