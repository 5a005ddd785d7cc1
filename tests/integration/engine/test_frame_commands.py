"""One command per cursor frame (worker.frames): with `frame.process: frame` and a body
the claiming worker may run (one tool), the claim, the frame's body and the frame's
count are one command, one close and one pass; the result, stats and loop counters
are those of the two-command path (a body that is a pipeline). A worker that dies in
the body leaves the rows recorded on the claim: its next attempt hands them over, the
body runs again on them, and they are counted once. On either store (SQLite,
Postgres), driven in this thread by the recording dispatcher of
test_cursor_continuation."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from noetl_celery.engine.service import Engine
from noetl_celery.orchestrator.ids import parse_claim
from noetl_celery.store.schema import commands, events, loops
from noetl_celery.store.rows import ClaimedCommand
from tests.integration.engine.test_cursor_continuation import (
    ROWS,
    Deliveries,
    body_ids,
    drain_exactly,
    engine,  # noqa: F401  (the fixture)
    playbook,
    queue_db,
    queue_rows,
    runs,
)



def claim_results(engine: Engine, eid: str) -> list[dict[str, Any]]:
    query = select(events.c.command_id, events.c.payload).where(
        events.c.execution_id == eid, events.c.type == "command.completed"
    )
    with engine.database.engine.connect() as conn:
        rows = conn.execute(query).all()
    return [p["result"] for cid, p in rows if parse_claim(cid or "") is not None]


def loop_row(engine: Engine, eid: str) -> tuple[int, int, int, int]:
    query = select(loops.c.total, loops.c.issued, loops.c.succeeded, loops.c.failed).where(
        loops.c.execution_id == eid
    )
    with engine.database.engine.connect() as conn:
        row = conn.execute(query).one()
    return int(row[0]), int(row[1]), int(row[2]), int(row[3])


def bodies(engine: Engine, eid: str) -> list[tuple[str, str | None, Any]]:
    query = select(commands.c.status, commands.c.worker, commands.c.item).where(
        commands.c.execution_id == eid, commands.c.kind == "iteration"
    )
    with engine.database.engine.connect() as conn:
        return [(r[0], r[1], r[2]) for r in conn.execute(query)]


def test_a_frame_is_one_command_counted_as_its_body_command_would_be(
    engine: Engine,  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _, deliveries, eid = drain_exactly(engine, tmp_path, fail_first=False)
    frames = -(-ROWS // 4)
    # every claim that took rows ran its frame's body and carried its outcome
    with_rows = [r for r in claim_results(engine, eid) if r["rows"]]
    assert len(with_rows) == frames
    assert all(r["recorded"] and r["body"]["status"] == "ok" for r in with_rows)
    # the bodies' rows are there, finished, never published nor claimed on their own
    assert len(body_ids(engine, eid)) == frames
    assert {(status, worker is not None) for status, worker, _ in bodies(engine, eid)} == {
        ("completed", True)
    }
    assert not set(body_ids(engine, eid)) & set(deliveries.published)
    fast = engine.summary(eid)["steps"]["drain"]
    fast_loop = loop_row(engine, eid)
    # the same drain, each body a command of its own (the path every body took before)
    (tmp_path / "two").mkdir()
    db = queue_db(tmp_path / "two")
    two = Deliveries()
    engine.use_dispatcher(two)
    monkeypatch.setattr(engine.executor.frames, "finish", lambda *args: None)
    eid2 = engine.start_text(playbook(False), {"db": str(db)})
    two.deliver_all(engine.executor.execute)
    slow = engine.summary(eid2)["steps"]["drain"]
    assert queue_rows(db) == [("done", 1, ROWS)]
    assert all("body" not in r for r in claim_results(engine, eid2))
    assert slow["stats"] == fast["stats"] == {"total": ROWS, "success": ROWS, "failed": 0}
    fast_items = engine.store.result(eid, "drain", 1)["results"]
    assert sorted(map(str, engine.store.result(eid2, "drain", 1)["results"])) == sorted(
        map(str, fast_items)
    )
    assert len(fast_items) == frames
    assert len(body_ids(engine, eid2)) == frames
    assert set(body_ids(engine, eid2)) <= set(two.published) | set(body_ids(engine, eid2))
    assert loop_row(engine, eid2) == fast_loop == (ROWS, frames, ROWS, 0)


def test_a_worker_that_dies_in_a_frame_body_leaves_its_rows_to_the_next_attempt(
    engine: Engine,  # noqa: F811
    tmp_path: Path,
) -> None:
    """The body ran (its rows marked done), then the process died before the close: the
    reaper's next attempt of the claim hands the recorded rows over without claiming,
    the body runs again on them, and every row is counted once."""
    db = queue_db(tmp_path)
    deliveries = Deliveries()
    engine.use_dispatcher(deliveries)
    executor = engine.executor
    real = executor.frames.run_body
    died: list[ClaimedCommand] = []

    class Died(BaseException):
        """The process ending in the middle of the frame."""

    def dies_after_the_first_body(body: ClaimedCommand) -> object:
        outcome = real(body)
        if not died:
            died.append(body)
            raise Died
        return outcome

    executor.frames.run_body = dies_after_the_first_body
    eid = engine.start_text(playbook(fail_first=False), {"db": str(db)})
    while deliveries.queue:
        try:
            executor.execute(deliveries.queue.popleft())
        except Died:
            pass  # its claim stays running, its heartbeat stopped: the lease runs out
    assert died and engine.status(eid)["status"] == "RUNNING"
    deadline = time.monotonic() + 60
    while engine.status(eid)["status"] == "RUNNING" and time.monotonic() < deadline:
        engine.reaper.sweep()
        deliveries.deliver_all(executor.execute)
        time.sleep(0.2)
    summary = engine.summary(eid)
    assert summary["status"] == "COMPLETED", summary["error"]
    assert summary["steps"]["drain"]["stats"] == {"total": ROWS, "success": ROWS, "failed": 0}
    # the frame's body ran twice on the same rows (at least once), every other once
    frames = runs(db)
    rows = sorted(r["id"] for r in died[0].item)
    assert frames.count(json.dumps(rows)) == 2
    assert len(frames) == -(-ROWS // 4) + 1
    assert sorted(queue_rows(db)) == sorted(
        [("done", 1, ROWS - len(rows)), ("done", 2, len(rows))]
    )
    # the next attempt handed the recorded rows over: its body was a command of its own
    handed = [r for r in claim_results(engine, eid) if r.get("recorded") and "body" not in r]
    assert [sorted(r["id"] for r in h["rows"]) for h in handed] == [rows]
