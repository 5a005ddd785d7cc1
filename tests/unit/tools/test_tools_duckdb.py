from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from noetl_celery.settings import Settings
from noetl_celery.tools.base import ToolOutcome
from noetl_celery.tools.services import ToolServices

RunTool = Callable[..., ToolOutcome]


def test_execution_file_is_shared_between_calls(run_tool: RunTool, settings: Settings) -> None:
    first = run_tool(
        "duckdb",
        {"query": "CREATE TABLE t AS SELECT 1 AS a; INSERT INTO t VALUES (2)"},
        execution_id="exec-42",
    )
    assert first.ok, first.error
    assert first.data == {
        "status": "success",
        "row_count": 1,
        "message": "INSERT",
        "statement_count": 2,
    }
    assert (settings.effective_duckdb_dir / "exec-42.duckdb").is_file()
    second = run_tool(
        "duckdb", {"command": "SELECT a FROM t ORDER BY a"}, execution_id="exec-42", step="other"
    )
    assert second.ok, second.error
    assert second.data == {
        "status": "success",
        "rows": [{"a": 1}, {"a": 2}],
        "row_count": 2,
        "columns": ["a"],
        "statement_count": 1,
    }
    # another execution has its own file
    other = run_tool("duckdb", {"query": "SELECT * FROM t"}, execution_id="exec-43")
    assert other.error is not None and other.error.kind == "db_error"


def test_execution_id_is_made_a_safe_file_name(run_tool: RunTool, settings: Settings) -> None:
    assert run_tool("duckdb", {"query": "SELECT 1"}, execution_id="../../evil id").ok
    assert (settings.effective_duckdb_dir / ".._.._evil_id.duckdb").is_file()


def test_memory_and_explicit_database(run_tool: RunTool, tmp_path: Path) -> None:
    out = run_tool("duckdb", {"database": ":memory:", "query": "CREATE TABLE m (x int)"})
    assert out.ok and out.data["row_count"] == 0
    target = tmp_path / "sub" / "explicit.duckdb"
    out = run_tool(
        "duckdb",
        {
            "database": str(target),
            "auth": "ignored",
            "db_type": "postgres",
            "query": "CREATE TABLE e AS SELECT 42 AS answer",
        },
    )
    assert out.ok, out.error
    assert target.is_file()
    assert run_tool("duckdb", {"database": str(target), "query": "SELECT * FROM e"}).data[
        "rows"
    ] == [{"answer": 42}]


def test_values_are_json_friendly(run_tool: RunTool) -> None:
    sql = (
        "SELECT 1.50::DECIMAL(5,2) AS d, 3::DECIMAL(5,2) AS i, DATE '2024-01-02' AS day, "
        "TIMESTAMP '2024-01-02 03:04:05' AS ts, '\\x01'::BLOB AS b, [1, 2] AS l, "
        "{'k': 'v'} AS s, uuid() IS NOT NULL AS u, NULL AS n"
    )
    out = run_tool("duckdb", {"database": ":memory:", "query": sql})
    assert out.ok, out.error
    assert out.data["rows"] == [
        {
            "d": 1.5,
            "i": 3,
            "day": "2024-01-02",
            "ts": "2024-01-02T03:04:05",
            "b": "01",
            "l": [1, 2],
            "s": {"k": "v"},
            "u": True,
            "n": None,
        }
    ]


def test_count_named_query_column_is_data(run_tool: RunTool) -> None:
    out = run_tool("duckdb", {"database": ":memory:", "query": 'SELECT 5 AS "Count"'})
    assert out.data["rows"] == [{"Count": 5}]


def test_truncation(run_tool: RunTool, services: ToolServices, tmp_path: Path) -> None:
    small = ToolServices(
        services.settings.with_overrides(postgres_max_rows=3), services.credentials
    )
    out = run_tool(
        "duckdb", {"database": ":memory:", "query": "SELECT * FROM range(10)"}, svc=small
    )
    assert out.data["row_count"] == 3 and out.data["truncated"] is True
    exact = run_tool(
        "duckdb", {"database": ":memory:", "query": "SELECT * FROM range(3)"}, svc=small
    )
    assert "truncated" not in exact.data


