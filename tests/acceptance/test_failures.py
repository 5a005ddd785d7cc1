"""Runs that tell the truth: unhandled item errors fail the execution (as NoETL and every
peer do), a failed run has no result and names what failed, a run still going after
`--timeout` has its own exit code. Real CLI processes, real workers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.support.engines import celery_engine
from tests.support.workers import run_cli, run_json

ROOT = Path(__file__).resolve().parents[2]
ITEMS = ROOT / "tests" / "playbooks" / "items_fail.yaml"
pytestmark = pytest.mark.acceptance


def test_one_failed_item_of_twenty_fails_the_run(distributed: dict[str, Any]) -> None:
    rc, out, stderr = run_json(["run", str(ITEMS), "--json"], distributed["env"])
    assert (rc, out["status"]) == (1, "FAILED"), stderr
    assert out["result"] is None  # not the last step that happened to succeed
    assert out["error"] == (
        "step 'each' failed: 1 of 20 items failed "
        "(first: item 7: ZeroDivisionError: division by zero (line 2: return 1 / (x - bad)))"
    )
    assert out["errors"] == [
        {
            "step": "each",
            "item": 7,
            "value": "7",
            "kind": "python_error",
            "message": out["errors"][0]["message"],
        }
    ]
    assert out["errors"][0]["message"].startswith("ZeroDivisionError: division by zero")
    # the loop completed, counted every item and routed on: only the verdict changed
    assert out["steps"]["each"]["stats"] == {"total": 20, "success": 19, "failed": 1}
    assert out["steps"]["end"] == {"finished": True}
    rc, status, _ = run_json(["status", out["execution_id"], "--json"], distributed["env"])
    assert status["status"] == "FAILED"
    assert [lp["failed"] for lp in status["loops"]] == [1]


def test_a_body_policy_that_continues_handles_the_item(distributed: dict[str, Any]) -> None:
    rc, out, stderr = run_json(
        ["run", str(ITEMS), "--set", "handle=true", "--json"], distributed["env"]
    )
    assert (rc, out["status"], out["error"], out["errors"]) == (0, "COMPLETED", None, []), stderr
    assert out["steps"]["each"]["stats"] == {"total": 20, "success": 20, "failed": 0}
    assert out["result"] == {"finished": True}


def test_every_item_failing_on_a_template_typo(distributed: dict[str, Any], tmp_path: Path) -> None:
    # a bare name could come from the payload: validation warns, every item fails
    # (`iter.y` cannot exist and is refused before the run: test_validate_names)
    typo = tmp_path / "typo.yaml"
    typo.write_text(ITEMS.read_text().replace('x: "{{ iter.x }}"', 'x: "{{ y }}"'))
    rc, out, stderr = run_json(["run", str(typo), "--json"], distributed["env"])
    assert (rc, out["status"], out["result"]) == (1, "FAILED", None), stderr
    assert "warning: `y` is not defined in this playbook" in stderr.splitlines()[0]
    assert out["steps"]["each"]["stats"] == {"total": 20, "success": 0, "failed": 20}
    assert out["error"].startswith("step 'each' failed: 20 of 20 items failed (first: item 0: ")
    assert "iter.y" in out["error"] or "'y'" in out["error"]
    assert len(out["errors"]) == 20  # every item, in order, up to the first 20
    assert [e["item"] for e in out["errors"]] == list(range(20))
    assert {e["step"] for e in out["errors"]} == {"each"}


def test_text_mode_names_the_failure_on_stderr(embedded_env: dict[str, str]) -> None:
    proc = run_cli(["run", str(ITEMS), "--set", "bad=3"], embedded_env)
    assert proc.returncode == 1, proc.stderr
    assert "FAILED" in proc.stdout
    assert "finished" not in proc.stdout  # a failed run prints no result
    assert "error: step 'each' failed: 1 of 20 items failed" in proc.stderr
    assert "each[3] python_error: ZeroDivisionError: division by zero" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_still_running_after_timeout_exits_3(distributed: dict[str, Any], tmp_path: Path) -> None:
    slow = tmp_path / "slow.yaml"
    slow.write_text(
        "apiVersion: noetl.io/v2\nkind: Playbook\nmetadata: {name: slow}\n"
        "workflow:\n  - step: start\n"
        "    tool: {kind: python, code: 'import time; time.sleep(30); result = 1'}\n"
    )
    rc, out, stderr = run_json(["run", str(slow), "--timeout", "1", "--json"], distributed["env"])
    assert (rc, out["status"], out["result"]) == (3, "RUNNING", None), stderr
    cancelled = run_cli(["cancel", out["execution_id"]], distributed["env"])
    assert cancelled.returncode == 0, cancelled.stderr
    proc = run_cli(["run", str(slow), "--timeout", "1"], distributed["env"])
    assert proc.returncode == 3
    assert "noetl-celery watch" in proc.stderr
    eid = proc.stdout.split()[1].rstrip(":")
    assert run_cli(["cancel", eid], distributed["env"]).returncode == 0


def test_a_cancelled_run_lists_the_cancellation(
    distributed: dict[str, Any], tmp_path: Path
) -> None:
    slow = tmp_path / "slow.yaml"
    slow.write_text(
        "apiVersion: noetl.io/v2\nkind: Playbook\nmetadata: {name: slow}\n"
        "workflow:\n  - step: start\n"
        "    tool: {kind: python, code: 'import time; time.sleep(30); result = 1'}\n"
    )
    rc, out, _ = run_json(["run", str(slow), "--timeout", "0.5", "--json"], distributed["env"])
    assert rc == 3
    assert run_cli(["cancel", out["execution_id"]], distributed["env"]).returncode == 0
    engine = celery_engine(distributed["url"], distributed["redis_url"], tmp_path)
    try:
        summary = engine.summary(out["execution_id"])
    finally:
        engine.close()
    assert (summary["status"], summary["result"]) == ("CANCELLED", None)
    assert summary["errors"] == [
        {
            "step": None,
            "item": None,
            "kind": "cancelled",
            "message": "cancelled by `noetl-celery cancel`",
        }
    ]


def test_run_prints_validation_warnings_first(embedded_env: dict[str, str], tmp_path: Path) -> None:
    warned = tmp_path / "warned.yaml"
    warned.write_text(
        "apiVersion: noetl.io/v2\nkind: Playbook\nmetadata: {name: warned}\n"
        "workload: {a: 1, a: 2}\n"
        "workflow:\n  - step: start\n"
        "    tool: {kind: python, input: {a: '{{ a }}'}, code: 'result = a'}\n"
    )
    proc = run_cli(["run", str(warned), "--json"], embedded_env)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["result"] == 2
    assert "warned.yaml:4" in proc.stderr and "given twice" in proc.stderr
