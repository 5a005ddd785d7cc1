"""`noetl-celery worker --pool threads`: real worker processes running commands on
threads, and long retry delays parked in Postgres instead of in a worker's slot.

Each test gets a database and a Redis of its own (no other worker may take its
messages), a threads worker and a beat sending the reaper every second (it issues parked
commands when due, and re-issues the commands of a killed worker).
"""

from __future__ import annotations

import signal
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest

from noetl_celery.engine.service import Engine
from tests.conftest import _env
from tests.support import services
from tests.support.engines import celery_engine
from tests.support.http_server import http_api, stats
from tests.support.private_services import PrivateRedis
from tests.support.workers import BeatProcess, WorkerProcess

pytestmark = pytest.mark.integration

FAST_RECOVERY = {
    "NOETL_LEASE_SECONDS": "4",
    "NOETL_REAPER_INTERVAL_SECONDS": "1",
    "NOETL_ISSUED_GRACE_SECONDS": "3",
    "NOETL_WAKE_GRACE_SECONDS": "2",
}


@dataclass
class ThreadsCluster:
    engine: Engine
    worker: WorkerProcess
    dsn: str

    def start(self, playbook: str, **payload: Any) -> str:
        return self.engine.start_text(playbook, payload)

    def statuses(self, eid: str, step: str) -> list[str]:
        with psycopg.connect(self.dsn) as conn:
            rows = conn.execute(
                "SELECT status FROM commands WHERE execution_id = %s AND step = %s "
                "ORDER BY command_id",
                (eid, step),
            ).fetchall()
        return [str(r[0]) for r in rows]

    def wait_for(self, what: str, check: Callable[[], bool], timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while not check():
            assert time.monotonic() < deadline, (
                f"{what}: not after {timeout}s\n{self.worker.tail()}"
            )
            time.sleep(0.05)


@pytest.fixture
def threads_cluster(
    template_db: str, credentials_file: Path, tmp_path: Path
) -> Iterator[Callable[[int], ThreadsCluster]]:
    """`make(concurrency)`: a database, a Redis, a `--pool threads -c N` worker and a beat."""
    with contextmanager(_cluster)(template_db, credentials_file, tmp_path) as make:
        yield make


def _cluster(
    template_db: str, credentials_file: Path, tmp_path: Path
) -> Iterator[Callable[[int], ThreadsCluster]]:
    redis = PrivateRedis()
    redis.start()
    started: list[WorkerProcess] = []
    engines: list[Engine] = []
    with services.cloned_database(template_db, prefix="noetl_thr") as name:
        url = services.sqlalchemy_url(name)
        env = _env(
            NOETL_DATABASE_URL=url,
            NOETL_BROKER_URL=redis.url,
            NOETL_CREDENTIALS_FILE=str(credentials_file),
            NOETL_HOME=str(tmp_path / "home"),
            **FAST_RECOVERY,
        )

        def make(concurrency: int) -> ThreadsCluster:
            worker = WorkerProcess("thr", env, concurrency, extra=["--pool", "threads"])
            started.append(worker)
            beat = BeatProcess(env)
            started.append(beat)
            worker.wait_ready()
            beat.wait_ready()
            engine = celery_engine(url, redis.url, tmp_path, credentials_file)
            engines.append(engine)
            return ThreadsCluster(engine, worker, services.dsn_for(name))

        try:
            yield make
        finally:
            for engine in engines:
                engine.close()
            for process in started:
                process.stop()
            redis.stop()


HTTP_LOOP = """
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: threads_http_loop, path: tests/threads_http_loop}
workload: {n: 200}
workflow:
  - step: start
    tool: {kind: python, input: {n: "{{ n }}"}, code: "result = {'items': list(range(n))}"}
    next: {arcs: [{step: fetch}]}
  - step: fetch
    loop:
      in: "{{ start.items }}"
      iterator: i
      spec: {mode: parallel, max_in_flight: 32}
    tool:
      kind: http
      method: GET
      url: "{{ api }}/item/{{ iter.i }}"
    next: {arcs: [{step: end, when: "{{ event.name == 'loop.done' }}"}]}
  - step: end
    tool: {kind: python, code: "result = {'done': True}"}
"""


def test_http_loop_on_a_threads_worker_counts_exactly(
    threads_cluster: Callable[[int], ThreadsCluster],
) -> None:
    cluster = threads_cluster(16)
    with http_api() as api:
        eid = cluster.start(HTTP_LOOP, api=api, n=200)
        row = cluster.engine.wait(eid, 120)
        served = stats()
    assert row.status == "COMPLETED", row.error
    summary = cluster.engine.summary(eid)
    assert summary["steps"]["fetch"]["stats"] == {"total": 200, "success": 200, "failed": 0}
    # every item requested exactly once (no lost or repeated command on the threads)
    assert sorted(k for k in served if k.startswith("/item/")) == sorted(
        f"/item/{i}:200" for i in range(200)
    )
    assert all(served[f"/item/{i}:200"] == 1 for i in range(200))
    terminals = [e for e in cluster.engine.events(eid) if e["type"] == "command.completed"]
    assert len(terminals) == 200 + 2
    log = cluster.worker.log.read_text(errors="replace")
    assert "threads pool of 16: engine database pool of 20 connections (+20 at a peak)" in log


THROTTLED = """
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: threads_throttled, path: tests/threads_throttled}
workload: {times: 2, after: 2}
workflow:
  - step: start
    tool: {kind: python, code: "result = {'go': True}"}
    next: {arcs: [{step: call}]}
  - step: call
    tool:
      - name: mark
        kind: http
        method: GET
        url: "{{ api }}/mark/{{ key }}"
      - name: fetch
        kind: http
        method: GET
        url: "{{ api }}/throttle/{{ key }}?times={{ times }}&after={{ after }}"
        spec:
          policy:
            rules:
              - when: "{{ output.status == 'error' }}"
                then: {do: retry, attempts: 5, backoff: fixed, delay: 0.1}
    next: {arcs: [{step: end}]}
  - step: end
    tool:
      kind: python
      input: {r: "{{ call.requests }}", k: "{{ call.key }}"}
      code: "result = {'requests': r, 'key': k}"
"""

QUICK = """
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: threads_quick, path: tests/threads_quick}
workflow:
  - step: only
    tool: {kind: python, code: "result = {'quick': True}"}
"""


def test_a_long_retry_after_parks_the_command_and_frees_the_slot(
    threads_cluster: Callable[[int], ThreadsCluster],
) -> None:
    """One thread: while the throttled pipeline waits out `Retry-After: 2` twice, the
    thread runs another execution to its end; the pipeline then resumes at the task
    that waits (the task before it ran once) and completes with the third answer."""
    cluster = threads_cluster(1)
    with http_api() as api:
        began = time.monotonic()
        eid = cluster.start(THROTTLED, api=api, key="a")
        cluster.wait_for("parked", lambda: cluster.statuses(eid, "call") == ["delayed"])
        other = cluster.start(QUICK)
        quick = cluster.engine.wait(other, 30)
        assert quick.status == "COMPLETED", quick.error
        # the other one ended while this one still waits
        assert cluster.engine.summary(eid)["status"] == "RUNNING"
        row = cluster.engine.wait(eid, 60)
        took = time.monotonic() - began
        served = stats()
    assert row.status == "COMPLETED", row.error
    assert cluster.engine.summary(eid)["result"] == {"requests": 3, "key": "a"}
    assert took >= 4.0  # two waits of 2s
    assert served["/mark/a:200"] == 1  # resumed at `fetch`, not from the first task
    assert (served["throttle:a:429"], served["throttle:a:200"]) == (2, 1)
    assert cluster.statuses(eid, "call") == ["completed"]
    completed = [e for e in cluster.engine.events(eid) if e["type"] == "command.completed"]
    assert [e["step"] for e in completed] == ["start", "call", "end"]
    log = cluster.worker.log.read_text(errors="replace")
    assert log.count(f"command {eid}:call:") >= 2 and "parked until" in log, log


def test_a_parked_command_of_a_cancelled_execution_does_not_come_back(
    threads_cluster: Callable[[int], ThreadsCluster],
) -> None:
    cluster = threads_cluster(2)
    with http_api() as api:
        eid = cluster.start(THROTTLED, api=api, key="c", times=1, after=3)
        cluster.wait_for("parked", lambda: cluster.statuses(eid, "call") == ["delayed"])
        assert cluster.engine.cancel(eid)
        time.sleep(5)  # past the due time and several sweeps
        served = stats()
    assert cluster.engine.summary(eid)["status"] == "CANCELLED"
    assert cluster.statuses(eid, "call") == ["cancelled"]
    assert served.get("throttle:c:429") == 1 and "throttle:c:200" not in served


def test_kill_9_while_parked_loses_nothing(
    threads_cluster: Callable[[int], ThreadsCluster],
) -> None:
    cluster = threads_cluster(2)
    with http_api() as api:
        eid = cluster.start(THROTTLED, api=api, key="k", times=1, after=3)
        cluster.wait_for("parked", lambda: cluster.statuses(eid, "call") == ["delayed"])
        cluster.worker.kill(signal.SIGKILL)
        time.sleep(1)
        cluster.worker.restart()
        row = cluster.engine.wait(eid, 60)
        served = stats()
    assert row.status == "COMPLETED", row.error
    assert cluster.engine.summary(eid)["result"] == {"requests": 2, "key": "k"}
    assert served["/mark/k:200"] == 1
    assert (served["throttle:k:429"], served["throttle:k:200"]) == (1, 1)


SLOW_LOOP = """
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: threads_slow_loop, path: tests/threads_slow_loop}
workflow:
  - step: start
    tool: {kind: python, input: {n: "{{ n }}"}, code: "result = {'items': list(range(n))}"}
    next: {arcs: [{step: each}]}
  - step: each
    loop:
      in: "{{ start.items }}"
      iterator: i
      spec: {mode: parallel, max_in_flight: 8}
    tool:
      kind: http
      method: GET
      url: "{{ api }}/slow/{{ iter.i }}?sleep=0.3"
    next: {arcs: [{step: end, when: "{{ event.name == 'loop.done' }}"}]}
  - step: end
    tool: {kind: python, code: "result = {'done': True}"}
"""


def test_a_killed_threads_worker_loses_no_item(
    threads_cluster: Callable[[int], ThreadsCluster],
) -> None:
    """kill -9 with eight commands on the worker's threads: their leases expire, the
    reaper issues their next attempts and every item completes exactly once in the
    engine's counts (the HTTP side may see a repeat: at-least-once)."""
    cluster = threads_cluster(8)
    with http_api() as api:
        eid = cluster.start(SLOW_LOOP, api=api, n=60)
        cluster.wait_for(
            "some items done", lambda: cluster.statuses(eid, "each").count("completed") >= 10
        )
        cluster.worker.kill(signal.SIGKILL)
        cluster.worker.restart()
        row = cluster.engine.wait(eid, 120)
        served = stats()
    assert row.status == "COMPLETED", row.error
    assert cluster.engine.summary(eid)["steps"]["each"]["stats"] == {
        "total": 60,
        "success": 60,
        "failed": 0,
    }
    assert all(served.get(f"/slow/{i}:200", 0) >= 1 for i in range(60))


def test_the_embedded_mode_parks_and_resumes_too(tmp_path: Path) -> None:
    """The process that parked a command issues it when due, without waiting for a
    sweep (the embedded reaper thread would sweep only after a minute here)."""
    from noetl_celery.settings import Settings
    from noetl_celery.store.database import SchemaMode

    settings = Settings(
        home=tmp_path,
        database_url=f"sqlite:///{tmp_path / 'noetl.sqlite3'}",
        reaper_interval_seconds=60,
    )
    engine = Engine(settings, schema=SchemaMode.MIGRATE)
    engine.use_in_process_workers()
    try:
        with http_api() as api:
            began = time.monotonic()
            eid = engine.start_text(THROTTLED, {"api": api, "key": "e", "times": 1, "after": 2})
            seen: set[str] = set()
            deadline = time.monotonic() + 30
            while engine.store.execution(eid).status == "RUNNING":
                assert time.monotonic() < deadline
                seen.update(c["status"] for c in _commands(engine, eid, "call"))
                time.sleep(0.05)
            took = time.monotonic() - began
            served = stats()
        row = engine.store.execution(eid)
        assert row.status == "COMPLETED", row.error
        assert "delayed" in seen
        assert 2.0 <= took < 15, took  # on time: the wait, not a sweep interval
        assert engine.summary(eid)["result"] == {"requests": 2, "key": "e"}
        assert (served["/mark/e:200"], served["throttle:e:429"]) == (1, 1)
    finally:
        engine.close()


def _commands(engine: Engine, eid: str, step: str) -> list[dict[str, Any]]:
    path = engine.settings.effective_database_url.removeprefix("sqlite:///")
    with closing(sqlite3.connect(path)) as conn:
        rows = conn.execute(
            "SELECT status FROM commands WHERE execution_id = ? AND step = ?", (eid, step)
        ).fetchall()
    return [{"status": str(r[0])} for r in rows]


def test_a_parked_pipelines_timeout_counts_from_its_first_start(tmp_path: Path) -> None:
    """`spec.timeout: 3` on a step that waits out `Retry-After: 2` twice: the waits are
    part of the step's time, so the second resumption finds the deadline passed and the
    step fails as timed out (a deadline restarted on each resumption would let it run
    on forever, 3 s at a time)."""
    from noetl_celery.settings import Settings
    from noetl_celery.store.database import SchemaMode

    settings = Settings(home=tmp_path, database_url=f"sqlite:///{tmp_path / 'noetl.sqlite3'}")
    engine = Engine(settings, schema=SchemaMode.MIGRATE)
    engine.use_in_process_workers()
    timed = THROTTLED.replace("  - step: call\n", "  - step: call\n    spec: {timeout: 3}\n")
    assert timed != THROTTLED
    try:
        with http_api() as api:
            eid = engine.start_text(timed, {"api": api, "key": "t", "times": 2, "after": 2})
            row = engine.wait(eid, 30)
            served = stats()
        assert row.status == "FAILED" and row.error is not None
        failed = {f["step"]: f["error"] for f in row.error["failures"]}
        assert failed["call"] == {"kind": "timeout", "message": "step 'call' timed out after 3s"}
        assert served["throttle:t:429"] == 2 and "throttle:t:200" not in served
    finally:
        engine.close()
