"""NOETL_RETENTION: an age (30d, 12h, 90m) or unset (never prune); a bad value fails at
start with one line; set, beat sends the prune's check."""

from __future__ import annotations

import pytest

from noetl_celery.constants import RETENTION_CHECK_SECONDS, TASK_PRUNE
from noetl_celery.errors import ConfigurationError
from noetl_celery.settings import Settings, age_seconds


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("30d", 30 * 86400.0),
        ("12h", 43200.0),
        ("90m", 5400.0),
        ("90min", 5400.0),
        ("45s", 45.0),
        (" 1.5d ", 129600.0),
        ("2D", 172800.0),
    ],
)
def test_ages(text: str, seconds: float) -> None:
    assert age_seconds(text) == seconds


@pytest.mark.parametrize("text", ["", "30", "30x", "0d", "-1d", "d", "1w", "inf d", "1e9999d"])
def test_not_ages(text: str) -> None:
    assert age_seconds(text) is None


def test_unset_never_prunes() -> None:
    assert Settings.from_env({}).retention_seconds == 0
    assert Settings.from_env({"NOETL_RETENTION": " "}).retention_seconds == 0
    assert Settings.from_env({"NOETL_RETENTION": "30d"}).retention_seconds == 30 * 86400


def test_a_bad_value_is_one_line() -> None:
    with pytest.raises(ConfigurationError) as caught:
        Settings.from_env({"NOETL_RETENTION": "30"})
    assert str(caught.value) == (
        "NOETL_RETENTION: '30' is not an age: use a number with a unit: 30d, 12h, 90m or 45s "
        "(unset: never prune)"
    )


def test_beat_sends_the_prune_only_with_retention() -> None:
    from noetl_celery.tasks.app import beat_schedule

    assert all(e["task"] != TASK_PRUNE for e in beat_schedule(Settings()).values())
    entry = beat_schedule(Settings(retention_seconds=86400.0))["noetl-retention"]
    assert entry["task"] == TASK_PRUNE
    assert entry["schedule"] == RETENTION_CHECK_SECONDS
