"""A cursor loop on the embedded engine with the sqlite cursor driver (no services)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

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
      spec: {mode: cursor, max_in_flight: 3, frame: {max_rows: 4, row_concurrency: 1}}
    tool:
      kind: python
      input: {db: "{{ db }}", id: "{{ iter.job.id }}"}
      code: |
        import sqlite3
        with sqlite3.connect(db, timeout=30) as conn:
            conn.execute("UPDATE queue SET status = 'done', hits = hits + 1 WHERE id = ?", (id,))
        result = {"id": id}
"""


# a deadline per body keeps each row's body a command of its own (without it the
# claiming worker runs its frame's rows itself, and a lane continuing locally may drain
# the queue before another lane's first claim finds a row)
PER_ROW_COMMANDS = PLAYBOOK.replace(
    "    tool:\n      kind: python", "    spec: {timeout: 60}\n    tool:\n      kind: python"
)


@pytest.mark.parametrize("row_commands", [True, False], ids=["row-commands", "inline"])
def test_sqlite_cursor_drains_the_queue(tmp_path: Path, row_commands: bool) -> None:
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
        text = PER_ROW_COMMANDS if row_commands else PLAYBOOK
        assert text != PLAYBOOK or not row_commands
        eid = engine.start_text(text, {"db": str(db)})
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
        slots = {r[0] for r in conn.execute("SELECT DISTINCT slot FROM queue")}
    assert rows == [("done", 1, 50)]
    lanes = {"1:slot-0", "1:slot-1", "1:slot-2"}
    assert slots == lanes if row_commands else slots and slots <= lanes


def test_unknown_cursor_kinds_are_rejected() -> None:
    report = validate_text(PLAYBOOK.replace("kind: sqlite", "kind: oracle"))
    assert not report.ok
    assert any("cursor `kind: oracle` is not supported" in p.message for p in report.errors)
