"""`run`'s worker check decides from what the fleet answers (the engine and the clock are
stand-ins here; tests/acceptance/test_misconfiguration.py runs it against real workers)."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest

from noetl_celery.cli.fleet import WorkerCheck, unserved_queues
from noetl_celery.constants import CMD_ISSUED, CMD_RUNNING
from noetl_celery.errors import WorkersElsewhere
from noetl_celery.settings import Settings
from noetl_celery.store.rows import InFlight
from noetl_celery.store.schema import utcnow

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
    flights: list[InFlight] = field(default_factory=list)

    def any_claimed(self, execution_id: str) -> bool:
        self.asked += 1
        return self.claimed

    def execution(self, execution_id: str) -> SimpleNamespace:
        return SimpleNamespace(catalog_id=7)

    def in_flight(self, execution_id: str) -> list[InFlight]:
        return self.flights


@dataclass
class FakeEngine:
    database_id: str | None = MINE
    store: FakeStore = field(default_factory=FakeStore)
    cancelled: list[tuple[str, str]] = field(default_factory=list)
    routed: dict[str, str] = field(default_factory=dict)

    def routed_queues(self, catalog_id: int) -> dict[str, str]:
        return self.routed

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


W = {"step": "each", "queue": "io"}


@pytest.mark.parametrize(
    ("waiting", "answers", "expected"),
    [
        # a worker of this database consumes `io`: served
        ([W], [{"database_id": MINE, "queues": ["io", "noetl.orchestrate"]}], {}),
        # only the default queue is consumed here; `io` only by another database's worker
        (
            [W, {"step": "other", "queue": "io"}, {"step": "plain", "queue": None}],
            [
                {"database_id": MINE, "queues": ["noetl.commands", "noetl.orchestrate"]},
                {"database_id": "x/y", "queues": ["io"]},
            ],
            {"io": ["each", "other"]},
        ),
        # nobody answers: the "no worker" warning covers it, not this one
        ([W], [], {}),
        # an older worker does not list its queues: it may serve it
        ([W], [{"database_id": MINE}], {}),
        # the engine's own queue is never "routed"
        ([{"step": "plain", "queue": None}], [{"database_id": MINE, "queues": []}], {}),
    ],
)
def test_unserved_queues(
    waiting: list[dict[str, Any]], answers: list[dict[str, Any]], expected: dict[str, list[str]]
) -> None:
    assert unserved_queues(waiting, answers, MINE) == expected


def flight(step: str, status: str = CMD_ISSUED, age: float = 60.0) -> InFlight:
    return InFlight(step, status, 3, utcnow() - dt.timedelta(seconds=age))


def test_a_routed_step_waiting_on_an_unserved_queue_is_named_once() -> None:
    engine = FakeEngine(store=FakeStore(claimed=True), routed={"each": "io"})
    answers = [{"hostname": "w", "database_id": MINE, "queues": ["noetl.commands"]}]
    check, _, clock, warnings, asks = make(answers, engine)
    engine.store.flights = [flight("each", age=2.0), flight("start", CMD_RUNNING)]
    run_for(check, clock, 8.0)
    assert asks[0] == 0 and warnings == []  # waited 2 s only: not asked yet
    engine.store.flights = [flight("each", age=30.0)]
    run_for(check, clock, 20.0)
    assert warnings == [
        "step each waits on queue io, which no worker of this engine database consumes: "
        "start one with `noetl-celery worker -Q io`"
    ]
    assert asks[0] == 1  # said once, and nothing more to ask about


def test_a_routed_queue_a_worker_consumes_is_not_named() -> None:
    engine = FakeEngine(store=FakeStore(claimed=True), routed={"each": "io"})
    engine.store.flights = [flight("each", age=30.0)]
    answers = [{"hostname": "w", "database_id": MINE, "queues": ["io"]}]
    check, _, clock, warnings, asks = make(answers, engine)
    run_for(check, clock, 12.0)
    assert warnings == [] and asks[0] >= 2  # asked every few seconds while it waits
