"""Schedules and their firings (the SQL behind `noetl-celery schedule` and beat).

`fire` is the exactly-once step: the firing row (schedule, fire time) and the execution
it starts are inserted in one transaction; a second firer of the same time inserts
nothing and starts nothing.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, delete, select, update

from noetl_celery.constants import TRIGGER_SCHEDULE
from noetl_celery.store import queries
from noetl_celery.store.database import Database
from noetl_celery.store.dialect import insert_ignore
from noetl_celery.store.schema import schedule_firings, schedules, utcnow

if TYPE_CHECKING:
    from noetl_celery.store.rows import CatalogEntry


@dataclass(frozen=True)
class ScheduleRow:
    schedule_id: int
    name: str | None
    path: str
    cron: str
    timezone: str
    payload: dict[str, Any] | None
    enabled: bool
    next_fire_at: dt.datetime
    last_fire_at: dt.datetime | None
    created_at: dt.datetime

    def to_json(self) -> dict[str, Any]:
        def iso(value: dt.datetime | None) -> str | None:
            return None if value is None else value.isoformat() + "Z"

        return {
            "schedule_id": self.schedule_id,
            "name": self.name,
            "path": self.path,
            "cron": self.cron,
            "timezone": self.timezone,
            "payload": self.payload or {},
            "enabled": self.enabled,
            # a paused schedule's stored time is stale: `resume` computes a new one
            "next_fire_at": iso(self.next_fire_at) if self.enabled else None,
            "last_fire_at": iso(self.last_fire_at),
            "created_at": iso(self.created_at),
        }


def _row(row: Any) -> ScheduleRow:
    return ScheduleRow(**row._mapping)


def _move_on(
    conn: Connection, schedule: ScheduleRow, fire_time: dt.datetime, next_fire_at: dt.datetime
) -> None:
    conn.execute(
        update(schedules)
        .where(
            schedules.c.schedule_id == schedule.schedule_id,
            schedules.c.next_fire_at < next_fire_at,  # never backwards (a slower firer)
        )
        .values(next_fire_at=next_fire_at, last_fire_at=fire_time)
    )


class ScheduleManager:
    """Cron schedules: add, list, pause, remove, and fire them exactly once per fire time."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def add(
        self,
        *,
        path: str,
        cron: str,
        timezone: str,
        payload: dict[str, Any],
        next_fire_at: dt.datetime,
        name: str | None = None,
        enabled: bool = True,
    ) -> ScheduleRow:
        """A new schedule; with `name`, the schedule of that name is replaced (how
        `catalog register` keeps a playbook's declared schedule current). A replaced
        schedule that was paused stays paused: registering a playbook again must not undo
        an operator's `schedule pause`."""
        values = {
            "path": path,
            "cron": cron,
            "timezone": timezone,
            "payload": payload,
            "enabled": enabled,
            "next_fire_at": next_fire_at,
        }
        with self.db.write() as conn:
            existing = None
            if name is not None:
                existing = conn.execute(
                    select(schedules.c.schedule_id, schedules.c.enabled).where(
                        schedules.c.name == name
                    )
                ).first()
            if existing is None:
                schedule_id = conn.execute(
                    schedules.insert()
                    .values(name=name, created_at=utcnow(), **values)
                    .returning(schedules.c.schedule_id)
                ).scalar_one()
            else:
                schedule_id = existing.schedule_id
                values["enabled"] = enabled and existing.enabled
                conn.execute(
                    update(schedules).where(schedules.c.schedule_id == schedule_id).values(**values)
                )
            row = conn.execute(
                select(schedules).where(schedules.c.schedule_id == schedule_id)
            ).one()
        return _row(row)

    def listing(self) -> list[ScheduleRow]:
        with self.db.read() as conn:
            rows = conn.execute(select(schedules).order_by(schedules.c.schedule_id)).all()
        return [_row(r) for r in rows]

    def get(self, schedule_id: int) -> ScheduleRow | None:
        with self.db.read() as conn:
            row = conn.execute(
                select(schedules).where(schedules.c.schedule_id == schedule_id)
            ).first()
        return None if row is None else _row(row)

    def set_enabled(
        self, schedule_id: int, enabled: bool, next_fire_at: dt.datetime | None = None
    ) -> tuple[ScheduleRow, bool] | None:
        """Pause or resume; (the schedule, whether it changed), None when there is none.
        Resuming sets `next_fire_at` (a paused schedule's stored time is stale); pausing or
        resuming a schedule already in that state changes nothing."""
        values: dict[str, Any] = {"enabled": enabled}
        if next_fire_at is not None:
            values["next_fire_at"] = next_fire_at
        with self.db.write() as conn:
            changed = conn.execute(
                update(schedules)
                .where(schedules.c.schedule_id == schedule_id, schedules.c.enabled.is_(not enabled))
                .values(**values)
                .returning(schedules.c.schedule_id)
            ).first()
            row = conn.execute(
                select(schedules).where(schedules.c.schedule_id == schedule_id)
            ).first()
        return None if row is None else (_row(row), changed is not None)

    def remove(self, schedule_id: int) -> bool:
        with self.db.write() as conn:
            gone = conn.execute(
                delete(schedules)
                .where(schedules.c.schedule_id == schedule_id)
                .returning(schedules.c.schedule_id)
            ).first()
        return gone is not None

    def due(self, now: dt.datetime, limit: int = 100) -> list[ScheduleRow]:
        with self.db.read() as conn:
            rows = conn.execute(
                select(schedules)
                .where(schedules.c.enabled.is_(True), schedules.c.next_fire_at <= now)
                .order_by(schedules.c.next_fire_at)
                .limit(limit)
            ).all()
        return [_row(r) for r in rows]

    def fire(
        self,
        schedule: ScheduleRow,
        fire_time: dt.datetime,
        next_fire_at: dt.datetime,
        entry: CatalogEntry,
        execution_id: str,
        payload: dict[str, Any],
    ) -> bool:
        """Start the run of `schedule` for `fire_time` unless some firer already did; move
        the schedule on either way. True when this call started it."""
        with self.db.write() as conn:
            # `due` read the schedule outside this transaction: a pause (or remove) since
            # then wins. The row lock orders this firing and a concurrent pause.
            enabled = conn.execute(
                select(schedules.c.enabled)
                .where(schedules.c.schedule_id == schedule.schedule_id)
                .with_for_update()
            ).scalar()
            if not enabled:
                return False
            won = conn.execute(
                insert_ignore(conn, schedule_firings).returning(schedule_firings.c.schedule_id),
                {
                    "schedule_id": schedule.schedule_id,
                    "fire_time": fire_time,
                    "execution_id": execution_id,
                    "created_at": utcnow(),
                },
            ).first()
            if won is not None:
                queries.insert_execution(
                    conn,
                    execution_id,
                    entry,
                    payload,
                    parent_execution_id=None,
                    parent_command_id=None,
                    trigger=TRIGGER_SCHEDULE,
                    rerun_of=None,
                    trigger_detail={
                        "schedule_id": schedule.schedule_id,
                        "schedule": schedule.name,
                        "fire_time": fire_time.isoformat() + "Z",
                    },
                    owner=None,
                    now=utcnow(),
                )
            _move_on(conn, schedule, fire_time, next_fire_at)
        return won is not None

    def advance(
        self, schedule: ScheduleRow, fire_time: dt.datetime, next_fire_at: dt.datetime
    ) -> None:
        """Move the schedule on without a run (its playbook is no longer in the catalog)."""
        with self.db.write() as conn:
            _move_on(conn, schedule, fire_time, next_fire_at)

    def firings(self, schedule_id: int) -> list[tuple[dt.datetime, str | None]]:
        with self.db.read() as conn:
            rows = conn.execute(
                select(schedule_firings.c.fire_time, schedule_firings.c.execution_id)
                .where(schedule_firings.c.schedule_id == schedule_id)
                .order_by(schedule_firings.c.fire_time)
            ).all()
        return [(r[0], r[1]) for r in rows]
