"""Connections to the engine's database: Postgres (deployments) or SQLite (embedded).

SQLite has no row locks, so every write transaction starts with `BEGIN IMMEDIATE`: the
database-wide write lock is what serialises orchestration passes there (docs/design.md §2.5
asks for serialisation in the database, never in process memory). Reads use a second
engine with plain deferred transactions so polling does not take the write lock.

`open_database` is how the engine gets one: it checks (or, where the composition root's
`SchemaMode` allows, migrates) the tables with a plain SELECT of `alembic_version`, and
reads the database's identity once. A driver error that means the database cannot be
used at all (no connection, or a lost one) becomes a StoreError of one line naming the
URL (password masked) and what to do, so no command shows a driver traceback.

Every driver error that says the database (not the statement's values) is the problem
leaves this module as a StoreError subclass: callers above the store catch those, never
SQLAlchemy's or psycopg's classes. Connections are taken with `read()`, `write()` and
`single_write()`, which also turn an exhausted pool into StoreUnavailable.
"""

from __future__ import annotations

import enum
import json
import logging
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from functools import partial
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine, create_engine, event, make_url, select, text
from sqlalchemy.engine import ExceptionContext
from sqlalchemy.exc import (
    ArgumentError,
    DisconnectionError,
    InterfaceError,
    OperationalError,
    ProgrammingError,
)
from sqlalchemy.exc import TimeoutError as PoolTimeout
from sqlalchemy.pool import QueuePool, StaticPool

from noetl_celery.errors import (
    ConfigurationError,
    SchemaOutdated,
    StoreError,
    StoreInterrupted,
    StoreUnavailable,
)
from noetl_celery.settings import (
    DB_IDLE_IN_TRANSACTION_SECONDS,
    DB_STATEMENT_TIMEOUT_SECONDS,
    mask_url,
)
from noetl_celery.store.database_messages import (
    UPGRADE,
    error_reason,
    failed_message,
    interrupted_message,
    known_revisions,
    masked_reason,
    milliseconds,
    outdated_message,
    short_error,
    unusable_message,
)
from noetl_celery.store.schema import SCHEMA_REVISION, engine_info, for_postgres, metadata
from noetl_celery.store.sqlite_wal import SQLITE_BUSY_SECONDS, use_wal
from noetl_celery.templating.environment import json_default

log = logging.getLogger("noetl_celery.store")

# the key in a write transaction's `Connection.info` of what runs after its commit
_AFTER_COMMIT = "noetl_after_commit"


def after_commit(conn: Connection, action: Callable[[], None]) -> None:
    """Run `action` once the write transaction of `conn` (`Database.write`) committed;
    at once when `conn` is not one (nothing to wait for)."""
    hooks = conn.info.get(_AFTER_COMMIT)
    if hooks is None:
        action()
    else:
        hooks.append(action)


# how the store writes JSON (the engine's serializer, and statements that pass JSON as text)
json_dumps = partial(json.dumps, default=json_default, separators=(",", ":"))

# seconds to wait for Postgres to answer a new connection (libpq's default is to wait
# for the OS, minutes for a host that drops packets); a URL's `connect_timeout` wins
CONNECT_TIMEOUT_SECONDS = 10
# SQLSTATEs of a statement the server cancelled, its transaction rolled back: a statement
# or lock timeout, a deadlock, a serialization failure. Doing the work again is safe.
_CANCELLED = {"57014", "55P03", "40P01", "40001"}
# SQLSTATEs of a statement naming a table or column the database does not have: the
# engine tables were dropped, or are at another revision, after the engine opened them
_SCHEMA_GONE = {"42P01", "42703"}  # undefined_table, undefined_column


class SchemaMode(enum.Enum):
    """What opening the engine database may do to its tables. Composition roots choose:
    only `noetl-celery db upgrade` and the embedded default database migrate; everything
    else requires tables at this engine's revision, and reads never create anything."""

    MIGRATE = "migrate"  # create or upgrade the tables
    REQUIRE = "require"  # refuse (SchemaOutdated) unless they are at SCHEMA_REVISION
    # as REQUIRE, but a database with no engine tables at all (the embedded default before
    # anything ran) reads as an empty one, and nothing is created
    READ = "read"


