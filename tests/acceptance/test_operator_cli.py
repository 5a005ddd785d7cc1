"""The operator's commands: `executions`, `status` as a table, `--json` everywhere."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import struct
import subprocess
import sys
import termios
from pathlib import Path
from typing import Any

import pytest

from noetl_celery.store.schema import SCHEMA_REVISION
from tests.support.workers import run_cli

ROOT = Path(__file__).resolve().parents[2]
HELLO = ROOT / "playbooks" / "examples" / "hello_world.yaml"
pytestmark = pytest.mark.acceptance


def run_json(args: list[str], env: dict[str, str], code: int = 0) -> Any:
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
    ids = [r["execution_id"] for r in run_json(["executions", "--json"], embedded_env)]
    assert ids == [second["execution_id"], failed["execution_id"], first["execution_id"]]
    only_failed = run_json(["executions", "--status", "failed", "--json"], embedded_env)
    assert [(r["execution_id"], r["status"], r["path"]) for r in only_failed] == [
        (failed["execution_id"], "FAILED", "tests/f")
    ]
    by_path = run_json(
        ["executions", "--playbook", "examples/hello_world", "--limit", "1", "--json"],
        embedded_env,
    )
    assert [r["execution_id"] for r in by_path] == [second["execution_id"]]
    assert set(by_path[0]) >= {
        "execution_id",
        "path",
        "status",
        "created_at",
        "finished_at",
        "duration_seconds",
        "parent_execution_id",
        "trigger",
        "rerun_of",
        "trigger_detail",
    }
    assert (by_path[0]["trigger"], by_path[0]["trigger_detail"]) == ("manual", None)
    table = run_cli(["executions"], embedded_env)
    assert table.returncode == 0 and "examples/hello_world" in table.stdout
    bad = run_cli(["executions", "--status", "sleeping"], embedded_env)
    assert bad.returncode == 2 and "unknown status" in bad.stderr


def test_status_prints_a_table(embedded_env: dict[str, str]) -> None:
    out = run_json(["run", str(HELLO), "--json"], embedded_env)
    proc = run_cli(["status", out["execution_id"]], embedded_env)
    assert proc.returncode == 0
    assert "COMPLETED" in proc.stdout and "greet_each" in proc.stdout and "3/3" in proc.stdout


def test_register_and_upgrade_speak_json(embedded_env: dict[str, str], tmp_path: Path) -> None:
    (tmp_path / "ok.yaml").write_text(HELLO.read_text())
    (tmp_path / "bad.yaml").write_text(
        "apiVersion: noetl.io/v2\nkind: Playbook\nmetadata: {name: b}\nworkflow:\n"
        "  - step: a\n    tol: {kind: noop}\n"
    )
    rows = run_json(["catalog", "register", str(tmp_path), "--json"], embedded_env, code=2)
    by_file = {Path(r["file"]).name: r for r in rows}
    assert by_file["ok.yaml"]["path"] == "examples/hello_world"
    assert by_file["bad.yaml"]["skipped"] is True
    [problem] = by_file["bad.yaml"]["problems"]
    assert problem["step"] == "a" and problem["line"] == 5 and problem["severity"] == "error"
    assert "misspelling of `tool`" in problem["message"]
    assert problem["file"] == str(tmp_path / "bad.yaml")
    assert by_file["ok.yaml"]["created"] is True and by_file["ok.yaml"]["version"] == 1
    assert run_json(["db", "upgrade", "--json"], embedded_env) == {"revision": SCHEMA_REVISION}


def test_validate_speaks_json(embedded_env: dict[str, str], tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "apiVersion: noetl.io/v2\nkind: Playbook\nmetadata: {name: x}\nworkflow:\n"
        "  - step: a\n    tool: {kind: noop}\n    next: {arcs: [{step: b}]}\n"
        "  - step: b\n    tool: {kind: nope}\n"
    )
    problems = run_json(["validate", str(HELLO), str(bad), "--json"], embedded_env, code=2)
    assert isinstance(problems, list) and problems
    assert all(set(p) == {"file", "line", "step", "field", "message", "severity"} for p in problems)
    assert {p["file"] for p in problems} == {str(bad)}  # the good file has no problems
    assert any(p["line"] == 9 and p["step"] == "b" and p["severity"] == "error" for p in problems)
    assert run_json(["validate", str(HELLO), "--json"], embedded_env) == []


SLOW_LOOP = """apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: slow, path: tests/slow}
workload: {items: [1, 2, 3, 4, 5, 6]}
workflow:
  - step: crawl
    loop: {in: "{{ items }}", iterator: i, spec: {mode: sequential}}
    tool: {kind: python, code: "import time\\ntime.sleep(0.3)\\nresult = {}"}
"""


def read_terminal(args: list[str], env: dict[str, str]) -> tuple[int, str, str]:
    """Run the CLI with stderr on a pseudo-terminal: (exit code, stdout, terminal text)."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    proc = subprocess.Popen(
        [sys.executable, "-m", "noetl_celery.cli.main", *args],
        env={**env, "TERM": "xterm-256color"},
        stdout=subprocess.PIPE,
        stderr=slave,
    )
    os.close(slave)
    chunks = []
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: every writer of the terminal has closed it
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(master)
    stdout = proc.communicate(timeout=120)[0].decode()
    terminal = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", b"".join(chunks).decode(errors="replace"))
    return proc.returncode, stdout, terminal


def test_run_shows_live_progress_on_a_terminal_only(
    embedded_env: dict[str, str], tmp_path: Path
) -> None:
    pb = tmp_path / "slow.yaml"
    pb.write_text(SLOW_LOOP)
    code, stdout, terminal = read_terminal(["run", str(pb)], embedded_env)
    assert code == 0 and "COMPLETED" in stdout
    assert "running: crawl" in terminal and "loops" in terminal
    assert re.search(r"crawl .* sequential .* [1-5]/6", terminal), terminal
    piped = run_cli(["run", str(pb)], embedded_env)
    assert piped.returncode == 0 and "running:" not in piped.stderr
    # --json stays one object on stdout, even on a terminal
    code, stdout, _ = read_terminal(["run", str(pb), "--json"], embedded_env)
    assert code == 0 and json.loads(stdout)["status"] == "COMPLETED"
    assert len(stdout.strip().splitlines()) == 1


def test_json_log_lines_name_execution_step_and_command(embedded_env: dict[str, str]) -> None:
    proc = run_cli(
        ["-v", "run", str(HELLO), "--json"], {**embedded_env, "NOETL_LOG_FORMAT": "json"}
    )
    assert proc.returncode == 0, proc.stderr
    eid = json.loads(proc.stdout)["execution_id"]
    entries = [json.loads(line) for line in proc.stderr.splitlines() if line.strip()]
    [done] = [e for e in entries if e["message"] == f"execution {eid} COMPLETED"]
    assert done["level"] == "INFO" and done["logger"] == "noetl_celery.orchestrate"
    # folded by the command whose completion ended the run, which the line names
    assert done["execution_id"] == eid and done["command_id"].startswith(f"{eid}:")
    assert done["step"] == done["command_id"].split(":")[1]
