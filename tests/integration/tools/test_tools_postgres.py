from __future__ import annotations

import base64
import json
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest

from noetl_celery.tools.base import ToolOutcome
from noetl_celery.tools.services import ToolServices

pytestmark = pytest.mark.integration

RunTool = Callable[..., ToolOutcome]


@pytest.fixture
def table(pg_test_dsn: str) -> Iterator[str]:
    name = f"tools_t_{uuid.uuid4().hex[:10]}"
    yield name
    with psycopg.connect(pg_test_dsn, autocommit=True) as conn:
        conn.execute(f"DROP TABLE IF EXISTS {name}")


def _error(out: ToolOutcome) -> dict[str, Any]:
    assert not out.ok and out.error is not None, out
    return out.error.to_json()  # as `output.error` shows it


def test_select_result_shape(run_pg: RunTool) -> None:
    out = run_pg({"query": "SELECT 1 AS a, 'x' AS b UNION ALL SELECT 2, 'y' ORDER BY a"})
    assert out.ok, out.error
    assert out.data == {
        "status": "success",
        "rows": [{"a": 1, "b": "x"}, {"a": 2, "b": "y"}],
        "row_count": 2,
        "columns": ["a", "b"],
        "statement_count": 1,
    }
    assert out.detail == {"pg": {"code": "00000", "sqlstate": "00000"}}


def test_command_result_shape(run_pg: RunTool, table: str) -> None:
    out = run_pg(
        {
            "command": f"CREATE TABLE {table} (id int PRIMARY KEY, v text);"
            f"INSERT INTO {table} VALUES (1, 'a'), (2, 'b')"
        }
    )
    assert out.ok, out.error
    assert out.data == {
        "status": "success",
        "row_count": 2,
        "message": "INSERT 0 2",
        "statement_count": 2,
    }


def test_credential_record_shape_with_dsn(
    pg_services: ToolServices, run_tool_with: RunTool
) -> None:
    out = run_tool_with(
        pg_services,
        "postgres",
        {"auth": {"key": "pg_record"}, "query": "SELECT current_database() AS db"},
    )
    assert out.ok, out.error
    assert out.data["rows"] == [{"db": "noetl_tools_test"}]


def test_multi_statement_do_block_and_failing_middle_statement(run_pg: RunTool, table: str) -> None:
    sql = f"""
    -- setup
    CREATE TABLE {table} (id int);
    DO $$
    BEGIN
      INSERT INTO {table} VALUES (1);
      INSERT INTO {table} VALUES (2); -- a semicolon inside the block
    END
    $$;
    INSERT INTO public.no_such_table VALUES (1);
    INSERT INTO {table} VALUES (3);
    SELECT count(*) AS n, '50%' AS pct FROM {table};
    """
    out = run_pg({"query": sql})
    error = _error(out)
    assert error["kind"] == "db_error" and error["code"] == "42P01"
    assert 'relation "public.no_such_table" does not exist' in str(error["message"])
    assert out.data["errors"] == [
        {"statement_index": 2, "message": 'relation "public.no_such_table" does not exist'}
    ]
    assert out.data["statement_count"] == 5
    # statements after the failure still ran, and the last result is kept
    assert out.data["rows"] == [{"n": 3, "pct": "50%"}]
    assert out.detail == {"pg": {"code": "42P01", "sqlstate": "42P01"}}


def test_sql_forms(run_pg: RunTool) -> None:
    encoded = base64.b64encode(b"SELECT 'b64' AS src").decode()
    assert run_pg({"command_b64": encoded}).data["rows"] == [{"src": "b64"}]
    listed = run_pg({"commands": ["SELECT 1 AS n;", "SELECT 2 AS n;"]})
    assert listed.data["rows"] == [{"n": 2}] and listed.data["statement_count"] == 2


