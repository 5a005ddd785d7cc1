"""Cursor loops on real workers: lanes drain a work queue with SKIP LOCKED claims."""

from __future__ import annotations

from typing import Any

import pytest

from noetl_celery.engine.service import Engine
from tests.integration.test_loops import PLAYBOOKS, finish, loop_dones
from tests.support.http_server import http_api

pytestmark = pytest.mark.integration


@pytest.fixture
def engine(engine_on_workers: Engine) -> Engine:
    return engine_on_workers


def drain(engine: Engine, **payload: Any) -> tuple[str, dict[str, Any]]:
    with http_api() as api:
        eid = engine.start_text(
            (PLAYBOOKS / "cursor_drain.yaml").read_text(), {"api": api, **payload}
        )
        summary = finish(engine, eid, timeout=300)
    return eid, summary


def test_lanes_never_claim_the_same_row(engine: Engine) -> None:
    eid, summary = drain(engine, rows=600, lanes=4, max_rows=20, concurrency=5)
    assert summary["result"]["rows"] == [
        {
            "seen": 600,
            "ids": 600,
            "reclaimed": 0,
            "done": 600,
            "failed": 0,
            "left_over": 0,
            "slots": 4,
        }
    ]
    assert summary["steps"]["drain"]["stats"] == {"total": 600, "success": 600, "failed": 0}
    assert loop_dones(engine, eid) == [("drain", 1)]
    loops = engine.status(eid)["loops"]
    assert loops[0]["mode"] == "cursor" and loops[0]["done"] == 600 and loops[0]["finished"]


def test_a_refilled_queue_is_drained_again_on_reentry(engine: Engine) -> None:
    eid, summary = drain(engine, rows=100, lanes=3, max_rows=7, concurrency=3, rounds=3)
    assert summary["result"]["rows"][0]["seen"] == 300
    assert summary["result"]["rows"][0]["ids"] == 300
    assert summary["result"]["rows"][0]["left_over"] == 0
    assert loop_dones(engine, eid) == [("drain", e) for e in (1, 2, 3)]


def test_body_policy_retry_then_continue_sets_the_row_status(engine: Engine) -> None:
    _, summary = drain(engine, rows=90, lanes=2, max_rows=10, concurrency=4, bad_every=9)
    assert summary["result"]["rows"] == [
        {
            "seen": 90,
            "ids": 90,
            "reclaimed": 0,
            "done": 80,
            "failed": 10,
            "left_over": 0,
            "slots": 2,
        }
    ]
    # every body ended in `continue`, so the loop counts all of them as successes
    assert summary["steps"]["drain"]["stats"]["success"] == 90
