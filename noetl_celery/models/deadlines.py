"""Deadlines (issue 32): `metadata.deadline` of a playbook, a duration from the start
(`"2h"`, `"90m"`, models.durations) or a time of day (`"06:00"`) in the time zone of
the playbook's `metadata.schedule` (UTC without one).

`deadline_state` is the whole decision: given now, the deadline and the running loops'
ETA, is the run at risk, past its deadline, or fine. The reaper's sweep asks it about
every running execution that has a deadline (engine.deadlines).
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from noetl_celery.errors import ConfigurationError
from noetl_celery.models.durations import DURATION_HINT, to_seconds
from noetl_celery.models.notify import EVENT_AT_RISK, EVENT_MISSED

_TIME_OF_DAY = re.compile(r"([01]?\d|2[0-3]):([0-5]\d)")


@dataclass(frozen=True)
class Deadline:
    seconds: float | None = None  # from the start
    time_of_day: dt.time | None = None  # the first such time at or after the start
    timezone: str = "UTC"

    def at(self, started_at: dt.datetime) -> dt.datetime:
        """The deadline of a run started at `started_at` (naive UTC), naive UTC."""
        if self.seconds is not None:
            return started_at + dt.timedelta(seconds=self.seconds)
        assert self.time_of_day is not None
        tz = ZoneInfo(self.timezone)
        local = started_at.replace(tzinfo=dt.UTC).astimezone(tz)
        due = dt.datetime.combine(local.date(), self.time_of_day, tzinfo=tz)
        if due <= local:
            due = dt.datetime.combine(local.date() + dt.timedelta(days=1), self.time_of_day, tz)
        return due.astimezone(dt.UTC).replace(tzinfo=None)


def parse_deadline(value: Any, timezone: str = "UTC", where: str = "metadata.deadline") -> Deadline:
    """A duration (`2h`) or a time of day (`06:00`); ConfigurationError naming `where`.
    A bare number is refused: YAML reads an unquoted `18:30` as the number 1110."""
    if not isinstance(value, str):
        raise ConfigurationError(
            f'{where}: write a duration with its unit ("2h", "90m") or a quoted time of '
            f'day ("06:00"), got {value!r} (YAML reads an unquoted 18:30 as the number 1110)'
        )
    match = _TIME_OF_DAY.fullmatch(value.strip())
    if match is not None:
        try:
            ZoneInfo(timezone)
        except (ZoneInfoNotFoundError, ValueError):
            raise ConfigurationError(f"{where}: unknown time zone {timezone!r}") from None
        return Deadline(time_of_day=dt.time(int(match[1]), int(match[2])), timezone=timezone)
    seconds = to_seconds(value)
    if seconds is None or seconds <= 0:
        raise ConfigurationError(
            f"{where}: {value!r} is neither a duration ({DURATION_HINT}) nor a time of day "
            "(HH:MM, e.g. 06:00)"
        )
    return Deadline(seconds=seconds)


def declared_deadline(metadata: dict[str, Any]) -> Deadline | None:
    """`metadata.deadline`, its time of day read in `metadata.schedule.timezone`; None
    when absent or malformed (validation refuses the malformed ones)."""
    value = metadata.get("deadline")
    if value is None:
        return None
    schedule = metadata.get("schedule")
    timezone = "UTC"
    if isinstance(schedule, dict) and isinstance(schedule.get("timezone"), str):
        timezone = schedule["timezone"]
    try:
        return parse_deadline(value, timezone)
    except ConfigurationError:
        return None


def deadline_state(
    now: dt.datetime, deadline_at: dt.datetime, eta_at: dt.datetime | None
) -> str | None:
    """`deadline.missed` once `now` reached the deadline; `deadline.at_risk` when the
    running loops are expected to finish (`eta_at`) after it; else None."""
    if now >= deadline_at:
        return EVENT_MISSED
    if eta_at is not None and eta_at > deadline_at:
        return EVENT_AT_RISK
    return None
