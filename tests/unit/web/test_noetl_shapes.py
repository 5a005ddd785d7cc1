"""The pure mapping to NoETL's JSON shapes (web.noetl_shapes), by tables."""

from __future__ import annotations

import base64
import datetime as dt
from collections.abc import Mapping
from typing import Any

import pytest

from noetl_celery.store.rows import ExecutionRow
from noetl_celery.web import noetl_events as events
from noetl_celery.web import noetl_inputs
from noetl_celery.web import noetl_shapes as shapes

YAML = "apiVersion: noetl.io/v2\nkind: Playbook\nmetadata: {name: a, path: t/a}\n"
T0 = dt.datetime(2026, 11, 24, 12, 0, 0)


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        (base64.b64encode(YAML.encode()).decode(), YAML),  # the CLI
        (YAML, YAML),  # the GUI: raw text
        (base64.encodebytes(YAML.encode()).decode(), YAML),  # wrapped base64
        (base64.b64encode(b"\xff\xfe\x00").decode(), base64.b64encode(b"\xff\xfe\x00").decode()),
        ("", ""),
        ("not base64!", "not base64!"),
    ],
)
def test_decode_content(given: str, expected: str) -> None:
    assert noetl_inputs.decode_content(given) == expected


@pytest.mark.parametrize(
    ("given", "expected"),
    [(None, None), ("latest", None), ("LATEST", None), ("", None), (3, 3), ("4", 4), (" 5 ", 5)],
)
def test_parse_version(given: Any, expected: int | None) -> None:
    assert noetl_inputs.parse_version(given) == expected


@pytest.mark.parametrize("given", ["2.0", True, 1.5, "v1", [1], "²", 0, -1, 2**31, str(2**31)])
def test_parse_version_refuses(given: Any) -> None:
    with pytest.raises(noetl_inputs.ShapeError, match="version"):
        noetl_inputs.parse_version(given)


@pytest.mark.parametrize(("given", "expected"), [(None, None), ("", None), (12, 12), ("12", 12)])
def test_parse_catalog_id(given: Any, expected: int | None) -> None:
    assert noetl_inputs.parse_catalog_id(given) == expected


@pytest.mark.parametrize("given", ["²", "1.5", True, 0, -3, 2**63, str(10**30), [1]])
def test_parse_catalog_id_refuses(given: Any) -> None:
    """Only ids a BIGINT column can hold (`²` is a digit to `str.isdigit`, not to int)."""
    with pytest.raises(noetl_inputs.ShapeError, match="catalog_id"):
        noetl_inputs.parse_catalog_id(given)


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ({}, {}),
        ({"workload": {"a": 1}}, {"a": 1}),
        ({"payload": {"a": 1}}, {"a": 1}),
        ({"payload": {"a": 1, "b": 2}, "workload": {"a": 3}}, {"a": 3, "b": 2}),
        ({"workload": None, "merge": True}, {}),
    ],
)
def test_execute_workload(body: dict[str, Any], expected: dict[str, Any]) -> None:
    assert noetl_inputs.execute_workload(body) == expected


def test_execute_workload_refuses_a_non_object() -> None:
    with pytest.raises(noetl_inputs.ShapeError, match="workload: must be a JSON object, not list"):
        noetl_inputs.execute_workload({"workload": [1]})


@pytest.mark.parametrize("kind", [None, "playbook", "Playbook", "PLAYBOOK"])
def test_check_kind_accepts_playbooks(kind: Any) -> None:
    noetl_inputs.check_kind(kind, "resource_kind")


def test_check_kind_refuses_others() -> None:
    with pytest.raises(
        noetl_inputs.ShapeError, match="resource_type: 'Credential' is not supported"
    ):
        noetl_inputs.check_kind("Credential", "resource_type")


@pytest.mark.parametrize(
    ("seconds", "expected"),
    [
        (None, None),
        (0, "0.0s"),
        (0.42, "0.4s"),
        (59.94, "59.9s"),
        (60, "1m 0s"),
        (185.7, "3m 5s"),
        (7207, "2h 0m 7s"),
    ],
)
def test_duration_human(seconds: float | None, expected: str | None) -> None:
    assert shapes.duration_human(seconds) == expected


@pytest.mark.parametrize(
    ("status", "completed", "failed"),
    [
        ("RUNNING", False, False),
        ("COMPLETED", True, False),
        ("FAILED", True, True),
        ("CANCELLED", True, False),
    ],
)
def test_status_flags(status: str, completed: bool, failed: bool) -> None:
    assert shapes.status_flags(status) == (completed, failed)


