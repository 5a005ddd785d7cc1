"""Frames claimed ahead (worker.frames): in a chain of a postgres cursor's frames, the
worker claims the lane's next frame before it closes the one it ran, and the chained
close records those rows on the next claim in its own statement: no record of its own
per frame. Every row is still run once and counted once, and a worker that dies after
that close leaves the recorded rows to the next claim's next attempt (handed over)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from noetl_celery.engine.service import Engine
from noetl_celery.orchestrator.ids import base_command_id, parse_claim
from noetl_celery.settings import Settings
from noetl_celery.store.database import SchemaMode
from noetl_celery.store.rows import ClaimedCommand, FrameRows
from noetl_celery.worker.reports import DUPLICATE, CommandReport
from tests.integration.engine.test_cursor_continuation import (
    Deliveries,
    claim_results,
    reap_until_done,
)

ROWS = 40

PLAYBOOK = """apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: claims_ahead}
workload: {run: x}
workflow:
  - step: drain
    loop:
      cursor:
        kind: postgres
        auth: pg_test
        claim: |
          WITH c AS (SELECT id FROM public.ahead_queue WHERE run = '{{ run }}'
                       AND status = 'pending'
                     ORDER BY id FOR UPDATE SKIP LOCKED LIMIT {{ __frame_max_rows }})
          UPDATE public.ahead_queue q SET status = 'claimed' FROM c
          WHERE q.run = '{{ run }}' AND q.id = c.id RETURNING q.id
      iterator: job
      spec: {mode: cursor, max_in_flight: 2, frame: {max_rows: 4, process: frame}}
    tool:
      kind: postgres
      auth: pg_test
      command: "UPDATE public.ahead_queue SET status = 'done', hits = hits + 1
        WHERE run = '{{ run }}' AND id = ANY(ARRAY[{{ iter.job | map(attribute='id')
        | join(',') }}]::int[])"
"""


@pytest.fixture
def engine(pg_url: str, tmp_path: Path, credentials_file: Path) -> Iterator[Engine]:
    settings = Settings(
        home=tmp_path / "home",
        database_url=pg_url,
        credentials_file=str(credentials_file),
        batch_budget_seconds=60,
        lease_seconds=3,
    )
    engine = Engine(settings, schema=SchemaMode.MIGRATE)
    try:
        yield engine
    finally:
        engine.close()


def seeded(data_db: str, name: str) -> str:
    run = f"{name}-{uuid.uuid4().hex[:8]}"
    with psycopg.connect(data_db, autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE IF NOT EXISTS public.ahead_queue "
            "(run text, id int, status text, hits int DEFAULT 0, PRIMARY KEY (run, id))"
        )
        conn.execute(
            "INSERT INTO public.ahead_queue (run, id, status) "
            "SELECT %s, g, 'pending' FROM generate_series(1, %s) g",
            (run, ROWS),
        )
    return run


def queue_rows(data_db: str, run: str) -> list[tuple[str, int, int]]:
    with psycopg.connect(data_db) as conn:
        return conn.execute(
            "SELECT status, hits, count(*) FROM public.ahead_queue WHERE run = %s "
            "GROUP BY status, hits ORDER BY status, hits",
            (run,),
        ).fetchall()


def counting_records(engine: Engine) -> list[str]:
    """The claims whose rows were recorded by a record of their own (Store.record_frame)."""
    recorded: list[str] = []
    real = engine.store.record_frame

    def record(command: ClaimedCommand, rows: list[Any], witness: Any = None) -> Any:
        recorded.append(command.command_id)
        return real(command, rows, witness)

    engine.store.record_frame = record  # type: ignore[method-assign]
    return recorded


def test_a_chain_records_each_next_frame_in_the_close_before_it(
    engine: Engine, data_db: str, request: pytest.FixtureRequest
) -> None:
    run = seeded(data_db, request.node.name)
    recorded = counting_records(engine)
    deliveries = Deliveries()
    engine.use_dispatcher(deliveries)
    eid = engine.start_text(PLAYBOOK, {"run": run})
    deliveries.deliver_all(engine.executor.execute)
    summary = engine.summary(eid)
    assert summary["status"] == "COMPLETED", summary["error"]
    assert summary["steps"]["drain"]["stats"] == {"total": ROWS, "success": ROWS, "failed": 0}
    assert queue_rows(data_db, run) == [("done", 1, ROWS)]
    # a record of its own only for a claim a pass issued: a block's first (frames 1,
    # 10, 19, ...: 1 + Limits.cursor_chain numbers a block); every other one got its
    # rows from the chained close before it
    frames = [parse_claim(cid) for cid in recorded]
    assert frames and all(c is not None and (c[1] - 1) % 9 == 0 for c in frames), frames
    with_rows = [r for r in claim_results(engine, eid) if r["rows"]]
    assert len(with_rows) == ROWS // 4 and len(recorded) <= 4


def test_rows_recorded_ahead_by_a_worker_that_died_are_handed_over(
    engine: Engine, data_db: str, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The process dies right after the chained close that recorded the next claim's
    rows (the queue committed them): the reaper runs that claim again once its lease is
    out, it hands the recorded rows over (claiming nothing), a body command runs them,
    and every row is done and counted once."""
    run = seeded(data_db, request.node.name)
    deliveries = Deliveries()
    engine.use_dispatcher(deliveries)
    executor = engine.executor
    real = executor._execute
    abandoned: list[tuple[str, FrameRows | None]] = []

    def dies_before_a_frame_claimed_ahead(
        command_id: str, capture: Any = None, chain_until: float | None = None, claimed: Any = None
    ) -> Any:
        if claimed is not None and not abandoned and FrameRows.of(claimed.resume):
            abandoned.append((command_id, executor.frames.take_ahead(command_id)))
            executor.heartbeats.stop(command_id)
            return CommandReport(command_id, DUPLICATE), None
        return real(command_id, capture, chain_until, claimed)

    monkeypatch.setattr(executor, "_execute", dies_before_a_frame_claimed_ahead)
    eid = engine.start_text(PLAYBOOK, {"run": run})
    deliveries.deliver_all(executor.execute)
    [(lost, frame)] = abandoned
    assert frame is not None and len(frame.rows) == 4
    reap_until_done(engine, deliveries, eid)
    summary = engine.summary(eid)
    assert summary["status"] == "COMPLETED", summary["error"]
    assert summary["steps"]["drain"]["stats"] == {"total": ROWS, "success": ROWS, "failed": 0}
    assert queue_rows(data_db, run) == [("done", 1, ROWS)]
    assert lost in {base_command_id(cid) for cid in deliveries.published}  # its next attempt
    handed = [r for r in claim_results(engine, eid) if r.get("recorded") and "body" not in r]
    assert [h["rows"] for h in handed] == [frame.rows]
