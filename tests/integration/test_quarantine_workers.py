"""Quarantined loop items on real Celery workers and Postgres: the worker marks the
outcome a `do: quarantine` rule stopped, the engine counts it apart, the run completes;
a cursor's quarantined rows are redriven from the rows their commands recorded."""

from __future__ import annotations

import sqlite3
from pathlib import Path

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


# A sqlite work queue drained by a cursor; the rows in `bad` fail until the file `fix`
# exists and are quarantined, left `claimed` in the queue. Every successful body adds
# one to its row's `hits` and records the cursor names it rendered.
CURSOR = """apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: cursor_quarantine, path: tests/cursor_quarantine}
workload: {db: "", fix: /nonexistent, bad: [4, 17, 18, 33]}
workflow:
  - step: drain
    loop:
      cursor:
        kind: sqlite
        auth: "{{ db }}"
        claim: |
          UPDATE queue SET status = 'claimed', claims = claims + 1
          WHERE id IN (SELECT id FROM queue WHERE status = 'pending'
                       ORDER BY id LIMIT {{ __frame_max_rows }})
          RETURNING id
      iterator: job
      spec:
        mode: cursor
        max_in_flight: 3
        on_item_error: quarantine
        frame: {max_rows: 5, row_concurrency: 1}
    tool:
      kind: python
      input:
        db: "{{ db }}"
        fix: "{{ fix }}"
        bad: "{{ bad }}"
        id: "{{ iter.job.id }}"
        slot: "{{ iter._worker_slot_id }}"
        frame: "{{ iter._frame_index }}"
      code: |
        import os, sqlite3
        assert id not in bad or os.path.exists(fix), f"row {id} is poisoned"
        with sqlite3.connect(db, timeout=30) as conn:
            conn.execute(
                "UPDATE queue SET status = 'done', hits = hits + 1, slot = ? WHERE id = ?",
                (f"{slot}/{frame}", id),
            )
        result = {"id": id}
    next: {arcs: [{step: after}]}
  - step: after
    tool: {kind: python, code: "result = {'after': True}"}
"""
ROWS = 40
CURSOR_BAD = [4, 17, 18, 33]


def queue(db: Path) -> list[tuple[int, str, int, int]]:
    with sqlite3.connect(db) as conn:
        return [
            (int(i), str(s), int(h), int(c))
            for i, s, h, c in conn.execute("SELECT id, status, hits, claims FROM queue ORDER BY id")
        ]


def test_a_redrive_runs_a_cursors_quarantined_rows_once(
    engine_on_workers: Engine, tmp_path: Path
) -> None:
    """The rows a cursor's bodies quarantined run again in the redrive, from the rows
    their commands recorded (the queue leaves them `claimed`: nothing claims them
    again), each once; across both executions every row is counted once."""
    engine = engine_on_workers
    db, fix = tmp_path / "queue.sqlite3", tmp_path / "fixed"
    with sqlite3.connect(db) as conn:
        conn.execute(
            "CREATE TABLE queue (id INTEGER PRIMARY KEY, status TEXT, hits INTEGER DEFAULT 0, "
            "claims INTEGER DEFAULT 0, slot TEXT)"
        )
        conn.executemany(
            "INSERT INTO queue (id, status) VALUES (?, 'pending')",
            [(i,) for i in range(1, ROWS + 1)],
        )
    payload = {"db": str(db), "fix": str(fix), "bad": CURSOR_BAD}
    eid = engine.start_text(CURSOR, payload)
    assert engine.wait(eid, 120).status == "COMPLETED"
    first = engine.summary(eid)["steps"]["drain"]["stats"]
    assert first == {"total": ROWS, "success": ROWS - 4, "failed": 0, "quarantined": 4}
    listed = engine.quarantine(eid)["items"]
    assert sorted(q["item"]["id"] for q in listed) == CURSOR_BAD
    left = [(i, s, h) for i, s, h, _ in queue(db) if s != "done"]
    assert left == [(i, "claimed", 0) for i in CURSOR_BAD]

    fix.write_text("fixed")
    redrive = engine.redrive(eid, step="drain")
    assert engine.wait(redrive, 120).status == "COMPLETED"
    summary = engine.summary(redrive)
    second = summary["steps"]["drain"]["stats"]
    assert second == {"total": 4, "success": 4, "failed": 0}
    assert list(summary["steps"]) == ["drain"]  # halted after the loop: `after` did not run
    assert first["success"] + second["success"] == ROWS  # every row counted once
    # each row ran to success once and was claimed once, by the original
    assert queue(db) == [(i, "done", 1, 1) for i in range(1, ROWS + 1)]
    # the redrive claimed nothing; its bodies rendered one frame of one lane
    kinds = engine.store.command_counts(redrive)
    assert (kinds.planned, kinds.issued, kinds.running) == (0, 0, 0)
    ran = engine.events(redrive, types=["command.completed"], step="drain")
    assert sorted(int(e["payload"]["result"]["id"]) for e in ran) == CURSOR_BAD
    assert all(e["iteration"] is not None for e in ran) and len(ran) == 4
    with sqlite3.connect(db) as conn:
        slots = {s for (s,) in conn.execute("SELECT slot FROM queue WHERE id IN (4, 17, 18, 33)")}
    assert slots == {"1:slot-0/1"}
    assert {q["redriven_by"] for q in engine.quarantine(eid)["items"]} == {redrive}
    again = engine.quarantine(eid, step="drain")["items"]
    assert all(q["redriven_by"] == redrive for q in again)
