"""`run`'s worker check decides from what the fleet answers (the engine and the clock are
stand-ins here; tests/acceptance/test_misconfiguration.py runs it against real workers)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from noetl_celery.cli.fleet import WorkerCheck
from noetl_celery.errors import WorkersElsewhere
from noetl_celery.settings import Settings

MINE = "abc/db_a"
SETTINGS = Settings(database_url="postgresql://u:pw@h:5432/db_a", broker_url="redis://:pw@r:6379/1")


@dataclass
class FakeOutbox:
    held: int = 0  # the execution's commands held for the broker

    def waiting(self, execution_id: str) -> int:
        return self.held


@dataclass
class FakeStore:
    claimed: bool = False
    asked: int = 0
    outbox: FakeOutbox = field(default_factory=FakeOutbox)

    def any_claimed(self, execution_id: str) -> bool:
        self.asked += 1
        return self.claimed


@dataclass
class FakeEngine:
    database_id: str | None = MINE
    store: FakeStore = field(default_factory=FakeStore)
    cancelled: list[tuple[str, str]] = field(default_factory=list)

    def cancel(self, execution_id: str, reason: str = "") -> bool:
        self.cancelled.append((execution_id, reason))
        return True


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def make(
    answers: list[dict[str, Any]], engine: FakeEngine | None = None
) -> tuple[WorkerCheck, FakeEngine, Clock, list[str], list[int]]:
    engine = engine or FakeEngine()
    clock, asks = Clock(), [0]
    warnings: list[str] = []

    def ask() -> list[dict[str, Any]]:
        asks[0] += 1
        return answers

    check = WorkerCheck(engine, SETTINGS, "e1", ask, warnings.append, clock)  # type: ignore[arg-type]
    return check, engine, clock, warnings, asks


def run_for(check: WorkerCheck, clock: Clock, seconds: float, step: float = 0.05) -> None:
    end = clock.now + seconds
    while clock.now < end:
        check()
        clock.now += step


def test_no_worker_answers_warns_once_and_keeps_waiting() -> None:
    check, engine, clock, warnings, asks = make([])
    run_for(check, clock, 2.9)
    assert asks[0] == 0 and warnings == []  # nothing asked before ~3 s
    run_for(check, clock, 10.0)
    assert asks[0] >= 3  # asked again every few seconds: a worker may start meanwhile
    assert warnings[0] == (
        "waiting for a worker: no noetl-celery worker answers on redis://:***@r:6379/1; "
        "start one with the same NOETL_DATABASE_URL"
    )
    assert warnings[1].startswith("no worker has claimed a command of execution e1 after 1")
    assert len(warnings) == 2 and engine.cancelled == []
    assert engine.store.asked <= 14  # the database is looked at once a second, not per poll


def test_workers_on_another_database_cancel_and_raise_naming_both() -> None:
    answers = [
        {"hostname": "w1@h", "database_id": "abc/db_b", "database": "postgresql://u:***@h/db_b"},
        {"hostname": "w2@h", "database_id": "abc/db_b", "database": "postgresql://u:***@h/db_b"},
    ]
    check, engine, clock, _, _ = make(answers)
    with pytest.raises(WorkersElsewhere) as info:
        run_for(check, clock, 5.0)
    message = str(info.value)
    assert "postgresql://u:***@h/db_b (identity abc/db_b): w1@h, w2@h" in message
    assert "this client uses postgresql://u:***@h:5432/db_a (identity abc/db_a)" in message
    assert "(execution e1 cancelled)" in message and "pw" not in message
    assert [eid for eid, _ in engine.cancelled] == ["e1"]


@pytest.mark.parametrize(
    "answers",
    [
        # one worker of this database is enough: it may be busy
        [{"hostname": "w1", "database_id": MINE}, {"hostname": "w2", "database_id": "x/y"}],
        # an older worker cannot tell: keep waiting rather than fail a run that may work
        [{"hostname": "old"}, {"hostname": "w2", "database_id": "x/y"}],
    ],
)
def test_no_error_while_a_worker_may_serve_this_database(answers: list[dict[str, Any]]) -> None:
    check, engine, clock, _, asks = make(answers)
    run_for(check, clock, 8.0)
    assert asks[0] >= 2 and engine.cancelled == []


def test_nothing_is_asked_once_a_worker_claimed() -> None:
    engine = FakeEngine(store=FakeStore(claimed=True))
    check, _, clock, warnings, asks = make([{"hostname": "w", "database_id": "x/y"}], engine)
    run_for(check, clock, 15.0)
    assert asks[0] == 0 and warnings == [] and engine.store.asked == 1


def test_commands_held_for_the_broker_wait_for_it_not_for_a_worker() -> None:
    """While the broker is away nobody can answer: no "no worker answers" warning, no
    "nothing claimed" warning; the wait is counted again from the broker's return."""
    engine = FakeEngine()
    engine.store.outbox.held = 3
    check, _, clock, warnings, asks = make([], engine)
    run_for(check, clock, 30.0)
    assert asks[0] == 0 and warnings == []
    engine.store.outbox.held = 0  # the relay published them
    run_for(check, clock, 1.9)  # the last held poll was at most a poll interval ago
    assert asks[0] == 0 and warnings == []
    run_for(check, clock, 10.0)
    assert asks[0] >= 1 and warnings[0].startswith("waiting for a worker")
