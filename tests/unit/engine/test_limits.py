"""The orchestrator's limits as the settings (and their environment) give them."""

from __future__ import annotations

import pytest

from noetl_celery.engine.limits import limits_of
from noetl_celery.errors import ConfigurationError
from noetl_celery.settings import Settings


def test_cursor_chains_default_to_eight_frames_and_zero_turns_them_off() -> None:
    assert limits_of(Settings.from_env({})).cursor_chain == 8
    assert limits_of(Settings.from_env({"NOETL_CURSOR_CHAIN": "0"})).cursor_chain == 0
    assert limits_of(Settings.from_env({"NOETL_CURSOR_CHAIN": "3"})).cursor_chain == 3


@pytest.mark.parametrize("raw", ["-1", "many"])
def test_a_cursor_chain_that_is_not_a_count_is_refused_by_name(raw: str) -> None:
    with pytest.raises(ConfigurationError, match="NOETL_CURSOR_CHAIN"):
        Settings.from_env({"NOETL_CURSOR_CHAIN": raw})


def test_every_limit_the_settings_carry_reaches_the_orchestrator() -> None:
    settings = Settings.from_env(
        {
            "NOETL_CLAIM_MAX_ATTEMPTS": "7",
            "NOETL_CLAIM_RETRY_DELAY_SECONDS": "2.5",
            "NOETL_CURSOR_CHAIN": "4",
        }
    )
    limits = limits_of(settings)
    assert (limits.claim_attempts, limits.claim_retry_delay_seconds) == (7, 2.5)
    assert limits.cursor_chain == 4
