"""The terminal views of `status`, `executions` and `run`'s live display."""

from __future__ import annotations

from typing import Any

from rich.console import Console, RenderableType

from noetl_celery.cli.renderables import (
    executions_renderable,
    progress_renderable,
    status_renderable,
)


def text_of(renderable: RenderableType) -> str:
    console = Console(record=True, width=120, color_system=None)
    console.print(renderable)
    return console.export_text()


def view(**changes: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "execution_id": "383",
        "path": "flows/pull",
        "status": "RUNNING",
        "duration_seconds": 12.5,
        "steps": [
            {"step": "start", "status": "completed", "runs": 1},
            {"step": "fetch", "status": "running", "runs": 1},
        ],
        "current": ["fetch"],
        "errors": [],
        "error": None,
        "loops": [
            {
                "step": "fetch",
                "epoch": 1,
                "mode": "parallel",
                "total": 400,
                "done": 120,
                "succeeded": 118,
                "failed": 2,
                "in_flight": 10,
                "finished": False,
            },
            {
                "step": "old",
                "epoch": 1,
                "mode": "sequential",
                "total": 3,
                "done": 3,
                "succeeded": 3,
                "failed": 0,
                "in_flight": 0,
                "finished": True,
            },
        ],
    }
    base.update(changes)
    return base


def test_status_shows_steps_loops_and_errors() -> None:
    out = text_of(status_renderable(view(errors=[{"step": "fetch", "message": "HTTP 500"}])))
    assert "execution 383" in out and "RUNNING" in out and "flows/pull" in out
    assert "start" in out and "completed" in out and "running" in out
    assert "120/400" in out and "old" in out and "3/3" in out  # finished loops too
    assert "error in fetch: HTTP 500" in out


def test_loops_show_succeeded_and_failed_apart() -> None:
    out = text_of(status_renderable(view()))
    header = next(line for line in out.splitlines() if "in flight" in line)
    assert "finished" in header and "succeeded" in header and "failed" in header
    [row] = [line for line in out.splitlines() if "120/400" in line]
    # 120 finished of 400: 118 succeeded, 2 failed
    assert [c for c in row.split("120/400")[1].split() if c != "│"][:2] == ["118", "2"]


def test_status_lists_steps_in_the_order_given() -> None:
    steps = [{"step": n, "status": "completed", "runs": 1} for n in ("start", "fetch", "end")]
    out = text_of(status_renderable(view(steps=steps)))
    assert out.index("start ") < out.index("fetch ") < out.index("end ")


def test_live_progress_shows_running_loops_only() -> None:
    out = text_of(progress_renderable(view()))
    assert "running: fetch" in out
    assert "120/400" in out and "2" in out
    assert "old" not in out  # a finished loop leaves the live display


def test_a_command_no_worker_took_is_waiting_not_running() -> None:
    waiting = [{"step": "start", "commands": 1, "seconds": 12.4}]
    live = text_of(progress_renderable(view(current=[], waiting=waiting, loops=[])))
    assert "waiting for a worker (12s): start" in live
    assert "running" not in live
    table = text_of(status_renderable(view(current=["fetch"], waiting=waiting)))
    assert "waiting for a worker (12s)" in table


def test_a_cursor_loop_without_a_total_yet() -> None:
    loops = [
        {
            "step": "drain",
            "epoch": 1,
            "mode": "cursor",
            "total": None,
            "done": 0,
            "succeeded": 0,
            "failed": 0,
            "in_flight": 4,
            "finished": False,
        }
    ]
    out = text_of(progress_renderable(view(loops=loops)))
    assert "claiming" in out and "0/?" in out


def test_executions_table() -> None:
    rows = [
        {
            "execution_id": "9",
            "path": "flows/a",
            "status": "FAILED",
            "created_at": "2026-11-23T06:00:00.123Z",
            "duration_seconds": 3.25,
        },
    ]
    out = text_of(executions_renderable(rows))
    assert "flows/a" in out and "FAILED" in out and "2026-11-23 06:00:00" in out and "3.2" in out


