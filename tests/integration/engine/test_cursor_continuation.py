"""Local continuation of cursor lanes (worker.execute): with `frame.process: frame` the
worker that records a frame's claim runs the frame's body next, and the worker that
records the body runs the lane's next claim, unpublished, each claimed in the close's
transaction. Driven here by a dispatcher that records what is published and delivers it
in this thread, on either store (SQLite, Postgres) and the sqlite cursor driver."""

from __future__ import annotations

import sqlite3
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from noetl_celery.engine.service import Engine
from noetl_celery.orchestrator.ids import base_command_id, parse_claim
from noetl_celery.settings import Settings
from noetl_celery.store.database import SchemaMode
from noetl_celery.store.schema import commands
from noetl_celery.worker.reports import DUPLICATE, CommandReport

ROWS = 30

PLAYBOOK = """apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: sqlite_frames}
workload: {db: ""}
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
      spec: {mode: cursor, max_in_flight: 2, frame: {max_rows: 4, process: frame}}
    tool:
      kind: python
      input: {db: "{{ db }}", rows: "{{ iter.job | tojson }}"}
      code: |
        import json, sqlite3
        ids = sorted(r["id"] for r in json.loads(rows))
        with sqlite3.connect(db, timeout=30) as conn:
            conn.execute("INSERT INTO runs (rows) VALUES (?)", (json.dumps(ids),))
            first = conn.execute(
                "SELECT count(*) FROM runs WHERE rows = ?", (json.dumps(ids),)
            ).fetchone()[0] == 1
        if first and FAIL_FIRST:
            raise RuntimeError("the first run of a frame fails")
        with sqlite3.connect(db, timeout=30) as conn:
            conn.executemany(
                "UPDATE queue SET status = 'done', hits = hits + 1 WHERE id = ?",
                [(i,) for i in ids],
            )
        result = {"rows": len(ids)}
FAIL_POLICY
"""

RETRY = """      spec:
        policy:
          rules:
            - when: "{{ output.status == 'error' }}"
              then: {do: retry, attempts: 3, backoff: fixed, delay: 0.01}"""


class Deliveries:
    """A dispatcher that records what is published and delivers it when asked."""

    def __init__(self) -> None:
        self.published: list[str] = []
        self.queue: deque[str] = deque()

    def publish(self, command_ids: Sequence[str]) -> None:
        self.published.extend(command_ids)
        self.queue.extend(command_ids)

    def wake(self, execution_id: str) -> None:
        return None

    def deliver_all(self, execute: Callable[[str], object]) -> None:
        while self.queue:
            execute(self.queue.popleft())


def queue_db(tmp_path: Path) -> Path:
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


@pytest.fixture
def engine(tmp_path: Path, store_url: str) -> Iterator[Engine]:
    # a chain long enough for the whole drain: the test counts what was published. On
    # Postgres the close of a lane's command also takes the execution's lock (one
    # statement: store.queries.close_lock_and_read)
    settings = Settings(
        home=tmp_path / "home",
        database_url=store_url,
        batch_budget_seconds=60,
        lease_seconds=3,
    )
    engine = Engine(settings, schema=SchemaMode.MIGRATE)
    try:
        yield engine
    finally:
        engine.close()


def playbook(fail_first: bool) -> str:
    text = PLAYBOOK.replace("FAIL_FIRST", "True" if fail_first else "False")
    return text.replace("FAIL_POLICY", RETRY if fail_first else "")


def queue_rows(db: Path) -> list[tuple[str, int, int]]:
    with sqlite3.connect(db) as conn:
        return conn.execute(
            "SELECT status, hits, count(*) FROM queue GROUP BY status, hits"
        ).fetchall()


def runs(db: Path) -> list[str]:
    with sqlite3.connect(db) as conn:
        return [r[0] for r in conn.execute("SELECT rows FROM runs ORDER BY n")]


def body_ids(engine: Engine, eid: str) -> list[str]:
    query = select(commands.c.command_id).where(
        commands.c.execution_id == eid, commands.c.step == "drain", commands.c.kind == "iteration"
    )
    with engine.database.engine.connect() as conn:
        return [r[0] for r in conn.execute(query)]


