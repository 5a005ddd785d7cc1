from __future__ import annotations

import base64
import json
import random

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


def _sqlparse_split(sql: str) -> tuple[str, ...]:
    """The reference: every statement as sqlparse cuts it, blank ones dropped."""
    import sqlparse

    statements = (s.strip() for s in sqlparse.split(sql.strip()))
    return tuple(
        s
        for s in statements
        if s and sqlparse.format(s, strip_comments=True).strip().strip(";").strip()
    )


# fragments a rendered statement is made of, marks inside and outside quotes
FRAGMENTS = [
    "SELECT 1",
    "INSERT INTO t VALUES (",
    ")",
    " ",
    "\n",
    "'a;b'",
    "'it''s; -- not a comment'",
    "'/* nor this */'",
    "'$$'",
    '"col;umn"',
    '"say ""hi"";"',
    "-- note\n",
    "/* block; */",
    ";",
    "$$ x; y $$",
    "$q$ ; $q$",
    "E'\\';'",
    "e",
    '\'{"k": "v; w"}\'::jsonb',
    "'C:\\dir;\\n'",  # backslashes, none before a quote
    "BEGIN",
    "END",
    "CREATE FUNCTION f() RETURNS int AS 'select 1;' LANGUAGE sql",
    "42",  # numbers and digits in names: masked as `0` for sqlparse
    "t2",
    "3.5e10",
    "BEGIN1",
]


def test_the_split_is_the_one_sqlparse_makes_on_generated_texts() -> None:
    """Statements cut by `;` alone are cut with their quoted values masked (one token
    each to sqlparse); one with a comment, a dollar quote or a backslash before a quote
    is read whole by sqlparse. Either way the cut is sqlparse's."""
    rng = random.Random(15)
    for _ in range(5000):
        sql = "".join(rng.choice(FRAGMENTS) for _ in range(rng.randint(1, 12)))
        # the same statements; trailing `;` and blanks are kept as written (empty statements)
        ours = [s.rstrip("; \n") for s in split_statements(sql)]
        assert ours == [s.rstrip("; \n") for s in _sqlparse_split(sql)], sql


def test_a_statement_carrying_json_is_not_lexed(monkeypatch: pytest.MonkeyPatch) -> None:
    """A page of records rendered into one INSERT: its `;`, `--`, `/*` and `$` are all
    inside the string, so the text is one statement without sqlparse (which lexes in
    Python: a quarter of a PFT drain's worker CPU went there)."""
    import sqlparse

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("sqlparse was asked")

    monkeypatch.setattr(sqlparse, "split", refuse)
    monkeypatch.setattr(sqlparse, "format", refuse)
    notes = [{"note": f"take 2; -- then /* {i} */ $5", "q": "it's"} for i in range(50)]
    records = json.dumps(notes)
    sql = (
        "INSERT INTO t (payload) SELECT '"
        + records.replace("'", "''")
        + "'::jsonb ON CONFLICT DO NOTHING;"
    )
    assert split_statements(sql) == (sql,)
    assert split_statements('SELECT "a;b" FROM t;;') == ('SELECT "a;b" FROM t;;',)


def test_renders_of_one_template_are_lexed_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two statements rendered per row (an upsert, then the queue row marked done):
    rows differ in their numbers and quoted values only, so sqlparse lexes the text
    they have in common once, and each render is still cut where sqlparse cuts it."""
    from sqlparse.engine import FilterStack

    template = (
        "INSERT INTO d (id, payload) VALUES ({id}, '{payload}'::jsonb) ON CONFLICT (id) "
        "DO UPDATE SET payload = EXCLUDED.payload; UPDATE q SET status = 'done' "
        "WHERE item_id = '{id}' AND shard = {id}1;"
    )
    renders = [
        template.format(id=row, payload=json.dumps({"row": row, "note": f"a; b {row}"}))
        for row in range(300, 320)
    ]
    expected = [_sqlparse_split(sql) for sql in renders]
    assert all(len(statements) == 2 for statements in expected)
    lexed: list[str] = []
    run = FilterStack.run

    def counted(self: FilterStack, sql: str, *args: object) -> object:
        lexed.append(sql)
        return run(self, sql, *args)

    monkeypatch.setattr(FilterStack, "run", counted)
    assert [split_statements(sql) for sql in renders] == expected
    assert len(lexed) <= 1  # once, or never: an earlier test may have lexed it first


@pytest.mark.parametrize(
    ("sql", "expected"),
    [
        ("SELECT 1; SELECT 2", ("SELECT 1;", "SELECT 2")),
        ("SELECT ';'; SELECT 2;", ("SELECT ';';", "SELECT 2;")),
        ("SELECT E'\\';'; SELECT 2", ("SELECT E'\\';';", "SELECT 2")),  # backslash escape
        (
            "INSERT INTO t SELECT '{\"a\": 1}; x'; UPDATE u SET v = ';'",
            ("INSERT INTO t SELECT '{\"a\": 1}; x';", "UPDATE u SET v = ';'"),
        ),
        ("SELECT 1 -- a; b", ("SELECT 1 -- a; b",)),  # a comment's `;` ends nothing
    ],
)
def test_texts_with_marks_outside_quotes_are_cut_there(sql: str, expected: tuple[str, ...]) -> None:
    assert split_statements(sql) == expected
