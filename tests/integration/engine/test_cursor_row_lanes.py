"""Per-row cursor lanes as one command (worker.frames, docs/design.md §4): without
`frame.process: frame`, a claim whose body the claiming worker may run (one tool:
orchestrator.frame_rules.inline_rows) runs its frame's per-row bodies itself, one after
another, and one close records every row's body (its command row, its terminal event)
and the lane's next claim. Results, stats, per-item results, failures, quarantine and
loop counters are those of the two-command path (each row's body a command of its
own), on both stores. A worker that dies mid-frame leaves the rows recorded on the
claim: its next attempt hands them over, their bodies run as commands, and each row is
counted once."""

from __future__ import annotations

import contextlib
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from noetl_celery.engine.service import Engine
from noetl_celery.orchestrator.ids import parse_claim
from noetl_celery.store.rows import ClaimedCommand
from noetl_celery.store.schema import commands, events
from tests.integration.engine.test_cursor_continuation import (
    Deliveries,
    body_ids,
    claim_results,
    engine,
    loop_row,
    queue_rows,
)

__all__ = ["engine"]  # the fixture, shared with the per-frame tests

ROWS = 30
BAD = 7  # the row whose body fails (with `bad: true`)

PLAYBOOK = """apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: sqlite_row_lanes}
workload: {db: "", bad: false}
workflow:
  - step: drain
    loop:
      cursor:
        kind: sqlite
        auth: "{{ db }}"
        claim: |
          UPDATE queue SET status = 'claimed'
          WHERE id IN (SELECT id FROM queue WHERE status = 'pending'
                       ORDER BY id LIMIT {{ __frame_max_rows }})
          RETURNING id
      iterator: job
      spec:
        mode: cursor
        max_in_flight: 2
        frame: {max_rows: 4, row_concurrency: 1}
ON_ITEM_ERROR
    tool:
      kind: python
      input: {db: "{{ db }}", id: "{{ iter.job.id }}", bad: "{{ bad }}"}
      code: |
        import sqlite3
        with sqlite3.connect(db, timeout=30) as conn:
            conn.execute("INSERT INTO runs (rows) VALUES (?)", (str(id),))
        if bad and int(id) == 7:
            raise RuntimeError("row 7 is bad")
        with sqlite3.connect(db, timeout=30) as conn:
            conn.execute("UPDATE queue SET status = 'done', hits = hits + 1 WHERE id = ?", (id,))
        result = {"id": int(id)}
"""


def playbook(quarantine: bool = False) -> str:
    extra = "        on_item_error: quarantine" if quarantine else ""
    return PLAYBOOK.replace("ON_ITEM_ERROR\n", extra + "\n" if extra else "")


def queue_db(tmp_path: Path) -> Path:
    tmp_path.mkdir(parents=True, exist_ok=True)
    db = tmp_path / "work.sqlite3"
    with sqlite3.connect(db) as conn:
        conn.execute(
            "CREATE TABLE queue (id INTEGER PRIMARY KEY, status TEXT, hits INTEGER DEFAULT 0)"
        )
        conn.execute("CREATE TABLE runs (n INTEGER PRIMARY KEY, rows TEXT)")
        conn.executemany(
            "INSERT INTO queue (id, status) VALUES (?, 'pending')",
            [(i,) for i in range(1, ROWS + 1)],
        )
    return db


def runs(db: Path) -> list[int]:
    with sqlite3.connect(db) as conn:
        return [int(r[0]) for r in conn.execute("SELECT rows FROM runs ORDER BY n")]


def body_events(engine: Engine, eid: str) -> list[tuple[int, str, Any]]:
    """(iteration, type, result) of every body's terminal event, by iteration."""
    query = (
        select(events.c.iteration, events.c.type, events.c.payload)
        .where(events.c.execution_id == eid, events.c.iteration.is_not(None))
        .order_by(events.c.iteration)
    )
    with engine.database.engine.connect() as conn:
        return [(int(r[0]), r[1], (r[2] or {}).get("result")) for r in conn.execute(query)]


def quarantined(engine: Engine, eid: str) -> list[Any]:
    query = select(events.c.payload).where(
        events.c.execution_id == eid, events.c.type == "item.quarantined"
    )
    with engine.database.engine.connect() as conn:
        return [r[0] for r in conn.execute(query)]


