"""Cron arithmetic of schedules (pure), by tables of cases."""

from __future__ import annotations

import datetime as dt

import pytest

from noetl_celery.errors import ConfigurationError
from noetl_celery.models.schedule import (
    check_cron,
    due_firing,
    latest_at_or_before,
    next_after,
    parse_declared,
)


def t(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text)


@pytest.mark.parametrize(
    ("cron", "tz", "after", "expected"),
    [
        ("*/5 * * * *", "UTC", "2026-11-23 10:02:00", "2026-11-23 10:05:00"),
        ("*/5 * * * *", "UTC", "2026-11-23 10:05:00", "2026-11-23 10:10:00"),  # strictly after
        ("0 9 * * *", "Europe/Berlin", "2026-11-23 07:00:00", "2026-11-23 08:00:00"),  # CET
        ("0 9 * * *", "Europe/Berlin", "2026-07-01 06:00:00", "2026-07-01 07:00:00"),  # CEST
        ("* * * * * */10", "UTC", "2026-11-23 10:00:01", "2026-11-23 10:00:10"),  # seconds
        ("0 0 1 * *", "UTC", "2026-11-23 00:00:00", "2026-12-01 00:00:00"),
    ],
)
def test_next_after(cron: str, tz: str, after: str, expected: str) -> None:
    assert next_after(cron, tz, t(after)) == t(expected)


@pytest.mark.parametrize(
    ("now", "expected"),
    [
        ("2026-11-23 10:05:00", "2026-11-23 10:05:00"),  # at a firing time: that one
        ("2026-11-23 10:07:30", "2026-11-23 10:05:00"),
    ],
)
def test_latest_at_or_before(now: str, expected: str) -> None:
    assert latest_at_or_before("*/5 * * * *", "UTC", t(now)) == t(expected)


@pytest.mark.parametrize(
    ("next_fire_at", "now", "fire_time", "next_at", "missed"),
    [
        # not due yet
        ("2026-11-23 10:05:00", "2026-11-23 10:04:59", None, None, None),
        # on time (beat ticks a little late)
        (
            "2026-11-23 10:05:00",
            "2026-11-23 10:05:00.4",
            "2026-11-23 10:05:00",
            "2026-11-23 10:10:00",
            0,
        ),
        # beat was down for ~1 hour: one run, for the latest missed time
        (
            "2026-11-23 10:05:00",
            "2026-11-23 11:07:00",
            "2026-11-23 11:05:00",
            "2026-11-23 11:10:00",
            12,
        ),
    ],
)
def test_due_firing_coalesces_missed_firings(
    next_fire_at: str, now: str, fire_time: str | None, next_at: str | None, missed: int | None
) -> None:
    firing = due_firing("*/5 * * * *", "UTC", t(next_fire_at), t(now))
    if fire_time is None:
        assert firing is None
        return
    assert firing is not None
    assert (firing.fire_time, firing.next_fire_at, firing.missed) == (
        t(fire_time),
        t(next_at or ""),
        missed,
    )


@pytest.mark.parametrize(
    ("cron", "tz", "fragment"),
    [
        ("* * *", "UTC", "needs 5 fields"),
        ("61 * * * *", "UTC", "is not valid"),
        ("*/5 * * * *", "Mars/Olympus", "unknown timezone"),
        # valid fields naming no date: croniter raised when asked for the next time
        ("0 0 31 2 *", "UTC", "never fires: no date matches"),
        ("0 0 30 2 *", "Europe/Berlin", "never fires"),
        ("0 0 31 4,6,9,11 *", "UTC", "never fires"),
    ],
)
def test_bad_cron_or_timezone(cron: str, tz: str, fragment: str) -> None:
    with pytest.raises(ConfigurationError, match=fragment):
        check_cron(cron, tz)


@pytest.mark.parametrize(
    ("declared", "expected"),
    [
        (None, None),
        (
            "*/5 * * * *",
            {
                "cron": "*/5 * * * *",
                "timezone": "UTC",
                "payload": {},
                "enabled": True,
                "deadline": None,
            },
        ),
        (
            {
                "cron": "0 9 * * 1",
                "timezone": "Europe/Berlin",
                "payload": {"day": "x"},
                "enabled": False,
            },
            {
                "cron": "0 9 * * 1",
                "timezone": "Europe/Berlin",
                "payload": {"day": "x"},
                "enabled": False,
                "deadline": None,
            },
        ),
        (
            {"cron": "0 3 * * *", "timezone": "Europe/Paris", "deadline": "06:00"},
            {
                "cron": "0 3 * * *",
                "timezone": "Europe/Paris",
                "payload": {},
                "enabled": True,
                "deadline": "06:00",
            },
        ),
    ],
)
def test_declared_schedules(declared: object, expected: object) -> None:
    assert parse_declared(declared) == expected


@pytest.mark.parametrize(
    ("declared", "fragment"),
    [
        ({"timezone": "UTC"}, "needs `cron`"),
        ({"cron": "* * * * *", "every": 5}, "unknown keys"),
        ({"cron": "* * * * *", "payload": [1]}, "payload must be a mapping"),
        ("nope", "needs 5 fields"),
        ("0 0 31 2 *", "never fires"),
        ({"cron": "0 3 * * *", "deadline": 1110}, "metadata.schedule.deadline: write a duration"),
        ({"cron": "0 3 * * *", "deadline": "later"}, "metadata.schedule.deadline: 'later'"),
    ],
)
def test_bad_declared_schedules(declared: object, fragment: str) -> None:
    with pytest.raises(ConfigurationError, match=fragment):
        parse_declared(declared)


@pytest.mark.parametrize("cron", ["0 0 29 2 *", "0 0 29 2 1", "0 0 31 * *", "0 0 * * * 30"])
def test_rare_crons_that_do_fire_are_valid(cron: str) -> None:
    check_cron(cron)  # February 29th (leap years), day OR weekday, months with a 31st