def normalise_url(url: str) -> str:
    """Accept plain `postgresql://` URLs (psycopg 3 is the only driver installed)."""
    for prefix in ("postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix) :]
    if url.startswith("postgresql+psycopg2://"):
        return "postgresql+psycopg://" + url[len("postgresql+psycopg2://") :]
    return url


def open_database(
    url: str,
    mode: SchemaMode,
    *,
    synchronous_commit: str = "off",
    idle_in_transaction_seconds: float = DB_IDLE_IN_TRANSACTION_SECONDS,
    statement_timeout_seconds: float = DB_STATEMENT_TIMEOUT_SECONDS,
    pool_size: int = 5,
    max_overflow: int = 20,
) -> Database:
    """The engine database at `url`, its tables checked (or migrated) as `mode` allows and
    its identity read. Raises ConfigurationError / StoreError / SchemaOutdated with one
    line that names the URL (password masked) and what to do."""
    database = Database(
        url,
        synchronous_commit=synchronous_commit,
        idle_in_transaction_seconds=idle_in_transaction_seconds,
        statement_timeout_seconds=statement_timeout_seconds,
        pool_size=pool_size,
        max_overflow=max_overflow,
    )
    try:
        if mode is SchemaMode.READ and database.current_revision() is None:
            database.dispose()
            return Database.empty(shown=database.shown)
        database.prepare(mode)
        database.database_id = database.read_identity()
    except BaseException:
        database.dispose()
        raise
    return database


class Database:
    """Engines for one database URL, plus schema checks."""

    def __init__(
        self,
        url: str,
        *,
        synchronous_commit: str = "off",
        idle_in_transaction_seconds: float = DB_IDLE_IN_TRANSACTION_SECONDS,
        statement_timeout_seconds: float = DB_STATEMENT_TIMEOUT_SECONDS,
        pool_size: int = 5,
        max_overflow: int = 20,
    ) -> None:
        # what messages show: the URL as configured, password masked
        self.shown = mask_url(url)
        self.url = normalise_url(url)
        # "<database_id>/<database name>" (see read_identity); None until read
        self.database_id: str | None = None
        # Postgres session settings of every engine connection (see session_options)
        self.session = {
            "synchronous_commit": synchronous_commit,
            "idle_in_transaction_session_timeout": milliseconds(idle_in_transaction_seconds),
            "statement_timeout": milliseconds(statement_timeout_seconds),
        }
        # Postgres connections kept per process, and how many more a peak may open (a
        # thread-pool worker sizes them from its concurrency, Settings.for_worker_threads)
        self.pool_size, self.max_overflow = pool_size, max_overflow
        try:
            self._build()
        except (ArgumentError, ValueError) as exc:
            raise ConfigurationError(
                f"NOETL_DATABASE_URL {self.shown} is not a valid database URL "
                f"({short_error(exc)}): "
                "expected postgresql://user:password@host:5432/dbname or sqlite:///path"
            ) from exc

    def _build(self) -> None:
        if self.url.startswith("sqlite"):
            self.dialect = "sqlite"
            self.engine = self._sqlite_engine(write=True)
            # in memory, one shared connection: each new one would be another database
            self.read_engine = self.engine if self.in_memory else self._sqlite_engine(write=False)
            if self.read_engine is not self.engine:
                event.listen(self.read_engine, "handle_error", self._unusable)
        elif self.url.startswith("postgresql"):
            self.dialect = "postgresql"
            for_postgres()  # the partial indexes' Postgres WHERE (store.schema)
            # session settings travel in the startup packet: no round trip per connection
            options = " ".join(f"-c {name}={value}" for name, value in self.session.items())
            connect_args: dict[str, Any] = {"options": options}
            if "connect_timeout" not in make_url(self.url).query:
                connect_args["connect_timeout"] = CONNECT_TIMEOUT_SECONDS
            self.engine = create_engine(
                self.url,
                json_serializer=json_dumps,
                pool_size=self.pool_size,
                max_overflow=self.max_overflow,
                connect_args=connect_args,
                # no pre-ping (a round trip per checkout on the hot path): a connection
                # that died is invalidated by the error it raises, and callers retry
                pool_recycle=1800,
            )
            # one statement needs no BEGIN/COMMIT around it: reads and single-statement
            # writes (the claim) run in autocommit
            self.read_engine = self.engine.execution_options(isolation_level="AUTOCOMMIT")
        else:
            raise ConfigurationError(
                f"NOETL_DATABASE_URL must be a postgresql:// or sqlite:// URL, got {self.shown!r}"
            )
        event.listen(self.engine, "handle_error", self._unusable)

    def _unusable(self, context: ExceptionContext) -> None:
        """Driver errors that mean the database cannot be reached at all (no connection
        could be made) become one StoreError naming the URL and what to do. A connection
        lost or ended by the server in use (a restart; a transaction idle past
        `idle_in_transaction_session_timeout`) or a statement the server cancelled
        (timeout, deadlock) become StoreInterrupted: the transaction is rolled back and
        callers may do it again. Any other operational error (out of disk or memory,
        SQLite locked) becomes StoreUnavailable. A statement naming a table or column the
        database lacks (the tables dropped, or migrated elsewhere, after they were
        checked) becomes SchemaOutdated, the error opening such a database gives. Errors
        about the statement's values (IntegrityError, DataError, ...) stay as they are:
        the store's own code handles those (a lost registration race, an outcome the
        database refuses).
        SQLAlchemy raises what this raises `from` the driver's error."""
        original = context.original_exception
        if context.connection is None:
            raise StoreError(unusable_message(self.shown, self.url, original))
        if context.is_disconnect:
            raise StoreInterrupted(interrupted_message(self.shown, self.url, original))
        if getattr(original, "sqlstate", None) in _SCHEMA_GONE:
            raise SchemaOutdated(
                f"the engine database {self.shown} does not have the engine tables this "
                f"noetl-celery needs ({error_reason(original)}): {UPGRADE}"
            )
        if getattr(original, "sqlstate", None) in _CANCELLED:
            raise StoreInterrupted(
                f"a statement on the engine database {self.shown} was cancelled: "
                f"{masked_reason(self.url, original)}"
            )
        if isinstance(context.sqlalchemy_exception, OperationalError | InterfaceError):
            raise StoreUnavailable(failed_message(self.shown, self.url, original))

    @classmethod
    def empty(cls, *, shown: str) -> Database:
        """An empty engine database in memory: what reads see when nothing has run yet
        (no file is created for them)."""
        database = cls("sqlite://")
        database.shown = shown
        metadata.create_all(database.engine)
        return database

    @property
    def in_memory(self) -> bool:
        return self.url in ("sqlite://", "sqlite:///:memory:")

    @property
    def sqlite_path(self) -> Path | None:
        if self.dialect != "sqlite" or self.in_memory:
            return None
        return Path(self.url.split("///", 1)[-1])

    @property
    def is_sqlite(self) -> bool:
        return self.dialect == "sqlite"

    def read(self) -> Connection:
        """A connection for reads (autocommit on Postgres, deferred on SQLite)."""
        return self._checkout(self.read_engine)

    @contextmanager
    def write(self) -> Iterator[Connection]:
        """A write transaction, committed when the block ends without an error. What the
        block registered with `after_commit` runs once the commit succeeded (never after
        a rollback, never twice for a transaction tried again)."""
        with self._checkout(self.engine) as conn:
            hooks: list[Callable[[], None]] = []
            conn.info[_AFTER_COMMIT] = hooks
            try:
                with conn.begin():
                    yield conn
            finally:
                conn.info.pop(_AFTER_COMMIT, None)
            for hook in hooks:
                try:
                    hook()
                except Exception:  # the commit stands; what follows it is best effort
                    log.warning("an after-commit action failed", exc_info=True)

    def single_write(self) -> AbstractContextManager[Connection]:
        """A connection for one write statement: autocommit on Postgres; on SQLite a
        transaction (its BEGIN IMMEDIATE is what serialises writers)."""
        if self.is_sqlite:
            return self.write()
        return self.read()

    def _checkout(self, engine: Engine) -> Connection:
        # a pool with every connection in use raises without reaching the driver (no
        # handle_error event): it is the database being busy, as a lock timeout is
        try:
            return engine.connect()
        except PoolTimeout as exc:
            raise StoreUnavailable(
                f"no connection to the engine database {self.shown} came free in time "
                f"({short_error(exc)}); lower the concurrency of this process or raise "
                "max_connections on the server"
            ) from exc

    def _sqlite_engine(self, *, write: bool) -> Engine:
        # no directory is made here: only a migration creates the file (see upgrade)
        # a file's connections are kept (a new one costs its open, three PRAGMAs and a
        # schema read: an embedded hello_world opened 43, issue 15); each is used by one
        # thread at a time, and a returned one is rolled back, so it holds no lock. No
        # limit beyond those kept (max_overflow -1): SQLite's own lock makes writers wait
        # (busy_timeout), and an embedded process with many worker threads must not wait
        # for a pool slot, which it never did when every checkout opened a connection
        pooling: dict[str, Any] = (
            {"poolclass": StaticPool}
            if self.in_memory
            else {"poolclass": QueuePool, "pool_size": self.pool_size, "max_overflow": -1}
        )
        engine = create_engine(
            self.url,
            json_serializer=json_dumps,
            connect_args={"timeout": SQLITE_BUSY_SECONDS, "check_same_thread": False},
            **pooling,
        )

        @event.listens_for(engine, "connect")
        def _on_connect(dbapi_conn: Any, _record: Any) -> None:
            dbapi_conn.isolation_level = None  # let SQLAlchemy's BEGIN below take over
            cursor = dbapi_conn.cursor()
            cursor.execute(f"PRAGMA busy_timeout={int(SQLITE_BUSY_SECONDS * 1000)}")
            use_wal(cursor)
            cursor.execute("PRAGMA synchronous=NORMAL")
            cursor.close()

        @event.listens_for(engine, "begin")
        def _on_begin(conn: Any) -> None:
            conn.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")

        return engine

    # ---- schema -----------------------------------------------------------------------------
    def current_revision(self) -> str | None:
        """The alembic revision of the engine tables; None when there are none. A plain
        SELECT: alembic itself is imported only to migrate. A SQLite file that does not
        exist is not created by asking."""
        path = self.sqlite_path
        if path is not None and not path.exists():
            return None
        try:
            with self.read() as conn:
                row = conn.execute(text("SELECT version_num FROM alembic_version")).first()
        except (StoreUnavailable, SchemaOutdated) as exc:
            # SQLite says "no such table" with an OperationalError, Postgres names an
            # undefined table (both wrapped by _unusable)
            if "alembic_version" in str(exc.__cause__):
                return None
            raise
        except ProgrammingError as exc:
            raise StoreError(
                f"the engine database {self.shown} cannot be read: {short_error(exc)}"
            ) from exc
        return row[0] if row else None

    def prepare(self, mode: SchemaMode) -> None:
        """Migrate (MIGRATE) or check (REQUIRE, READ) the engine tables."""
        revision = self.current_revision()
        if revision == SCHEMA_REVISION:
            return
        if mode is SchemaMode.MIGRATE and (revision is None or revision in known_revisions()):
            self.upgrade(new=revision is None)
            return
        raise SchemaOutdated(outdated_message(self.shown, revision))

    def upgrade(self, *, new: bool = False) -> None:
        """Migrate the tables to SCHEMA_REVISION; `new`: there are none yet (a new
        SQLite database is then created at the head without alembic, store.migrate)."""
        from noetl_celery.store.migrate import create_at_head, upgrade_to_head

        path = self.sqlite_path
        if path is not None:
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise StoreError(unusable_message(self.shown, self.url, exc)) from exc
        if new and self.is_sqlite:
            create_at_head(self)
        else:
            upgrade_to_head(self)

    def read_identity(self) -> str | None:
        """`<engine_info.database_id>/<database name>` on Postgres: a copy made with
        CREATE DATABASE ... TEMPLATE shares the id row, so the name tells them apart.
        None for tables that never had the row (made without the migrations)."""
        with self.read() as conn:
            row = conn.execute(
                select(engine_info.c.value).where(engine_info.c.key == "database_id")
            ).first()
            if row is None:
                return None
            if self.dialect != "postgresql":
                return str(row[0])
            name = conn.execute(text("SELECT current_database()")).scalar_one()
        return f"{row[0]}/{name}"

    def dispose(self) -> None:
        self.engine.dispose()
        if self.read_engine is not self.engine:
            self.read_engine.dispose()


def transient(exc: BaseException) -> bool:
    """True for an error that says the database is away or busy right now (unreachable,
    connection lost, pool exhausted, a deadlock, a serialization failure, SQLite's
    "database is locked"): doing the same again later may work. False for anything else,
    which doing the same again would repeat (a value the database refuses, a bug)."""
    return isinstance(
        exc, StoreError | OperationalError | InterfaceError | DisconnectionError | PoolTimeout
    )
