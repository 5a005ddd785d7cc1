"""The `postgres` cursor driver: the claim statement runs in a transaction on a pooled
connection of its credential (the same pools the postgres tool uses), held open until
the engine has recorded the rows (see cursors.base)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextlib import ExitStack, suppress
from typing import Any, ClassVar

import psycopg

from noetl_celery.cursors.base import ClaimRequest, CursorError
from noetl_celery.errors import ConfigurationError, CredentialError
from noetl_celery.pgconn import (
    PoolExhausted,
    auth_alias,
    db_message,
    pg_connection,
    sqlstate_kind,
)
from noetl_celery.tools.jsonable import to_jsonable
from noetl_celery.tools.services import ToolServices

log = logging.getLogger("noetl_celery.cursors")


class _Held:
    def __init__(
        self,
        rows: list[dict[str, Any]],
        conn: psycopg.Connection[Any],
        stack: ExitStack,
        witness: tuple[int, int] | None = None,
    ) -> None:
        self.rows = rows
        self.witness = witness
        self._conn = conn
        self._stack = stack

    def _end(self, statement: str) -> None:
        try:
            self._conn.execute(statement)
        except psycopg.Error:
            # the claim is undone with the connection: its rows stay pending in the
            # queue and a later frame claims them again (at least once, never lost)
            log.warning("cursor claim %s failed; its rows stay pending", statement, exc_info=True)
        finally:
            self._stack.close()

    def commit(self) -> None:
        self._end("COMMIT")

    def rollback(self) -> None:
        self._end("ROLLBACK")


class Driver:
    kind: ClassVar[str] = "postgres"

    def claim(self, request: ClaimRequest, services: ToolServices) -> _Held:
        redact = services.redactor.redact
        alias = auth_alias({"auth": request.auth})
        if alias is None:
            raise CursorError("config_error", "a postgres cursor needs `auth` (a credential)")
        try:
            conninfo = services.credentials.resolve(alias).postgres_conninfo()
        except (CredentialError, ConfigurationError) as exc:
            raise CursorError("config_error", redact(str(exc))) from None
        stack = ExitStack()
        conn: psycopg.Connection[Any] | None = None
        try:
            conn = stack.enter_context(pg_connection(services.pg_pool(conninfo), conninfo))
            witnessed = _may_share_wal(conn, conninfo, services)
            cur, seen = _begin_and_claim(conn, request.sql, witnessed)
            rows = _rows(cur)
        except BaseException as exc:
            if conn is not None:
                _quiet_rollback(conn)
            stack.close()
            if isinstance(exc, PoolExhausted | psycopg.Error):
                raise _cursor_error(exc, redact) from None
            raise
        return _Held(rows, conn, stack, seen)


# the claim's transaction as the engine can find it on its own server (cursors.base)
_WITNESS = "SELECT pg_backend_pid(), txid_current()"
# the queue servers' system identifiers, by conninfo (None: the server does not say)
_CLUSTERS: dict[str, str | None] = {}


def _may_share_wal(conn: psycopg.Connection[Any], conninfo: str, services: ToolServices) -> bool:
    """Whether the queue's server may be the engine's (their system identifiers match):
    only then does a claim ask for a witness (a server that does not say, a Postgres
    look-alike without pg_control_system, never does). Read once per conninfo, on a
    connection outside any transaction."""
    engine = services.engine_cluster()
    if engine is None:
        return False
    if conninfo not in _CLUSTERS:
        try:
            row = conn.execute(
                "SELECT CAST(system_identifier AS text) FROM pg_control_system()"
            ).fetchone()
        except psycopg.Error:
            row = None
        _CLUSTERS[conninfo] = None if row is None else str(row[0])
    return _CLUSTERS[conninfo] == engine


def _begin_and_claim(
    conn: psycopg.Connection[Any], sql: str, witnessed: bool
) -> tuple[psycopg.Cursor[Any], tuple[int, int] | None]:
    """BEGIN and the claim statement (and, `witnessed`, the claim transaction's pid and
    id), pipelined when libpq can (one round trip, not two); the claim's error, if any,
    is raised here either way."""
    if not psycopg.Pipeline.is_supported():
        conn.execute("BEGIN")
        cur = conn.execute(sql)
        return cur, _witness(conn.execute(_WITNESS)) if witnessed else None
    with conn.pipeline():
        conn.execute("BEGIN")
        cur = conn.execute(sql)
        seen = conn.cursor().execute(_WITNESS) if witnessed else None
    # their results arrived with the pipeline's sync
    return cur, None if seen is None else _witness(seen)


def _witness(cur: psycopg.Cursor[Any]) -> tuple[int, int] | None:
    row = cur.fetchone()
    return None if row is None else (int(row[0]), int(row[1]))


def _rows(cur: psycopg.Cursor[Any]) -> list[dict[str, Any]]:
    if cur.description is None:
        return []
    columns = [column.name for column in cur.description]
    return [
        {name: to_jsonable(value, bytes_as="hex") for name, value in zip(columns, row, strict=True)}
        for row in cur.fetchall()
    ]


def _quiet_rollback(conn: psycopg.Connection[Any]) -> None:
    with suppress(psycopg.Error):  # a broken connection: the server rolled back already
        conn.execute("ROLLBACK")


def _cursor_error(exc: BaseException, redact: Callable[[str], str]) -> CursorError:
    if isinstance(exc, PoolExhausted):
        return CursorError("db_connection", str(exc), retryable=True)
    assert isinstance(exc, psycopg.Error)
    kind, retryable = sqlstate_kind(exc.sqlstate)
    if isinstance(exc, psycopg.OperationalError) and exc.sqlstate is None:
        kind, retryable = "db_connection", True
    return CursorError(kind, redact(db_message(exc)), retryable)
