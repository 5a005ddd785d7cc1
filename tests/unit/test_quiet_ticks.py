"""Beat's periodic ticks leave Celery's INFO log; failures and other tasks do not."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest

from noetl_celery.tasks.quiet import BrokerDown, QuietTicks

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


def beat_error(log: logging.Logger, exc: BaseException) -> None:
    """What celery.beat's apply_entry logs when sending a tick fails."""
    try:
        raise exc
    except BaseException as raised:
        log.error("Message Error: %s\n%s", raised, ["  File ...stack...\n"], exc_info=True)


def scheduling_error_from_a_dead_broker() -> BaseException:
    from celery.beat import SchedulingError
    from kombu.exceptions import OperationalError
    from redis.exceptions import ConnectionError as RedisConnectionError

    refused = "Error 111 connecting to 127.0.0.1:6379. Connection refused."
    try:
        try:
            try:
                raise RedisConnectionError(refused)
            except RedisConnectionError as exc:
                raise OperationalError(refused) from exc
        except OperationalError as exc:
            raise SchedulingError(f"Couldn't apply scheduled task noetl-reaper: {exc}") from exc
    except SchedulingError as exc:
        return exc


@pytest.fixture
def beat_logger() -> Iterator[tuple[logging.Logger, Capture]]:
    log = logging.getLogger("celery.beat.broker_down_test")
    capture = Capture()
    log.addHandler(capture)
    log.addFilter(BrokerDown())
    log.propagate = False
    yield log, capture
    log.removeHandler(capture)
    log.filters.clear()


def test_a_tick_beat_cannot_send_to_a_dead_broker_is_one_line(
    beat_logger: tuple[logging.Logger, Capture],
) -> None:
    log, capture = beat_logger
    beat_error(log, scheduling_error_from_a_dead_broker())
    [record] = capture.records
    assert record.levelname == "ERROR" and record.exc_info is None
    assert record.getMessage() == (
        "Message Error: Couldn't apply scheduled task noetl-reaper: Error 111 connecting to "
        "127.0.0.1:6379. Connection refused. (the broker is unreachable; sent again at the "
        "next tick)"
    )


def test_other_beat_errors_keep_their_traceback(
    beat_logger: tuple[logging.Logger, Capture],
) -> None:
    log, capture = beat_logger
    beat_error(log, ValueError("a bad schedule entry"))
    [record] = capture.records
    assert record.exc_info is not None
    assert record.getMessage().startswith("Message Error: a bad schedule entry\n")