def drain_exactly(engine: Engine, tmp_path: Path, fail_first: bool) -> tuple[Path, Deliveries, str]:
    """Drain the queue through a recording dispatcher; every row done exactly once.
    (the queue's file, what was published, the execution id)"""
    db = queue_db(tmp_path)
    deliveries = Deliveries()
    engine.use_dispatcher(deliveries)
    eid = engine.start_text(playbook(fail_first=fail_first), {"db": str(db)})
    deliveries.deliver_all(engine.executor.execute)
    summary = engine.summary(eid)
    assert summary["status"] == "COMPLETED", summary["error"]
    assert summary["steps"]["drain"]["stats"] == {"total": ROWS, "success": ROWS, "failed": 0}
    assert queue_rows(db) == [("done", 1, ROWS)]
    return db, deliveries, eid


def test_a_lane_runs_its_frames_bodies_and_claims_without_publishing_them(
    engine: Engine, tmp_path: Path
) -> None:
    _, deliveries, eid = drain_exactly(engine, tmp_path, fail_first=False)
    # only each lane's first claim went through the broker: every body, and every claim
    # after a body, ran in the process that recorded the command before it
    claims = [parse_claim(cid) for cid in deliveries.published if parse_claim(cid)]
    assert sorted(claims) == [(0, 1), (1, 1)]  # type: ignore[type-var]
    bodies = body_ids(engine, eid)
    assert len(bodies) == -(-ROWS // 4)
    assert not set(bodies) & set(deliveries.published)


def test_a_frame_body_that_fails_once_runs_again_with_the_same_rows(
    engine: Engine, tmp_path: Path
) -> None:
    db, _, _ = drain_exactly(engine, tmp_path, fail_first=True)
    frames = runs(db)
    # every frame ran twice with the same rows, and no row is in two frames
    assert sorted(frames) == sorted(f for f in set(frames) for _ in range(2))
    assert sum(len(f.split(",")) for f in set(frames)) == ROWS


def test_a_continuation_left_by_a_dead_process_is_run_again_by_the_reaper(
    engine: Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The process dies right after the close that claimed the frame's body (its lease
    runs, nothing runs it): the reaper issues it again once the lease expired, and every
    row is processed once."""
    db = queue_db(tmp_path)
    deliveries = Deliveries()
    engine.use_dispatcher(deliveries)
    executor = engine.executor
    real = executor._execute
    abandoned: list[str] = []

    def dies_before_the_first_continuation(
        command_id: str,
        capture: Any = None,
        chain_until: float | None = None,
        claimed: Any = None,
    ) -> Any:
        if claimed is not None and not abandoned:
            abandoned.append(command_id)  # claimed, never run, its lease not renewed
            executor.heartbeats.stop(command_id)
            return CommandReport(command_id, DUPLICATE), None
        return real(command_id, capture, chain_until, claimed)

    monkeypatch.setattr(executor, "_execute", dies_before_the_first_continuation)
    eid = engine.start_text(playbook(fail_first=False), {"db": str(db)})
    deliveries.deliver_all(executor.execute)
    assert abandoned
    assert engine.status(eid)["status"] == "RUNNING"
    deadline = time.monotonic() + 60
    while engine.status(eid)["status"] == "RUNNING" and time.monotonic() < deadline:
        engine.reaper.sweep()
        deliveries.deliver_all(executor.execute)
        time.sleep(0.2)
    summary = engine.summary(eid)
    assert summary["status"] == "COMPLETED", summary["error"]
    assert summary["steps"]["drain"]["stats"] == {"total": ROWS, "success": ROWS, "failed": 0}
    assert queue_rows(db) == [("done", 1, ROWS)]
    # the reaper's next attempt went out, and ran the frame's rows
    assert abandoned[0] not in deliveries.published
    assert abandoned[0] in {base_command_id(cid) for cid in deliveries.published}
    assert len(runs(db)) == -(-ROWS // 4)
