"""Reading `script:` files at registration, and what a worker does with a script."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from noetl_celery.errors import PlaybookInvalid
from noetl_celery.models.playbook import Playbook
from noetl_celery.models.script_source import StoredScripts
from noetl_celery.models.validation import load_playbook
from noetl_celery.passes.scripts import apply_script, capture_scripts, script_text
from noetl_celery.settings import Settings
from noetl_celery.store.repository import catalog_digest
from noetl_celery.tools.script_fetch import ScriptFetchError
from noetl_celery.tools.services import ToolServices


def playbook(steps: str, workload: str = "") -> Playbook:
    text = (
        "apiVersion: noetl.io/v2\nkind: Playbook\nmetadata: {name: s, path: t/s}\n"
        + (f"workload:\n{workload}" if workload else "")
        + "workflow:\n"
        + steps
    )
    return load_playbook(text)


PY_FILE = """\
- step: start
  tool:
    kind: python
    script: {uri: ./lib/main.py, source: {type: file}}
"""


def test_relative_to_the_playbook_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib/main.py").write_text("def main():\n    return 1\n")
    (tmp_path / "pb.yaml").write_text("x")
    monkeypatch.chdir("/")
    stored = capture_scripts(playbook(PY_FILE), str(tmp_path / "pb.yaml"))
    assert stored is not None
    assert stored.files == {"./lib/main.py": "def main():\n    return 1\n"}
    assert stored.base_dir == str(tmp_path.resolve())


def test_falls_back_to_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # NoETL's fixtures give paths from the repository root, where `noetl` runs
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib/main.py").write_text("result = 2\n")
    elsewhere = tmp_path / "playbooks"
    elsewhere.mkdir()
    (elsewhere / "pb.yaml").write_text("x")
    monkeypatch.chdir(tmp_path)
    stored = capture_scripts(playbook(PY_FILE), str(elsewhere / "pb.yaml"))
    assert stored is not None and stored.files["./lib/main.py"] == "result = 2\n"


def test_uri_rendered_from_the_workload(tmp_path: Path) -> None:
    (tmp_path / "q.sql").write_text("SELECT 1")
    (tmp_path / "pb.yaml").write_text("x")
    steps = """\
- step: start
  tool:
    kind: duckdb
    script: {uri: "{{ workload.dir }}/q.sql", source: {type: file}}
- step: later
  tool:
    kind: python
    script: {uri: "{{ start.path }}", source: {type: file}}
"""
    stored = capture_scripts(playbook(steps, f"  dir: {tmp_path}\n"), str(tmp_path / "pb.yaml"))
    assert stored is not None and stored.files == {f"{tmp_path}/q.sql": "SELECT 1"}


def test_missing_file_names_file_and_step(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "pb.yaml").write_text("x")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(PlaybookInvalid) as caught:
        capture_scripts(playbook(PY_FILE), str(tmp_path / "pb.yaml"))
    [problem] = caught.value.problems
    assert problem.step == "start" and problem.field == "tool.script.uri"
    assert "script file './lib/main.py' not found (looked in" in problem.message
    assert str(tmp_path / "pb.yaml") in str(problem)


def test_problem_line_in_a_pipeline(tmp_path: Path) -> None:
    steps = """\
- step: start
  tool:
    - name: first
      kind: python
      code: "result = 1"
    - name: second
      kind: duckdb
      script:
        uri: ./none.sql
"""
    text = "apiVersion: noetl.io/v2\nkind: Playbook\nmetadata: {name: s}\nworkflow:\n" + steps
    with pytest.raises(PlaybookInvalid) as caught:
        capture_scripts(load_playbook(text), None, text)
    [problem] = caught.value.problems
    assert (problem.line, problem.step) == (13, "start")
    assert text.splitlines()[12].strip() == "uri: ./none.sql"


def test_unreadable_file_is_a_problem(tmp_path: Path) -> None:
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib/main.py").write_bytes(b"\xff\xfe\x00x")
    (tmp_path / "pb.yaml").write_text("x")
    with pytest.raises(PlaybookInvalid, match="UTF-16"):
        capture_scripts(playbook(PY_FILE), str(tmp_path / "pb.yaml"))


def test_no_file_scripts_store_nothing() -> None:
    steps = """\
