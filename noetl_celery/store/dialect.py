"""`INSERT ... ON CONFLICT` for both dialects (SQLAlchemy spells it per dialect)."""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from typing import Any

from sqlalchemy import Connection, Table


def _dialect_insert(dialect: str, table: Table) -> Any:
    # each dialect's module is imported by the first statement on it: the embedded
    # SQLite default never imports the Postgres dialect (issue 15, start-up time)
    if dialect == "postgresql":
        from sqlalchemy.dialects.postgresql import insert as pg_insert

        return pg_insert(table)
    from sqlalchemy.dialects.sqlite import insert as sqlite_insert

    return sqlite_insert(table)


def _insert(conn: Connection, table: Table) -> Any:
    return _dialect_insert(conn.dialect.name, table)


def insert_ignore(conn: Connection, table: Table) -> Any:
    """INSERT ... ON CONFLICT DO NOTHING (any unique index, partial ones included); built
    once per dialect and table (values come as execute parameters)."""
    return _insert_ignore(conn.dialect.name, table)


@lru_cache(maxsize=64)
def _insert_ignore(dialect: str, table: Table) -> Any:
    return _dialect_insert(dialect, table).on_conflict_do_nothing()


def upsert(
    conn: Connection,
    table: Table,
    keys: Sequence[str],
    values: dict[str, Any],
    where: Any = None,
    insert_only: Sequence[str] = (),
) -> Any:
    """INSERT, or UPDATE the existing row (only where `where` holds, if given); the
    `insert_only` columns keep the value the first insert gave them."""
    stmt = _insert(conn, table).values(**values)
    kept = set(keys) | set(insert_only)
    updates = {k: stmt.excluded[k] for k in values if k not in kept}
    return stmt.on_conflict_do_update(index_elements=list(keys), set_=updates, where=where)


def add_to_counter(conn: Connection, table: Table, name: str, amount: int) -> None:
    """`value += amount` of the counter `name`, created at `amount` (one statement: two
    sweeps counting at once add up, neither is lost)."""
    stmt = _insert(conn, table).values(name=name, value=amount)
    conn.execute(
        stmt.on_conflict_do_update(
            index_elements=["name"], set_={"value": table.c.value + stmt.excluded.value}
        )
    )
