"""The CLI as users and the compat kit call it (subprocesses, real services)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.support.workers import run_cli, run_json

ROOT = Path(__file__).resolve().parents[2]
HELLO = ROOT / "playbooks" / "examples" / "hello_world.yaml"
RUN_KEYS = {
    "execution_id",
    "status",
    "result",
    "error",
    "errors",
    "quarantined",
    "duration_seconds",
    "steps",
}
pytestmark = pytest.mark.acceptance


def test_embedded_run_needs_no_services(embedded_env: dict[str, str]) -> None:
    rc, out, _ = run_json(["run", str(HELLO), "--json"], embedded_env)
    assert rc == 0
    assert set(out) == RUN_KEYS
    assert out["status"] == "COMPLETED" and out["error"] is None
    assert out["result"]["greeted"] == 3
    assert out["steps"]["start"] == {"status": "ok", "data": {"message": "Hello World"}}


def test_set_and_payload_override_the_workload(embedded_env: dict[str, str]) -> None:
    rc, out, _ = run_json(
        ["run", str(HELLO), "--json", "--payload", '{"names": ["Lin"]}', "--set", "message=Hi"],
        embedded_env,
    )
    assert rc == 0 and out["result"]["lines"] == ["Hi, Lin!"]


def test_execution_id_is_what_templates_see(embedded_env: dict[str, str], tmp_path: Path) -> None:
    pb = tmp_path / "eid.yaml"
    pb.write_text("""apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: eid}
workload: {execution_id: "{{ job.uuid }}"}
workflow:
  - step: start
    tool:
      kind: python
      input: {eid: "{{ execution_id }}"}
      code: "print('noise'); result = {'eid': eid}"
