"""Sub-playbooks on real workers: 100 waiting parents on two worker processes of two
slots each complete (NoETL deadlocks here: its waiting parents hold worker slots)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select

from noetl_celery.store.schema import executions
from tests.support.engines import celery_engine

PLAYBOOKS = Path(__file__).resolve().parents[1] / "playbooks"
pytestmark = pytest.mark.integration


def test_hundred_sub_playbooks_on_two_workers(distributed: dict[str, Any], tmp_path: Path) -> None:
    engine = celery_engine(distributed["url"], distributed["redis_url"], tmp_path)
    try:
        engine.register_file(PLAYBOOKS / "child_double.yaml")
        eid = engine.start_text(
            (PLAYBOOKS / "parent_fanout.yaml").read_text(), {"n": 100, "window": 100}
        )
        row = engine.wait(eid, 300)
        assert row.status == "COMPLETED", row.error
        summary = engine.summary(eid)
        assert summary["result"] == {"total": 100, "success": 100, "failed": 0}
        with engine.database.read_engine.connect() as conn:
            children = conn.execute(
                select(executions.c.status, func.count())
                .where(executions.c.parent_execution_id == eid)
                .group_by(executions.c.status)
            ).all()
        assert children == [("COMPLETED", 100)]
        counts = engine.store.command_counts(eid)
        assert counts.issued == counts.running == counts.planned == 0
    finally:
        engine.close()
