"""models.deadlines: parsing `metadata.deadline` and the at-risk/missed decision."""

from __future__ import annotations

import datetime as dt

import pytest

from noetl_celery.errors import ConfigurationError
from noetl_celery.models.deadlines import (
    Deadline,
    deadline_state,
    declared_deadline,
    parse_deadline,
)

T0 = dt.datetime(2026, 11, 29, 3, 0, 0)  # naive UTC, like the store's
H = dt.timedelta(hours=1)


@pytest.mark.parametrize(
    ("now", "eta", "state"),
    [
        (T0, None, None),  # fine, no loop running
        (T0, T0 + H, None),  # ETA before the deadline
        (T0, T0 + 2 * H, None),  # ETA exactly at the deadline: not at risk
        (T0, T0 + 3 * H, "deadline.at_risk"),  # ETA after it
        (T0 + 2 * H, None, "deadline.missed"),  # the deadline is now
        (T0 + 3 * H, T0 + H, "deadline.missed"),  # past it: missed whatever the ETA
        (T0 + 3 * H, T0 + 5 * H, "deadline.missed"),
    ],
)
def test_deadline_state(now: dt.datetime, eta: dt.datetime | None, state: str | None) -> None:
    assert deadline_state(now, T0 + 2 * H, eta) == state


def test_a_duration_counts_from_the_start() -> None:
    assert parse_deadline("2h").at(T0) == T0 + 2 * H
    assert parse_deadline("90m").at(T0) == T0 + dt.timedelta(minutes=90)


def test_a_time_of_day_is_the_next_one_in_its_time_zone() -> None:
    # started 03:00 UTC = 04:00 in Paris (winter): 06:00 Paris is 05:00 UTC, same day
    assert parse_deadline("06:00", "Europe/Paris").at(T0) == dt.datetime(2026, 11, 29, 5, 0)
    # started after 06:00 UTC: the next day's 06:00
    late = dt.datetime(2026, 11, 29, 7, 0)
    assert parse_deadline("06:00").at(late) == dt.datetime(2026, 11, 30, 6, 0)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (1110, "quoted time of day"),  # YAML's reading of an unquoted 18:30
        ("25:00", "neither a duration"),
        ("soon", "neither a duration"),
        ("0s", "neither a duration"),
    ],
)
def test_bad_deadlines_are_refused(value: object, message: str) -> None:
    with pytest.raises(ConfigurationError) as err:
        parse_deadline(value)
    assert message in str(err.value) and str(err.value).startswith("metadata.deadline: ")


def test_an_unknown_time_zone_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="unknown time zone 'Mars/Base'"):
        parse_deadline("06:00", "Mars/Base")


def test_declared_reads_the_schedule_time_zone() -> None:
    got = declared_deadline(
        {"deadline": "06:00", "schedule": {"cron": "0 3 * * *", "timezone": "Asia/Tokyo"}}
    )
    assert got == Deadline(time_of_day=dt.time(6, 0), timezone="Asia/Tokyo")
    assert declared_deadline({}) is None
