"""Migration 0017: on Postgres the columns that issue, claim and close update are the
commands table's last, so each in-place update logs a few bytes instead of the row; the
inbox's one index is its primary key (execution, event). Rows written before it keep
every value, both ways."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from alembic import command
from alembic.config import Config
from sqlalchemy import Connection, insert, inspect, select, text

from noetl_celery.store.database import Database, SchemaMode
from noetl_celery.store.migrate import script_location
from noetl_celery.store.schema import SCHEMA_REVISION, commands, inbox
from noetl_celery.store.statements import CLAIM, CLOSE_COMMAND, ISSUE_RANGE
from tests.integration.store.test_migrations_and_locks import empty_url, migrate_to

__all__ = ["empty_url"]  # the fixture, both backends


def _set_columns(statement: Any) -> set[str]:
    """The columns an UPDATE statement sets, as its SQL names them."""
    sql = str(statement.compile())
    assignments = sql.split(" SET ", 1)[1].split(" WHERE ", 1)[0]
    return {part.split("=", 1)[0].strip() for part in assignments.split(", ")}


# what the per-item updates write: the statements themselves say (the locking and the
# batch closes in store.queries.commands set the same two columns as CLOSE_COMMAND)
UPDATED = set().union(*(_set_columns(s) for s in (ISSUE_RANGE, CLAIM, CLOSE_COMMAND)))


def _columns_in_order(conn: Connection) -> list[str]:
    return list(
        conn.execute(
            text(
                "SELECT attname FROM pg_attribute WHERE attrelid = 'commands'::regclass "
                "AND attnum > 0 AND NOT attisdropped ORDER BY attnum"
            )
        ).scalars()
    )


def test_updated_columns_are_the_tail_of_the_table(pg_url: str) -> None:
    database = Database(pg_url)
    with database.engine.connect() as conn:
        order = _columns_in_order(conn)
        fillfactor = conn.execute(
            text("SELECT reloptions FROM pg_class WHERE relname = 'commands'")
        ).scalar()
    database.dispose()
    assert {
        "status",
        "ctx_version",
        "issued_at",
        "worker",
        "lease_until",
        "started_at",
        "finished_at",
    } == UPDATED
    assert set(order[-len(UPDATED) :]) == UPDATED, order
    assert order[-1] == "status"  # every update writes it
    assert fillfactor == ["fillfactor=70"]  # room for the in-place updates (0003)


ROW = {
    "command_id": "e1:fan:1:7",
    "execution_id": "e1",
    "step": "fan",
    "kind": "noop",
    "epoch": 1,
    "iteration": 7,
    "attempt": 2,
    "status": "running",
    "ctx_version": 3,
    "item": {"i": 7, "name": "seven"},
    "meta": {"loop": "fan"},
    "resume": {"frame": {"rows": [1]}},
    "worker": "w1:42",
    "lease_until": dt.datetime(2026, 11, 29, 12, 0, 30),
    "deadline_at": dt.datetime(2026, 11, 29, 13, 0),
    "republished": 1,
    "issued_at": dt.datetime(2026, 11, 29, 12, 0),
    "started_at": dt.datetime(2026, 11, 29, 12, 0, 1),
    "finished_at": None,
}


INBOX = {"execution_id": "e1", "event_id": 9, "step": "fan", "epoch": 1, "iteration": 7}


def _inbox_keys(database: Database) -> tuple[list[str], list[str]]:
    """(the inbox's primary key columns, its other indexes' names)"""
    found = inspect(database.engine)
    key = found.get_pk_constraint("inbox")["constrained_columns"]
    return key, [str(index["name"]) for index in found.get_indexes("inbox")]


def _downgrade(database: Database, revision: str) -> None:
    config = Config()
    config.set_main_option("script_location", str(script_location()))
    with database.engine.connect() as conn:
        config.attributes["connection"] = conn
        command.downgrade(config, revision)
        conn.commit()


@pytest.fixture
def at_0016(empty_url: str) -> Iterator[Database]:
    database = Database(empty_url)
    migrate_to(database, "0016")
    with database.engine.begin() as conn:
        conn.execute(insert(commands).values(**ROW))
        conn.execute(insert(inbox).values(**INBOX))
    yield database
    database.dispose()


def test_rows_written_before_0017_keep_every_value(at_0016: Database, tmp_path: Path) -> None:
    database = at_0016
    database.prepare(SchemaMode.MIGRATE)
    assert database.current_revision() == SCHEMA_REVISION >= "0017"
    with database.engine.begin() as conn:
        assert conn.execute(select(commands)).one()._asdict() == ROW
        assert conn.execute(select(inbox)).one()._asdict() == INBOX
        # the table is usable as before: the claim's statement finds nothing issued
        params = {"b_cid": ROW["command_id"], "b_worker": "w", "b_now": None, "b_lease": None}
        assert conn.execute(CLAIM, params).first() is None
    assert _inbox_keys(database) == (["execution_id", "event_id"], [])
    _downgrade(database, "0016")
    assert _inbox_keys(database) == (["event_id"], ["ix_inbox_execution"])
    with database.engine.connect() as conn:
        assert conn.execute(select(commands)).one()._asdict() == ROW
        assert conn.execute(select(inbox)).one()._asdict() == INBOX
        if database.engine.dialect.name == "postgresql":
            order = _columns_in_order(conn)
            assert order[7] == "status" and order[-1] == "republished"  # 0016's order
