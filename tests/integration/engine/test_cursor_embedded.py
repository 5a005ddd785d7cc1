"""A cursor loop on the embedded engine with the sqlite cursor driver (no services)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from noetl_celery.engine.service import Engine
from noetl_celery.models.validation import validate_text
from noetl_celery.settings import Settings
from noetl_celery.store.database import SchemaMode

PLAYBOOK = """apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: sqlite_drain}
workload: {db: ""}
workflow:
  - step: drain
    loop:
      cursor:
        kind: sqlite
        auth: "{{ db }}"
        claim: |
          UPDATE queue SET status = 'claimed', slot = '{{ __worker_slot_id }}'
          WHERE id IN (SELECT id FROM queue WHERE status = 'pending'
                       ORDER BY id LIMIT {{ __frame_max_rows }})
          RETURNING id
      iterator: job
      spec: {mode: cursor, max_in_flight: 3, frame: {max_rows: 4, row_concurrency: 2}}
    tool:
      kind: python
      input: {db: "{{ db }}", id: "{{ iter.job.id }}"}
      code: |
        import sqlite3
        with sqlite3.connect(db, timeout=30) as conn:
            conn.execute("UPDATE queue SET status = 'done', hits = hits + 1 WHERE id = ?", (id,))
        result = {"id": id}
"""


def test_sqlite_cursor_drains_the_queue(tmp_path: Path) -> None:
    db = tmp_path / "work.sqlite3"
    with sqlite3.connect(db) as conn:
        conn.execute(
            "CREATE TABLE queue (id INTEGER PRIMARY KEY, status TEXT, slot TEXT, "
            "hits INTEGER DEFAULT 0)"
        )
        conn.executemany(
            "INSERT INTO queue (id, status) VALUES (?, 'pending')", [(i,) for i in range(1, 51)]
        )
    engine = Engine(Settings(home=tmp_path / "home"), schema=SchemaMode.MIGRATE)
    engine.use_in_process_workers()
    try:
        eid = engine.start_text(PLAYBOOK, {"db": str(db)})
        engine.wait(eid, 60)
        summary = engine.summary(eid)
    finally:
        engine.close()
    assert summary["status"] == "COMPLETED", summary["error"]
    assert summary["steps"]["drain"]["stats"] == {"total": 50, "success": 50, "failed": 0}
    with sqlite3.connect(db) as conn:
        rows = conn.execute(
            "SELECT status, hits, count(*) FROM queue GROUP BY status, hits"
        ).fetchall()
        slots = conn.execute("SELECT count(DISTINCT slot) FROM queue").fetchone()
    assert rows == [("done", 1, 50)]
    assert slots == (3,)


def test_unknown_cursor_kinds_are_rejected() -> None:
    report = validate_text(PLAYBOOK.replace("kind: sqlite", "kind: oracle"))
    assert not report.ok
    assert any("cursor `kind: oracle` is not supported" in p.message for p in report.errors)
