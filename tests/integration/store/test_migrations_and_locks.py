"""The alembic migrations create exactly `store.schema`, and the orchestration lock is a
database lock (a second pass finds it taken)."""

from __future__ import annotations

import threading

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

from noetl_celery.store.database import Database, SchemaMode
from noetl_celery.store.repository import Store
from noetl_celery.store.schema import SCHEMA_REVISION, metadata


def test_migrations_match_the_schema(store_url: str) -> None:
    database = Database(store_url)
    database.prepare(SchemaMode.MIGRATE)
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
