"""Breaking things on purpose: nothing is lost, nothing is counted twice.

Every test runs a real loop (5,000 items) or cursor drain (3,000 rows) on two worker
processes and a beat, breaks something in the middle, and then asserts the exact
result-table counts, the exact loop counts, one `loop.done` and a terminal status. The
recovery time of each fault (until everything that was in flight at the fault has
finished) is printed at the end of the run.
"""

from __future__ import annotations

import datetime as dt
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from noetl_celery.orchestrator.ids import base_command_id
from tests.chaos.conftest import (
    RECOVERY,
    Cluster,
    assert_drain_exact,
    assert_loop_exact,
    utcnow,
)

pytestmark = pytest.mark.chaos
N = 5000
ROWS = 3000


Fault = tuple[set[str], dt.datetime, str]


def fault_at(
    cluster: Cluster, eid: str, finished: int, what: str, fault: Callable[[], Any]
) -> Fault:
    """Wait until `finished` commands have finished, break things, and return what the
    recovery check needs."""
    cluster.wait_finished(eid, finished)
    lost = cluster.in_flight(eid)
    at = utcnow()
    fault()
    return lost, at, what


def kill_workers(cluster: Cluster, eid: str, points: tuple[int, ...]) -> list[Fault]:
    """SIGKILL the workers in turn (whole process groups) when `points` commands have
    finished; each is started again at once."""
    faults = []
    for round_, point in enumerate(points):
        victim = cluster.workers[round_ % 2]
        faults.append(fault_at(cluster, eid, point, f"SIGKILL worker #{round_ + 1}", victim.kill))
        victim.restart()
    return faults


def test_worker_sigkill_during_a_parallel_loop(cluster_factory: Any) -> None:
    cluster: Cluster = cluster_factory()
    eid = cluster.start("chaos_loop.yaml", n=N, window=50)
    faults = kill_workers(cluster, eid, (800, 2000, 3200))
    assert_loop_exact(cluster, eid, N)
    for lost, at, what in faults:
        assert cluster.recovery(eid, lost, at, what) < 60


def test_worker_sigkill_during_a_cursor_drain(cluster_factory: Any) -> None:
    cluster: Cluster = cluster_factory()
    eid = cluster.start("chaos_cursor.yaml", n=ROWS, lanes=4, max_rows=50, concurrency=10)
    faults = kill_workers(cluster, eid, (600, 1800))
    assert_drain_exact(cluster, eid, ROWS)
    for lost, at, what in faults:
        assert cluster.recovery(eid, lost, at, what) < 60


def test_redis_flushall_in_the_middle(cluster_factory: Any) -> None:
    cluster: Cluster = cluster_factory()
    eid = cluster.start("chaos_loop.yaml", n=N, window=50)
    # FLUSHALL also wipes kombu's exchange bindings: publishing must not depend on them
    lost, at, what = fault_at(cluster, eid, 1500, "redis FLUSHALL", cluster.redis.client().flushall)
    assert_loop_exact(cluster, eid, N)
    assert cluster.recovery(eid, lost, at, what) < 60


def test_redis_restarted_in_the_middle(cluster_factory: Any) -> None:
    cluster: Cluster = cluster_factory()
    eid = cluster.start("chaos_loop.yaml", n=N, window=50)
    lost, at, what = fault_at(cluster, eid, 1500, "redis restart (1 s down)", cluster.redis.restart)
    assert_loop_exact(cluster, eid, N)
    assert cluster.recovery(eid, lost, at, what) < 90


def test_postgres_restarted_in_the_middle(cluster_factory: Any) -> None:
    cluster: Cluster = cluster_factory()
    eid = cluster.start("chaos_loop.yaml", n=N, window=50)
    lost, at, what = fault_at(
        cluster, eid, 1500, "postgres crash + restart (2 s down)", cluster.pg.restart
    )
    assert_loop_exact(cluster, eid, N)
    assert cluster.recovery(eid, lost, at, what) < 90


def test_every_message_delivered_twice(cluster_factory: Any) -> None:
    cluster: Cluster = cluster_factory(
        worker_module="tests.chaos.worker_wrappers duplicate", duplicate=True
    )
    eid = cluster.start("chaos_loop.yaml", n=N, window=50)
    assert_loop_exact(cluster, eid, N)
    # no crash here: every iteration ran exactly once although every message came twice
    assert cluster.result(eid)["rows"][0]["runs"] == N
    dropped = sum(w.log.read_text().count("duplicate delivery dropped") for w in cluster.workers)
    assert dropped >= N


def test_orchestrator_killed_between_commit_and_publish(
    cluster_factory: Any, tmp_path: Path
) -> None:
    markers = tmp_path / "deaths"
    markers.mkdir()
    cluster: Cluster = cluster_factory(
        worker_module="tests.chaos.worker_wrappers die-after-commit",
        NOETL_CHAOS_DIR=str(markers),
        NOETL_CHAOS_DEATHS="3",
        NOETL_CHAOS_AFTER="300",
    )
    eid = cluster.start("chaos_loop.yaml", n=N, window=50)
    assert_loop_exact(cluster, eid, N)
    deaths = sorted(markers.iterdir())
    assert len(deaths) == 3  # three passes committed their commands and died unpublished
    for n, marker in enumerate(deaths):
        info = json.loads(marker.read_text())
        at = dt.datetime.fromtimestamp(info["at"], dt.UTC).replace(tzinfo=None)
        lost = {base_command_id(c) for c in info["commands"]}
        assert lost, "the killed pass had commands to publish"
        assert cluster.recovery(eid, lost, at, f"killed after commit #{n + 1}") < 60


def test_cancel_a_running_loop(cluster_factory: Any) -> None:
    cluster: Cluster = cluster_factory()
    eid = cluster.start("chaos_loop.yaml", n=N, window=50)
    cluster.wait_finished(eid, 1000)
    started = time.monotonic()
    assert cluster.engine.cancel(eid, "chaos test")
    cancelled_at = utcnow()
    seconds = time.monotonic() - started
    assert cluster.status(eid) == "CANCELLED"
    assert seconds < 5
    time.sleep(3)  # long enough for anything still running to show up
    late_claims = cluster.query(
        "SELECT count(*) FROM commands WHERE execution_id = %s AND started_at > %s",
        eid,
        cancelled_at,
    )[0][0]
    assert late_claims == 0  # no command ran after the cancel
    late_events = cluster.query(
        "SELECT count(*) FROM events WHERE execution_id = %s AND created_at > %s "
        "AND type IN ('command.completed', 'command.failed', 'loop.done')",
        eid,
        cancelled_at,
    )[0][0]
    assert late_events == 0
    assert cluster.left_running(eid) == 0
    runs = cluster.query(
        "SELECT count(*) FROM public.chaos_runs WHERE execution_id = %s", eid, data=True
    )[0][0]
    time.sleep(1)
    assert runs < N
    assert (
        cluster.query(
            "SELECT count(*) FROM public.chaos_runs WHERE execution_id = %s", eid, data=True
        )[0][0]
        == runs
    )
    assert cluster.loop_dones(eid) == []
    assert not cluster.engine.cancel(eid)  # already ended
    RECOVERY.append((cluster.test, "cancel -> CANCELLED", round(seconds, 2)))
