"""The operator's commands: `executions`, `status` as a table, `--json` everywhere."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.workers import run_cli

ROOT = Path(__file__).resolve().parents[2]
HELLO = ROOT / "playbooks" / "examples" / "hello_world.yaml"
pytestmark = pytest.mark.acceptance


def run_json(args: list[str], env: dict[str, str], code: int = 0) -> object:
    proc = run_cli(args, env)
    assert proc.returncode == code, proc.stderr
    return json.loads(proc.stdout)


def test_executions_lists_newest_first_with_filters(
    embedded_env: dict[str, str], tmp_path: Path
) -> None:
    failing = tmp_path / "fail.yaml"
    failing.write_text(
        "apiVersion: noetl.io/v2\nkind: Playbook\nmetadata: {name: f, path: tests/f}\n"
        "workflow:\n  - step: a\n    tool: {kind: python, code: \"assert False, 'no'\"}\n"
    )
    first = run_json(["run", str(HELLO), "--json"], embedded_env)
    failed = run_json(["run", str(failing), "--json"], embedded_env, code=1)
    second = run_json(["run", str(HELLO), "--json"], embedded_env)
    ids = [r["execution_id"] for r in run_json(["executions", "--json"], embedded_env)]  # type: ignore[union-attr]
    assert ids == [second["execution_id"], failed["execution_id"], first["execution_id"]]  # type: ignore[index]
    only_failed = run_json(["executions", "--status", "failed", "--json"], embedded_env)
    assert [(r["execution_id"], r["status"], r["path"]) for r in only_failed] == [  # type: ignore[union-attr]
        (failed["execution_id"], "FAILED", "tests/f")  # type: ignore[index]
    ]
    by_path = run_json(
        ["executions", "--playbook", "examples/hello_world", "--limit", "1", "--json"],
        embedded_env,
    )
    assert [r["execution_id"] for r in by_path] == [second["execution_id"]]  # type: ignore[union-attr,index]
    table = run_cli(["executions"], embedded_env)
    assert table.returncode == 0 and "examples/hello_world" in table.stdout
    bad = run_cli(["executions", "--status", "sleeping"], embedded_env)
    assert bad.returncode == 2 and "unknown status" in bad.stderr


def test_status_prints_a_table(embedded_env: dict[str, str]) -> None:
    out = run_json(["run", str(HELLO), "--json"], embedded_env)
    proc = run_cli(["status", out["execution_id"]], embedded_env)  # type: ignore[index]
    assert proc.returncode == 0
    assert "COMPLETED" in proc.stdout and "greet_each" in proc.stdout and "3/3" in proc.stdout


def test_register_and_upgrade_speak_json(embedded_env: dict[str, str], tmp_path: Path) -> None:
    (tmp_path / "ok.yaml").write_text(HELLO.read_text())
    (tmp_path / "bad.yaml").write_text(
        "apiVersion: noetl.io/v2\nkind: Playbook\nmetadata: {name: b}\nworkflow:\n  - step: a\n"
    )
    rows = run_json(["catalog", "register", str(tmp_path), "--json"], embedded_env, code=2)
    by_file = {Path(r["file"]).name: r for r in rows}  # type: ignore[union-attr]
    assert by_file["ok.yaml"]["path"] == "examples/hello_world"
    assert by_file["bad.yaml"]["skipped"] is True
    assert any("has no `tool`" in p for p in by_file["bad.yaml"]["problems"])
    assert run_json(["db", "upgrade", "--json"], embedded_env) == {"revision": "0005"}
