"""A process that stalls while it holds an execution's lock loses its transaction to
Postgres (`idle_in_transaction_session_timeout`); when it resumes, the engine does the
work again instead of failing: an orchestration pass is redone, a command's outcome is
recorded again (not lost, the command not run twice). Real Postgres, in-process
workers; the stall is a sleep inside the transaction (the chaos suite SIGSTOPs a real
worker: tests/chaos, test_lock_holder_frozen_for_30_s)."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from noetl_celery.engine.service import Engine
from noetl_celery.settings import Settings
from noetl_celery.store.database import SchemaMode

pytestmark = pytest.mark.integration

IDLE = 0.5  # the bound under test: a stall of STALL outlives it
STALL = 1.5
HEAD = "apiVersion: noetl.io/v2\nkind: Playbook\nmetadata: {name: t, path: tests/stall}\n"
LOOP = (
    HEAD
    + """workflow:
  - step: each
    loop: {in: "{{ range(30) | list }}", iterator: i, spec: {mode: parallel, max_in_flight: 10}}
    tool: {kind: noop}
"""
)
ONCE = (
    HEAD
    + """workload: {marks: ""}
workflow:
  - step: work
    tool:
      kind: python
      input: {marks: "{{ marks }}"}
      code: |
        def main(marks):
            with open(marks, "a") as fh:
                fh.write("x")
            return {"ran": True}
"""
)


@pytest.fixture
def engine(pg_url: str, tmp_path: Path) -> Iterator[Engine]:
    built = Engine(
        Settings(
            home=tmp_path,
            database_url=pg_url,
            embedded_workers=4,
            reaper_interval_seconds=0.2,
            wake_grace_seconds=0.5,
            # a lost close would be recovered by a re-run after this: the test says no
            lease_seconds=3,
            db_idle_in_transaction_seconds=IDLE,
        ),
        schema=SchemaMode.MIGRATE,
    )
    built.use_in_process_workers()
    yield built
    built.close()


def stall_once(target: Any, name: str, monkeypatch: pytest.MonkeyPatch, when: Any) -> list[str]:
    """Make `target.name` stall STALL seconds inside its transaction, the first time
    `when(*args)` holds; returns a list that records the stall."""
    original = getattr(target, name)
    stalled: list[str] = []

    def stalling(*args: Any, **kwargs: Any) -> Any:
        result = original(*args, **kwargs)
        if not stalled and when(*args):
            stalled.append(name)
            time.sleep(STALL)  # frozen, the transaction open and the lock held
        return result

    monkeypatch.setattr(target, name, stalling)
    return stalled


def test_an_orchestration_pass_cut_short_is_done_again(
    engine: Engine, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    stalled = stall_once(engine.orchestrator, "run_pass", monkeypatch, lambda tx: True)
    with caplog.at_level(logging.WARNING, logger="noetl_celery.retry"):
        eid = engine.start_text(LOOP, {})  # its first pass stalls, and is redone
        row = engine.wait(eid, 30)
    assert stalled
    assert row.status == "COMPLETED", row.error
    assert engine.summary(eid)["steps"]["each"]["stats"] == {
        "total": 30,
        "success": 30,
        "failed": 0,
    }
    assert "an orchestration pass of execution" in caplog.text
    assert "was interrupted, trying again" in caplog.text
    assert "idle-in-transaction timeout" in caplog.text


def test_a_close_cut_short_is_recorded_again_not_run_again(
    engine: Engine, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    marks = tmp_path / "marks"
    marks.write_text("")
    # the close and the in-place pass share a transaction: it stalls after both
    stalled = stall_once(
        engine.executor.closer,
        "_close_and_fold",
        monkeypatch,
        lambda completion, command, *rest: command.step == "work",
    )
    eid = engine.start_text(ONCE, {"marks": str(marks)})
    row = engine.wait(eid, 30)
    assert stalled
    assert row.status == "COMPLETED", row.error
    time.sleep(3.5)  # past the lease: a lost close would have been re-run by now
    assert marks.read_text() == "x"  # the tool ran once
    counts = engine.store.command_counts(eid)
    assert (counts.completed, counts.expired) == (1, 0), counts
    events = [e.type for e in engine.store.events(eid)]
    assert events.count("command.completed") == 1
