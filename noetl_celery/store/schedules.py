"""Schedules and their firings (the SQL behind `noetl-celery schedule` and beat).

`fire` is the exactly-once step: the firing row (schedule, fire time) and the execution
it starts are inserted in one transaction; a second firer of the same time inserts
nothing and starts nothing.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from noetl_celery.constants import TRIGGER_SCHEDULE
from noetl_celery.store import queries
from noetl_celery.store.database import Database
from noetl_celery.store.rows import CatalogEntry, ScheduleRow
from noetl_celery.store.schema import utcnow

__all__ = ["ScheduleManager", "ScheduleRow"]


class ScheduleManager:
    """`store.schedules`: add, list, pause and remove cron schedules, and fire them
    exactly once per fire time."""

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
        deadline: str | None = None,
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
            "deadline": deadline,
        }
        with self.db.write() as conn:
            existing = None if name is None else queries.schedule_named(conn, name)
            if existing is None:
                schedule_id = queries.insert_schedule(conn, name, values, utcnow())
            else:
                schedule_id = existing.schedule_id
                values["enabled"] = enabled and existing.enabled
                queries.update_schedule(conn, schedule_id, values)
            row = queries.schedule(conn, schedule_id)
        assert row is not None  # written in this transaction
        return row

    def listing(self) -> list[ScheduleRow]:
        with self.db.read() as conn:
            return queries.schedules_all(conn)

    def get(self, schedule_id: int) -> ScheduleRow | None:
        with self.db.read() as conn:
            return queries.schedule(conn, schedule_id)

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
            changed = queries.switch_schedule(conn, schedule_id, enabled, values)
            row = queries.schedule(conn, schedule_id)
        return None if row is None else (row, changed)

    def remove(self, schedule_id: int) -> bool:
        with self.db.write() as conn:
            return queries.delete_schedule(conn, schedule_id)

    def due(self, now: dt.datetime, limit: int = 100) -> list[ScheduleRow]:
        with self.db.read() as conn:
            return queries.due_schedules(conn, now, limit)

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
            if not queries.lock_schedule_enabled(conn, schedule.schedule_id):
                return False
            won = queries.insert_firing(
                conn, schedule.schedule_id, fire_time, execution_id, utcnow()
            )
            if won:
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
            queries.move_schedule_on(conn, schedule.schedule_id, fire_time, next_fire_at)
        return won

    def advance(
        self, schedule: ScheduleRow, fire_time: dt.datetime, next_fire_at: dt.datetime
    ) -> None:
        """Move the schedule on without a run (its playbook is no longer in the catalog)."""
        with self.db.write() as conn:
            queries.move_schedule_on(conn, schedule.schedule_id, fire_time, next_fire_at)

    def firings(self, schedule_id: int) -> list[tuple[dt.datetime, str | None]]:
        with self.db.read() as conn:
            return queries.schedule_firings_of(conn, schedule_id)
