"""The one-line messages about an engine database that cannot be used or is at another
revision (no database needed: the driver's words are given as text)."""

from __future__ import annotations

import pytest

from noetl_celery.errors import ConfigurationError
from noetl_celery.store.database import Database
from noetl_celery.store.database_messages import outdated_message, unusable_message
from noetl_celery.store.migrate import revisions
from noetl_celery.store.schema import SCHEMA_REVISION

URL = "postgresql+psycopg://postgres:s3cret@127.0.0.1:5432/x"
SHOWN = "postgresql://postgres:***@127.0.0.1:5432/x"

DRIVER = {
    "refused": (
        'connection failed: connection to server at "127.0.0.1", port 1 failed: Connection '
        "refused\n\tIs the server running on that host and accepting TCP/IP connections?",
        "Connection refused",
        "check NOETL_DATABASE_URL (host, port, options)",
    ),
    "two addresses": (
        "connection failed: Multiple connection attempts failed. All failures were:\n"
        "- host: 'localhost', port: 1, hostaddr: '::1': connection failed: connection to "
        'server at "::1", port 1 failed: Connection refused\n'
        "- host: 'localhost', port: 1, hostaddr: '127.0.0.1': connection failed: "
        'connection to server at "127.0.0.1", port 1 failed: Connection refused',
        "Connection refused",
        "and that Postgres runs there",
    ),
    "missing database": (
        'connection failed: connection to server at "127.0.0.1", port 5432 failed: FATAL:  '
        'database "x" does not exist',
        'database "x" does not exist',
        "create the database, then run `noetl-celery db upgrade`",
    ),
    "wrong password": (
        'connection failed: connection to server at "127.0.0.1", port 5432 failed: FATAL:  '
        'password authentication failed for user "postgres"',
        'password authentication failed for user "postgres"',
        "check the user and password in NOETL_DATABASE_URL",
    ),
    "timeout": ("connection timeout expired", "connection timeout expired", "host, port"),
}


@pytest.mark.parametrize("case", sorted(DRIVER))
def test_unusable_database_messages_are_one_line(case: str) -> None:
    driver, reason, hint = DRIVER[case]
    message = unusable_message(SHOWN, URL, RuntimeError(driver))
    assert "\n" not in message
    assert message.startswith(f"the engine database {SHOWN} cannot be used: {reason}; ")
    assert hint in message


def test_a_password_the_driver_repeats_is_masked() -> None:
    message = unusable_message(SHOWN, URL, RuntimeError("failed: bad s3cret here"))
    assert "s3cret" not in message and "***" in message


def test_a_password_that_is_also_a_name_does_not_blank_the_name() -> None:
    # compose's database: user, password and database are all "noetl"; the URL shown
    # names the user and the database anyway, the driver's reason must too
    url, shown = "postgresql://noetl:noetl@db:5432/noetl", "postgresql://noetl:***@db:5432/noetl"
    driver = 'connection failed: connection to server at "db", port 5432 failed: FATAL:  '
    missing = unusable_message(shown, url, RuntimeError(driver + 'database "noetl" does not exist'))
    assert 'cannot be used: database "noetl" does not exist; create the database' in missing
    refused = unusable_message(
        shown, url, RuntimeError(driver + 'password authentication failed for user "noetl"')
    )
    assert 'password authentication failed for user "noetl"; check the user' in refused


def test_outdated_messages() -> None:
    assert outdated_message(SHOWN, None) == (
        f"the engine database {SHOWN} has no engine tables, this noetl-celery needs "
        f"{SCHEMA_REVISION}: run `noetl-celery db upgrade`"
    )
    assert outdated_message(SHOWN, "0005") == (
        f"the engine database {SHOWN} is at revision 0005, this noetl-celery needs "
        f"{SCHEMA_REVISION}: run `noetl-celery db upgrade`"
    )
    newer = outdated_message(SHOWN, "9999")
    assert "a newer noetl-celery migrated it; upgrade noetl-celery" in newer


def test_the_package_ships_every_revision_up_to_its_own() -> None:
    assert SCHEMA_REVISION in revisions()
    assert len(revisions()) == int(SCHEMA_REVISION)


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://postgres:s3cret@127.0.0.1:abc/x",
        "postgresql://postgres:s3cret@[::1/x",
        "nonsense",
        "mysql://u:s3cret@h/x",
    ],
)
def test_a_malformed_url_is_a_configuration_error(url: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        Database(url)
    assert "NOETL_DATABASE_URL" in str(info.value) and "s3cret" not in str(info.value)
