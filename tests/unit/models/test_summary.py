"""The execution summary: one shape for `run --json` and a waiting parent's
`resume.child` (engine.summaries.run_summary and store.children.child_summary both build it
with models.summary.execution_summary)."""

from __future__ import annotations

from typing import Any

from noetl_celery.models.summary import execution_summary


def test_steps_are_the_results_of_steps_that_ran_read_at_their_result_epoch() -> None:
    asked: list[tuple[str, int]] = []

    def step_result(step: str, epoch: int) -> Any:
        asked.append((step, epoch))
        return {"step": step, "epoch": epoch}

    state = {
        "steps": {
            "start": {"result_epoch": 1},
            "each": {"result_epoch": 3},
            "never": {"status": ""},  # entered no epoch with a result
        }
    }
    summary = execution_summary("e1", "COMPLETED", {"ok": 1}, None, 1.23456, state, step_result)
    assert summary == {
        "execution_id": "e1",
        "status": "COMPLETED",
        "result": {"ok": 1},
        "error": None,
        "duration_seconds": 1.235,
        "steps": {"start": {"step": "start", "epoch": 1}, "each": {"step": "each", "epoch": 3}},
    }
    assert asked == [("start", 1), ("each", 3)]


def test_an_error_object_is_shown_as_its_message() -> None:
    error = {"kind": "http", "message": "step 'fetch' failed: 500"}
    summary = execution_summary("e2", "FAILED", None, error, 0.0, None, lambda s, e: None)
    assert summary["error"] == "step 'fetch' failed: 500"
    assert summary["steps"] == {}


def test_an_error_object_without_a_message_is_shown_whole() -> None:
    summary = execution_summary("e3", "FAILED", None, {"kind": "x"}, 0.0, {}, lambda s, e: None)
    assert summary["error"] == "{'kind': 'x'}"
