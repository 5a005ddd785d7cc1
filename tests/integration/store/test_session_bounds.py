"""The engine's Postgres sessions are bounded by time: a transaction left idle (its
process frozen while it holds an execution's lock) is ended by the server and rolled
back whole, a statement running too long is cancelled, and both reach the engine as
StoreInterrupted (safe to do again). Migrations run without the bounds."""

from __future__ import annotations

import threading
import time
import uuid

import psycopg
import pytest
from sqlalchemy import select, text

from noetl_celery.errors import StoreInterrupted
from noetl_celery.settings import Settings
from noetl_celery.store.database import Database
from noetl_celery.store.repository import Store
from noetl_celery.store.schema import SCHEMA_REVISION, events, utcnow
from tests.support import services

pytestmark = pytest.mark.integration


def shown(database: Database, name: str) -> str:
    with database.read_engine.connect() as conn:
        return str(conn.execute(text(f"SHOW {name}")).scalar())


def test_engine_sessions_are_bounded_by_default_and_as_configured(pg_url: str) -> None:
    defaults = Settings()
    assert (defaults.db_idle_in_transaction_seconds, defaults.db_statement_timeout_seconds) == (
        10.0,
        60.0,
    )
    database = Database(pg_url)
    assert shown(database, "idle_in_transaction_session_timeout") == "10s"
    assert shown(database, "statement_timeout") == "1min"
    database.dispose()
    database = Database(pg_url, idle_in_transaction_seconds=2.5, statement_timeout_seconds=0)
    assert shown(database, "idle_in_transaction_session_timeout") == "2500ms"
    assert shown(database, "statement_timeout") == "0"  # 0: no limit
    database.dispose()


def test_settings_read_the_bounds_from_the_environment() -> None:
    settings = Settings.from_env(
        {"NOETL_DB_IDLE_IN_TRANSACTION_SECONDS": "4", "NOETL_DB_STATEMENT_TIMEOUT_SECONDS": "0"}
    )
    assert settings.db_idle_in_transaction_seconds == 4.0
    assert settings.db_statement_timeout_seconds == 0.0


def test_a_frozen_lock_holder_loses_its_transaction_and_nothing_it_wrote(pg_url: str) -> None:
    database = Database(pg_url, idle_in_transaction_seconds=1)
    store = Store(database)
    store.create_execution("1", store.register("p", "p", "x"), {})
    holding = threading.Event()
    raised: list[BaseException] = []

    def frozen_holder() -> None:
        try:
            with store.orchestration("1", wait=True) as tx:
                assert tx is not None
                # written in the pass's transaction: gone if the server ends it
                tx.conn.execute(
                    events.insert().values(
                        execution_id="1", type="test.frozen_marker", created_at=utcnow()
                    )
                )
                holding.set()
                time.sleep(2.5)  # frozen: a GC pause, SIGSTOP, a debugger
                tx.conn.execute(text("SELECT 1"))  # what it does when it resumes
        except BaseException as exc:
            raised.append(exc)

    thread = threading.Thread(target=frozen_holder)
    thread.start()
    assert holding.wait(10)
    started = time.monotonic()
    with store.orchestration("1", wait=True) as tx:  # waits for the lock...
        waited = time.monotonic() - started
        assert tx is not None
    thread.join(10)
    # ...about the idle bound, not as long as the holder stays frozen
    assert waited < 2.0
    assert len(raised) == 1 and isinstance(raised[0], StoreInterrupted), raised
    assert "idle-in-transaction timeout" in str(raised[0])
    with database.read_engine.connect() as conn:
        marker = conn.execute(select(events).where(events.c.type == "test.frozen_marker")).all()
    assert marker == []  # rolled back whole
    assert store.has_unhandled("1") is False  # the pool still works after the lost session
    database.dispose()


def test_a_statement_past_its_timeout_is_interrupted(pg_url: str) -> None:
    database = Database(pg_url, statement_timeout_seconds=0.3)
    cancelled = "cancelled: canceling statement due to statement timeout"
    with pytest.raises(StoreInterrupted, match=cancelled), database.engine.begin() as conn:
        conn.execute(text("SELECT pg_sleep(2)"))
    with database.engine.begin() as conn:
        assert conn.execute(text("SELECT 1")).scalar() == 1
    database.dispose()


def test_migrations_run_without_the_bounds_then_restore_them() -> None:
    """A `db upgrade` waits for another process's migration (an advisory lock) as long
    as that one takes: longer than the statement bound here."""
    from noetl_celery.store.migrate import _MIGRATION_LOCK

    name = f"noetl_bounds_{uuid.uuid4().hex[:8]}"
    services.create_database(name)
    try:
        database = Database(
            services.sqlalchemy_url(name),
            idle_in_transaction_seconds=0.3,
            statement_timeout_seconds=0.3,
        )
        with psycopg.connect(services.dsn_for(name), autocommit=True) as other:
            other.execute("SELECT pg_advisory_lock(%s)", (_MIGRATION_LOCK,))
            upgrade = threading.Thread(target=database.upgrade)
            upgrade.start()
            time.sleep(1.0)  # another migration runs this long
            other.execute("SELECT pg_advisory_unlock(%s)", (_MIGRATION_LOCK,))
        upgrade.join(30)
        assert database.current_revision() == SCHEMA_REVISION
        assert shown(database, "statement_timeout") == "300ms"  # the pool's sessions again
        assert shown(database, "idle_in_transaction_session_timeout") == "300ms"
        database.dispose()
    finally:
        services.drop_database(name)
