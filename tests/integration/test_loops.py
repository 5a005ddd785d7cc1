"""Loops on real workers with exact counts: pagination inside loops, re-entry, a large
loop, and the loop progress operators see."""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest

from noetl_celery.engine.service import Engine
from noetl_celery.engine.summaries import RunSummary
from tests.support import http_server

PLAYBOOKS = Path(__file__).resolve().parents[1] / "playbooks"
pytestmark = pytest.mark.integration


@pytest.fixture
def engine(engine_on_workers: Engine) -> Engine:
    return engine_on_workers


def finish(engine: Engine, eid: str, timeout: float = 180) -> RunSummary:
    row = engine.wait(eid, timeout)
    assert row.status == "COMPLETED", row.error
    counts = engine.store.command_counts(eid)
    assert (counts.planned, counts.issued, counts.running) == (0, 0, 0), counts
    return engine.summary(eid)


def loop_dones(engine: Engine, eid: str) -> list[tuple[str | None, int | None]]:
    return [(e["step"], e["epoch"]) for e in engine.events(eid) if e["type"] == "loop.done"]


def test_paginate_until_404_with_retries_inside_a_parallel_loop(engine: Engine) -> None:
    ids = [f"p{i}" for i in range(30)]
    expected_pages = sum(http_server.pages_for(i) for i in ids)
    with http_server.http_api() as api:
        eid = engine.start_text(
            (PLAYBOOKS / "paginate_in_loop.yaml").read_text(),
            {"api": api, "ids": ids, "fail": "1", "limit": 40},
        )
        summary = finish(engine, eid)
        counts = http_server.stats()
    assert summary["result"]["rows"] == [
        {"pages": expected_pages, "ids": 30, "items": 3 * expected_pages}
    ]
    assert counts["pages:200"] == expected_pages  # every page fetched once
    # one injected 500 on the first request of every page, the 404 page included
    assert counts["pages:500"] == expected_pages + 30
    assert counts["pages:404"] == 30  # one 404 per id ends its pagination
    assert summary["steps"]["fetch_all"]["stats"] == {"total": 30, "success": 30, "failed": 0}
    assert loop_dones(engine, eid) == [("fetch_all", 1)]


def test_rate_limited_pages_honour_retry_after(engine: Engine) -> None:
    ids = [f"r{i}" for i in range(12)]
    expected_pages = sum(http_server.pages_for(i) for i in ids)
    with http_server.http_api() as api:
        eid = engine.start_text(
            (PLAYBOOKS / "paginate_in_loop.yaml").read_text(),
            {"api": api, "ids": ids, "limit": 5, "window": 12},
        )
        summary = finish(engine, eid, timeout=300)
        counts = http_server.stats()
    assert summary["result"]["rows"][0]["pages"] == expected_pages
    assert counts.get("pages:429", 0) >= 1  # the limit was hit and absorbed by retries


def test_step_loopback_pagination_reenters_the_loop_per_page(engine: Engine) -> None:
    pages = http_server.pages_for("batch7")
    with http_server.http_api() as api:
        eid = engine.start_text((PLAYBOOKS / "loopback_pages.yaml").read_text(), {"api": api})
        summary = finish(engine, eid)
    assert summary["result"] == {"processed": 3 * pages, "pages": pages}
    assert loop_dones(engine, eid) == [("process_items", e) for e in range(1, pages + 1)]


def test_a_loop_reentered_five_times(engine: Engine, data_db: str) -> None:
    eid = engine.start_text((PLAYBOOKS / "reentry.yaml").read_text(), {"rounds": 5})
    finish(engine, eid)
    with psycopg.connect(data_db) as conn:
        rows = conn.execute(
            "SELECT round, count(*), count(DISTINCT item) FROM public.it_rounds "
            "WHERE execution_id = %s GROUP BY round ORDER BY round",
            (eid,),
        ).fetchall()
    assert rows == [(r, 12, 12) for r in range(1, 6)]
    assert loop_dones(engine, eid) == [("each", e) for e in range(1, 6)]
    loops = engine.status(eid)["loops"]
    assert [(lp["epoch"], lp["done"], lp["total"], lp["finished"]) for lp in loops] == [
        (e, 12, 12, True) for e in range(1, 6)
    ]


def test_ten_thousand_items_exactly(engine: Engine, data_db: str) -> None:
    eid = engine.start_text(
        (PLAYBOOKS / "side_effect_loop.yaml").read_text(), {"n": 10_000, "window": 100}
    )
    summary = finish(engine, eid, timeout=600)
    assert summary["result"]["rows"] == [{"runs": 10_000, "items": 10_000}]
    assert summary["steps"]["each"]["stats"] == {"total": 10_000, "success": 10_000, "failed": 0}
    events = engine.events(eid)
    terminals = [e for e in events if e["type"] in ("command.completed", "command.failed")]
    assert len(terminals) == 10_003
    assert len({e["command_id"] for e in terminals}) == 10_003
    assert loop_dones(engine, eid) == [("each", 1)]
    with psycopg.connect(data_db) as conn:
        dup = conn.execute(
            "SELECT count(*) FROM (SELECT i FROM public.it_runs WHERE "
            "execution_id = %s GROUP BY i HAVING count(*) > 1) d",
            (eid,),
        ).fetchone()
    assert dup == (0,)


def test_status_shows_live_loop_progress(engine: Engine) -> None:
    import time

    eid = engine.start_text("""apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: slow_loop}
workflow:
  - step: slow
    loop: {in: "{{ range(24) | list }}", iterator: i, spec: {mode: parallel, max_in_flight: 4}}
    tool: {kind: python, code: "import time; time.sleep(0.15); result = 1"}
""")
    seen = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        view = engine.status(eid)
        if view["loops"]:
            seen.append(view["loops"][0])
        if view["status"] != "RUNNING":
            break
        time.sleep(0.05)
    running = [lp for lp in seen if not lp["finished"]]
    assert running, "never saw the loop while it ran"
    assert all(lp["total"] == 24 and 0 <= lp["in_flight"] <= 4 for lp in running)
    assert any(0 < lp["done"] < 24 for lp in running)  # progress moved while running
    assert seen[-1]["finished"] and seen[-1]["done"] == 24 and seen[-1]["in_flight"] == 0
