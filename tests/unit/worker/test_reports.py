"""What a task hands back to Celery for each kind of outcome (worker.reports)."""

from __future__ import annotations

from typing import Any

import pytest

from noetl_celery.constants import ReportStatus
from noetl_celery.models.outcome import Outcome
from noetl_celery.worker.reports import MESSAGE_CHARS, CommandReport, report_of

CID = "587249013456781234:fetch:1:7:a2"


@pytest.mark.parametrize(
    ("outcome", "recorded", "status", "kind", "message"),
    [
        ({"status": "ok", "result": {"a": 1}}, True, "completed", None, None),
        ({"status": "break", "result": None}, True, "completed", None, None),
        (
            {"status": "error", "error": {"kind": "http_error", "message": "503 from api"}},
            True,
            "failed",
            "http_error",
            "503 from api",
        ),
        # never written; an error as bare text reads as an engine error with that message
        ({"status": "error", "error": "boom"}, True, "failed", "engine_error", "boom"),
        # the command was re-issued or cancelled meanwhile: this run's outcome was dropped
        ({"status": "error", "error": {"kind": "x"}}, False, "superseded", None, None),
    ],
)
def test_report_of(
    outcome: dict[str, Any], recorded: bool, status: str, kind: str | None, message: str | None
) -> None:
    # outcomes as stored: the report reads what the terminal event holds
    report = report_of(CID, Outcome.from_json(outcome), recorded=recorded)
    assert (report.status, report.kind, report.message) == (status, kind, message)


def test_result_names_the_execution_and_step_but_no_values() -> None:
    report = report_of(CID, Outcome("ok", {"secret": "s3"}), recorded=True)
    assert report.as_result() == {
        "status": "completed",
        "execution_id": "587249013456781234",
        "step": "fetch",
    }
    failed = CommandReport(
        CID, ReportStatus.FAILED, "python_error", "ZeroDivisionError: division by zero"
    )
    assert failed.as_result()["kind"] == "python_error"
    assert failed.failure_text() == (
        f"execution 587249013456781234 step fetch (command {CID}): "
        "python_error: ZeroDivisionError: division by zero"
    )


def test_long_messages_are_cut() -> None:
    error = {"kind": "python_error", "message": "x" * 5000}
    report = report_of(CID, Outcome.from_json({"status": "error", "error": error}), recorded=True)
    assert report.message is not None and len(report.message) == MESSAGE_CHARS
