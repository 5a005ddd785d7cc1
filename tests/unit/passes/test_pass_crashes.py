"""What the orchestrator does when a pass crashes: the database being away goes back to
the caller untouched (nothing is counted, nothing fails); any other crash is recorded,
and the execution ends FAILED once `PASS_CRASH_LIMIT` passes in a row crashed."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from sqlalchemy.exc import DataError, IntegrityError, InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout

from noetl_celery.errors import StoreError
from noetl_celery.models.outcome import StepError
from noetl_celery.passes import orchestrate
from noetl_celery.passes.orchestrate import PASS_CRASH_LIMIT, PassDriver, crash_message
from noetl_celery.store.database import transient


class CrashingStore:
    """A store whose orchestration transaction raises `error` (its `termination`
    records crashes: see driver)."""

    def __init__(self, error: BaseException, termination: Recorded) -> None:
        self.error = error
        self.termination = termination

    def has_unhandled(self, execution_id: str) -> bool:
        return False

    @contextmanager
    def orchestration(self, execution_id: str, *, wait: bool) -> Iterator[None]:
        raise self.error
        yield  # pragma: no cover


class Recorded:
    def __init__(self, crashes: int) -> None:
        self.crashes = crashes
        self.recorded: list[tuple[str, dict[str, Any]]] = []
        self.ended: list[tuple[Any, ...]] = []

    def record_pass_crash(self, execution_id: str, error: StepError) -> int:
        self.recorded.append((execution_id, error.to_json()))  # as the event stores it
        return self.crashes

    def end(self, *args: Any, **kwargs: Any) -> bool:
        self.ended.append((*args[2:], kwargs.get("kind")))
        return True


def driver(error: BaseException, monkeypatch: pytest.MonkeyPatch, crashes: int) -> Recorded:
    recorded = Recorded(crashes)
    monkeypatch.setattr(orchestrate, "end_tree", recorded.end)
    return recorded


def orchestrator(error: BaseException, recorded: Recorded) -> PassDriver:
    return PassDriver(CrashingStore(error, recorded), None, None)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "error",
    [
        StoreError("the engine database at postgresql://... cannot be reached"),
        OperationalError("UPDATE ...", {}, Exception("deadlock detected")),
        InterfaceError("SELECT 1", {}, Exception("connection already closed")),
        PoolTimeout("QueuePool limit of size 5 overflow 20 reached"),
    ],
    ids=["store", "operational", "interface", "pool"],
)
def test_the_database_being_away_is_not_a_crash(
    error: BaseException, monkeypatch: pytest.MonkeyPatch
) -> None:
    recorded = driver(error, monkeypatch, crashes=PASS_CRASH_LIMIT)
    assert transient(error)
    with pytest.raises(type(error)):
        orchestrator(error, recorded).drive("e1")
    assert recorded.recorded == [] and recorded.ended == []


@pytest.mark.parametrize(
    "error",
    [
        RecursionError("maximum recursion depth exceeded while calling a Python object"),
        KeyError("steps"),
        DataError("INSERT ...", {}, Exception("unsupported Unicode escape sequence")),
        IntegrityError("INSERT ...", {}, Exception("duplicate key value")),
    ],
    ids=["recursion", "bug", "data", "integrity"],
)
def test_any_other_crash_is_recorded_and_the_caller_goes_on(
    error: BaseException, monkeypatch: pytest.MonkeyPatch
) -> None:
    recorded = driver(error, monkeypatch, crashes=PASS_CRASH_LIMIT - 1)
    assert not transient(error)
    assert orchestrator(error, recorded).drive("e1") == 0  # no exception: logged and recorded
    [(eid, crash)] = recorded.recorded
    assert (eid, crash) == ("e1", {"kind": "engine_error", "message": crash_message(error)})
    assert crash["message"].startswith(type(error).__name__ + ": ")
    assert recorded.ended == []  # not yet: one more crash may still be where it ran


def test_the_last_crash_allowed_ends_the_execution_failed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    error = RecursionError("maximum recursion depth exceeded")
    recorded = driver(error, monkeypatch, crashes=PASS_CRASH_LIMIT)
    orchestrator(error, recorded).drive("e1")
    assert recorded.ended == [
        (
            "e1",
            "FAILED",
            f"the engine could not orchestrate this execution: {PASS_CRASH_LIMIT} passes in a "
            "row crashed (RecursionError: maximum recursion depth exceeded)",
            "engine_error",
        )
    ]


def test_a_crash_message_is_one_short_line_postgres_can_store() -> None:
    message = crash_message(ValueError("bad\x00value " + chr(0xD800) + "\nsecond line"))
    assert message == "ValueError: bad\\u0000value \\ud800"
    assert len(crash_message(ValueError("x" * 10_000))) == orchestrate.CRASH_MESSAGE_CHARS
