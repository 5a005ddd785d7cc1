"""Beat's periodic ticks leave Celery's INFO log; failures and other tasks do not."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest

from noetl_celery.tasks.quiet import QuietTicks

TRACE_SUCCESS = "Task %(name)s[%(id)s] succeeded in %(runtime)ss: %(return_value)s"
RECEIVED = "Task %(name)s[%(id)s] received"
TRACE_ERROR = "Task %(name)s[%(id)s] %(description)s: %(exc)s"


class Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def logger() -> Iterator[tuple[logging.Logger, Capture]]:
    log = logging.getLogger("celery.app.trace.quiet_test")  # a logger of our own
    capture = Capture()
    log.addHandler(capture)
    log.addFilter(QuietTicks())
    log.propagate = False
    yield log, capture
    log.removeHandler(capture)
    log.filters.clear()


def about(name: str) -> dict[str, Any]:
    return {"name": name, "id": "5e1", "runtime": 0.002, "return_value": None}


def test_tick_lines_are_dropped_at_info(logger: tuple[logging.Logger, Capture]) -> None:
    log, capture = logger
    log.setLevel(logging.INFO)
    log.info(RECEIVED, about("noetl.fire_schedules"))
    log.info(TRACE_SUCCESS, about("noetl.fire_schedules"))
    log.info(TRACE_SUCCESS, about("noetl.reap"))
    log.info("Scheduler: Sending due task %s (%s)", "noetl-schedules", "noetl.fire_schedules")
    assert capture.records == []


def test_other_tasks_and_failures_still_show(logger: tuple[logging.Logger, Capture]) -> None:
    log, capture = logger
    log.setLevel(logging.INFO)
    log.info(TRACE_SUCCESS, about("noetl.execute_command"))
    failure = {**about("noetl.fire_schedules"), "description": "raised unexpected", "exc": "X"}
    log.error(TRACE_ERROR, failure)
    log.warning("Scheduler: %s (%s)", "noetl-reaper", "noetl.reap")
    lines = [(r.levelname, r.getMessage()) for r in capture.records]
    assert lines == [
        ("INFO", "Task noetl.execute_command[5e1] succeeded in 0.002s: None"),
        ("ERROR", "Task noetl.fire_schedules[5e1] raised unexpected: X"),
        ("WARNING", "Scheduler: noetl-reaper (noetl.reap)"),
    ]


def test_tick_lines_show_as_debug_when_debug_is_on(
    logger: tuple[logging.Logger, Capture],
) -> None:
    log, capture = logger
    log.setLevel(logging.DEBUG)
    log.info(TRACE_SUCCESS, about("noetl.reap"))
    [record] = capture.records
    assert (record.levelno, record.levelname) == (logging.DEBUG, "DEBUG")
    assert record.getMessage() == "Task noetl.reap[5e1] succeeded in 0.002s: None"