- step: start
  tool:
    kind: python
    script: {uri: "http://127.0.0.1:9/x.py"}
- step: other
  tool: {kind: python, code: "result = 1"}
- step: inline
  tool:
    kind: python
    script: {uri: inline, source: {type: inline, code: "result = 2"}}
"""
    assert capture_scripts(playbook(steps), None) is None


def test_digest_follows_the_script_text() -> None:
    one = catalog_digest("yaml", {"base_dir": "/a", "files": {"x": "1"}})
    assert one == catalog_digest("yaml", {"base_dir": "/b", "files": {"x": "1"}})
    assert one != catalog_digest("yaml", {"base_dir": "/a", "files": {"x": "2"}})
    assert catalog_digest("yaml", None) == catalog_digest("yaml", {"files": {}})


def test_apply_script() -> None:
    python = apply_script("python", {"kind": "python", "code": "old", "script": {}}, "new", str)
    assert python == {"kind": "python", "code": "new"}
    sql = apply_script(
        "postgres",
        {"kind": "postgres", "auth": "pg", "query": "old", "script": {}},
        "SELECT {{ n }}",
        lambda text: text.replace("{{ n }}", "7"),
    )
    assert sql == {"kind": "postgres", "auth": "pg", "command": "SELECT 7"}


@pytest.fixture
def services(tmp_path: Path) -> Any:
    with ToolServices(Settings(home=tmp_path)) as built:
        yield built


def test_script_text_from_the_stored_files(services: ToolServices) -> None:
    stored = StoredScripts(base_dir="/nowhere", files={"./x.py": "result = 3"})
    assert script_text({"uri": "./x.py"}, stored, services, "step 'a'") == "result = 3"


def test_script_text_of_an_inline_source(services: ToolServices) -> None:
    raw = {"uri": "inline", "source": {"type": "inline", "code": "result = 5"}}
    assert script_text(raw, StoredScripts(), services, "step 'a'") == "result = 5"


def test_script_text_reads_beside_the_original_location(
    tmp_path: Path, services: ToolServices
) -> None:
    (tmp_path / "late.py").write_text("result = 4")
    stored = StoredScripts(base_dir=str(tmp_path))
    assert script_text({"uri": "late.py"}, stored, services, "step 'a'") == "result = 4"


@pytest.mark.parametrize(
    ("raw", "needle"),
    [
        ({"uri": "gs://b/x.py"}, "step 'a': script source 'gcs' is not supported by noetl-celery"),
        ({"uri": "s3://b/x.sql", "source": {"type": "s3"}}, "script source 's3' is not supported"),
        ({"uri": "gone.py"}, "step 'a': script file 'gone.py' was not stored"),
        ({"uri": "x", "source": {"type": "inline"}}, "step 'a': an inline script needs its code"),
        ({"uri": "ftp://h/x", "source": {"type": "http"}}, "is not an http(s) URL"),
    ],
)
def test_script_text_failures(
    raw: dict[str, Any], needle: str, services: ToolServices, tmp_path: Path
) -> None:
    with pytest.raises(ScriptFetchError) as caught:
        script_text(raw, StoredScripts(base_dir=str(tmp_path)), services, "step 'a'")
    assert caught.value.kind == "config_error"
    assert needle in caught.value.message


def test_unreachable_http_source(services: ToolServices) -> None:
    raw = {"uri": "http://127.0.0.1:9/x.py", "source": {"timeout": 2}}
    with pytest.raises(ScriptFetchError) as caught:
        script_text(raw, StoredScripts(), services, "step 'a'")
    assert caught.value.kind == "connection" and caught.value.retryable
    assert caught.value.message.startswith(
        "step 'a': cannot fetch script from http://127.0.0.1:9/x.py:"
    )
