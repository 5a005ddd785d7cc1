"""The read models' queries at scale on Postgres: the executions page is a fixed number
of statements whatever its size, and a loop's failed items are paged and counted through
their partial index without reading its successful iterations."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import event, text

from noetl_celery.engine import readmodels
from noetl_celery.models.filters import ExecutionFilter
from noetl_celery.store.database import Database, SchemaMode
from noetl_celery.store.repository import Store

pytestmark = pytest.mark.integration

EXECUTIONS = 3000
ITEMS = 100_000
FAILED_EVERY = 3333  # 31 failed items: 0, 3333, ..., 99990


@pytest.fixture
def store(pg_url: str) -> Iterator[Store]:
    database = Database(pg_url)
    database.prepare(SchemaMode.REQUIRE)
    yield Store(database)
    database.dispose()


class Statements:
    """Counts the SQL statements the store sends (an N+1 shows as N)."""

    def __init__(self, store: Store) -> None:
        self.count = 0
        self.engine = store.db.read_engine
        event.listen(self.engine, "before_cursor_execute", self._seen)

    def _seen(self, *_: Any) -> None:
        self.count += 1

    def close(self) -> None:
        event.remove(self.engine, "before_cursor_execute", self._seen)


def fill(store: Store) -> None:
    """3000 executions, each with a finished loop epoch, every tenth with an open one
    whose live counters are in its state; one execution with a 100,000-item loop."""
    with store.db.engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO catalog (path, version, name, content, content_sha256, created_at) "
                "VALUES ('tests/scale', 1, 'scale', 'x', 'x', now())"
            )
        )
        conn.execute(
            text(
                "INSERT INTO executions (execution_id, catalog_id, path, status, trigger, "
                "payload, state, passes, created_at, updated_at) "
                "SELECT 'x' || g, (SELECT max(catalog_id) FROM catalog), 'tests/scale', "
                "CASE WHEN g % 10 = 0 THEN 'RUNNING' ELSE 'COMPLETED' END, 'manual', '{}', "
                "CASE WHEN g % 10 = 0 THEN jsonb_build_object('steps', jsonb_build_object("
                "'live', jsonb_build_object('loop', jsonb_build_object('epoch', 1, "
                "'done', false, 'succeeded', 4, 'failed', 1, 'in_flight', 2)))) END, "
                "0, timestamp '2026-01-01' + g * interval '1 second', now() "
                "FROM generate_series(1, :n) g"
            ),
            {"n": EXECUTIONS},
        )
        conn.execute(
            text(
                "INSERT INTO loops (execution_id, step, epoch, mode, total, issued, succeeded, "
                "failed, done, updated_at, started_at) "
                "SELECT 'x' || g, 'each', 1, 'items', 10, 10, 8, 2, true, now(), now() "
                "FROM generate_series(1, :n) g "
                "UNION ALL SELECT 'x' || g, 'live', 1, 'items', 10, 0, 0, 0, false, now(), now() "
                "FROM generate_series(10, :n, 10) g"
            ),
            {"n": EXECUTIONS},
        )
        conn.execute(
            text(
                "INSERT INTO commands (command_id, execution_id, step, kind, epoch, iteration, "
                "attempt, status, ctx_version, item) "
                "SELECT 'x1:big:1:' || g, 'x1', 'big', 'tool', 1, g, 1, "
                "CASE WHEN g % :every = 0 THEN 'failed' ELSE 'completed' END, 1, "
                "jsonb_build_object('n', g) FROM generate_series(0, :items - 1) g"
            ),
            {"items": ITEMS, "every": FAILED_EVERY},
        )
        conn.execute(
            text(
                "INSERT INTO events (execution_id, type, step, command_id, epoch, iteration, "
                "payload, created_at) "
                "SELECT 'x1', CASE WHEN g % :every = 0 THEN 'command.failed' "
                "ELSE 'command.completed' END, 'big', 'x1:big:1:' || g, 1, g, "
                "jsonb_build_object('error', jsonb_build_object('kind', 'boom', "
                "'message', 'item ' || g)), now() FROM generate_series(0, :items - 1) g"
            ),
            {"items": ITEMS, "every": FAILED_EVERY},
        )
        conn.execute(text("ANALYZE"))


def test_pages_stay_bounded_at_scale(store: Store) -> None:
    fill(store)
    counter = Statements(store)
    try:
        started = time.monotonic()
        page = readmodels.executions_page(store, ExecutionFilter(limit=500, offset=1000))
        elapsed = time.monotonic() - started
        statements, counter.count = counter.count, 0
        assert statements == 4  # page, count, loop totals of its ids, live steps
        assert elapsed < 2.0, elapsed
        assert page["total"] == EXECUTIONS and len(page["executions"]) == 500
        lines = {e["execution_id"]: e for e in page["executions"]}
        assert (lines["x2000"]["items_done"], lines["x2000"]["items_failed"]) == (15, 3)
        assert (lines["x1999"]["items_done"], lines["x1999"]["items_failed"]) == (10, 2)
        assert page["executions"][0]["execution_id"] == "x2000"  # newest first

        first = store.overview.failed_iterations("x1", "big", epoch=1, offset=0, limit=10)
        rest = store.overview.failed_iterations("x1", "big", epoch=None, offset=10, limit=50)
        total = store.overview.count_failed_iterations("x1", "big", epoch=1)
        assert counter.count == 3
    finally:
        counter.close()
    expected = list(range(0, ITEMS, FAILED_EVERY))
    assert total == len(expected) == 31
    assert [f.iteration for f in first + rest] == expected
    assert first[1].item == {"n": FAILED_EVERY} and first[1].error["message"] == "item 3333"
    with store.db.read_engine.connect() as conn:
        plan = "\n".join(
            r[0]
            for r in conn.execute(
                text(
                    "EXPLAIN SELECT count(*) FROM events WHERE execution_id = 'x1' AND "
                    "step = 'big' AND type = 'command.failed' AND iteration IS NOT NULL"
                )
            )
        )
    assert "ix_events_failed_iterations" in plan, plan