def test_value_conversion(run_pg: RunTool) -> None:
    sql = """SELECT '{"a": [1, {"b": null}]}'::jsonb AS j, '[1,2]'::json AS js,
                    1.50::numeric AS dec, 42::numeric AS whole, 7::bigint AS big,
                    DATE '2024-01-02' AS d, TIMESTAMPTZ '2024-01-02 03:04:05+00' AS ts,
                    TIME '12:30' AS t, '00000000-0000-0000-0000-000000000001'::uuid AS u,
                    '\\xdeadbeef'::bytea AS b, interval '1 day' AS iv,
                    ARRAY[1.5, 2]::numeric[] AS arr, NULL::text AS n, true AS flag,
                    '127.0.0.1'::inet AS ip"""
    out = run_pg({"query": sql})
    assert out.ok, out.error
    row = out.data["rows"][0]
    assert row["j"] == {"a": [1, {"b": None}]} and row["js"] == [1, 2]
    assert row["dec"] == 1.5 and isinstance(row["dec"], float)
    assert row["whole"] == 42 and isinstance(row["whole"], int) and row["big"] == 7
    assert row["d"] == "2024-01-02" and row["ts"] == "2024-01-02T03:04:05+00:00"
    assert row["t"] == "12:30:00"
    assert row["u"] == "00000000-0000-0000-0000-000000000001"
    assert row["b"] == "deadbeef"
    assert row["iv"] == "1 day, 0:00:00"
    assert row["arr"] == [1.5, 2] and row["n"] is None and row["flag"] is True
    assert row["ip"] == "127.0.0.1"
    json.dumps(out.data)


def test_truncation(new_pg_services: Callable[..., ToolServices], run_tool_with: RunTool) -> None:
    svc = new_pg_services(postgres_max_rows=3)
    out = run_tool_with(
        svc, "postgres", {"auth": "pg_test", "query": "SELECT g FROM generate_series(1, 10) g"}
    )
    assert out.ok, out.error
    assert out.data["rows"] == [{"g": 1}, {"g": 2}, {"g": 3}]
    assert out.data["row_count"] == 3 and out.data["truncated"] is True
    assert out.data["total_row_count"] == 10
    exact = run_tool_with(svc, "postgres", {"auth": "pg_test", "query": "SELECT 1 AS x"})
    assert "truncated" not in exact.data


@pytest.mark.parametrize(
    ("sqlstate", "kind", "retryable"),
    [
        ("23505", "db_constraint", False),
        ("40P01", "db_deadlock", True),
        ("40001", "db_deadlock", True),
        ("57014", "db_timeout", True),
        ("28000", "auth", False),
        ("42601", "syntax_error", False),
        ("08006", "db_connection", True),
        ("22012", "db_error", False),
    ],
)
def test_error_kind_by_sqlstate(run_pg: RunTool, sqlstate: str, kind: str, retryable: bool) -> None:
    sql = (
        f"DO $$ BEGIN RAISE EXCEPTION 'raised %', '{sqlstate}' USING ERRCODE = '{sqlstate}'; END $$"
    )
    error = _error(run_pg({"query": sql}))
    assert (error["kind"], error["retryable"], error["code"]) == (kind, retryable, sqlstate)
    assert error["message"] == f"raised {sqlstate}"


def test_real_constraint_and_syntax_errors(run_pg: RunTool, table: str) -> None:
    out = run_pg(
        {
            "query": f"CREATE TABLE {table} (id int PRIMARY KEY);"
            f"INSERT INTO {table} VALUES (1); INSERT INTO {table} VALUES (1)"
        }
    )
    error = _error(out)
    assert error["kind"] == "db_constraint"
    assert "duplicate key value violates unique constraint" in str(error["message"])
    assert "DETAIL: Key (id)=(1) already exists." in str(error["message"])
    syntax = _error(run_pg({"query": "SELEC 1"}))
    assert syntax["kind"] == "syntax_error"
    assert 'syntax error at or near "SELEC"' in str(syntax["message"])


def test_statement_timeout(run_pg: RunTool) -> None:
    started = time.monotonic()
    error = _error(run_pg({"query": "SELECT pg_sleep(5)", "timeout": 0.3}))
    assert time.monotonic() - started < 3
    assert error["kind"] == "db_timeout" and error["retryable"] is True
    assert "statement timeout" in str(error["message"])
    # the pooled connection got its default back
    for _ in range(3):
        shown = run_pg({"query": "SHOW statement_timeout"})
        assert shown.data["rows"] == [{"statement_timeout": "0"}]