def drain(engine: Engine, tmp_path: Path, **workload: Any) -> tuple[Path, Deliveries, str]:
    db = queue_db(tmp_path)
    deliveries = Deliveries()
    engine.use_dispatcher(deliveries)
    quarantine = workload.pop("quarantine", False)
    eid = engine.start_text(playbook(quarantine), {"db": str(db), **workload})
    deliveries.deliver_all(engine.executor.execute)
    return db, deliveries, eid


def outcome_of(engine: Engine, eid: str) -> dict[str, Any]:
    """What a user sees of the drain, whichever path ran its bodies."""
    summary = engine.summary(eid)
    items = engine.store.result(eid, "drain", 1)["results"]
    return {
        "status": summary["status"],
        "stats": summary["steps"]["drain"]["stats"],
        "items": sorted(map(str, items)),
        "loop": loop_row(engine, eid),
        "bodies": sorted((t, str(r)) for _, t, r in body_events(engine, eid)),
        "quarantined": sorted(len(p) for p in quarantined(engine, eid)),
    }


@pytest.mark.parametrize(
    ("bad", "quarantine"), [(False, False), (True, False), (True, True)], ids=["ok", "fail", "q"]
)
def test_a_frame_of_rows_is_one_command_counted_as_its_row_commands_would_be(
    engine: Engine,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    bad: bool,
    quarantine: bool,
) -> None:
    db, deliveries, eid = drain(engine, tmp_path / "one", bad=bad, quarantine=quarantine)
    frames = -(-ROWS // 4)
    # every claim that took rows ran each row's body and carried its outcome, in order
    with_rows = [r for r in claim_results(engine, eid) if r["rows"]]
    assert len(with_rows) == frames
    assert all(r["recorded"] and len(r["bodies"]) == len(r["rows"]) for r in with_rows)
    assert sorted(runs(db)) == list(range(1, ROWS + 1))  # each row's body ran once
    # one body command row per row, finished, none published nor claimed on its own
    ids = body_ids(engine, eid)
    assert len(ids) == ROWS and not set(ids) & set(deliveries.published)
    # only each lane's first claim went through the broker: the lanes continued here
    claims = [parse_claim(cid) for cid in deliveries.published if parse_claim(cid)]
    assert sorted(claims) == [(0, 1), (1, 1)]  # type: ignore[type-var]
    one = outcome_of(engine, eid)
    # the same drain, each row's body a command of its own (the two-command path)
    two = Deliveries()
    engine.use_dispatcher(two)
    monkeypatch.setattr(engine.executor.frames, "finish", lambda *args: None)
    db2 = queue_db(tmp_path / "two")
    eid2 = engine.start_text(playbook(quarantine), {"db": str(db2), "bad": bad})
    two.deliver_all(engine.executor.execute)
    assert all("bodies" not in r for r in claim_results(engine, eid2))
    assert len(body_ids(engine, eid2)) == ROWS  # each a command the pass issued
    assert outcome_of(engine, eid2) == one
    failed = 1 if bad and not quarantine else 0
    kept = 1 if bad and quarantine else 0
    stats = {"total": ROWS, "success": ROWS - failed - kept, "failed": failed}
    if kept:
        stats["quarantined"] = kept
    assert one["stats"] == stats
    assert one["status"] == ("FAILED" if failed else "COMPLETED")
    assert len(one["quarantined"]) == kept
    assert one["loop"] == (ROWS, ROWS, ROWS - failed - kept, failed)
    assert queue_rows(db) == queue_rows(db2)


def test_a_worker_that_dies_mid_frame_leaves_its_rows_to_the_next_attempt(
    engine: Engine, tmp_path: Path
) -> None:
    """Two rows of a frame ran, then the process died before the close: the reaper's
    next attempt of the claim hands the recorded rows over without claiming, each row's
    body runs again as a command, and every row is counted once."""
    db = queue_db(tmp_path)
    deliveries = Deliveries()
    engine.use_dispatcher(deliveries)
    executor = engine.executor
    real = executor.frames.run_body
    died: list[ClaimedCommand] = []

    class Died(BaseException):
        """The process ending in the middle of the frame."""

    def dies_after_two_rows(body: ClaimedCommand, watch: str | None = None) -> object:
        outcome = real(body, watch)
        if not died and body.iteration == 1:
            died.append(body)
            raise Died
        return outcome

    executor.frames.run_body = dies_after_two_rows
    eid = engine.start_text(playbook(), {"db": str(db)})
    while deliveries.queue:
        with contextlib.suppress(Died):  # the claim stays running: the lease runs out
            executor.execute(deliveries.queue.popleft())
    assert died and engine.status(eid)["status"] == "RUNNING"
    deadline = time.monotonic() + 60
    while engine.status(eid)["status"] == "RUNNING" and time.monotonic() < deadline:
        engine.reaper.sweep()
        deliveries.deliver_all(executor.execute)
        time.sleep(0.2)
    summary = engine.summary(eid)
    assert summary["status"] == "COMPLETED", summary["error"]
    assert summary["steps"]["drain"]["stats"] == {"total": ROWS, "success": ROWS, "failed": 0}
    # the two rows that ran before the death ran twice (at least once), the rest once
    seen = runs(db)
    assert sorted(set(seen)) == list(range(1, ROWS + 1))
    assert len(seen) == ROWS + 2
    # the next attempt handed the recorded rows over: their bodies were commands
    handed = [r for r in claim_results(engine, eid) if r.get("recorded") and "bodies" not in r]
    assert [len(h["rows"]) for h in handed] == [4]
    assert len(body_ids(engine, eid)) == ROWS
    assert loop_row(engine, eid) == (ROWS, ROWS, ROWS, 0)


def test_a_frame_of_rows_is_one_command_without_local_continuation_too(
    engine: Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With no chain (every command through the broker: its close does not take the
    execution's lock in the closing statement) the bodies are written before the close."""
    monkeypatch.setattr(engine.executor, "chain_seconds", 0.0)
    db, deliveries, eid = drain(engine, tmp_path)
    assert engine.summary(eid)["steps"]["drain"]["stats"] == {
        "total": ROWS,
        "success": ROWS,
        "failed": 0,
    }
    assert sorted(runs(db)) == list(range(1, ROWS + 1))
    assert len([r for r in claim_results(engine, eid) if r.get("bodies")]) == -(-ROWS // 4)
    ids = body_ids(engine, eid)
    assert len(ids) == ROWS and not set(ids) & set(deliveries.published)
    with engine.database.engine.connect() as conn:
        statuses = {
            r[0]
            for r in conn.execute(
                select(commands.c.status).where(
                    commands.c.execution_id == eid, commands.c.kind == "iteration"
                )
            )
        }
    assert statuses == {"completed"}


def test_a_frame_of_rows_cancelled_mid_frame_runs_no_more_rows_and_writes_no_body(
    engine: Engine, tmp_path: Path
) -> None:
    """The execution is cancelled while a claim runs its frame's rows: the rows left are
    not started (the claim's status is polled between rows), the close finds the claim
    cancelled and writes no body of it, and the cancel listed the frame's rows (recorded
    on the claim) as interrupted."""
    db = queue_db(tmp_path)
    deliveries = Deliveries()
    engine.use_dispatcher(deliveries)
    executor = engine.executor
    real = executor.frames.run_body
    ended: list[Any] = []

    def cancelled_in_the_first_row(body: ClaimedCommand, watch: str | None = None) -> object:
        outcome = real(body, watch)
        if not ended:
            ended.append(engine.cancel_tree(body.execution_id, "by the test"))
            deadline = time.monotonic() + 10  # the heartbeat thread's next poll
            while not executor.heartbeats.lost(base_claim(body)) and time.monotonic() < deadline:
                time.sleep(0.05)
        return outcome

    executor.frames.run_body = cancelled_in_the_first_row
    eid = engine.start_text(playbook(), {"db": str(db)})
    deliveries.deliver_all(executor.execute)
    [cancel] = ended
    assert engine.status(eid)["status"] == "CANCELLED"
    assert body_ids(engine, eid) == []
    assert runs(db) == [1]  # the frame's other rows never ran
    assert cancel is not None
    interrupted = cancel.unfinished_rows["drain"]["interrupted"]
    assert sorted(r["id"] for r in interrupted) == [1, 2, 3, 4]


def base_claim(body: ClaimedCommand) -> str:
    """The claim command that ran `body` (lane 0's first frame: the first row's)."""
    return f"{body.execution_id}:{body.step}:{body.epoch}:c0.1"