""")
    rc, out, err = run_json(["run", str(pb), "--json"], embedded_env)
    assert rc == 0 and out["result"]["eid"] == out["execution_id"]
    assert "noise" in err  # python prints go to stderr, stdout stays one JSON object


def test_status_and_events_read_the_run_back(embedded_env: dict[str, str]) -> None:
    _, out, _ = run_json(["run", str(HELLO), "--json"], embedded_env)
    eid = out["execution_id"]
    _, status, _ = run_json(["status", eid, "--json"], embedded_env)
    assert status["status"] == "COMPLETED" and status["current"] == []
    assert {s["step"] for s in status["steps"]} == {"start", "greet_each", "end"}
    assert status["loops"][0]["done"] == 3
    _, events, _ = run_json(["events", eid, "--json"], embedded_env)
    types = [e["type"] for e in events]
    assert types[0] == "execution.started" and types[-1] == "execution.completed"
    assert types.count("loop.done") == 1
    assert all({"event_id", "type", "step", "command_id", "created_at"} <= set(e) for e in events)
    assert [e["event_id"] for e in events] == sorted(e["event_id"] for e in events)
    proc = run_cli(["status", "does-not-exist"], embedded_env)
    assert proc.returncode == 2 and "no execution with id does-not-exist" in proc.stderr


INVALID = {
    "bad yaml": ("workflow: [\n  - step: a\n    tool: {kind: noop\n", "line"),
    "unknown tool kind": (
        "apiVersion: noetl.io/v2\nkind: Playbook\nmetadata: {name: x}\nworkflow:\n"
        "  - step: a\n    tool: {kind: snowflak}\n",
        "did you mean `snowflake`?",
    ),
    "arc to a missing step": (
        "apiVersion: noetl.io/v2\nkind: Playbook\nmetadata: {name: x}\nworkflow:\n"
        "  - step: a\n    tool: {kind: noop}\n    next: {arcs: [{step: nowhere}]}\n",
        "nowhere",
    ),
    "template syntax": (
        "apiVersion: noetl.io/v2\nkind: Playbook\nmetadata: {name: x}\nworkflow:\n"
        "  - step: a\n    tool: {kind: python, input: {v: '{{ x + }}'}, code: 'result = 1'}\n",
        "template",
    ),
}


@pytest.mark.parametrize("name", sorted(INVALID))
def test_invalid_playbooks_are_rejected_before_anything_is_written(
    name: str, embedded_env: dict[str, str], tmp_path: Path
) -> None:
    text, fragment = INVALID[name]
    pb = tmp_path / "bad.yaml"
    pb.write_text(text)
    rc, out, _ = run_json(["run", str(pb), "--json"], embedded_env)
    assert rc == 2 and out["status"] == "FAILED" and out["execution_id"] is None
    assert fragment in out["error"] and str(pb) in out["error"]
    proc = run_cli(["validate", str(pb)], embedded_env)
    assert proc.returncode == 2 and fragment in (proc.stdout + proc.stderr)
    # nothing was written: no execution exists in the embedded database
    db = Path(embedded_env["NOETL_HOME"]) / "noetl.sqlite3"
    if db.exists():
        import sqlite3

        with sqlite3.connect(db) as conn:
            assert conn.execute("SELECT count(*) FROM executions").fetchone() == (0,)


def test_validate_reports_line_numbers(embedded_env: dict[str, str], tmp_path: Path) -> None:
    pb = tmp_path / "lines.yaml"
    pb.write_text(
        "apiVersion: noetl.io/v2\nkind: Playbook\nmetadata: {name: x}\nworkflow:\n"
        "  - step: a\n    tool: {kind: noop}\n    next: {arcs: [{step: b}]}\n"
        "  - step: b\n    tool: {kind: nope}\n"
    )
    proc = run_cli(["validate", str(pb)], embedded_env)
    assert proc.returncode == 2
    assert f"{pb}:9: step 'b'" in proc.stderr


def test_catalog_register_directory(embedded_env: dict[str, str]) -> None:
    proc = run_cli(["catalog", "register", str(ROOT / "playbooks")], embedded_env)
    assert proc.returncode == 0, proc.stderr
    assert "examples/hello_world v1" in proc.stdout
    again = run_cli(["catalog", "register", str(HELLO)], embedded_env)
    assert "unchanged examples/hello_world v1" in again.stdout


@pytest.mark.integration
def test_distributed_run_on_workers(distributed: dict[str, Any]) -> None:
    rc, out, _ = run_json(["run", str(HELLO), "--json"], distributed["env"])
    assert rc == 0 and out["status"] == "COMPLETED" and out["result"]["greeted"] == 3


@pytest.mark.integration
def test_distributed_failure_exit_code(distributed: dict[str, Any], tmp_path: Path) -> None:
    pb = tmp_path / "fail.yaml"
    pb.write_text(
        "apiVersion: noetl.io/v2\nkind: Playbook\nmetadata: {name: f}\nworkflow:\n"
        "  - step: a\n    tool: {kind: python, code: \"assert False, 'nope'\"}\n"
    )
    rc, out, _ = run_json(["run", str(pb), "--json"], distributed["env"])
    assert rc == 1 and out["status"] == "FAILED" and "AssertionError: nope" in out["error"]


@pytest.mark.integration
def test_cancel_a_distributed_run(distributed: dict[str, Any], tmp_path: Path) -> None:
    from tests.support.engines import celery_engine

    engine = celery_engine(distributed["url"], distributed["redis_url"], tmp_path)
    try:  # submitted without waiting: its step sleeps on a worker
        eid = engine.start_text(
            "apiVersion: noetl.io/v2\nkind: Playbook\nmetadata: {name: s}\nworkflow:\n"
            '  - step: a\n    tool: {kind: python, code: "import time\\ntime.sleep(5)"}\n'
        )
    finally:
        engine.close()
    rc, out, _ = run_json(["cancel", eid, "--json"], distributed["env"])
    assert rc == 0 and out == {
        "execution_id": eid,
        "status": "CANCELLED",
        "cancelled": True,
        "unfinished_rows": {},  # no cursor step: nothing claimed from a queue
        "child_unfinished_rows": {},
    }
    rc, out, _ = run_json(["cancel", eid, "--json"], distributed["env"])
    assert rc == 1 and out["cancelled"] is False and out["status"] == "CANCELLED"
    proc = run_cli(["cancel", "no-such-execution"], distributed["env"])
    assert proc.returncode == 2 and "no execution with id no-such-execution" in proc.stderr