def test_the_trigger_column_says_how_each_run_was_started() -> None:
    top = {
        "execution_id": "100",
        "path": "flows/parent",
        "status": "RUNNING",
        "created_at": "2026-11-23T06:00:00Z",
        "duration_seconds": 1.0,
        "parent_execution_id": None,
        "trigger": "manual",
        "rerun_of": None,
        "trigger_detail": None,
    }
    fired = {"schedule_id": 3, "schedule": "catalog:flows/daily", "fire_time": "2026-11-23T06Z"}
    rows = [
        {**top, "execution_id": "101", "parent_execution_id": "100", "trigger": "parent"},
        {**top, "execution_id": "102", "trigger": "schedule", "trigger_detail": fired},
        {
            **top,
            "execution_id": "103",
            "trigger": "schedule",
            "trigger_detail": {"schedule_id": 4, "schedule": None, "manual": True},
        },
        {**top, "execution_id": "104", "trigger": "rerun", "rerun_of": "100"},
        top,
        # a row from before the trigger column existed: its parent still shows
        {
            k: v
            for k, v in {**top, "execution_id": "105", "parent_execution_id": "9"}.items()
            if k != "trigger"
        },
    ]
    lines = text_of(executions_renderable(rows)).splitlines()
    assert "trigger" in lines[1]
    cells = {
        row[0]: row[-1]
        for row in ([c.strip() for c in line.split("│")[1:-1]] for line in lines[3:-1])
    }
    assert cells == {
        "101": "parent 100",
        "102": "schedule 3 catalog:flows/daily",
        "103": "schedule 4 (by hand)",
        "104": "rerun of 100",
        "100": "manual",
        "105": "parent 9",
    }


def test_status_names_the_execution_a_rerun_repeats() -> None:
    assert "rerun of 377" in text_of(status_renderable(view(rerun_of="377", trigger="rerun")))
    assert "rerun of" not in text_of(status_renderable(view()))


def test_schedule_list_names_an_unnamed_schedule_by_its_path() -> None:
    from noetl_celery.cli.renderables import schedules_renderable

    row = {
        "schedule_id": 3,
        "name": None,
        "path": "flows/nightly",
        "cron": "0 3 * * *",
        "timezone": "Europe/Berlin",
        "enabled": True,
        "next_fire_at": "2026-11-26T02:00:00Z",
        "last_fire_at": None,
    }
    [line] = [ln for ln in text_of(schedules_renderable([row])).splitlines() if "0 3 * * *" in ln]
    assert line.count("flows/nightly") == 2  # the name column and the path column


def test_status_says_which_claimed_rows_a_cancel_left_unprocessed() -> None:
    report = {
        "epoch": 1,
        "count": 3,
        "rows": [{"id": 7}, {"id": 8}],
        "interrupted": [{"id": 6}],
        "truncated": False,
    }
    out = text_of(status_renderable(view(status="CANCELLED", unfinished_rows={"drain": report})))
    assert (
        "drain: 3 claimed row(s) not processed (1 interrupted while running), still claimed in "
        "your queue; list them: noetl-celery events 383 --type cursor.unfinished --json"
    ) in " ".join(out.split())
    assert "not processed" not in text_of(status_renderable(view()))


def test_status_shows_deadline_events_and_notifications() -> None:
    deadline = [
        {
            "event": "deadline.at_risk",
            "at": "2026-11-29T04:10:00Z",
            "deadline_at": "2026-11-29T05:00:00Z",
            "eta_at": "2026-11-29T05:40:00Z",
        },
        {
            "event": "deadline.missed",
            "at": "2026-11-29T05:00:02Z",
            "deadline_at": "2026-11-29T05:00:00Z",
            "eta_at": None,
        },
    ]
    notes = [
        {
            "id": "383.deadline.missed.engine",
            "event": "deadline.missed",
            "target": "engine",
            "attempts": 1,
            "delivered_at": "2026-11-29T05:00:03Z",
            "last_error": None,
        },
        {
            "id": "383.deadline.missed.playbook",
            "event": "deadline.missed",
            "target": "playbook",
            "attempts": 3,
            "delivered_at": None,
            "last_error": "NoetlError: the receiver answered HTTP 500",
        },
    ]
    out = " ".join(text_of(status_renderable(view(deadline=deadline, notifications=notes))).split())
    assert "deadline at risk (due 2026-11-29T05:00:00Z, ETA 2026-11-29T05:40:00Z)" in out
    assert "deadline missed (due 2026-11-29T05:00:00Z)" in out
    assert (
        "notification deadline.missed -> engine: delivered 2026-11-29T05:00:03Z (attempt 1)" in out
    )
    assert (
        "notification deadline.missed -> playbook: pending after 3 attempt(s), last error: "
        "NoetlError: the receiver answered HTTP 500"
    ) in out
    plain = text_of(status_renderable(view()))
    assert "deadline" not in plain and "notification" not in plain
