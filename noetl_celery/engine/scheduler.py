"""Cron schedules: adding them, and firing the due ones (beat sends `fire_due` every
`NOETL_SCHEDULE_TICK_SECONDS`; any number of beats and workers may call it at once: the
firing row decides, see store.schedules)."""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any

from noetl_celery.constants import TRIGGER_SCHEDULE
from noetl_celery.errors import CatalogNotFound, ConfigurationError, ScheduleNotFound
from noetl_celery.models.deadlines import parse_deadline
from noetl_celery.models.inputs import PayloadLimits, check_payload
from noetl_celery.models.schedule import check_cron, due_firing, next_after
from noetl_celery.passes.ids import new_execution_id
from noetl_celery.passes.orchestrate import PassDriver
from noetl_celery.store.repository import Store
from noetl_celery.store.schedules import ScheduleRow
from noetl_celery.store.schema import utcnow

log = logging.getLogger("noetl_celery.schedules")


class Schedules:
    def __init__(
        self, store: Store, orchestrator: PassDriver, limits: PayloadLimits | None = None
    ) -> None:
        self.store = store
        self.orchestrator = orchestrator
        self.limits = limits or PayloadLimits()

    def add(
        self,
        path: str,
        cron: str,
        *,
        timezone: str = "UTC",
        payload: dict[str, Any] | None = None,
        name: str | None = None,
        enabled: bool = True,
        deadline: str | None = None,
    ) -> ScheduleRow:
        check_cron(cron, timezone)
        if deadline is not None:  # ConfigurationError: neither a duration nor HH:MM
            parse_deadline(deadline, timezone, "--deadline")
        check_payload(payload, self.limits)  # every firing stores it: refuse it now
        self.store.resolve_catalog(path)  # raises CatalogNotFound: register it first
        first = next_after(cron, timezone, utcnow())
        return self.store.schedules.add(
            path=path,
            cron=cron,
            timezone=timezone,
            payload=payload or {},
            next_fire_at=first,
            name=name,
            enabled=enabled,
            deadline=deadline,
        )

    def all(self) -> list[ScheduleRow]:
        return self.store.schedules.listing()

    def remove(self, schedule_id: int) -> bool:
        return self.store.schedules.remove(schedule_id)

    def get(self, schedule_id: int) -> ScheduleRow:
        row = self.store.schedules.get(schedule_id)
        if row is None:
            raise ScheduleNotFound(f"no schedule {schedule_id} (see `noetl-celery schedule list`)")
        return row

    def pause(self, schedule_id: int) -> tuple[ScheduleRow, bool]:
        """Keep the schedule but stop firing it; (schedule, whether it was running)."""
        return self._set_enabled(schedule_id, False, None)

    def resume(self, schedule_id: int) -> tuple[ScheduleRow, bool]:
        """Fire it again from the next cron time after now: the firings it missed while
        paused are not made up (no backlog); (schedule, whether it was paused)."""
        row = self.get(schedule_id)
        return self._set_enabled(schedule_id, True, next_after(row.cron, row.timezone, utcnow()))

    def _set_enabled(
        self, schedule_id: int, enabled: bool, next_fire_at: dt.datetime | None
    ) -> tuple[ScheduleRow, bool]:
        result = self.store.schedules.set_enabled(schedule_id, enabled, next_fire_at)
        if result is None:
            raise ScheduleNotFound(f"no schedule {schedule_id} (see `noetl-celery schedule list`)")
        log.info(
            "schedule %s %s%s",
            schedule_id,
            "resumed" if enabled else "paused",
            "" if result[1] else " (it already was)",
        )
        return result

    def trigger(self, schedule_id: int) -> str:
        """Start a run of the schedule now (paused or not) with its payload and its
        playbook's latest version, recorded as a schedule run triggered by hand. Its
        cadence is untouched: no firing row, no change to the next or last firing."""
        schedule = self.get(schedule_id)
        entry = self.store.resolve_catalog(schedule.path)
        execution_id = new_execution_id()
        self.store.create_execution(
            execution_id,
            entry,
            dict(schedule.payload or {}),
            trigger=TRIGGER_SCHEDULE,
            trigger_detail={
                "schedule_id": schedule.schedule_id,
                "schedule": schedule.name,
                "fire_time": utcnow().isoformat() + "Z",
                "manual": True,
            },
        )
        log.info(
            "schedule %s triggered by hand: execution %s",
            schedule_id,
            execution_id,
            extra={"execution_id": execution_id},
        )
        self.orchestrator.drive(execution_id, wait=True)
        return execution_id

    def firings(self, schedule_id: int) -> list[tuple[Any, str | None]]:
        return self.store.schedules.firings(schedule_id)

    def fire_due(self) -> list[str]:
        """Start the runs that are due; returns the ids of the executions started here."""
        started: list[str] = []
        now = utcnow()
        for schedule in self.store.schedules.due(now):
            try:
                firing = due_firing(schedule.cron, schedule.timezone, schedule.next_fire_at, now)
            except ConfigurationError as exc:
                # stored before its cron was checked for a date (`0 0 31 2 *`): paused,
                # once, so neither this tick nor the next ones stop at it
                log.error("schedule %s paused: %s", schedule.schedule_id, exc)
                self.store.schedules.set_enabled(schedule.schedule_id, False, None)
                continue
            if firing is None:
                continue
            try:
                entry = self.store.resolve_catalog(schedule.path)
            except CatalogNotFound as exc:
                # the playbook is gone: skip this firing, keep the schedule
                log.error("schedule %s skipped a firing: %s", schedule.schedule_id, exc)
                self.store.schedules.advance(schedule, firing.fire_time, firing.next_fire_at)
                continue
            execution_id = new_execution_id()
            payload = dict(schedule.payload or {})
            if self.store.schedules.fire(
                schedule,
                firing.fire_time,
                firing.next_fire_at,
                entry,
                execution_id,
                payload,
            ):
                if firing.missed:
                    log.warning(
                        "schedule %s missed %d firing(s); ran once for %s",
                        schedule.schedule_id,
                        firing.missed,
                        firing.fire_time,
                    )
                log.info(
                    "schedule %s fired for %s: execution %s",
                    schedule.schedule_id,
                    firing.fire_time,
                    execution_id,
                    extra={"execution_id": execution_id},
                )
                self.orchestrator.drive(execution_id, wait=True)
                started.append(execution_id)
        if not started:  # beat asks every second: say so only when asked for debug
            log.debug("schedules: none started")
        return started
