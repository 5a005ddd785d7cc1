"""Reruns on the embedded engine: what the first pass starts from, and its limits."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from noetl_celery.engine.service import Engine
from noetl_celery.engine.summaries import RunSummary
from noetl_celery.errors import ConfigurationError
from noetl_celery.orchestrator.decide import start
from noetl_celery.passes.rerun import RerunError, start_inputs
from noetl_celery.settings import Settings
from noetl_celery.store.database import SchemaMode
from tests.integration.engine.test_cursor_embedded import PLAYBOOK as CURSOR

TWO_LOOPS = """apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: two_loops, path: tests/two_loops}
workload: {a: [1, 2, 3, 4], b: [10, 20, 30], bad: [2, 4, 20], mark: first}
workflow:
  - step: first
    loop: {in: "{{ a }}", iterator: x, spec: {mode: parallel, max_in_flight: 2}}
    tool:
      kind: python
      input: {x: "{{ iter.x }}", bad: "{{ bad }}"}
      code: |
        assert x not in bad, f"{x} is bad"
        result = x
    next: {arcs: [{step: second, when: "{{ event.name == 'loop.done' }}"}]}
  - step: second
    loop: {in: "{{ b }}", iterator: y}
    tool:
      kind: python
      input: {y: "{{ iter.y }}", bad: "{{ bad }}"}
      code: |
        assert y not in bad, f"{y} is bad"
        result = y
    next: {arcs: [{step: last, when: "{{ event.name == 'loop.done' }}"}]}
  - step: last
    tool: {kind: python, input: {mark: "{{ mark }}"}, code: "result = {'mark': mark}"}
"""


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Engine]:
    built = Engine(Settings(home=tmp_path / "home"), schema=SchemaMode.MIGRATE)
    built.use_in_process_workers()
    yield built
    built.close()


def finish(engine: Engine, eid: str) -> RunSummary:
    engine.wait(eid, 60)
    return engine.summary(eid)


def items_run(engine: Engine, eid: str, step: str) -> list[Any]:
    return sorted(
        e["payload"]["result"] for e in engine.events(eid, types=["command.completed"], step=step)
    )


def test_each_failing_loop_reruns_its_failed_items(engine: Engine) -> None:
    original = engine.start_text(TWO_LOOPS)
    finish(engine, original)
    rerun = engine.rerun(original, failed_items=True, overrides={"bad": []})
    summary = finish(engine, rerun)
    assert summary["status"] == "COMPLETED", summary["error"]
    assert items_run(engine, rerun, "first") == [2, 4]  # the loop that failed first leads
    assert items_run(engine, rerun, "second") == [20]  # the later loop, when reached
    assert summary["result"] == {"mark": "first"}
    detail = engine.store.execution(rerun).trigger_detail or {}
    assert detail["start"]["entry"] == "first"
    assert detail["start"]["items"] == {"first": 2, "second": 1}
    counts = engine.store.command_counts(rerun)
    assert counts.planned == counts.issued == counts.running == 0


def test_the_first_pass_is_decided_the_same_every_time(engine: Engine) -> None:
    original = engine.start_text(TWO_LOOPS)
    finish(engine, original)
    rerun = engine.rerun(original, failed_items=True, overrides={"bad": [4]})
    row = engine.store.execution(rerun)
    inputs = start_inputs(engine.store, row)
    assert inputs == start_inputs(engine.store, row)  # read from an ended original
    assert inputs["loop_items"] == {"first": [2, 4], "second": [20]}
    assert inputs["variables"]["bad"] == [4] and inputs["entry"] == "first"
    playbook = engine.playbooks.get(row.catalog_id)

    class NoFacts:
        def result(self, step: str, epoch: int) -> Any:
            raise AssertionError("the first pass reads no results")

        def iteration_results(self, step: str, epoch: int, limit: int) -> list[Any]:
            return []

    one = start(playbook, rerun, row.payload, NoFacts(), now=0.0, **inputs)
    two = start(playbook, rerun, row.payload, NoFacts(), now=0.0, **start_inputs(engine.store, row))
    assert one == two
    assert [(p.step, p.items) for p in one.plans] == [("first", [2, 4]), ("second", [20])]


def test_from_a_step_the_original_never_reached(engine: Engine) -> None:
    original = engine.start_text(
        TWO_LOOPS.replace(
            "when: \"{{ event.name == 'loop.done' }}\"}]}\n  - step: last",
            'when: "{{ false }}"}]}\n  - step: last',
        )
    )
    finish(engine, original)
    # never run: its arc did not match, so it is only marked skipped (no epoch, no result)
    last = (engine.store.execution(original).state or {})["steps"]["last"]
    assert last["status"] == "skipped" and last["epoch"] == 0
    assert last.get("result_epoch") is None
    rerun = engine.rerun(original, from_step="last", overrides={"mark": "later"})
    summary = finish(engine, rerun)
    assert summary["status"] == "COMPLETED" and summary["result"] == {"mark": "later"}
    # the original's final results came along
    assert summary["steps"]["second"]["stats"]["total"] == 3


def test_cursor_loops_are_not_rerun_by_item(engine: Engine, tmp_path: Path) -> None:
    db = tmp_path / "work.sqlite3"
    with sqlite3.connect(db) as conn:
        conn.execute(
            "CREATE TABLE queue (id INTEGER PRIMARY KEY, status TEXT, slot TEXT, "
            "hits INTEGER DEFAULT 0)"
        )
        conn.executemany("INSERT INTO queue (id, status) VALUES (?, 'pending')", [(1,), (2,)])
    failing = CURSOR.replace('result = {"id": id}', 'assert id != 2\n        result = {"id": id}')
    assert failing != CURSOR
    original = engine.start_text(failing, {"db": str(db)})
    summary = finish(engine, original)
    assert summary["steps"]["drain"]["stats"]["failed"] == 1
    with pytest.raises(RerunError, match="step 'drain' failed rows of a cursor loop"):
        engine.rerun(original, failed_items=True)


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("NOETL_LOG_CAPTURE_BYTES", "-1", "NOETL_LOG_CAPTURE_BYTES must be >= 0"),
        ("NOETL_LOG_CAPTURE_BYTES", "64k", "NOETL_LOG_CAPTURE_BYTES must be an integer"),
        ("NOETL_PROGRESS_SECONDS", "-5", "NOETL_PROGRESS_SECONDS must be >= 0"),
    ],
)
def test_bad_settings_are_named(name: str, value: str, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        Settings.from_env({name: value})
