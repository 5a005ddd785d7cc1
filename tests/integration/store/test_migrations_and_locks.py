"""The alembic migrations create exactly `store.schema`, and the orchestration lock is a
database lock (a second pass finds it taken)."""

from __future__ import annotations

import datetime as dt
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.migration import MigrationContext
from sqlalchemy import insert, select

from noetl_celery.store import queries
from noetl_celery.store.database import Database, SchemaMode
from noetl_celery.store.migrate import script_location
from noetl_celery.store.repository import Store
from noetl_celery.store.rows import LoopCounters
from noetl_celery.store.schema import SCHEMA_REVISION, loops, metadata
from tests.support import services


def test_migrations_match_the_schema(store_url: str) -> None:
    database = Database(store_url)
    # upgrade(), not prepare(): a new SQLite file would be created from the schema
    # itself (store.migrate.create_at_head), and this compares the migrations
    database.upgrade()
    assert database.current_revision() == SCHEMA_REVISION
    with database.engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), metadata)
    database.dispose()
    assert diff == []


def test_second_pass_does_not_get_the_lock_while_one_holds_it(pg_url: str) -> None:
    database = Database(pg_url)
    store = Store(database)
    entry = store.register("p", "p", "x")
    store.create_execution("1", entry, {})
    holding, release = threading.Event(), threading.Event()
    seen: list[object] = []

    def holder() -> None:
        with store.orchestration("1", wait=True) as tx:
            assert tx is not None
            holding.set()
            release.wait(10)

    thread = threading.Thread(target=holder)
    thread.start()
    assert holding.wait(10)
    with store.orchestration("1", wait=False) as tx:
        seen.append(tx)
    release.set()
    thread.join()
    with store.orchestration("1", wait=False) as tx:
        seen.append(tx is not None)
    database.dispose()
    assert seen == [None, True]


@pytest.fixture(params=["sqlite", "postgresql"])
def empty_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A database without any table, on either backend."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'empty.sqlite3'}"
        return
    name = f"noetl_t_{uuid.uuid4().hex[:12]}"
    services.create_database(name)
    try:
        yield services.sqlalchemy_url(name)
    finally:
        services.drop_database(name)


def migrate_to(database: Database, revision: str) -> None:
    config = Config()
    config.set_main_option("script_location", str(script_location()))
    with database.engine.connect() as conn:
        config.attributes["connection"] = conn
        command.upgrade(config, revision)
        conn.commit()


def test_loops_rows_written_before_0011_read_as_never_deferred(empty_url: str) -> None:
    """0011 adds the counters a worker's close reads (window, in flight) to `loops`: a row
    an older engine wrote keeps its counts and reads 0 for both, which never defers."""
    database = Database(empty_url)
    migrate_to(database, "0010")
    now = dt.datetime(2026, 11, 27, 4, 0)
    row = {
        "execution_id": "1",
        "step": "each",
        "epoch": 2,
        "mode": "parallel",
        "total": 100,
        "issued": 40,
        "succeeded": 10,
        "failed": 1,
        "done": False,
        "updated_at": now,
        "started_at": now,
    }
    with database.engine.begin() as conn:
        conn.execute(insert(loops).values(**row))  # the columns 0010 has
    database.prepare(SchemaMode.MIGRATE)
    assert database.current_revision() == SCHEMA_REVISION >= "0011"
    with database.engine.connect() as conn:
        kept = conn.execute(select(loops)).one()._asdict()
        counters = queries.loop_counters(conn, "1", "each", 2)
        other_epoch = queries.loop_counters(conn, "1", "each", 1)
    database.dispose()
    # later revisions add their own columns with their defaults (0015: quarantined)
    assert kept == {**row, "window_size": 0, "in_flight": 0, "quarantined": 0}
    assert counters == LoopCounters(done=False, window=0, in_flight=0)
    assert other_epoch is None
