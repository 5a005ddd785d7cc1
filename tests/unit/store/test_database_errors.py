"""Driver errors leave the store as StoreError subclasses (callers never catch
SQLAlchemy's classes), keeping the driver's error as the cause; errors about a
statement's values stay as they are, for the store's own handling."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.exc import IntegrityError
from sqlalchemy.exc import TimeoutError as PoolTimeout

from noetl_celery.errors import StoreError, StoreUnavailable
from noetl_celery.store.database import Database, SchemaMode, open_database, transient


def test_an_operational_error_of_a_statement_is_store_unavailable(tmp_path: Path) -> None:
    database = Database(f"sqlite:///{tmp_path / 'e.db'}")
    try:
        expected = pytest.raises(StoreUnavailable, match="could not do a statement")
        with expected as raised, database.read() as conn:
            conn.execute(text("SELECT * FROM no_such_table"))
        assert "no_such_table" in str(raised.value)
        assert "no_such_table" in str(raised.value.__cause__)
        assert transient(raised.value)
    finally:
        database.dispose()


def test_a_write_rolls_back_and_raises_store_unavailable(tmp_path: Path) -> None:
    database = Database(f"sqlite:///{tmp_path / 'e.db'}")
    try:
        with database.write() as conn:
            conn.execute(text("CREATE TABLE t (k INTEGER PRIMARY KEY)"))
        with pytest.raises(StoreUnavailable), database.write() as conn:
            conn.execute(text("INSERT INTO t VALUES (1)"))
            conn.execute(text("INSERT INTO missing VALUES (1)"))
        with database.read() as conn:
            assert conn.execute(text("SELECT count(*) FROM t")).scalar_one() == 0
    finally:
        database.dispose()


def test_a_value_the_database_refuses_is_not_wrapped(tmp_path: Path) -> None:
    database = Database(f"sqlite:///{tmp_path / 'e.db'}")
    try:
        with database.write() as conn:
            conn.execute(text("CREATE TABLE t (k INTEGER PRIMARY KEY)"))
            conn.execute(text("INSERT INTO t VALUES (1)"))
        with pytest.raises(IntegrityError), database.single_write() as conn:
            conn.execute(text("INSERT INTO t VALUES (1)"))
    finally:
        database.dispose()


def test_an_exhausted_pool_is_store_unavailable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    database = Database(f"sqlite:///{tmp_path / 'e.db'}")

    def exhausted() -> None:
        raise PoolTimeout("QueuePool limit of size 5 overflow 20 reached")

    try:
        monkeypatch.setattr(database.read_engine, "connect", exhausted)
        with pytest.raises(StoreUnavailable, match="came free in time") as raised:
            database.read()
        assert isinstance(raised.value.__cause__, PoolTimeout)
    finally:
        monkeypatch.undo()
        database.dispose()


def test_a_sqlite_file_without_tables_has_no_revision(tmp_path: Path) -> None:
    path = tmp_path / "e.db"
    database = Database(f"sqlite:///{path}")
    try:
        with database.write() as conn:
            conn.execute(text("CREATE TABLE other (k INTEGER)"))
        assert database.current_revision() is None
    finally:
        database.dispose()


def test_an_unreadable_sqlite_file_is_a_store_error(tmp_path: Path) -> None:
    path = tmp_path / "e.db"
    path.write_text("not a database, just text long enough to be a header" * 40)
    with pytest.raises(StoreError):
        open_database(f"sqlite:///{path}", SchemaMode.REQUIRE)
