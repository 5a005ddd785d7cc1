"""Timeouts and cancellation on the engine with its real store (both backends) and
in-process workers: every one ends in a clear terminal status, never a hang."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from noetl_celery.engine.service import Engine
from noetl_celery.engine.summaries import RunSummary
from noetl_celery.settings import Settings
from noetl_celery.store.database import SchemaMode

HEAD = "apiVersion: noetl.io/v2\nkind: Playbook\nmetadata: {name: t, path: tests/t}\n"
SLEEPER = (
    HEAD.replace("tests/t", "tests/sleeper")
    + """workflow:
  - step: nap
    tool: {kind: python, code: "import time\\ntime.sleep(30)\\nresult = {}"}
"""
)


def engine_for(store_url: str, home: Path, **settings: float) -> Engine:
    built = Engine(
        Settings(
            home=home,
            database_url=store_url,
            embedded_workers=4,
            reaper_interval_seconds=0.2,
            **settings,  # type: ignore[arg-type]
        ),
        schema=SchemaMode.MIGRATE,
    )
    built.use_in_process_workers()
    return built


@pytest.fixture
def engine(store_url: str, tmp_path: Path) -> Iterator[Engine]:
    built = engine_for(store_url, tmp_path)
    yield built
    built.close()


def finish(engine: Engine, eid: str, limit: float = 20) -> tuple[RunSummary, float]:
    started = time.monotonic()
    engine.wait(eid, limit)
    return engine.summary(eid), time.monotonic() - started


def test_a_step_timeout_stops_a_pipeline_at_a_task_boundary(engine: Engine) -> None:
    eid = engine.start_text(
        HEAD
        + """workflow:
  - step: slow
    spec: {timeout: 1}
    tool:
      - name: tick
        kind: python
        code: "import time\\ntime.sleep(0.2)\\nresult = {}"
        spec:
          policy:
            rules:
              - else: {then: {do: jump, to: tick}}
"""
    )
    summary, seconds = finish(engine, eid)
    assert summary["status"] == "FAILED"
    # the pipeline's own check between tasks, or the reaper's deadline sweep, whichever
    # comes first: both end the step as timed out
    assert "step 'slow' timed out" in str(summary["error"])
    assert seconds < 10


def test_a_step_timeout_fails_a_single_call_stuck_inside_a_tool(engine: Engine) -> None:
    eid = engine.start_text(
        SLEEPER.replace("- step: nap\n", "- step: nap\n    spec: {timeout: 1}\n")
    )
    summary, seconds = finish(engine, eid)
    assert summary["status"] == "FAILED"
    assert "step 'nap' timed out" in str(summary["error"])
    assert seconds < 10  # the reaper failed it at its deadline; the sleep did not matter


def test_the_execution_timeout(store_url: str, tmp_path: Path) -> None:
    engine = engine_for(store_url, tmp_path, execution_timeout_seconds=1.0)
    try:
        eid = engine.start_text(SLEEPER)
        summary, seconds = finish(engine, eid)
    finally:
        engine.close()
    assert summary["status"] == "FAILED"
    assert "execution timed out after 1s" in str(summary["error"])
    assert seconds < 10


def test_cancel_cascades_to_a_waiting_child(engine: Engine) -> None:
    engine.register_text(SLEEPER)
    eid = engine.start_text(
        HEAD
        + """workflow:
  - step: call
    tool: {kind: playbook, path: tests/sleeper, return_step: nap}
"""
    )
    deadline = time.monotonic() + 10
    while not (children := _children(engine, eid)):
        assert time.monotonic() < deadline, "the child never started"
        time.sleep(0.05)
    assert engine.cancel(eid, "test")
    assert engine.summary(eid)["status"] == "CANCELLED"
    assert [engine.summary(c)["status"] for c in children] == ["CANCELLED"]
    assert not engine.cancel(eid)  # already ended
    for execution in (eid, *children):
        counts = engine.store.command_counts(execution)
        assert counts.issued == counts.running == counts.planned == 0, counts


def _children(engine: Engine, eid: str) -> list[str]:
    from sqlalchemy import select

    from noetl_celery.store.schema import executions

    with engine.database.read_engine.connect() as conn:
        rows = conn.execute(
            select(executions.c.execution_id).where(executions.c.parent_execution_id == eid)
        ).all()
    return [r[0] for r in rows]


def test_heartbeats_keep_a_long_command_leased(store_url: str, tmp_path: Path) -> None:
    """A command running for several lease periods is renewed, never taken for lost."""
    engine = engine_for(store_url, tmp_path, lease_seconds=1)
    try:
        eid = engine.start_text(SLEEPER.replace("time.sleep(30)", "time.sleep(3.5)"))
        summary, _ = finish(engine, eid)
        counts = engine.store.command_counts(eid)
    finally:
        engine.close()
    assert summary["status"] == "COMPLETED", summary["error"]
    assert counts.expired == 0 and counts.completed == 1  # one attempt, never re-issued


def test_a_cancel_stops_a_running_pipeline_within_a_poll(engine: Engine, tmp_path: Path) -> None:
    """A pipeline that would tick forever stops at the task boundary after its worker's
    heartbeat thread found the command cancelled (worker.heartbeat's status poll)."""
    ticks = tmp_path / "ticks"
    eid = engine.start_text(
        HEAD
        + f"""workflow:
  - step: forever
    tool:
      - name: tick
        kind: python
        code: |
          import time
          with open({str(ticks)!r}, "a") as f:
              f.write("t")
          time.sleep(0.05)
          result = {{}}
        spec:
          policy:
            rules:
              - else: {{then: {{do: jump, to: tick}}}}
"""
    )
    deadline = time.monotonic() + 10
    while not ticks.exists() or len(ticks.read_text()) < 10:  # past a whole poll period
        assert time.monotonic() < deadline, "the pipeline never ran"
        time.sleep(0.05)
    assert engine.cancel(eid, "test")
    time.sleep(1.0)  # a poll period (0.2 s) and a tick, with room for a slow machine
    after_stop = len(ticks.read_text())
    time.sleep(1.0)
    assert len(ticks.read_text()) == after_stop, "the pipeline still ticks after a cancel"
    assert engine.summary(eid)["status"] == "CANCELLED"