def _view(status: str, **extra: Any) -> dict[str, Any]:
    return {
        "execution_id": "42",
        "path": "t/a",
        "status": status,
        "created_at": "2026-11-24T12:00:00Z",
        "finished_at": None if status == "RUNNING" else "2026-11-24T12:00:01Z",
        "duration_seconds": 1.25,
        "error": None,
        "steps": [
            {"step": "start", "status": "completed", "runs": 1},
            {"step": "work", "status": "running" if status == "RUNNING" else "failed"},
        ],
        "current": [],
        "waiting": [],
        **extra,
    }


@pytest.mark.parametrize(
    ("view", "errors", "expected"),
    [
        (
            _view("RUNNING", current=["work"]),
            [],
            {"completed": False, "failed": False, "current_step": "work", "error": None},
        ),
        (
            _view("RUNNING", waiting=[{"step": "queued", "commands": 1, "seconds": 2.0}]),
            [],
            {"completed": False, "failed": False, "current_step": "queued", "error": None},
        ),
        (
            _view("COMPLETED"),
            [],
            {"completed": True, "failed": False, "current_step": "work", "error": None},
        ),
        (
            _view("FAILED"),
            [{"step": "work", "item": None, "kind": "error", "message": "boom"}],
            {"completed": True, "failed": True, "error": "step 'work': boom"},
        ),
        (
            _view("FAILED", error="execution timed out"),
            [],
            {"completed": True, "failed": True, "error": "execution timed out"},
        ),
        (
            _view("CANCELLED"),
            [{"step": None, "item": None, "kind": "cancelled", "message": "stop"}],
            {"completed": True, "failed": False, "status": "CANCELLED", "error": "stop"},
        ),
    ],
)
def test_status_body(
    view: dict[str, Any], errors: list[dict[str, Any]], expected: dict[str, Any]
) -> None:
    body: Mapping[str, Any] = shapes.status_body(view, errors)
    assert {k: body[k] for k in expected} == expected
    assert body["execution_id"] == "42"
    assert body["completed_steps"] == ["start"]
    assert body["duration_human"] == "1.2s"
    assert body["start_time"] == "2026-11-24T12:00:00Z"
    assert body["variables"] == {}  # the payload may hold secrets: never echoed


def test_error_line_names_the_first_failures_and_counts_the_rest() -> None:
    errors = [{"step": "each", "item": i, "message": f"bad {i}"} for i in range(5)]
    assert shapes.error_line(errors) == (
        "step 'each' item 0: bad 0; step 'each' item 1: bad 1; step 'each' item 2: bad 2 (+2 more)"
    )
    assert shapes.error_line([], "fallback") == "fallback"


@pytest.mark.parametrize(
    ("status", "ended", "made", "expected"),
    [
        ("COMPLETED", 0, 0, 100),
        ("FAILED", 1, 4, 100),
        ("CANCELLED", 0, 9, 100),
        ("RUNNING", 0, 0, 0),
        ("RUNNING", 1, 4, 25),
        ("RUNNING", 4, 4, 99),
    ],
)
def test_progress_percent(status: str, ended: int, made: int, expected: int) -> None:
    assert shapes.progress_percent(status, ended, made) == expected


def _row(status: str, **extra: Any) -> ExecutionRow:
    values: dict[str, Any] = {
        "execution_id": "7",
        "catalog_id": 3,
        "path": "t/a",
        "status": status,
        "parent_execution_id": None,
        "parent_command_id": None,
        "payload": {"password": "never-shown"},
        "state": None,
        "result": {"x": 1},
        "error": None,
        "created_at": T0,
        "updated_at": T0 + dt.timedelta(seconds=2),
        "finished_at": None if status == "RUNNING" else T0 + dt.timedelta(seconds=2),
    }
    values.update(extra)
    return ExecutionRow(**values)


def test_execution_entry() -> None:
    assert shapes.execution_entry(_row("COMPLETED"), 2, (3, 3)) == {
        "execution_id": "7",
        "catalog_id": "3",
        "path": "t/a",
        "version": 2,
        "status": "COMPLETED",
        "start_time": "2026-11-24T12:00:00Z",
        "end_time": "2026-11-24T12:00:02Z",
        "duration_seconds": 2.0,
        "duration_human": "2.0s",
        "progress": 100,
        "result": {"x": 1},
        "error": None,
        "parent_execution_id": None,
    }
    failed = shapes.execution_entry(_row("FAILED", error={"message": "boom"}), 1, (1, 2))
    assert (failed["result"], failed["error"], failed["end_time"]) == (
        None,
        "boom",
        "2026-11-24T12:00:02Z",
    )
    assert "never-shown" not in str(failed)


