"""`script:` sources end to end: embedded runs through the CLI, and distributed runs on
the session's worker processes (which never see the script files).

File scripts are read where the playbook is registered and stored with its catalog
version; http scripts are fetched by the worker from a local server; gcs/s3 fail the step.
"""

from __future__ import annotations

import shutil
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import psycopg
import pytest

from noetl_celery.engine.service import Engine
from noetl_celery.errors import PlaybookInvalid
from tests.support.workers import run_cli, run_json

pytestmark = pytest.mark.integration

GREET = """\
def main(name, count=1):
    return {"messages": [f"Hello, {name}! (#{i + 1})" for i in range(count)], "count": count}
"""
TOTAL = "result = {'total': sum(numbers), 'seen': len(numbers)}\n"
# rendered like inline SQL: `table` comes from the step's input
MAKE_SQL = """\
-- a file of statements, as NoETL's create_test_table.sql
DROP TABLE IF EXISTS {{ table }};
CREATE TABLE {{ table }} (id serial PRIMARY KEY, message text NOT NULL);
INSERT INTO {{ table }} (message) VALUES ('from a file'), ('stored with the catalog');
SELECT count(*) AS total_records, 'file' AS script_source FROM {{ table }};
"""
DUCK_SQL = "CREATE TABLE n AS SELECT * FROM range(4) r(i);\nSELECT sum(i) AS total FROM n;\n"


def playbook(path: str, table: str) -> str:
    return f"""\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {{name: script_sources, path: {path}}}
workload:
  lib: ./lib
  who: Ada
  script_url: http://127.0.0.1:9/none.py
workflow:
  - step: start
    tool:
      kind: python
      script: {{uri: "{{{{ workload.lib }}}}/greet.py", source: {{type: file}}}}
      input: {{name: "{{{{ who }}}}", count: 2}}
    next: {{arcs: [{{step: summed}}]}}
  - step: summed
    tool:
      kind: python
      script: {{uri: ./lib/total.py}}
      input: {{numbers: [1, 2, 3]}}
    next: {{arcs: [{{step: pg}}]}}
  - step: pg
    tool:
      kind: postgres
      auth: pg_test
      script: {{uri: sql/make.sql, source: {{type: file}}}}
      input: {{table: {table}}}
    next: {{arcs: [{{step: duck}}]}}
  - step: duck
    tool:
      kind: duckdb
      database: ":memory:"
      script: {{uri: ./sql/duck.sql}}
    next: {{arcs: [{{step: fetched}}]}}
  - step: fetched
    tool:
      kind: python
      script:
        uri: greet.py
        source: {{type: http, endpoint: "{{{{ script_url }}}}/greet.py", timeout: 10}}
      input: {{name: Web}}
"""


def write_project(root: Path, path: str, table: str) -> Path:
    (root / "lib").mkdir(parents=True)
    (root / "sql").mkdir()
    (root / "lib/greet.py").write_text(GREET)
    (root / "lib/total.py").write_text(TOTAL)
    (root / "sql/make.sql").write_text(MAKE_SQL)
    (root / "sql/duck.sql").write_text(DUCK_SQL)
    file = root / "scripts.yaml"
    file.write_text(playbook(path, table))
    return file


