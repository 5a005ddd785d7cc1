"""Run the alembic migrations shipped inside the package against a `Database`, or
create a new SQLite database's tables at the head revision directly.

The migrations are package data (`noetl_celery/store/migrations`), so an installed wheel
can create and upgrade its tables without the source tree. Only `noetl-celery db upgrade` and
the embedded default database reach this module: alembic is imported nowhere else, and only
to upgrade existing tables or create Postgres ones. A new SQLite file (the embedded default
on its first run) is created from `store.schema` and stamped at the head revision without
alembic: the migrations create exactly that schema (tests/integration/store/
test_fresh_sqlite.py compares the two), and importing alembic and replaying every
migration was most of a first run's start-up (issue 15).
"""

from __future__ import annotations

import re
import uuid
from functools import cache
from importlib.resources import files
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import insert, text

from noetl_celery.errors import StoreError
from noetl_celery.store.schema import SCHEMA_REVISION, engine_info, metadata, utcnow

if TYPE_CHECKING:
    from noetl_celery.store.database import Database

# Any constant works: it only has to be the same for every engine process.
_MIGRATION_LOCK = 7_316_525_001


def script_location() -> Path:
    # installed packages (wheels, editable installs) are plain directories, never zipped:
    # alembic needs a real path to read env.py and versions/ from
    location = Path(str(files("noetl_celery.store") / "migrations"))
    if not (location / "env.py").is_file():
        raise StoreError(
            f"the migrations of this noetl-celery are missing ({location / 'env.py'}): "
            "reinstall the package"
        )
    return location


_REVISION = re.compile(r"^revision\s*=\s*[\"'](\w+)[\"']", re.MULTILINE)


@cache
def revisions() -> frozenset[str]:
    """Every revision this package ships, read from the files (alembic is not imported):
    a database at a revision outside this set was migrated by a newer noetl-celery."""
    found: set[str] = set()
    for path in (script_location() / "versions").glob("*.py"):
        match = _REVISION.search(path.read_text(encoding="utf-8"))
        if match:
            found.add(match.group(1))
    return frozenset(found)


def upgrade_to_head(database: Database) -> None:
    from alembic import command
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(script_location()))
    with database.engine.connect() as conn:
        if database.dialect == "postgresql":
            # the engine's session bounds are for orchestration, not for a migration: an
            # index on a big table may take minutes, and so may waiting for another
            # process's migration (RESET below restores the connection's bounds)
            conn.execute(text("SET statement_timeout = 0"))
            conn.execute(text("SET idle_in_transaction_session_timeout = 0"))
            # two processes starting at once must not both create the tables
            conn.execute(text("SELECT pg_advisory_lock(:k)"), {"k": _MIGRATION_LOCK})
            conn.commit()
        try:
            config.attributes["connection"] = conn
            command.upgrade(config, "head")
            conn.commit()
        finally:
            if database.dialect == "postgresql":
                conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": _MIGRATION_LOCK})
                conn.execute(text("RESET statement_timeout"))
                conn.execute(text("RESET idle_in_transaction_session_timeout"))
                conn.commit()


# what `alembic stamp` creates on SQLite (alembic.runtime.migration's version table)
_VERSION_TABLE = (
    "CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL, "
    "CONSTRAINT alembic_version_pkc PRIMARY KEY (version_num))"
)


def create_at_head(database: Database) -> None:
    """Create a SQLite database's engine tables at SCHEMA_REVISION, as the migrations
    would: the tables of `store.schema`, the database's identity row (0006) and the
    alembic version stamp, in one write transaction. Two processes creating the same new
    file at once take turns on SQLite's write lock; the second finds the stamp and stops."""
    if not database.is_sqlite:
        raise StoreError("create_at_head is for a new SQLite database; use upgrade_to_head")
    with database.write() as conn:  # BEGIN IMMEDIATE: the database-wide write lock
        stamped = conn.execute(
            text("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'alembic_version'")
        ).first()
        if stamped is not None:
            return
        metadata.create_all(conn)
        conn.execute(text(_VERSION_TABLE))
        conn.execute(
            text("INSERT INTO alembic_version (version_num) VALUES (:v)"), {"v": SCHEMA_REVISION}
        )
        conn.execute(
            insert(engine_info).values(
                key="database_id", value=uuid.uuid4().hex, created_at=utcnow()
            )
        )
