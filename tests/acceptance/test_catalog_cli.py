"""`catalog list | show | register` and `run PATH` with a catalog path, as users call them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.workers import run_cli

pytestmark = pytest.mark.acceptance

VERSIONED = """apiVersion: noetl.io/v2
kind: Playbook
metadata: {{name: versioned, path: tests/versioned, description: "version {v}"}}
workflow:
  - step: only
    tool: {{kind: python, code: "result = {{'version': {v}}}"}}
"""


def cli_json(args: list[str], env: dict[str, str], code: int = 0) -> Any:
    proc = run_cli(args, env)
    assert proc.returncode == code, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 1, proc.stdout
    return json.loads(lines[0])


def one_line_error(args: list[str], env: dict[str, str], code: int = 2) -> str:
    """The command fails with `code` and exactly one line on stderr, no traceback."""
    proc = run_cli(args, env)
    assert proc.returncode == code, (proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    return lines[0]


@pytest.fixture
def two_versions(embedded_env: dict[str, str], tmp_path: Path) -> dict[int, str]:
    """`tests/versioned` registered twice: version 1 and version 2 (the latest)."""
    texts = {}
    for v in (1, 2):
        texts[v] = VERSIONED.format(v=v)
        file = tmp_path / "versioned.yaml"
        file.write_text(texts[v])
        out = cli_json(["catalog", "register", str(file), "--json"], embedded_env)
        assert out[0]["version"] == v and out[0]["created"] is True
    return texts


def test_run_a_catalog_path_starts_that_version(
    embedded_env: dict[str, str], two_versions: dict[int, str], tmp_path: Path
) -> None:
    # run from a directory without such a file: PATH can only be the catalog path
    latest = cli_json(["run", "tests/versioned", "--json"], embedded_env)
    assert latest["status"] == "COMPLETED" and latest["result"] == {"version": 2}
    first = cli_json(["run", "tests/versioned@1", "--json"], embedded_env)
    assert first["result"] == {"version": 1}
    events = cli_json(["events", first["execution_id"], "--json"], embedded_env)
    assert events[0]["type"] == "execution.started" and events[0]["payload"]["version"] == 1
    explicit = cli_json(["run", "tests/versioned@latest", "--json"], embedded_env)
    assert explicit["result"] == {"version": 2}
    # an existing file wins over a catalog path of the same spelling
    shadow = tmp_path / "tests" / "versioned"
    shadow.parent.mkdir()
    shadow.write_text(VERSIONED.format(v=7).replace("tests/versioned", "tests/shadow"))
    proc = run_cli(["run", "tests/versioned", "--json"], embedded_env, cwd=str(tmp_path))
    assert proc.returncode == 0 and json.loads(proc.stdout)["result"] == {"version": 7}


@pytest.mark.parametrize(
    ("arg", "message"),
    [
        (
            "tests/versiond",
            "tests/versiond is not a playbook file, and no playbook is registered at catalog "
            "path 'tests/versiond'; did you mean 'tests/versioned'?",
        ),
        (
            "versioned.yaml",
            "versioned.yaml is not a playbook file, and no playbook is registered at catalog "
            "path 'versioned.yaml'; did you mean 'tests/versioned'?",
        ),
        (
            "nothing/like/it",
            "nothing/like/it is not a playbook file, and no playbook is registered at catalog "
            "path 'nothing/like/it'",
        ),
        ("tests/versioned@3", "catalog path 'tests/versioned' has no version 3 (registered: 1, 2)"),
        (
            "tests/versioned@two",
            "version 'two' in 'tests/versioned@two' is not a version number (use "
            "PATH@VERSION, e.g. tests/versioned@1)",
        ),
        ("tests/versioned@0", "version '0' in 'tests/versioned@0' is not a version number"),
        ("@2", "'@2' has no catalog path before '@'"),
        (".", ". is a directory; give a playbook file or a catalog path"),
    ],
)
def test_run_path_that_names_nothing(
    embedded_env: dict[str, str], two_versions: dict[int, str], arg: str, message: str
) -> None:
    line = one_line_error(["run", arg], embedded_env)
    assert line.startswith(message), line
    # --json still prints exactly one object, with the same message
    out = cli_json(["run", arg, "--json"], embedded_env, code=2)
    assert out["status"] == "FAILED" and out["execution_id"] is None
    assert out["error"].startswith(message)


def test_catalog_list_and_show(embedded_env: dict[str, str], two_versions: dict[int, str]) -> None:
    [row] = cli_json(["catalog", "list", "--json"], embedded_env)
    assert row["path"] == "tests/versioned" and row["name"] == "versioned"
    assert row["latest_version"] == 2 and row["versions"] == 2
    assert row["registered_at"].endswith("Z") and row["first_registered_at"] <= row["registered_at"]
    table = run_cli(["catalog", "list"], embedded_env)
    assert table.returncode == 0
    assert "tests/versioned" in table.stdout and "v2" in table.stdout

    shown = cli_json(["catalog", "show", "tests/versioned", "--json"], embedded_env)
    assert shown["version"] == 2 and shown["latest_version"] == 2
    assert shown["content"] == two_versions[2]
    assert shown["metadata"] == {
        "name": "versioned",
        "path": "tests/versioned",
        "description": "version 2",
    }
    assert [v["version"] for v in shown["versions"]] == [1, 2]
    old = cli_json(["catalog", "show", "tests/versioned@1", "--json"], embedded_env)
    assert old["version"] == 1 and old["content"] == two_versions[1]
    assert old["catalog_id"] == shown["versions"][0]["catalog_id"]

    # the plain output is the YAML, its catalog facts as comments: it can be saved and run
    plain = run_cli(["catalog", "show", "tests/versioned@1"], embedded_env)
    assert plain.returncode == 0
    assert plain.stdout.startswith("# catalog path: tests/versioned\n# version: 1 (latest 2;")
    assert plain.stdout.endswith(two_versions[1])
    assert yaml.safe_load(plain.stdout) == yaml.safe_load(two_versions[1])

    assert one_line_error(["catalog", "show", "tests/versiond"], embedded_env) == (
        "no playbook is registered at catalog path 'tests/versiond'; did you mean "
        "'tests/versioned'?"
    )
    assert one_line_error(["catalog", "show", "tests/versioned@9", "--json"], embedded_env) == (
        "catalog path 'tests/versioned' has no version 9 (registered: 1, 2)"
    )
    assert one_line_error(["catalog", "show", "tests/versioned@v1"], embedded_env).startswith(
        "version 'v1' in 'tests/versioned@v1' is not a version number"
    )


def test_catalog_list_of_an_empty_catalog(embedded_env: dict[str, str]) -> None:
    assert cli_json(["catalog", "list", "--json"], embedded_env) == []


def test_register_skips_invalid_files_and_shared_paths(
    embedded_env: dict[str, str], tmp_path: Path
) -> None:
    (tmp_path / "a_ok.yaml").write_text(VERSIONED.format(v=1))
    (tmp_path / "b_bad.yaml").write_text(
        # a misspelled `tool:` (a step without any tool is a noop, as in NoETL's engine)
        "apiVersion: noetl.io/v2\nkind: Playbook\nmetadata: {name: b}\nworkflow:\n"
        "  - step: a\n    tol: {kind: noop}\n"
    )
    twin = VERSIONED.format(v=1).replace("tests/versioned", "tests/twin")
    (tmp_path / "c_twin.yaml").write_text(twin)
    (tmp_path / "d_twin.yaml").write_text(twin.replace("{'version': 1}", "{'version': 2}"))

    proc = run_cli(["catalog", "register", str(tmp_path)], embedded_env)
    assert proc.returncode == 2
    assert proc.stdout == f"registered tests/versioned v1 ({tmp_path / 'a_ok.yaml'})\n"
    err = proc.stderr.splitlines()
    assert err[-1] == "1 registered, 0 unchanged, 3 skipped"
    c, d = tmp_path / "c_twin.yaml", tmp_path / "d_twin.yaml"
    assert f"{c}:3: field 'metadata.path': catalog path 'tests/twin' is also declared by {d}" in (
        proc.stderr
    )
    assert f"{d}:3: field 'metadata.path': catalog path 'tests/twin' is also declared by {c}" in (
        proc.stderr
    )
    assert "Traceback" not in proc.stderr
    # neither twin reached the catalog
    assert [r["path"] for r in cli_json(["catalog", "list", "--json"], embedded_env)] == [
        "tests/versioned"
    ]

    rows = cli_json(["catalog", "register", str(tmp_path), "--json"], embedded_env, code=2)
    by_file = {Path(r["file"]).name: r for r in rows}
    assert by_file["a_ok.yaml"]["created"] is False  # registered above, unchanged
    assert by_file["b_bad.yaml"]["skipped"] is True
    [problem] = by_file["d_twin.yaml"]["problems"]
    assert problem["field"] == "metadata.path" and problem["line"] == 3
    assert problem["message"].startswith(f"catalog path 'tests/twin' is also declared by {c};")

    # the twins registered one at a time are two versions of one path, as asked
    for file in (c, d):
        cli_json(["catalog", "register", str(file), "--json"], embedded_env)
    twins = cli_json(["catalog", "show", "tests/twin", "--json"], embedded_env)
    assert twins["version"] == 2


def test_register_summary_when_all_is_well(embedded_env: dict[str, str], tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(VERSIONED.format(v=1))
    first = run_cli(["catalog", "register", str(tmp_path)], embedded_env)
    assert first.returncode == 0 and first.stdout.endswith("1 registered, 0 unchanged, 0 skipped\n")
    again = run_cli(["catalog", "register", str(tmp_path)], embedded_env)
    assert again.returncode == 0 and again.stdout.endswith("0 registered, 1 unchanged, 0 skipped\n")
