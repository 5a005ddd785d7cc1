"""Quarantined loop items on real Celery workers and Postgres: the worker marks the
outcome a `do: quarantine` rule stopped, the engine counts it apart, the run completes."""

from __future__ import annotations

import pytest

from noetl_celery.engine.service import Engine
from tests.integration.engine.test_quarantine import BAD, POLICY

pytestmark = pytest.mark.integration


def test_poisoned_items_are_quarantined_on_workers(engine_on_workers: Engine) -> None:
    engine = engine_on_workers
    eid = engine.start_text(POLICY)
    row = engine.wait(eid, 120)
    assert row.status == "COMPLETED", row.error
    summary = engine.summary(eid)
    assert summary["steps"]["each"]["stats"] == {
        "total": 20,
        "success": 17,
        "failed": 0,
        "quarantined": 3,
    }
    assert summary["quarantined"] == 3
    [loop] = engine.store.loops(eid)
    assert (loop.succeeded, loop.failed, loop.quarantined) == (17, 0, 3)
    failed = engine.events(eid, types=["command.failed"], step="each")
    assert len(failed) == len(BAD) and {e["iteration"] for e in failed} == set(BAD)
    counts = engine.store.command_counts(eid)
    assert (counts.planned, counts.issued, counts.running) == (0, 0, 0), counts
