"""Cron schedules: when a schedule fires (pure; times are naive UTC like the store's).

A schedule is a cron expression (5 fields, or 6 with seconds last, as croniter reads
them) in a timezone. Firing times are computed in that timezone, so `0 9 * * *` in
`Europe/Berlin` fires at 09:00 Berlin time across daylight-saving changes.

Missed firings (beat was down) are coalesced: a schedule whose next firing lies in the
past fires once, for the latest cron time that has passed, then resumes its cadence.
Starting a backlog of identical runs after an outage is rarely what a data pipeline
wants (the firing records which cron time the run stands for).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from noetl_celery.errors import ConfigurationError
from noetl_celery.models.deadlines import parse_deadline

UTC = dt.UTC
# a cron expression that matches no date in this many years never fires (`0 0 29 2 1`
# fires: croniter takes day OR weekday, as cron does)
MAX_YEARS_BETWEEN_FIRINGS = 50


def zone(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ConfigurationError(f"unknown timezone {name!r} (use an IANA name like UTC)") from None


def check_cron(expression: str, timezone: str = "UTC") -> None:
    """Raise ConfigurationError naming what is wrong with the expression or timezone."""
    zone(timezone)
    fields = expression.split()
    if len(fields) not in (5, 6):
        raise ConfigurationError(
            f"cron {expression!r} needs 5 fields (minute hour day month weekday) "
            "or 6 (plus seconds last)"
        )
    # croniter is imported when a cron expression is read: a playbook without a
    # schedule (every embedded `run` of one) starts without it
    from croniter import CroniterBadCronError, croniter

    try:
        croniter(expression)
    except (CroniterBadCronError, ValueError, KeyError) as exc:
        raise ConfigurationError(f"cron {expression!r} is not valid: {exc}") from None
    # valid fields can still name no date at all (`0 0 31 2 *`: February 31st)
    next_after(expression, timezone, dt.datetime.now(UTC).replace(tzinfo=None))


def _never(expression: str) -> ConfigurationError:
    return ConfigurationError(
        f"cron {expression!r} never fires: no date matches its day and month fields "
        f"within {MAX_YEARS_BETWEEN_FIRINGS} years"
    )


def _step(expression: str, start: dt.datetime, forward: bool) -> dt.datetime:
    """The cron time after (or before) `start`, or ConfigurationError when there is none
    (croniter gives up after searching `MAX_YEARS_BETWEEN_FIRINGS` years)."""
    from croniter import CroniterBadDateError, croniter

    try:
        it = croniter(expression, start, max_years_between_matches=MAX_YEARS_BETWEEN_FIRINGS)
        value = it.get_next(dt.datetime) if forward else it.get_prev(dt.datetime)
    except CroniterBadDateError:
        raise _never(expression) from None
    assert isinstance(value, dt.datetime)
    return value


def _aware(utc_naive: dt.datetime, tz: ZoneInfo) -> dt.datetime:
    return utc_naive.replace(tzinfo=UTC).astimezone(tz)


def _naive(aware: dt.datetime) -> dt.datetime:
    return aware.astimezone(UTC).replace(tzinfo=None)


def next_after(expression: str, timezone: str, after: dt.datetime) -> dt.datetime:
    """The first firing strictly after `after` (naive UTC in and out)."""
    tz = zone(timezone)
    return _naive(_step(expression, _aware(after, tz), forward=True))


def latest_at_or_before(expression: str, timezone: str, now: dt.datetime) -> dt.datetime:
    """The last firing time at or before `now` (naive UTC)."""
    tz = zone(timezone)
    probe = _aware(now, tz) + dt.timedelta(microseconds=1)
    return _naive(_step(expression, probe, forward=False))


@dataclass(frozen=True)
class Firing:
    fire_time: dt.datetime  # the cron time this run is for
    next_fire_at: dt.datetime  # when the schedule is due again
    missed: int  # cron times skipped by coalescing (0 when on time)


def due_firing(
    expression: str, timezone: str, next_fire_at: dt.datetime, now: dt.datetime
) -> Firing | None:
    """What to start now for a schedule due at `next_fire_at`, or None if not yet due."""
    if next_fire_at > now:
        return None
    fire_time = latest_at_or_before(expression, timezone, now)
    if fire_time < next_fire_at:  # cannot happen unless the cron changed: fire as planned
        fire_time = next_fire_at
    missed = 0
    probe = next_fire_at
    while probe < fire_time and missed < 1000:  # counted for the log line only
        missed += 1
        probe = next_after(expression, timezone, probe)
    return Firing(fire_time, next_after(expression, timezone, fire_time), missed)


def parse_declared(value: Any) -> dict[str, Any] | None:
    """`metadata.schedule` of a playbook: a cron string, or {cron, timezone, payload,
    enabled}. None when absent; ConfigurationError when malformed."""
    if value is None:
        return None
    if isinstance(value, str):
        value = {"cron": value}
    if not isinstance(value, dict) or not isinstance(value.get("cron"), str):
        raise ConfigurationError("metadata.schedule needs `cron` (a cron expression)")
    unknown = set(value) - {"cron", "timezone", "payload", "enabled", "deadline"}
    if unknown:
        raise ConfigurationError(f"metadata.schedule: unknown keys {sorted(unknown)}")
    timezone = value.get("timezone") or "UTC"
    check_cron(value["cron"], str(timezone))
    payload = value.get("payload") or {}
    if not isinstance(payload, dict):
        raise ConfigurationError("metadata.schedule.payload must be a mapping")
    deadline = value.get("deadline")
    if deadline is not None:
        parse_deadline(deadline, str(timezone), "metadata.schedule.deadline")
    return {
        "cron": value["cron"],
        "timezone": str(timezone),
        "payload": payload,
        "enabled": bool(value.get("enabled", True)),
        "deadline": deadline,
    }
