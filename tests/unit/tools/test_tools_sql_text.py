from __future__ import annotations

import base64

import pytest

from noetl_celery.tools.sql_text import (
    SqlSourceError,
    extract_sql,
    first_keyword,
    split_statements,
)

DO_BLOCK = """DO $$
BEGIN
  INSERT INTO t VALUES (1);
  RAISE NOTICE 'a; b';
END
$$;"""


def test_dollar_quoted_block_stays_whole() -> None:
    sql = f"CREATE TABLE t (id int);\n{DO_BLOCK}\nSELECT ';' AS s, \"a;b\" FROM t;"
    assert split_statements(sql) == (
        "CREATE TABLE t (id int);",
        DO_BLOCK,
        "SELECT ';' AS s, \"a;b\" FROM t;",
    )


def test_tagged_dollar_quotes() -> None:
    sql = (
        "CREATE FUNCTION f() RETURNS int AS $fn$ BEGIN RETURN 1; END $fn$ LANGUAGE plpgsql;"
        " SELECT f()"
    )
    statements = split_statements(sql)
    assert len(statements) == 2 and statements[1] == "SELECT f()"


def test_empty_and_comment_only_statements_are_dropped() -> None:
    sql = "-- leading\nSELECT 1;\n;\n/* block */ ;\n-- trailing only\n"
    assert split_statements(sql) == ("-- leading\nSELECT 1;",)
    assert split_statements("  ") == ()
    assert split_statements("-- nothing here") == ()
    assert split_statements(";;") == ()


def test_single_statement_fast_path_keeps_text() -> None:
    assert split_statements("  SELECT 1;  ") == ("SELECT 1;",)
    assert split_statements("SELECT 'x' -- note") == ("SELECT 'x' -- note",)


def test_extract_sql_priorities_and_forms() -> None:
    encoded = base64.b64encode(b"SELECT 2").decode()
    assert extract_sql({"query": "SELECT 1", "command_b64": encoded}, "pg") == "SELECT 2"
    assert extract_sql({"commands": ["SELECT 1;", "SELECT 2;"]}, "pg") == "SELECT 1;\nSELECT 2;"
    assert extract_sql({"cmd": "SELECT 3"}, "pg") == "SELECT 3"
    assert extract_sql({"query": "", "command": "SELECT 4"}, "pg") == "SELECT 4"


@pytest.mark.parametrize(
    ("config", "needle"),
    [
        ({}, "postgres tool needs `command` or `query`"),
        ({"query_b64": "@@@"}, "not valid base64"),
    ],
)
def test_extract_sql_errors(config: dict[str, object], needle: str) -> None:
    with pytest.raises(SqlSourceError, match=needle):
        extract_sql(config, "postgres")


def test_first_keyword() -> None:
    assert first_keyword("  insert into t values (1)") == "INSERT"
    assert first_keyword("-- c\n/* d */ select 1") == "SELECT"
    assert first_keyword("(select 1)") == ""
