"""Connections to the engine's database: Postgres (deployments) or SQLite (embedded).

SQLite has no row locks, so every write transaction starts with `BEGIN IMMEDIATE`: the
database-wide write lock is what serialises orchestration passes there (design §2.5
asks for serialisation in the database, never in process memory). Reads use a second
engine with plain deferred transactions so polling does not take the write lock.
"""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event, text
from sqlalchemy.exc import OperationalError, ProgrammingError
from sqlalchemy.pool import NullPool

from noetl_celery.errors import ConfigurationError, SchemaOutdated, StoreError
from noetl_celery.store.schema import SCHEMA_REVISION, metadata
from noetl_celery.templating.environment import json_default

_dumps = partial(json.dumps, default=json_default, separators=(",", ":"))


def normalise_url(url: str) -> str:
    """Accept plain `postgresql://` URLs (psycopg 3 is the only driver installed)."""
    for prefix in ("postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix) :]
    if url.startswith("postgresql+psycopg2://"):
        return "postgresql+psycopg://" + url[len("postgresql+psycopg2://") :]
    return url


class Database:
    """Engines for one database URL, plus schema checks."""

    def __init__(self, url: str, *, synchronous_commit: str = "off") -> None:
        self.url = normalise_url(url)
        if self.url.startswith("sqlite"):
            self.dialect = "sqlite"
            self.engine = self._sqlite_engine(write=True)
            self.read_engine = self._sqlite_engine(write=False)
        elif self.url.startswith("postgresql"):
            self.dialect = "postgresql"
            self.engine = create_engine(
                self.url,
                json_serializer=_dumps,
                pool_size=5,
                max_overflow=20,
                connect_args={"options": f"-c synchronous_commit={synchronous_commit}"},
                # no pre-ping (a round trip per checkout on the hot path): a connection
                # that died is invalidated by the error it raises, and callers retry
                pool_recycle=1800,
            )
            # one statement needs no BEGIN/COMMIT around it: reads and single-statement
            # writes (the claim) run in autocommit
            self.read_engine = self.engine.execution_options(isolation_level="AUTOCOMMIT")
        else:
            raise ConfigurationError(
                f"NOETL_DATABASE_URL must be a postgresql:// or sqlite:// URL, got {url!r}"
            )

    @property
    def is_sqlite(self) -> bool:
        return self.dialect == "sqlite"

    def single_write(self) -> Any:
        """A connection for one write statement: autocommit on Postgres; on SQLite a
        transaction (its BEGIN IMMEDIATE is what serialises writers)."""
        if self.is_sqlite:
            return self.engine.begin()
        return self.read_engine.connect()

    def _sqlite_engine(self, *, write: bool) -> Engine:
        path = self.url.split("///", 1)[-1]
        if path and path != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(
            self.url,
            json_serializer=_dumps,
            poolclass=NullPool,
            connect_args={"timeout": 60, "check_same_thread": False},
        )

        @event.listens_for(engine, "connect")
        def _on_connect(dbapi_conn: Any, _record: Any) -> None:
            dbapi_conn.isolation_level = None  # let SQLAlchemy's BEGIN below take over
            cursor = dbapi_conn.cursor()
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA synchronous=NORMAL")
            cursor.execute("PRAGMA busy_timeout=60000")
            cursor.close()

        @event.listens_for(engine, "begin")
        def _on_begin(conn: Any) -> None:
            conn.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")

        return engine

    # ---- schema -----------------------------------------------------------------------------
    def current_revision(self) -> str | None:
        try:
            with self.read_engine.connect() as conn:
                row = conn.execute(text("SELECT version_num FROM alembic_version")).first()
        except (OperationalError, ProgrammingError) as exc:
            if "alembic_version" in str(exc):
                return None
            raise StoreError(f"cannot reach the engine database: {_short(exc)}") from exc
        return row[0] if row else None

    def ensure_schema(self, *, upgrade: bool) -> None:
        """Create / upgrade the schema, or raise `SchemaOutdated` when not allowed to."""
        revision = self.current_revision()
        if revision == SCHEMA_REVISION:
            return
        if not upgrade:
            raise SchemaOutdated(
                f"database schema is at {revision or 'nothing'}, this engine needs "
                f"{SCHEMA_REVISION}: run `noetl-celery db upgrade`"
            )
        self.upgrade()

    def upgrade(self) -> None:
        from noetl_celery.store.migrate import upgrade_to_head

        upgrade_to_head(self)

    def create_all_for_tests(self) -> None:
        metadata.create_all(self.engine)

    def dispose(self) -> None:
        self.engine.dispose()
        if self.read_engine is not self.engine:
            self.read_engine.dispose()


def _short(exc: Exception) -> str:
    return str(exc).strip().splitlines()[0][:300]
