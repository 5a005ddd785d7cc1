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

UTC = dt.UTC


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


def _aware(utc_naive: dt.datetime, tz: ZoneInfo) -> dt.datetime:
    return utc_naive.replace(tzinfo=UTC).astimezone(tz)


def _naive(aware: dt.datetime) -> dt.datetime:
    return aware.astimezone(UTC).replace(tzinfo=None)


def next_after(expression: str, timezone: str, after: dt.datetime) -> dt.datetime:
    """The first firing strictly after `after` (naive UTC in and out)."""
    from croniter import croniter

    tz = zone(timezone)
    value = croniter(expression, _aware(after, tz)).get_next(dt.datetime)
    assert isinstance(value, dt.datetime)
    return _naive(value)


def latest_at_or_before(expression: str, timezone: str, now: dt.datetime) -> dt.datetime:
    """The last firing time at or before `now` (naive UTC)."""
    from croniter import croniter

    tz = zone(timezone)
    probe = _aware(now, tz) + dt.timedelta(microseconds=1)
    value = croniter(expression, probe).get_prev(dt.datetime)
    assert isinstance(value, dt.datetime)
    return _naive(value)


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
    unknown = set(value) - {"cron", "timezone", "payload", "enabled"}
    if unknown:
        raise ConfigurationError(f"metadata.schedule: unknown keys {sorted(unknown)}")
    timezone = value.get("timezone") or "UTC"
    check_cron(value["cron"], str(timezone))
    payload = value.get("payload") or {}
    if not isinstance(payload, dict):
        raise ConfigurationError("metadata.schedule.payload must be a mapping")
    return {
        "cron": value["cron"],
        "timezone": str(timezone),
        "payload": payload,
        "enabled": bool(value.get("enabled", True)),
    }
