"""One contract for `Facts`, run against every implementation: the unit tests'
simulator (tests/unit/orchestrator/sim.py) and the real store on SQLite and Postgres.
The unit tests trust the simulator to answer as the store does; this keeps them from
drifting apart (a failed iteration's result once did)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from noetl_celery.engine.service import Engine
from noetl_celery.models.outcome import Outcome
from noetl_celery.orchestrator.decisions import Facts
from noetl_celery.settings import Settings
from noetl_celery.store.database import SchemaMode
from tests.unit.orchestrator.sim import Sim, err, ok, playbook

PLAYBOOK = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: facts_contract}
workload: {items: [0, 1, 2]}
workflow:
  - step: first
    tool: {kind: python, code: "result = {'n': 1}"}
    next: {arcs: [{step: each}]}
  - step: each
    loop: {in: "{{ items }}", iterator: item}
    tool:
      kind: python
      input: {item: "{{ iter.item }}"}
      code: |
        if item == 1:
            raise ValueError("item 1 fails")
        result = {"i": item}
"""


def simulated(step: str, item: Any, iteration: int | None) -> Outcome:
    """What the python tool reports for the playbook's commands."""
    if step == "first":
        return ok({"n": 1})
    return err("ValueError: item 1 fails") if item == 1 else ok({"i": item})


@pytest.fixture(params=["simulator", "sqlite", "postgresql"])
def facts(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Facts]:
    """The history of one run of PLAYBOOK, as each implementation answers it."""
    if request.param == "simulator":
        sim = Sim(playbook(PLAYBOOK), simulated)
        assert sim.run().status == "FAILED"
        yield sim
        return
    url = (
        f"sqlite:///{tmp_path / 'noetl.sqlite3'}"
        if request.param == "sqlite"
        else request.getfixturevalue("pg_url")
    )
    engine = Engine(Settings(home=tmp_path, database_url=url), schema=SchemaMode.MIGRATE)
    engine.use_in_process_workers()
    try:
        eid = engine.start_text(PLAYBOOK)
        engine.wait(eid, 60)
        assert engine.summary(eid)["status"] == "FAILED"
        with engine.store.orchestration(eid, wait=True) as tx:
            assert tx is not None
            yield tx
    finally:
        engine.close()


def test_the_facts_of_a_run(facts: Facts) -> None:
    assert facts.result("first", 1) == {"n": 1}
    per_item = facts.iteration_results("each", 1, 10)
    assert len(per_item) == 3
    assert per_item[0] == {"i": 0} and per_item[2] == {"i": 2}
    # a failed iteration's result: its error, marked as one
    failed = per_item[1]
    assert set(failed) == {"status", "error"} and failed["status"] == "error"
    assert failed["error"]["kind"] == "python_error"
    assert "item 1 fails" in failed["error"]["message"]
    assert facts.iteration_results("each", 1, 2) == per_item[:2]  # the first `limit`
    assert facts.iteration_results("each", 2, 10) == []  # an epoch that never ran
    stats = {"total": 3, "success": 2, "failed": 1}
    assert facts.result("each", 1) == {"stats": stats, "results": per_item}