@contextmanager
def serving(directory: Path) -> Iterator[str]:
    """A static file server on loopback (scripts fetched over http)."""

    class Quiet(SimpleHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(Quiet, directory=str(directory)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def check_steps(steps: dict[str, Any]) -> None:
    assert steps["start"] == {
        "messages": ["Hello, Ada! (#1)", "Hello, Ada! (#2)"],
        "count": 2,
    }
    assert steps["summed"] == {"total": 6, "seen": 3}
    pg = steps["pg"]
    assert pg["rows"] == [{"total_records": 2, "script_source": "file"}]
    assert pg["statement_count"] == 4
    assert steps["duck"]["rows"] == [{"total": 6}]
    assert steps["fetched"] == {"messages": ["Hello, Web! (#1)"], "count": 1}


def table_rows(data_db: str, table: str) -> int:
    with psycopg.connect(data_db, autocommit=True) as conn:
        count = conn.execute(f"SELECT count(*) FROM {table}").fetchone()
        conn.execute(f"DROP TABLE {table}")
    assert count is not None
    return int(count[0])


def unique() -> str:
    return uuid.uuid4().hex[:8]


# ---- embedded (the CLI, SQLite, in-process workers) ------------------------------------------
def test_embedded_run_of_a_file(embedded_env: dict[str, str], tmp_path: Path, data_db: str) -> None:
    tag = unique()
    file = write_project(tmp_path / "project", f"tests/scripts_{tag}", f"script_e_{tag}")
    served = tmp_path / "served"
    served.mkdir()
    (served / "greet.py").write_text(GREET)
    with serving(served) as url:
        # from another directory: relative script paths are the playbook file's
        rc, out, err = run_json_in(
            ["run", str(file), "--json", "--set", f"script_url={url}"], embedded_env, "/"
        )
    assert rc == 0, (out, err)
    assert out["status"] == "COMPLETED", out["errors"]
    check_steps(out["steps"])
    assert table_rows(data_db, f"script_e_{tag}") == 2


def test_registered_playbook_runs_by_catalog_path_anywhere(
    embedded_env: dict[str, str], tmp_path: Path, data_db: str
) -> None:
    tag = unique()
    project = tmp_path / "project"
    file = write_project(project, f"tests/scripts_{tag}", f"script_c_{tag}")
    proc = run_cli(["catalog", "register", str(file)], embedded_env, cwd=str(project))
    assert proc.returncode == 0, proc.stderr
    served = tmp_path / "served"
    served.mkdir()
    (served / "greet.py").write_text(GREET)
    shutil.rmtree(project)  # the catalog version holds the scripts: no file is needed
    rc, shown, err = run_json(["catalog", "show", f"tests/scripts_{tag}", "--json"], embedded_env)
    assert rc == 0, err
    assert shown["scripts"]["files"] == {
        "./lib/greet.py": GREET,
        "./lib/total.py": TOTAL,
        "sql/make.sql": MAKE_SQL,
        "./sql/duck.sql": DUCK_SQL,
    }
    assert shown["scripts"]["base_dir"] == str(project.resolve())
    text = run_cli(["catalog", "show", f"tests/scripts_{tag}"], embedded_env).stdout
    assert "# script files stored with this version: ./lib/greet.py, ./lib/total.py, " in text
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    with serving(served) as url:
        rc, out, err = run_json_in(
            ["run", f"tests/scripts_{tag}", "--json", "--set", f"script_url={url}"],
            embedded_env,
            str(elsewhere),
        )
    assert rc == 0 and out["status"] == "COMPLETED", (out, err)
    check_steps(out["steps"])
    assert table_rows(data_db, f"script_c_{tag}") == 2


def test_a_changed_script_file_registers_a_new_version(
    embedded_env: dict[str, str], tmp_path: Path
) -> None:
    tag = unique()
    file = write_project(tmp_path, f"tests/scripts_{tag}", "unused")
    versions = []
    for text in ("result = 1\n", "result = 1\n", "result = 2\n"):
        (tmp_path / "lib/total.py").write_text(text)
        rc, out, err = run_json(["catalog", "register", str(file), "--json"], embedded_env)
        assert rc == 0, err
        versions.append(out[0]["version"])
    assert versions == [1, 1, 2]


def test_missing_script_file_is_a_validation_error(
    embedded_env: dict[str, str], tmp_path: Path
) -> None:
    file = tmp_path / "missing.yaml"
    file.write_text("""\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: missing_script}
workflow:
  - step: start
    tool:
      kind: postgres
      auth: pg_test
      script: {uri: ./sql/nowhere.sql, source: {type: file}}
""")
    proc = run_cli(["run", str(file)], embedded_env, cwd=str(tmp_path))
    assert proc.returncode == 2, proc.stderr
    assert f"{file}:9: step 'start': field 'tool.script.uri': script file './sql/nowhere.sql' " in (
        proc.stderr
    )
    assert "not found (looked in" in proc.stderr
    checked = run_cli(["validate", str(file)], embedded_env, cwd=str(tmp_path))
    assert checked.returncode == 2
    assert "step 'start': field 'tool.script.uri': script file './sql/nowhere.sql'" in (
        checked.stderr
    )


UNSUPPORTED = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {{name: cloud_script, path: tests/cloud_{tag}}}
workflow:
  - step: start
    tool: {{kind: python, code: "result = 1"}}
    next: {{arcs: [{{step: cloud}}]}}
  - step: cloud
    tool:
      kind: postgres
      auth: pg_test
      script:
        uri: s3://bucket/migrations/upgrade.sql
        source: {{type: s3, region: us-east-1, auth: aws_credentials}}
  - step: web
    tool:
      kind: python
      script: {{uri: "http://127.0.0.1:9/gone.py"}}
"""


def test_unsupported_source_fails_the_step(embedded_env: dict[str, str], tmp_path: Path) -> None:
    file = tmp_path / "cloud.yaml"
    file.write_text(UNSUPPORTED.format(tag=unique()))
    proc = run_cli(["run", str(file), "--json"], embedded_env)
    assert "warning: script source 's3' is not supported by noetl-celery" in proc.stderr
    out = json_line(proc)
    assert out["status"] == "FAILED"
    [error] = out["errors"]
    assert error["step"] == "cloud" and error["kind"] == "config_error"
    assert error["message"].startswith(
        "step 'cloud': script source 's3' is not supported by noetl-celery"
    )


def test_unreachable_http_source_fails_the_step(
    embedded_env: dict[str, str], tmp_path: Path
) -> None:
    file = tmp_path / "web.yaml"
    text = UNSUPPORTED.format(tag=unique()).replace("step: cloud}", "step: web}")
    file.write_text(text)
    proc = run_cli(["run", str(file), "--json"], embedded_env)
    out = json_line(proc)
    assert out["status"] == "FAILED"
    [error] = out["errors"]
    assert error["step"] == "web" and error["kind"] == "connection"
    assert error["message"].startswith(
        "step 'web': cannot fetch script from http://127.0.0.1:9/gone.py:"
    )


def run_json_in(args: list[str], env: dict[str, str], cwd: str) -> tuple[int, Any, str]:
    proc = run_cli(args, env, cwd=cwd)
    return proc.returncode, json_line(proc), proc.stderr


def json_line(proc: Any) -> Any:
    import json

    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 1, (proc.stdout, proc.stderr)
    return json.loads(lines[0])


# ---- distributed (Postgres, Redis, two worker processes) ------------------------------------
def test_distributed_workers_need_no_script_file(
    engine_on_workers: Engine, tmp_path: Path, data_db: str
) -> None:
    engine = engine_on_workers
    tag = unique()
    project = tmp_path / "project"
    file = write_project(project, f"tests/scripts_d_{tag}", f"script_d_{tag}")
    _, entry = engine.register_file(file)
    shutil.rmtree(project)
    served = tmp_path / "served"
    served.mkdir()
    (served / "greet.py").write_text(GREET)
    with serving(served) as url:
        eid = engine.start_path(entry.path, {"script_url": url})
        row = engine.wait(eid, 90)
    assert row.status == "COMPLETED", engine.summary(eid)["errors"]
    check_steps(engine.summary(eid)["steps"])
    assert table_rows(data_db, f"script_d_{tag}") == 2


def test_distributed_unsupported_and_missing(engine_on_workers: Engine, tmp_path: Path) -> None:
    engine = engine_on_workers
    eid = engine.start_text(UNSUPPORTED.format(tag=unique()))
    assert engine.wait(eid, 60).status == "FAILED"
    [error] = engine.summary(eid)["errors"]
    assert str(error["message"]).startswith(
        "step 'cloud': script source 's3' is not supported by noetl-celery"
    )
    file = tmp_path / "pb.yaml"
    file.write_text(playbook(f"tests/nofile_{unique()}", "unused"))
    with pytest.raises(PlaybookInvalid, match=r"step 'start'.*script file './lib/greet.py'"):
        engine.register_file(file)
