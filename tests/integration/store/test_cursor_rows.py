"""A cursor epoch takes each row once (both backends): rows a claim returns again, after
an earlier claim of them was recorded but never committed, are dropped by the store."""

from __future__ import annotations

from pathlib import Path

from noetl_celery.engine.service import Engine
from noetl_celery.models.outcome import Outcome
from noetl_celery.orchestrator.decisions import Completion
from noetl_celery.settings import Settings
from noetl_celery.store.database import SchemaMode

PLAYBOOK = """apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: c, path: tests/c}
workflow:
  - step: only
    tool: {kind: noop}
"""


def claim(eid: str, frame: int, ids: list[int], epoch: int = 1) -> Completion:
    rows = [{"id": i} for i in ids]
    return Completion(
        event_id=frame,
        command_id=f"{eid}:drain:{epoch}:c0.{frame}",
        step="drain",
        epoch=epoch,
        iteration=None,
        outcome=Outcome("ok", {"rows": rows, "row_count": len(rows)}),
    )


def test_rows_claimed_again_in_an_epoch_are_dropped(store_url: str, tmp_path: Path) -> None:
    engine = Engine(Settings(home=tmp_path, database_url=store_url), schema=SchemaMode.MIGRATE)
    try:
        eid = engine.start_text(PLAYBOOK)
        with engine.store.orchestration(eid, wait=True) as tx:
            assert tx is not None
            [first] = tx.first_claims([claim(eid, 1, [1, 2, 3])])
            [again, body] = tx.first_claims(
                [claim(eid, 2, [2, 3, 4, 4]), claim(eid, 1, [1], epoch=2)]
            )
        assert first.outcome.result["rows"] == [{"id": 1}, {"id": 2}, {"id": 3}]
        assert again.outcome.result["rows"] == [{"id": 4}]
        assert again.outcome.result["duplicates"] == 3
        assert body.outcome.result["rows"] == [{"id": 1}]  # a new epoch starts afresh
    finally:
        engine.close()
