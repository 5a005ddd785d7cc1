"""Local continuation of cursor lanes (worker.execute): with `frame.process: frame` the
worker that records a frame's claim runs the frame's body next, and the worker that
records the body runs the lane's next claim, unpublished, each claimed in the close's
transaction. Driven here by a dispatcher that records what is published and delivers it
in this thread, on either store (SQLite, Postgres) and the sqlite cursor driver.

One command per frame (worker.frames): with a body the claiming worker may run (one
tool) the claim, the frame's body and the frame's count are one command, one close and
one pass; the result, stats and loop counters are those of the two-command path. A
worker that dies in the body leaves the rows recorded on the claim: its next attempt
hands them over, the body runs again on them, and they are counted once."""

from __future__ import annotations

import contextlib
import dataclasses
import json
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
from noetl_celery.store.rows import ClaimedCommand
from noetl_celery.store.schema import commands, events, executions, loops
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
    reap_until_done(engine, deliveries, eid)
    summary = engine.summary(eid)
    assert summary["status"] == "COMPLETED", summary["error"]
    assert summary["steps"]["drain"]["stats"] == {"total": ROWS, "success": ROWS, "failed": 0}
    assert queue_rows(db) == [("done", 1, ROWS)]
    # the reaper's next attempt went out, and ran the frame's rows
    assert abandoned[0] not in deliveries.published
    assert abandoned[0] in {base_command_id(cid) for cid in deliveries.published}
    assert len(runs(db)) == -(-ROWS // 4)


def reap_until_done(engine: Engine, deliveries: Deliveries, eid: str) -> None:
    """Sweep (the reaper issues again what a dead process left) and deliver until the
    execution ends, a minute at most."""
    deadline = time.monotonic() + 60
    while engine.status(eid)["status"] == "RUNNING" and time.monotonic() < deadline:
        engine.reaper.sweep()
        deliveries.deliver_all(engine.executor.execute)
        time.sleep(0.2)


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
    engine: Engine,
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
    engine: Engine,
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

    def dies_after_the_first_body(body: ClaimedCommand, watch: str | None = None) -> object:
        outcome = real(body, watch)
        if not died:
            died.append(body)
            raise Died
        return outcome

    executor.frames.run_body = dies_after_the_first_body
    eid = engine.start_text(playbook(fail_first=False), {"db": str(db)})
    while deliveries.queue:
        # the claim stays running, its heartbeat stopped: the lease runs out
        with contextlib.suppress(Died):
            executor.execute(deliveries.queue.popleft())
    assert died and engine.status(eid)["status"] == "RUNNING"
    reap_until_done(engine, deliveries, eid)
    summary = engine.summary(eid)
    assert summary["status"] == "COMPLETED", summary["error"]
    assert summary["steps"]["drain"]["stats"] == {"total": ROWS, "success": ROWS, "failed": 0}
    # the frame's body ran twice on the same rows (at least once), every other once
    frames = runs(db)
    rows = sorted(r["id"] for r in died[0].item)
    assert frames.count(json.dumps(rows)) == 2
    assert len(frames) == -(-ROWS // 4) + 1
    assert sorted(queue_rows(db)) == sorted([("done", 1, ROWS - len(rows)), ("done", 2, len(rows))])
    # the next attempt handed the recorded rows over: its body was a command of its own
    handed = [r for r in claim_results(engine, eid) if r.get("recorded") and "body" not in r]
    assert [sorted(r["id"] for r in h["rows"]) for h in handed] == [rows]


def test_a_frame_body_run_with_a_claim_cancelled_meanwhile_leaves_no_body_row(
    engine: Engine, tmp_path: Path
) -> None:
    """The execution is cancelled while a claim runs its frame's body: the close finds
    the claim cancelled and writes nothing of it, and the cancel listed the frame's
    rows (recorded on the claim) as interrupted."""
    db = queue_db(tmp_path)
    deliveries = Deliveries()
    engine.use_dispatcher(deliveries)
    executor = engine.executor
    real = executor.frames.run_body
    ended: list[Any] = []

    def cancelled_in_the_body(body: ClaimedCommand, watch: str | None = None) -> object:
        outcome = real(body, watch)
        if not ended:
            ended.append((body, engine.cancel_tree(body.execution_id, "by the test")))
        return outcome

    executor.frames.run_body = cancelled_in_the_body
    eid = engine.start_text(playbook(fail_first=False), {"db": str(db)})
    deliveries.deliver_all(executor.execute)
    [(body, cancel)] = ended
    assert engine.status(eid)["status"] == "CANCELLED"
    assert body_ids(engine, eid) == []  # the first frame's body was the run cancelled
    assert cancel is not None
    assert cancel.unfinished_rows["drain"]["interrupted"] == body.item


def test_a_frame_is_one_command_without_local_continuation_too(
    engine: Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With no chain (every command through the broker: its close does not take the
    execution's lock in the closing statement) the body is written before the close."""
    monkeypatch.setattr(engine.executor, "chain_seconds", 0.0)
    _, deliveries, eid = drain_exactly(engine, tmp_path, fail_first=False)
    frames = -(-ROWS // 4)
    assert len([r for r in claim_results(engine, eid) if r.get("body")]) == frames
    assert len(body_ids(engine, eid)) == frames
    assert not set(body_ids(engine, eid)) & set(deliveries.published)
    claims = [parse_claim(cid) for cid in deliveries.published if parse_claim(cid)]
    assert len(claims) == frames + 2  # every claim went out: each lane's last found none


def test_a_lane_chains_its_frames_with_fewer_passes_on_postgres(
    engine: Engine, tmp_path: Path
) -> None:
    """Chains (orchestrator.cursor): on Postgres the worker that ran a frame's body
    issues its lane's next claim in the close and runs it next, with no pass between
    (the completion says `chained`); later passes fold them, so the execution takes
    fewer passes than frames, and every row is still done and counted once
    (drain_exactly). SQLite closes every frame with a pass."""
    _, deliveries, eid = drain_exactly(engine, tmp_path, fail_first=False)
    results = claim_results(engine, eid)
    chained = [r for r in results if r.get("chained")]
    frames = -(-ROWS // 4)
    with engine.database.engine.connect() as conn:
        passes = conn.execute(
            select(executions.c.passes).where(executions.c.execution_id == eid)
        ).scalar_one()
    if engine.database.engine.dialect.name == "postgresql":
        # 8 frames on 2 lanes, within each lane's block (1 + Limits.cursor_chain
        # numbers): every frame chained the lane's next claim (the last ones found none)
        assert len(chained) == frames
        assert all(r["body"]["status"] == "ok" for r in chained)
        assert passes < frames
    else:
        assert chained == []
        assert passes >= frames
    # a chained claim never went through the broker
    claims = [parse_claim(cid) for cid in deliveries.published if parse_claim(cid)]
    assert sorted(claims) == [(0, 1), (1, 1)]  # type: ignore[type-var]


def test_no_chain_with_a_cursor_chain_of_zero(engine: Engine, tmp_path: Path) -> None:
    """`NOETL_CURSOR_CHAIN=0`: every frame's close folds it with a pass, on both stores."""
    engine.orchestrator.limits = dataclasses.replace(engine.orchestrator.limits, cursor_chain=0)
    _, _, eid = drain_exactly(engine, tmp_path, fail_first=False)
    results = claim_results(engine, eid)
    assert [r for r in results if r.get("chained")] == []
    assert all("chain" not in (meta or {}) for meta in claim_metas(engine, eid))


def claim_metas(engine: Engine, eid: str) -> list[dict[str, Any] | None]:
    query = select(commands.c.meta).where(
        commands.c.execution_id == eid, commands.c.kind == "claim"
    )
    with engine.database.engine.connect() as conn:
        return [r[0] for r in conn.execute(query)]


def test_a_frame_body_outcome_the_database_refuses_falls_back_to_a_body_command(
    engine: Engine, tmp_path: Path
) -> None:
    """A frame whose body's result Postgres cannot store (a NUL character): the chained
    close writes nothing, the claim is closed with its rows alone, the pass plans the
    body command, which fails with `result_not_storable`; its rows count as failed, the
    other frames' as done, and the lane goes on."""
    db = queue_db(tmp_path)
    deliveries = Deliveries()
    engine.use_dispatcher(deliveries)
    text = playbook(fail_first=False).replace(
        'result = {"rows": len(ids)}',
        'result = {"rows": len(ids), "x": "\\u0000" if 5 in ids else ""}',
    )
    assert "u0000" in text
    eid = engine.start_text(text, {"db": str(db)})
    deliveries.deliver_all(engine.executor.execute)
    summary = engine.summary(eid)
    if engine.database.engine.dialect.name == "sqlite":  # SQLite stores a NUL: no fallback
        assert summary["status"] == "COMPLETED", summary["error"]
        assert queue_rows(db) == [("done", 1, ROWS)]
        return
    assert summary["status"] == "FAILED"
    assert "result.x contains a NUL character" in str(summary["error"])
    assert summary["steps"]["drain"]["stats"] == {"total": ROWS, "success": ROWS - 4, "failed": 4}
    # every row's body ran; the refused frame's twice (with its claim, then as a command)
    assert sorted(queue_rows(db)) == [("done", 1, ROWS - 4), ("done", 2, 4)]
    refused = [r for r in claim_results(engine, eid) if {"id": 5} in r["rows"]]
    assert len(refused) == 1 and "body" not in refused[0] and "chained" not in refused[0]
