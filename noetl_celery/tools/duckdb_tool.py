"""`kind: duckdb`: SQL on a DuckDB file shared by the steps of one execution.

Unlike postgres, statements stop at the first failure: they usually build on each other
(create, load, transform) in one local file, and running the rest against a half-built
state only buries the first error.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import duckdb

from noetl_celery.models.outcome import ErrorKind
from noetl_celery.tools.base import ToolCall, ToolOutcome
from noetl_celery.tools.jsonable import to_jsonable
from noetl_celery.tools.sql_text import (
    SqlSourceError,
    StatementResult,
    extract_sql,
    first_keyword,
    split_statements,
)

Redact = Callable[[str], str]
# Waits between attempts to open a file another process holds locked (~1.5 s in total).
LOCK_BACKOFF = (0.05, 0.1, 0.2, 0.4, 0.8)
# Statements whose result set is data even when it happens to be one `Count` column.
_QUERY_WORDS = frozenset(
    {
        "SELECT",
        "WITH",
        "VALUES",
        "FROM",
        "TABLE",
        "SHOW",
        "DESCRIBE",
        "SUMMARIZE",
        "PRAGMA",
        "EXPLAIN",
        "CALL",
    }
)
_UNSAFE_FILE_CHARS = re.compile(r"[^A-Za-z0-9_.-]")


def database_path(call: ToolCall) -> str:
    """`database` as given, or the execution's own file under the duckdb directory."""
    configured = call.config.get("database")
    if isinstance(configured, str) and configured.strip():
        if configured.strip() == ":memory:":
            return ":memory:"
        path = Path(configured.strip()).expanduser()
    else:
        name = _UNSAFE_FILE_CHARS.sub("_", str(call.execution_id)) or "default"
        path = call.services.settings.effective_duckdb_dir / f"{name}.duckdb"
    path.parent.mkdir(parents=True, exist_ok=True)
    return str(path)


def _is_lock_error(exc: duckdb.Error) -> bool:
    return isinstance(exc, duckdb.IOException) and "lock" in str(exc).lower()


def _open(database: str) -> duckdb.DuckDBPyConnection:
    for delay in (*LOCK_BACKOFF, None):
        try:
            return duckdb.connect(database)
        except duckdb.Error as exc:
            if delay is None or not _is_lock_error(exc):
                raise
            time.sleep(delay)  # another process (prefork worker) holds the file
    raise AssertionError("unreachable")


def _result(con: duckdb.DuckDBPyConnection, statement: str, max_rows: int) -> StatementResult:
    names = [column[0] for column in con.description or ()]
    keyword = first_keyword(statement)
    if names in (["Count"], ["Success"]) and keyword not in _QUERY_WORDS:
        # DDL/DML report an affected-row count (or a flag) as a one-column result
        row = con.fetchone()
        count = row[0] if row and names == ["Count"] and isinstance(row[0], int) else 0
        return {"status": "success", "row_count": count, "message": keyword or "OK"}
    if not names:
        return {"status": "success", "row_count": 0, "message": keyword or "OK"}
    kept = con.fetchmany(max_rows)
    result: StatementResult = {
        "status": "success",
        "rows": [
            {n: to_jsonable(v, bytes_as="hex") for n, v in zip(names, row, strict=True)}
            for row in kept
        ],
        "row_count": len(kept),
        "columns": names,
    }
    if len(kept) == max_rows and con.fetchone() is not None:
        result["truncated"] = True
    return result


def _error_kind(exc: duckdb.Error) -> tuple[ErrorKind, bool]:
    if isinstance(exc, duckdb.ParserException | duckdb.SyntaxException):
        return "syntax_error", False
    if isinstance(exc, duckdb.ConstraintException):
        return "db_constraint", False
    if isinstance(exc, duckdb.InterruptException):
        return "db_timeout", True
    return "db_error", False


class DuckdbTool:
    kind: ClassVar[str] = "duckdb"
    raw_fields: ClassVar[frozenset[str]] = frozenset()

    def run(self, call: ToolCall) -> ToolOutcome:
        # `auth` and `db_type` are accepted for NoETL compatibility and ignored.
        redact = call.services.redactor.redact
        try:
            statements = split_statements(extract_sql(call.config, "duckdb"))
        except SqlSourceError as exc:
            return ToolOutcome.failure("config_error", redact(str(exc)))
        if not statements:
            return ToolOutcome.failure("config_error", "duckdb tool: the SQL has no statements")
        try:
            database = database_path(call)
            con = _open(database)
        except OSError as exc:
            return ToolOutcome.failure("config_error", redact(f"duckdb database: {exc}"))
        except duckdb.Error as exc:
            locked = _is_lock_error(exc)
            return ToolOutcome.failure(
                "db_connection", redact(f"cannot open duckdb database: {exc}"), retryable=locked
            )
        timer = None
        if call.timeout:
            # DuckDB has no statement timeout setting: interrupt the connection instead.
            timer = threading.Timer(call.timeout, con.interrupt)
            timer.daemon = True
            timer.start()
        try:
            return _run(con, statements, call.services.settings.postgres_max_rows, redact)
        finally:
            if timer is not None:
                timer.cancel()
            con.close()


def _run(
    con: duckdb.DuckDBPyConnection, statements: tuple[str, ...], max_rows: int, redact: Redact
) -> ToolOutcome:
    last: StatementResult | None = None
    count = len(statements)
    for index, statement in enumerate(statements):
        try:
            con.execute(statement)
            last = _result(con, statement, max_rows)
        except duckdb.Error as exc:
            message = redact(str(exc).strip() or type(exc).__name__)
            kind, retryable = _error_kind(exc)
            data: dict[str, Any] = {
                "status": "error",
                "errors": [{"statement_index": index, "message": message}],
                "message": message,
                "statement_count": count,
            }
            if last is not None and "rows" in last:
                data.update({k: last[k] for k in ("rows", "columns", "row_count") if k in last})
            return ToolOutcome.failure(
                kind, message, data=data, retryable=retryable, exception=type(exc).__name__
            )
    assert last is not None  # statements is never empty here
    return ToolOutcome.success({**last, "statement_count": count})
