"""Sub-playbooks on the engine with its real store (both backends), in-process workers
with only two threads: a waiting parent must not hold a worker slot."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from noetl_celery.engine.service import Engine
from noetl_celery.engine.summaries import RunSummary
from noetl_celery.models.filters import ExecutionFilter
from noetl_celery.settings import Settings
from noetl_celery.store.database import SchemaMode

PLAYBOOKS = Path(__file__).resolve().parents[2] / "playbooks"


@pytest.fixture
def engine(store_url: str, tmp_path: Path) -> Iterator[Engine]:
    built = Engine(
        Settings(home=tmp_path, database_url=store_url, embedded_workers=2),
        schema=SchemaMode.MIGRATE,
    )
    built.use_in_process_workers()
    built.register_file(PLAYBOOKS / "child_double.yaml")
    yield built
    built.close()


def run(engine: Engine, text: str, payload: dict[str, Any] | None = None) -> RunSummary:
    eid = engine.start_text(text, payload)
    engine.wait(eid, 120)
    return engine.summary(eid)


def children_of(engine: Engine, eid: str) -> list[str]:
    from sqlalchemy import select

    from noetl_celery.store.schema import executions

    with engine.database.read_engine.connect() as conn:
        rows = conn.execute(
            select(executions.c.status).where(executions.c.parent_execution_id == eid)
        ).all()
    return [r[0] for r in rows]


def test_a_parent_waits_for_its_child_and_gets_its_summary(engine: Engine) -> None:
    out = run(
        engine,
        """apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: p}
workflow:
  - step: call
    tool: {kind: playbook, path: tests/child_double, return_step: double, input: {x: 21}}
""",
    )
    assert out["status"] == "COMPLETED", out["error"]
    call = out["steps"]["call"]
    assert call["status"] == "COMPLETED" and call["result"] == {"doubled": 42}
    assert call["steps"]["start"] == {"x": 21}  # the child's steps, as run --json shows them
    assert children_of(engine, out["execution_id"]) == ["COMPLETED"]
    # `executions` tells the child (started by its parent) from the parent (by hand)
    [child] = engine.executions(ExecutionFilter(trigger="parent"))
    assert child["parent_execution_id"] == out["execution_id"] and child["trigger"] == "parent"
    assert [e["execution_id"] for e in engine.executions(ExecutionFilter(trigger="manual"))] == [
        out["execution_id"]
    ]


def test_more_waiting_parents_than_worker_slots(engine: Engine) -> None:
    out = run(engine, (PLAYBOOKS / "parent_fanout.yaml").read_text(), {"n": 12, "window": 12})
    assert out["status"] == "COMPLETED", out["error"]
    assert out["result"] == {"total": 12, "success": 12, "failed": 0}
    assert children_of(engine, out["execution_id"]).count("COMPLETED") == 12


def test_a_failed_child_fails_the_parent_step(engine: Engine) -> None:
    out = run(
        engine, (PLAYBOOKS / "parent_fanout.yaml").read_text(), {"n": 4, "window": 2, "fail_at": 2}
    )
    assert out["steps"]["fan"]["stats"] == {"total": 4, "success": 3, "failed": 1}
    failed = [r for r in out["steps"]["fan"]["results"] if r.get("status") == "error"]
    assert len(failed) == 1 and "child asked to fail for x=2" in failed[0]["error"]["message"]


def test_a_single_step_child_failure_fails_the_execution(engine: Engine) -> None:
    out = run(
        engine,
        """apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: p}
workflow:
  - step: call
    tool: {kind: playbook, path: tests/child_double, return_step: double, input: {fail: true}}
""",
    )
    assert out["status"] == "FAILED"
    assert "child execution" in str(out["error"]) and "FAILED" in str(out["error"])


def test_fire_and_forget_and_unknown_paths(engine: Engine) -> None:
    out = run(
        engine,
        """apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: p}
workflow:
  - step: call
    tool: {kind: playbook, path: tests/child_double, input: {x: 3}}
    next: {arcs: [{step: missing}]}
  - step: missing
    tool: {kind: playbook, path: tests/no_such_playbook, return_step: end}
""",
    )
    assert out["steps"]["call"]["status"] == "started"
    assert out["status"] == "FAILED"
    assert "no playbook registered at catalog path 'tests/no_such_playbook'" in str(out["error"])
    child = out["steps"]["call"]["execution_id"]
    engine.wait(child, 60)
    assert engine.summary(child)["result"] == {"doubled": 6}