def test_configuration_errors(
    run_pg: RunTool, pg_services: ToolServices, run_tool_with: RunTool
) -> None:
    unknown = _error(run_pg({"auth": "pg_nope", "query": "SELECT 1"}))
    assert unknown["kind"] == "config_error"
    assert "pg_nope" in str(unknown["message"]) and "pg_test" in str(unknown["message"])
    missing_sql = _error(run_pg({}))
    assert missing_sql == {
        "kind": "config_error",
        "retryable": False,
        "message": "postgres tool needs `command` or `query`",
    }
    no_auth = _error(run_tool_with(pg_services, "postgres", {"query": "SELECT 1"}))
    assert no_auth["kind"] == "config_error"
    assert _error(run_pg({"query": "-- just a comment"}))["kind"] == "config_error"


def test_closed_port_is_db_connection_without_password(
    run_pg: RunTool, closed_port_password: str
) -> None:
    for _ in range(2):  # the second call goes through the pool's failure state
        started = time.monotonic()
        out = run_pg({"auth": "pg_closed", "query": "SELECT 1"})
        assert time.monotonic() - started < 5
        error = _error(out)
        assert error["kind"] == "db_connection" and error["retryable"] is True
        assert "pg_closed" in str(error["message"])
        assert "Connection refused" in str(error["message"])
        assert closed_port_password not in repr(out)


def test_secret_in_database_message_is_redacted(run_pg: RunTool, closed_port_password: str) -> None:
    out = run_pg({"query": f"SELECT '{closed_port_password}'::int"})
    error = _error(out)
    assert "invalid input syntax for type integer" in str(error["message"])
    assert closed_port_password not in repr(out)
    assert '"***"' in str(error["message"])


def test_reconnects_after_backends_are_killed(
    new_pg_services: Callable[..., ToolServices], run_tool_with: RunTool, pg_test_dsn: str
) -> None:
    svc = new_pg_services()
    config = {"auth": "pg_test", "query": "SELECT pg_backend_pid() AS pid"}
    first = run_tool_with(svc, "postgres", config)
    assert first.ok, first.error
    # what a server restart does to pooled connections
    with psycopg.connect(pg_test_dsn, autocommit=True) as admin:
        killed = admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid = %s",
            (first.data["rows"][0]["pid"],),
        ).fetchall()
    assert killed == [(True,)]
    time.sleep(0.1)
    second = run_tool_with(svc, "postgres", config)
    assert second.ok, second.error
    assert second.data["rows"][0]["pid"] != first.data["rows"][0]["pid"]


def test_link_lost_during_call_is_db_connection(
    new_pg_services: Callable[..., ToolServices], run_tool_with: RunTool
) -> None:
    svc = new_pg_services()
    out = run_tool_with(
        svc,
        "postgres",
        {
            "auth": "pg_test",
            "query": "SELECT pg_terminate_backend(pg_backend_pid()); SELECT 1 AS after",
        },
    )
    error = _error(out)
    assert error["kind"] == "db_connection" and error["retryable"] is True
    # the dead connection did not poison the pool
    again = run_tool_with(svc, "postgres", {"auth": "pg_test", "query": "SELECT 1 AS ok"})
    assert again.ok, again.error


def test_concurrent_calls_share_a_bounded_pool(
    new_pg_services: Callable[..., ToolServices], run_tool_with: RunTool
) -> None:
    svc = new_pg_services()
    results: list[ToolOutcome] = []
    lock = threading.Lock()

    def work(i: int) -> None:
        out = run_tool_with(
            svc, "postgres", {"auth": "pg_test", "query": f"SELECT {i} AS i, pg_sleep(0.05)"}
        )
        with lock:
            results.append(out)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(24)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert all(r.ok for r in results), [r.error for r in results if not r.ok]
    assert sorted(r.data["rows"][0]["i"] for r in results) == list(range(24))
    pool = svc.pg_pool(svc.credentials.resolve("pg_test").postgres_conninfo())
    assert pool.get_stats()["pool_size"] <= 8
