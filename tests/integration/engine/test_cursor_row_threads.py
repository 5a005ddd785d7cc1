"""A frame's per-row bodies run in threads of the claiming worker (worker.frame_rows,
docs/design.md §4): a pipeline (an HTTP call with retry policies, then a no-op) whose
rows are meant to overlap (`frame.row_concurrency` > 1) runs that many rows at a time
in the claim's command, on both stores. A retry's short delay is slept in the row's
thread; a row whose retry must wait past `NOETL_PARK_AFTER_SECONDS` parks: the frame's
close writes its body command parked, the lane waits for it, and it resumes where it
stopped (its attempts kept) as a command of its own, counted once."""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from noetl_celery.engine.service import Engine
from noetl_celery.store.schema import commands, events
from tests.integration.engine.test_cursor_continuation import Deliveries, claim_results, engine

# the fixture; its NOETL_PARK_AFTER_SECONDS is the default, 1 s: a Retry-After of 2 s
# parks, the 0.1 s retry delay is slept
__all__ = ["engine"]

ROWS = 16
FRAME = 8
THREADS = 4
SLOW = 0.3  # seconds each answer takes: the rows of a frame overlap for certain
FLAKY = 3  # answered 503 once, then 200 (a retry slept in the row's thread)
PARKS = 11  # answered 503 with Retry-After: 2 once (the row parks), then 200

PLAYBOOK = """apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: row_threads}
workload: {db: "", api: ""}
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
      spec:
        mode: cursor
        max_in_flight: 2
        frame: {max_rows: FRAME, row_concurrency: THREADS}
    tool:
      - name: fetch
        kind: http
        url: "{{ api }}/row/{{ iter.job.id }}"
        spec:
          policy:
            rules:
              - when: "{{ output.status == 'error' and output.error.retryable }}"
                then: {do: retry, attempts: 3, backoff: fixed, delay: 0.1}
              - else:
                  then: {do: continue, set: {iter.seen: "{{ output.data.row }}"}}
      - name: done
        kind: noop
        spec:
          policy:
            rules: [{else: {then: {do: break, set: {iter.ok: "{{ iter.seen }}"}}}}]
""".replace("FRAME", str(FRAME)).replace("THREADS", str(THREADS))


class Api:
    """Answers /row/<id> after SLOW seconds; counts requests and how many overlapped."""

    def __init__(self) -> None:
        self.requests: Counter[int] = Counter()
        self.on_request: Callable[[int], None] | None = None  # run before answering
        self.running = 0
        self.most = 0
        self._lock = threading.Lock()
        api = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                row = int(self.path.rsplit("/", 1)[1])
                with api._lock:
                    api.requests[row] += 1
                    first = api.requests[row] == 1
                    api.running += 1
                    api.most = max(api.most, api.running)
                try:
                    if api.on_request is not None:
                        api.on_request(row)
                    time.sleep(SLOW)
                    if first and row in (FLAKY, PARKS):
                        retry_after = "2" if row == PARKS else "0"
                        self._answer(503, {"error": "busy"}, {"Retry-After": retry_after})
                    else:
                        self._answer(200, {"row": row}, {})
                finally:
                    with api._lock:
                        api.running -= 1

            def _answer(self, status: int, body: Any, headers: dict[str, str]) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for name, value in headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def api() -> Iterator[Api]:
    server = Api()
    try:
        yield server
    finally:
        server.close()


def queue_db(tmp_path: Path) -> Path:
    db = tmp_path / "work.sqlite3"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE queue (id INTEGER PRIMARY KEY, status TEXT)")
        conn.executemany(
            "INSERT INTO queue (id, status) VALUES (?, 'pending')",
            [(i,) for i in range(1, ROWS + 1)],
        )
    return db


def body_rows(engine: Engine, eid: str) -> dict[int, tuple[str, Any]]:
    """iteration -> (status, resume) of every body command row."""
    query = select(commands.c.iteration, commands.c.status, commands.c.resume).where(
        commands.c.execution_id == eid, commands.c.kind == "iteration"
    )
    with engine.database.engine.connect() as conn:
        return {int(r[0]): (r[1], r[2]) for r in conn.execute(query)}


def terminal_events(engine: Engine, eid: str) -> Counter[int]:
    query = select(events.c.iteration).where(
        events.c.execution_id == eid,
        events.c.iteration.is_not(None),
        events.c.type.in_(("command.completed", "command.failed")),
    )
    with engine.database.engine.connect() as conn:
        return Counter(int(r[0]) for r in conn.execute(query))


