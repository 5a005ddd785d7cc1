"""Cancelling a cursor drain records the rows its claims took and no body will process
(both backends): frames planned but not run, bodies cancelled while running, and claims
committed but not folded yet. Steps are driven by hand: nothing runs unless the test
says so."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from noetl_celery.constants import EV_CURSOR_UNFINISHED
from noetl_celery.engine.service import Engine
from noetl_celery.models.outcome import Outcome
from noetl_celery.orchestrator.ids import claim_command_id, iteration_command_id
from noetl_celery.settings import Settings
from noetl_celery.store.database import SchemaMode

PLAYBOOK = """apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: drain_by_hand, path: tests/drain_by_hand}
workflow:
  - step: drain
    loop:
      cursor: {kind: sqlite, auth: unused.sqlite3, claim: "SELECT 1"}
      iterator: job
      spec: {mode: cursor, max_in_flight: 2, frame: {max_rows: 3, row_concurrency: 1}}
    tool: {kind: noop}
"""


def claimed(engine: Engine, command_id: str, rows: list[dict[str, Any]]) -> None:
    """A worker ran the claim: its rows are recorded (and the claim committed)."""
    command = engine.store.claim(command_id, "test-worker", 60)
    assert command is not None
    result = {"rows": rows, "row_count": len(rows)}
    assert engine.store.complete(command, Outcome("ok", result))


def test_a_cancel_records_every_claimed_row_no_body_will_process(
    store_url: str, tmp_path: Path
) -> None:
    engine = Engine(Settings(home=tmp_path, database_url=store_url), schema=SchemaMode.MIGRATE)
    try:
        eid = engine.start_text(PLAYBOOK)  # lanes 0 and 1 each issue their first claim
        claimed(engine, claim_command_id(eid, "drain", 1, 0, 1), [{"id": 1}, {"id": 2}, {"id": 3}])
        engine.orchestrator.drive(eid, wait=True)  # frame of lane 0: 1 issued, 2 planned
        body = engine.store.claim(iteration_command_id(eid, "drain", 1, 0), "test-worker", 60)
        assert body is not None and body.item == {"id": 1}  # running when cancelled
        # lane 1's claim committed, not folded yet: row 3 again (a claim recorded before
        # but never committed put it back) and two new rows
        claimed(engine, claim_command_id(eid, "drain", 1, 1, 1), [{"id": 3}, {"id": 4}, {"id": 5}])

        ended = engine.cancel_tree(eid, "by the test")

        assert ended is not None
        report = {
            "epoch": 1,
            "count": 5,
            "rows": [{"id": 2}, {"id": 3}, {"id": 4}, {"id": 5}],
            "interrupted": [{"id": 1}],
            "truncated": False,
        }
        assert ended.unfinished_rows == {"drain": report}
        recorded = [e for e in engine.events(eid) if e["type"] == EV_CURSOR_UNFINISHED]
        assert [(e["step"], e["epoch"], e["payload"]) for e in recorded] == [("drain", 1, report)]
        assert engine.status(eid)["unfinished_rows"] == {"drain": report}
        assert engine.cancel_tree(eid, "again") is None  # once only
    finally:
        engine.close()


def test_a_parked_body_is_reported_as_interrupted(store_url: str, tmp_path: Path) -> None:
    """A body waiting out a long retry delay (parked: `delayed`) had started its
    pipeline: its row is reported with the interrupted ones, not as never started."""
    engine = Engine(Settings(home=tmp_path, database_url=store_url), schema=SchemaMode.MIGRATE)
    try:
        eid = engine.start_text(PLAYBOOK.replace("max_in_flight: 2", "max_in_flight: 1"))
        claimed(engine, claim_command_id(eid, "drain", 1, 0, 1), [{"id": 1}, {"id": 2}])
        engine.orchestrator.drive(eid, wait=True)  # row 1's body issued, row 2's planned
        body_id = iteration_command_id(eid, "drain", 1, 0)
        body = engine.store.claim(body_id, "test-worker", 60)
        assert body is not None and body.item == {"id": 1}
        resume = {"continuation": {"index": 1}, "parked": {"task": "fetch", "delay": 30}}
        assert engine.store.parking.park(body_id, resume, 30.0) is not None

        ended = engine.cancel_tree(eid, "by the test")

        assert ended is not None
        assert ended.unfinished_rows == {
            "drain": {
                "epoch": 1,
                "count": 2,
                "rows": [{"id": 2}],
                "interrupted": [{"id": 1}],
                "truncated": False,
            }
        }
    finally:
        engine.close()


def test_a_cancel_without_a_cursor_records_nothing(store_url: str, tmp_path: Path) -> None:
    engine = Engine(Settings(home=tmp_path, database_url=store_url), schema=SchemaMode.MIGRATE)
    try:
        eid = engine.start_text(PLAYBOOK.replace("max_in_flight: 2", "max_in_flight: 1"))
        claimed(engine, claim_command_id(eid, "drain", 1, 0, 1), [])  # drained at once
        engine.orchestrator.drive(eid, wait=True)
        assert engine.summary(eid)["status"] == "COMPLETED"
        assert engine.cancel_tree(eid, "too late") is None
        loop_in = engine.start_text(
            "apiVersion: noetl.io/v2\nkind: Playbook\nmetadata: {name: items}\nworkflow:\n"
            "  - step: each\n    loop: {in: '{{ [1, 2, 3] }}', iterator: n}\n"
            "    tool: {kind: noop}\n"
        )
        ended = engine.cancel_tree(loop_in, "a loop.in: its items are not claimed anywhere")
        assert ended is not None and ended.unfinished_rows == {}
        assert engine.status(loop_in)["unfinished_rows"] == {}
    finally:
        engine.close()


def test_rows_recorded_on_a_claim_that_runs_its_frame_body_are_interrupted(
    store_url: str, tmp_path: Path
) -> None:
    """One command per frame (worker.frames): rows recorded on a running claim (its
    body runs in its worker) and the rows a claim's next attempt handed over (its
    completion, not folded yet, without a body) are reported as interrupted; those of a
    completion that carries its body ran and are not reported."""
    frames = PLAYBOOK.replace("max_in_flight: 2", "max_in_flight: 3").replace(
        "row_concurrency: 1}", "row_concurrency: 1, process: frame}"
    )
    engine = Engine(Settings(home=tmp_path, database_url=store_url), schema=SchemaMode.MIGRATE)
    try:
        eid = engine.start_text(frames)  # three lanes, each claim reserved iteration 0..2
        running = engine.store.claim(claim_command_id(eid, "drain", 1, 0, 1), "test-worker", 60)
        assert running is not None and (running.meta or {}).get("iteration") == 0
        frame = engine.store.record_frame(running, [{"id": 1}, {"id": 2}])
        assert frame is not None and frame.rows == [{"id": 1}, {"id": 2}]
        handed = engine.store.claim(claim_command_id(eid, "drain", 1, 1, 1), "test-worker", 60)
        assert handed is not None
        result = {"rows": [{"id": 3}], "row_count": 1, "recorded": True, "iteration": 1}
        assert engine.store.complete(handed, Outcome("ok", result))
        ran = engine.store.claim(claim_command_id(eid, "drain", 1, 2, 1), "test-worker", 60)
        assert ran is not None
        with_body = {**result, "rows": [{"id": 4}], "iteration": 2, "body": {"status": "ok"}}
        assert engine.store.complete(ran, Outcome("ok", with_body))

        ended = engine.cancel_tree(eid, "by the test")

        assert ended is not None
        assert ended.unfinished_rows == {
            "drain": {
                "epoch": 1,
                "count": 3,
                "rows": [],
                "interrupted": [{"id": 1}, {"id": 2}, {"id": 3}],
                "truncated": False,
            }
        }
    finally:
        engine.close()