def test_errors_stop_at_first_failure(run_tool: RunTool) -> None:
    sql = "CREATE TABLE a (x int); SELECT * FROM no_such_table_xyz; CREATE TABLE b (x int)"
    out = run_tool("duckdb", {"query": sql}, execution_id="err-1")
    assert out.error is not None and out.error.kind == "db_error"
    assert "no_such_table_xyz" in out.error.message
    assert out.data["errors"][0]["statement_index"] == 1
    assert out.data["statement_count"] == 3
    later = run_tool("duckdb", {"query": "SELECT * FROM b"}, execution_id="err-1")
    assert later.error is not None and "b" in later.error.message


def test_parser_error_is_syntax_error(run_tool: RunTool) -> None:
    out = run_tool("duckdb", {"database": ":memory:", "query": "SELEC 1"})
    assert out.error is not None and out.error.kind == "syntax_error"
    assert "SELEC" in out.error.message


def test_constraint_error(run_tool: RunTool) -> None:
    sql = "CREATE TABLE u (id int PRIMARY KEY); INSERT INTO u VALUES (1); INSERT INTO u VALUES (1)"
    out = run_tool("duckdb", {"database": ":memory:", "query": sql})
    assert out.error is not None and out.error.kind == "db_constraint"


def test_timeout_interrupts(run_tool: RunTool) -> None:
    sql = "SELECT count(*) FROM range(100000000) a, range(100000) b"
    started = time.monotonic()
    out = run_tool("duckdb", {"database": ":memory:", "query": sql, "timeout": 0.3})
    assert out.error is not None and out.error.kind == "db_timeout", out.error
    assert out.error.retryable is True
    assert time.monotonic() - started < 10


def test_missing_sql(run_tool: RunTool) -> None:
    out = run_tool("duckdb", {"database": ":memory:"})
    assert out.error is not None and out.error.kind == "config_error"
    assert "duckdb tool needs `command` or `query`" in out.error.message


def _hold_lock(path: Path, seconds: float) -> subprocess.Popen[str]:
    script = (
        "import duckdb, sys, time\n"
        f"con = duckdb.connect({str(path)!r})\n"
        "print('locked', flush=True)\n"
        f"time.sleep({seconds})\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "locked"
    return proc


def test_file_locked_by_another_process(run_tool: RunTool, tmp_path: Path) -> None:
    path = tmp_path / "locked.duckdb"
    holder = _hold_lock(path, 20)
    try:
        out = run_tool("duckdb", {"database": str(path), "query": "SELECT 1"})
    finally:
        holder.kill()
        holder.communicate()  # reaps it and closes its stdout pipe (no ResourceWarning)
    assert out.error is not None and out.error.kind == "db_connection"
    assert out.error.retryable is True and "lock" in out.error.message.lower()


def test_short_lock_is_waited_out(run_tool: RunTool, tmp_path: Path) -> None:
    path = tmp_path / "brief.duckdb"
    holder = _hold_lock(path, 0.3)
    try:
        out = run_tool("duckdb", {"database": str(path), "query": "SELECT 1 AS one"})
    finally:
        holder.communicate()  # waits, and closes its stdout pipe (no ResourceWarning)
    assert out.ok, out.error
    assert out.data["rows"] == [{"one": 1}]


@pytest.mark.parametrize("field", ["command_b64", "commands", "cmds"])
def test_sql_aliases(run_tool: RunTool, field: str) -> None:
    import base64

    value: object = "SELECT 7 AS v"
    if field == "command_b64":
        value = base64.b64encode(b"SELECT 7 AS v").decode()
    elif field == "commands":
        value = ["SELECT 6 AS v;", "SELECT 7 AS v;"]
    out = run_tool("duckdb", {"database": ":memory:", field: value})
    assert out.data["rows"] == [{"v": 7}]
