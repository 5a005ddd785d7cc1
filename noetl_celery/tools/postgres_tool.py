"""`kind: postgres`: SQL statements on a pooled autocommit connection (NoETL semantics).

Every statement runs in its own implicit transaction and a failing statement does not
stop the later ones; the result describes the last statement, and any failure turns the
whole call into an error outcome listing each failed statement.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import psycopg

from noetl_celery.errors import ConfigurationError, CredentialError
from noetl_celery.models.outcome import ErrorKind
from noetl_celery.pgconn import (
    PoolExhausted,
    auth_alias,
    db_message,
    pg_connection,
    reset_statement_timeout,
    set_statement_timeout,
    sqlstate_kind,
)
from noetl_celery.tools.base import ToolCall, ToolOutcome
from noetl_celery.tools.jsonable import to_jsonable
from noetl_celery.tools.sql_text import (
    SqlSourceError,
    StatementResult,
    extract_sql,
    split_statements,
)

Redact = Callable[[str], str]


def _statement_result(cur: psycopg.Cursor[Any], max_rows: int) -> StatementResult:
    if cur.description is None:
        return {"status": "success", "row_count": cur.rowcount, "message": cur.statusmessage}
    columns = [column.name for column in cur.description]
    kept = cur.fetchmany(max_rows)
    result: StatementResult = {
        "status": "success",
        "rows": [
            {
                name: to_jsonable(value, bytes_as="hex")
                for name, value in zip(columns, row, strict=True)
            }
            for row in kept
        ],
        "row_count": len(kept),
        "columns": columns,
    }
    if cur.rowcount > len(kept):
        result["truncated"] = True
        result["total_row_count"] = cur.rowcount
    return result


class PostgresTool:
    kind: ClassVar[str] = "postgres"
    raw_fields: ClassVar[frozenset[str]] = frozenset()

    def run(self, call: ToolCall) -> ToolOutcome:
        services = call.services
        redact = services.redactor.redact
        alias = auth_alias(call.config)
        if alias is None:
            return ToolOutcome.failure("config_error", "postgres tool needs `auth` (a credential)")
        try:
            conninfo = services.credentials.resolve(alias).postgres_conninfo()
            statements = split_statements(extract_sql(call.config, "postgres"))
        except (CredentialError, ConfigurationError, SqlSourceError) as exc:
            return ToolOutcome.failure("config_error", redact(str(exc)))
        if not statements:
            return ToolOutcome.failure("config_error", "postgres tool: the SQL has no statements")
        try:
            with pg_connection(services.pg_pool(conninfo), conninfo) as conn:
                return _run(
                    conn, statements, call.timeout, services.settings.postgres_max_rows, redact
                )
        except PoolExhausted as exc:
            return ToolOutcome.failure("db_connection", str(exc), retryable=True)
        except psycopg.Error as exc:  # could not connect, or the link died between statements
            return _connect_failure(exc, alias, conninfo, redact)


def connection_target(conninfo: str) -> str:
    """`user@host:port/dbname` of a conninfo, never its password: what a connection
    error must name (libpq's own text omits the database when the server refuses the
    connection, and the host when it is a socket)."""
    from psycopg.conninfo import conninfo_to_dict

    try:
        params = conninfo_to_dict(conninfo)
    except psycopg.Error:
        return "?"
    user = f"{params['user']}@" if params.get("user") else ""
    port = f":{params['port']}" if params.get("port") else ""
    dbname = f"/{params['dbname']}" if params.get("dbname") else ""
    return f"{user}{params.get('host') or 'localhost'}{port}{dbname}"


def _connect_failure(exc: psycopg.Error, alias: str, conninfo: str, redact: Redact) -> ToolOutcome:
    text = " ".join(str(exc).split())
    kind: ErrorKind
    kind, retryable = sqlstate_kind(exc.sqlstate)
    if kind == "auth" or "authentication failed" in text:
        kind, retryable = "auth", False  # a wrong password stays wrong on retry
    else:
        kind, retryable = "db_connection", True
    target = connection_target(conninfo)
    return ToolOutcome.failure(
        kind,
        redact(f"cannot connect with postgres credential '{alias}' ({target}): {text}"),
        retryable=retryable,
        detail={"pg": {"code": exc.sqlstate, "sqlstate": exc.sqlstate}},
        code=exc.sqlstate,
    )


def _run(
    conn: psycopg.Connection[Any],
    statements: tuple[str, ...],
    timeout: float | None,
    max_rows: int,
    redact: Redact,
) -> ToolOutcome:
    last: StatementResult | None = None
    errors: list[tuple[int, psycopg.Error]] = []
    if timeout:
        set_statement_timeout(conn, timeout)
    try:
        for index, statement in enumerate(statements):
            try:
                with conn.cursor() as cur:
                    # no params: psycopg sends the text as is, so `%` needs no escaping
                    cur.execute(statement)
                    last = _statement_result(cur, max_rows)
            except psycopg.Error as exc:
                errors.append((index, exc))
                if conn.broken or conn.closed:
                    break  # nothing later can run on a dead link
    finally:
        if timeout:
            # a broken connection is discarded by the pool anyway
            with contextlib.suppress(psycopg.Error):
                reset_statement_timeout(conn)
    count = len(statements)
    if not errors:
        assert last is not None
        return ToolOutcome.success(
            {**last, "statement_count": count}, pg={"code": "00000", "sqlstate": "00000"}
        )
    return _failure(errors, last, count, redact)


def _failure(
    errors: list[tuple[int, psycopg.Error]],
    last: Mapping[str, Any] | None,
    count: int,
    redact: Redact,
) -> ToolOutcome:
    listed: list[dict[str, Any]] = [
        {"statement_index": i, "message": redact(db_message(e))} for i, e in errors
    ]
    message: str = listed[0]["message"]
    first = errors[0][1]
    kind, retryable = sqlstate_kind(first.sqlstate)
    if first.sqlstate is None and isinstance(first, psycopg.OperationalError):
        kind, retryable = "db_connection", True  # link lost mid-call: no SQLSTATE
    data: dict[str, Any] = {
        "status": "error",
        "errors": listed,
        "message": message,
        "statement_count": count,
    }
    if last is not None and "rows" in last:
        data.update(
            {k: last[k] for k in ("rows", "columns", "row_count", "truncated") if k in last}
        )
    return ToolOutcome.failure(
        kind,
        message,
        data=data,
        retryable=retryable,
        detail={"pg": {"code": first.sqlstate, "sqlstate": first.sqlstate}},
        code=first.sqlstate,
    )
