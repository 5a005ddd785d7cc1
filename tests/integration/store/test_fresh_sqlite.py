"""A new SQLite engine database (the embedded default's first run) is created from
`store.schema` and stamped at the head revision without alembic (store.migrate
.create_at_head). That is only right while it is the very database the migrations make:
these compare the two, table by table, column by column, index by index."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.pool import QueuePool

from noetl_celery.store.database import Database, SchemaMode, open_database
from noetl_celery.store.migrate import script_location, upgrade_to_head
from noetl_celery.store.schema import SCHEMA_REVISION
from noetl_celery.store.sqlite_wal import use_wal
from tests.support.threads import all_at_once


def _shape(path: Path) -> dict[str, Any]:
    """What SQLite says about every table: columns (type, not null, default, primary
    key), indexes (unique, origin, partial, columns, their SQL) and foreign keys."""
    conn = sqlite3.connect(path)
    try:
        shape: dict[str, Any] = {}
        tables = conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
        for (name,) in tables:
            indexes = conn.execute(f"PRAGMA index_list('{name}')").fetchall()
            shape[name] = {
                "columns": sorted(r[1:] for r in conn.execute(f"PRAGMA table_info('{name}')")),
                "indexes": sorted(
                    (
                        r[1],
                        r[2],
                        r[3],
                        r[4],
                        [c[2] for c in conn.execute(f"PRAGMA index_info('{r[1]}')")],
                    )
                    for r in indexes
                ),
                "foreign_keys": sorted(
                    r[2:] for r in conn.execute(f"PRAGMA foreign_key_list('{name}')")
                ),
            }
        sql = conn.execute(
            "SELECT name, sql FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL"
        ).fetchall()
        shape["index sql"] = sorted((n, " ".join(s.split())) for n, s in sql)
        return shape
    finally:
        conn.close()


def _identity_rows(path: Path) -> list[tuple[str, str]]:
    conn = sqlite3.connect(path)
    try:
        return conn.execute("SELECT key, value FROM engine_info").fetchall()
    finally:
        conn.close()


def test_a_new_sqlite_database_is_what_the_migrations_make(tmp_path: Path) -> None:
    created, migrated = tmp_path / "created.sqlite3", tmp_path / "migrated.sqlite3"
    fresh = Database(f"sqlite:///{created}")
    fresh.prepare(SchemaMode.MIGRATE)  # a new file: create_at_head
    by_alembic = Database(f"sqlite:///{migrated}")
    upgrade_to_head(by_alembic)
    assert fresh.current_revision() == by_alembic.current_revision() == SCHEMA_REVISION
    fresh.dispose()
    by_alembic.dispose()
    shape = _shape(created)
    assert "executions" in shape and "alembic_version" in shape
    assert shape == _shape(migrated)
    ((key, value),) = _identity_rows(created)
    assert key == "database_id" and len(value) == 32


def test_alembic_reads_the_stamp_as_its_head(tmp_path: Path) -> None:
    """A later `db upgrade` (with a newer noetl-celery's migrations) starts from the
    stamp: alembic must see the head revision there, not an empty database."""
    database = Database(f"sqlite:///{tmp_path / 'noetl.sqlite3'}")
    database.prepare(SchemaMode.MIGRATE)
    config = Config()
    config.set_main_option("script_location", str(script_location()))
    head = ScriptDirectory.from_config(config).get_current_head()
    with database.engine.connect() as conn:
        assert MigrationContext.configure(conn).get_current_revision() == head
    upgrade_to_head(database)  # nothing left to do, and nothing fails
    assert database.current_revision() == head
    database.dispose()


def test_two_processes_creating_the_file_at_once_make_one_database(tmp_path: Path) -> None:
    # rounds: one in about fifteen failed when switching the new file to WAL answered
    # "database is locked" at once (SQLite does not wait for a busy lock there)
    for round_ in range(20):
        path = tmp_path / f"noetl-{round_}.sqlite3"

        def open_it(path: Path = path) -> None:
            database = Database(f"sqlite:///{path}")
            database.prepare(SchemaMode.MIGRATE)
            database.dispose()

        assert all_at_once([open_it] * 4) == [], f"round {round_}"
        assert len(_identity_rows(path)) == 1
        conn = sqlite3.connect(path)
        try:
            assert conn.execute("SELECT version_num FROM alembic_version").fetchall() == [
                (SCHEMA_REVISION,)
            ]
            assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        finally:
            conn.close()


def _holding_the_file(path: Path) -> sqlite3.Connection:
    """A connection with the file's write lock (a new file, not yet in WAL mode)."""
    holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN IMMEDIATE")
    holder.execute("CREATE TABLE t (x int)")
    return holder


def test_switching_to_wal_waits_for_a_connection_that_holds_the_file(tmp_path: Path) -> None:
    path = tmp_path / "noetl.sqlite3"
    holder = _holding_the_file(path)
    timer = threading.Timer(0.3, holder.commit)
    timer.start()
    other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    try:
        use_wal(other.cursor(), patience=10)
        assert other.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    finally:
        timer.join()
        other.close()
        holder.close()


def test_switching_to_wal_gives_up_after_its_patience(tmp_path: Path) -> None:
    path = tmp_path / "noetl.sqlite3"
    holder = _holding_the_file(path)
    other = sqlite3.connect(path, isolation_level=None)
    try:
        with pytest.raises(sqlite3.OperationalError, match="locked"):
            use_wal(other.cursor(), patience=0.2)
    finally:
        other.close()
        holder.close()


def test_a_sqlite_file_keeps_its_connections_and_their_settings(tmp_path: Path) -> None:
    """Each read or write used to open a new connection (open, PRAGMAs, schema read: 43
    of them in an embedded hello_world, issue 15): a returned one is kept, rolled back
    (it holds no lock: another connection can take the write lock), and keeps WAL."""
    path = tmp_path / "noetl.sqlite3"
    database = open_database(f"sqlite:///{path}", SchemaMode.MIGRATE)
    try:
        with database.read() as conn:
            first_read = conn.connection.dbapi_connection
        with database.read() as conn:
            assert conn.connection.dbapi_connection is first_read
            assert conn.exec_driver_sql("PRAGMA journal_mode").scalar_one() == "wal"
        with database.write() as conn:
            first_write = conn.connection.dbapi_connection
            conn.exec_driver_sql(
                "INSERT INTO engine_info (key, value, created_at) VALUES ('k', 'v', '2026-01-01')"
            )
        with database.write() as conn:
            assert conn.connection.dbapi_connection is first_write
        other = sqlite3.connect(path, timeout=1)
        try:  # the kept connections hold no lock
            other.execute("BEGIN IMMEDIATE")
            other.execute("DELETE FROM engine_info WHERE key = 'k'")
            other.execute("COMMIT")
        finally:
            other.close()
    finally:
        database.dispose()


def test_a_sqlite_file_opens_past_its_pool_size_instead_of_waiting(tmp_path: Path) -> None:
    """More threads at once than connections kept (many embedded workers): each gets a
    connection at once, as when every checkout opened one; only `pool_size` are kept."""
    path = tmp_path / "noetl.sqlite3"
    open_database(f"sqlite:///{path}", SchemaMode.MIGRATE).dispose()
    database = Database(f"sqlite:///{path}", pool_size=1, max_overflow=0)
    try:
        held = [database.read() for _ in range(4)]  # a pool limit would raise here
        assert len({id(conn.connection.dbapi_connection) for conn in held}) == 4
        for conn in held:
            conn.close()
        pool = database.read_engine.pool
        assert isinstance(pool, QueuePool) and pool.checkedin() == 1
    finally:
        database.dispose()