def test_rows_overlap_in_the_claims_threads_and_a_parked_row_finishes_as_its_own_command(
    engine: Engine, api: Api, tmp_path: Path
) -> None:
    deliveries = Deliveries()
    engine.use_dispatcher(deliveries)
    eid = engine.start_text(PLAYBOOK, {"db": str(queue_db(tmp_path)), "api": api.url})
    deadline = time.monotonic() + 90
    while engine.status(eid)["status"] == "RUNNING" and time.monotonic() < deadline:
        deliveries.deliver_all(engine.executor.execute)  # the parked row comes back here
        time.sleep(0.1)
    summary = engine.summary(eid)
    assert summary["status"] == "COMPLETED", summary["error"]
    assert summary["steps"]["drain"]["stats"] == {"total": ROWS, "success": ROWS, "failed": 0}
    # every row's request answered once; the flaky and parked rows twice (their retry)
    expected = {row: 2 if row in (FLAKY, PARKS) else 1 for row in range(1, ROWS + 1)}
    assert dict(api.requests) == expected
    # the rows of a frame overlapped, row_concurrency of them at a time (the test runs
    # one command at a time: every overlap is within a frame)
    assert api.most == THREADS
    # every frame's rows ran with its claim; the parked row's body is in its claim's
    # completion as parked, and its own command finished it
    with_rows = [r for r in claim_results(engine, eid) if r["rows"]]
    assert len(with_rows) == ROWS // FRAME
    parked = [
        (r["iteration"] + i, body)
        for r in with_rows
        for i, body in enumerate(r["bodies"])
        if body == {"parked": True}
    ]
    assert len(parked) == 1
    [(parked_iteration, _)] = parked
    rows = body_rows(engine, eid)
    assert len(rows) == ROWS and {status for status, _ in rows.values()} == {"completed"}
    # it resumed where it stopped: at the retry of `fetch`, its first attempt counted
    resume = rows[parked_iteration][1]
    assert resume["parked"]["task"] == "fetch" and resume["parked"]["delay"] == 2
    # published alone, when due (the others never went through the broker)
    body_ids = [cid for cid in deliveries.published if cid.rsplit(":", 1)[1].isdigit()]
    assert body_ids == [f"{eid}:drain:1:{parked_iteration}"]
    assert terminal_events(engine, eid) == Counter(dict.fromkeys(rows, 1))


def test_a_frame_cancelled_mid_frame_starts_no_more_rows_and_writes_no_body(
    engine: Engine, api: Api, tmp_path: Path
) -> None:
    """The execution is cancelled while the first rows' requests are out: the threads
    take no more rows (the claim's status is polled), the rows in flight stop at their
    next task, and the close finds the claim cancelled and writes no body."""
    deliveries = Deliveries()
    engine.use_dispatcher(deliveries)
    cancels: list[Any] = []
    started: dict[str, str] = {}

    seen = threading.Event()  # the claim's worker saw the cancel

    def cancel_once(row: int) -> None:
        # every request waits here until the cancel is seen, so the rows in flight are
        # the first THREADS whatever the heartbeat's poll period: none ends (and lets
        # its thread take a row) between the cancel and the poll that sees it
        with api._lock:
            first = not cancels
            if first:
                cancels.append(None)
        if not first:
            assert seen.wait(10), "the cancel was never seen"
            return
        eid = started["eid"]
        cancels[0] = engine.cancel_tree(eid, "by the test")
        claim = f"{eid}:drain:1:c0.1"  # lane 0's first frame: the first command delivered
        deadline = time.monotonic() + 10  # the heartbeat thread's next poll
        while not engine.executor.heartbeats.lost(claim):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        seen.set()

    api.on_request = cancel_once
    eid = engine.start_text(PLAYBOOK, {"db": str(queue_db(tmp_path)), "api": api.url})
    started["eid"] = eid
    deliveries.deliver_all(engine.executor.execute)
    assert engine.status(eid)["status"] == "CANCELLED"
    # the rows whose requests were out when the cancel was seen, and no other
    assert set(api.requests) <= set(range(1, THREADS + 1)) and api.requests
    assert body_rows(engine, eid) == {}
    [cancel] = cancels
    interrupted = cancel.unfinished_rows["drain"]["interrupted"]
    assert sorted(r["id"] for r in interrupted) == list(range(1, FRAME + 1))