@pytest.mark.parametrize(
    ("native", "name", "status"),
    [
        ("execution.started", "playbook.initialized", "STARTED"),
        ("command.completed", "step.exit", "COMPLETED"),
        ("command.failed", "call.error", "FAILED"),
        ("loop.done", "loop.done", "COMPLETED"),
        ("step.failed", "step.failed", "FAILED"),
        ("execution.completed", "playbook.completed", "COMPLETED"),
        ("execution.failed", "playbook.failed", "FAILED"),
        ("execution.cancelled", "execution.cancelled", "CANCELLED"),
        ("pass.failed", "pass.failed", "FAILED"),
        ("something.new", "something.new", None),
    ],
)
def test_event_names(native: str, name: str, status: str | None) -> None:
    event = {
        "event_id": 9,
        "execution_id": "7",
        "type": native,
        "step": "work",
        "command_id": None,
        "epoch": 1,
        "iteration": None,
        "payload": {},
        "created_at": "2026-11-24T12:00:00Z",
    }
    mapped = events.event_entry(event)
    assert (mapped["event_type"], mapped["status"]) == (name, status)
    assert mapped["context"]["native_type"] == native
    assert (mapped["node_name"], mapped["event_id"]) == ("work", 9)
    assert events.native_types([name]) == {native}
    assert events.ehdb_event(event)["event_type"] == name


def test_event_error_is_the_message() -> None:
    event = {
        "event_id": 1,
        "execution_id": "7",
        "type": "command.failed",
        "payload": {"status": "error", "error": {"kind": "python", "message": "ZeroDivision"}},
        "created_at": None,
    }
    mapped = events.event_entry(event)
    assert (mapped["error"], mapped["result"]) == ("ZeroDivision", None)


@pytest.mark.parametrize(
    ("page", "size", "total", "pages", "has_next", "has_prev"),
    [(1, 10, 0, 1, False, False), (1, 10, 25, 3, True, False), (3, 10, 25, 3, False, True)],
)
def test_pagination(
    page: int, size: int, total: int, pages: int, has_next: bool, has_prev: bool
) -> None:
    assert events.pagination(page, size, total) == {
        "page": page,
        "page_size": size,
        "total_events": total,
        "total_pages": pages,
        "has_next": has_next,
        "has_prev": has_prev,
    }


def test_register_and_batch_bodies() -> None:
    assert shapes.register_body("t/a", 2, 11, True) == {
        "status": "success",
        "message": "Resource 't/a' version '2' registered.",
        "path": "t/a",
        "version": 2,
        "catalog_id": "11",
        "kind": "Playbook",
    }
    results = [
        shapes.batch_result(0, path="t/a", version=1, catalog_id=5),
        shapes.batch_result(1, error="invalid playbook: x"),
    ]
    assert shapes.batch_body(results) == {
        "registered": 1,
        "failed": 1,
        "results": [
            {
                "index": 0,
                "status": "registered",
                "path": "t/a",
                "version": 1,
                "catalog_id": "5",
                "error": None,
            },
            {
                "index": 1,
                "status": "failed",
                "path": None,
                "version": None,
                "catalog_id": None,
                "error": "invalid playbook: x",
            },
        ],
    }


def test_catalog_entry_parses_the_playbook() -> None:
    class Row:
        catalog_id = 4
        path = "t/a"
        version = 1
        name = "a"
        content = YAML
        content_sha256 = "abc"
        created_at = T0

    entry = shapes.catalog_entry(Row())
    assert entry["catalog_id"] == "4"
    assert entry["payload"]["metadata"] == {"name": "a", "path": "t/a"}
    assert (entry["kind"], entry["content"], entry["created_at"]) == (
        "Playbook",
        YAML,
        "2026-11-24T12:00:00Z",
    )


def test_cancel_bodies() -> None:
    assert shapes.cancel_body("7", ["7", "8"], "stop it") == {
        "status": "cancelled",
        "execution_id": "7",
        "cancelled_executions": ["7", "8"],
        "message": "Cancelled 2 execution(s): stop it",
    }
    assert shapes.already_ended_body("7", "COMPLETED")["status"] == "already_completed"


def test_ehdb_state() -> None:
    answer = events.ehdb_state(_row("RUNNING"), 4, "work")
    assert answer["exists"] is True
    state = answer["state"]
    assert state is not None
    assert state["terminal"] is False
    assert state["current_node"] == "work"
    assert state["event_count"] == 4
    assert state["completed_at"] is None


def test_status_lists_completed_steps_in_playbook_order() -> None:
    view = _view(
        "COMPLETED",
        steps=[
            {"step": "end", "status": "completed"},
            {"step": "start", "status": "completed"},
            {"step": "extra", "status": "completed"},
        ],
    )
    body = shapes.status_body(view, [], ["start", "middle", "end"], last_step="end")
    assert body["completed_steps"] == ["start", "end", "extra"]
    assert body["current_step"] == "end"
