"""URL masking (the one function every message that names a database or broker uses)
and the rule that a broker needs a shared Postgres database."""

from __future__ import annotations

from pathlib import Path

import pytest

from noetl_celery.errors import ConfigurationError
from noetl_celery.settings import Settings, mask_url

BROKER_SQLITE = (
    "NOETL_BROKER_URL is set but NOETL_DATABASE_URL is not: workers cannot share the "
    "embedded SQLite file; set NOETL_DATABASE_URL=postgresql://..."
)


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        (
            "postgresql://postgres:s3cret@127.0.0.1:5432/x",
            "postgresql://postgres:***@127.0.0.1:5432/x",
        ),
        ("postgresql+psycopg://u:p@h/x", "postgresql+psycopg://u:***@h/x"),
        ("postgresql://postgres@127.0.0.1:5432/x", "postgresql://postgres@127.0.0.1:5432/x"),
        ("redis://:s3cret@redis:6379/0", "redis://:***@redis:6379/0"),
        ("redis://127.0.0.1:6379/1", "redis://127.0.0.1:6379/1"),
        # an unencoded @ in the password: everything up to the last @ is hidden
        ("postgresql://u:p@ss@h/x", "postgresql://u:***@h/x"),
        (
            "postgresql://u@h/x?password=s3cret&sslmode=require",
            "postgresql://u@h/x?password=***&sslmode=require",
        ),
        ("sqlite:////tmp/noetl.sqlite3", "sqlite:////tmp/noetl.sqlite3"),
        ("not a url", "not a url"),
        ("", ""),
    ],
)
def test_mask_url(url: str, shown: str) -> None:
    assert mask_url(url) == shown
    assert "s3cret" not in mask_url(url)


def test_settings_show_their_urls_masked(tmp_path: Path) -> None:
    settings = Settings(
        home=tmp_path, database_url="postgresql://u:pw1@h/x", broker_url="redis://:pw2@r:6379/0"
    )
    assert settings.shown_database_url == "postgresql://u:***@h/x"
    assert settings.shown_broker_url == "redis://:***@r:6379/0"
    embedded = Settings(home=tmp_path)
    assert embedded.shown_database_url == f"sqlite:///{tmp_path / 'noetl.sqlite3'}"
    assert embedded.shown_broker_url.startswith("none")


def test_a_broker_with_the_embedded_database_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError) as info:
        Settings(home=tmp_path, broker_url="redis://r:6379/0").require_shared_database()
    assert str(info.value) == BROKER_SQLITE
    with pytest.raises(ConfigurationError, match="NOETL_DATABASE_URL is a SQLite URL"):
        Settings(
            home=tmp_path, broker_url="redis://r:6379/0", database_url="sqlite:////tmp/x.db"
        ).require_shared_database()


@pytest.mark.parametrize(
    ("broker", "database"),
    [("", ""), ("", "sqlite:////tmp/x.db"), ("redis://r:6379/0", "postgresql://u@h/x")],
)
def test_configurations_that_can_work_pass(tmp_path: Path, broker: str, database: str) -> None:
    Settings(home=tmp_path, broker_url=broker, database_url=database).require_shared_database()


def test_batch_settings_are_read_and_checked() -> None:
    settings = Settings.from_env({"NOETL_BATCH_SIZE": "20", "NOETL_BATCH_BUDGET_SECONDS": "1.5"})
    assert (settings.batch_size, settings.batch_budget_seconds) == (20, 1.5)
    assert Settings.from_env({}).batch_size == 50
    with pytest.raises(ConfigurationError, match=r"NOETL_BATCH_SIZE must be >= 1, got 0"):
        Settings.from_env({"NOETL_BATCH_SIZE": "0"})
    with pytest.raises(ConfigurationError, match=r"NOETL_BATCH_SIZE must be <= 1000 .*got 5000"):
        Settings.from_env({"NOETL_BATCH_SIZE": "5000"})
    with pytest.raises(ConfigurationError, match="NOETL_BATCH_BUDGET_SECONDS must be a number"):
        Settings.from_env({"NOETL_BATCH_BUDGET_SECONDS": "soon"})
