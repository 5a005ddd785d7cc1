"""Grouped closes (worker.close_window) under SIGKILL: a worker killed while the closes of
commands it ran beside a waiting one wait in its window loses nothing and counts nothing
twice (issue 34). Items wait on Postgres (`pg_sleep`), so a batch's rest runs beside its
first command; the window is wide (1 s), so the kill lands while closes wait in it. The
commands whose closes died with the process are still `running` under leases that run
out: the reaper runs them again as their next attempt, and each item is counted once.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.chaos.conftest import Cluster, assert_loop_exact, utcnow

pytestmark = pytest.mark.chaos


def test_worker_sigkill_while_closes_wait_in_its_window(cluster_factory: Any) -> None:
    cluster: Cluster = cluster_factory(NOETL_CLOSE_WINDOW_SECONDS="1.0")
    n = 400
    eid = cluster.start("sleepy_loop.yaml", n=n, window=100, pause=0.2)
    victim = cluster.workers[0]
    deadline = time.monotonic() + 90
    while "run beside it" not in victim.log.read_text(errors="replace"):
        assert time.monotonic() < deadline, "no batch ran its rest beside: " + victim.tail(20)
        time.sleep(0.05)
    cluster.wait_finished(eid, 100)
    lost, at = cluster.in_flight(eid), utcnow()
    assert lost, "nothing in flight: the kill would prove nothing"
    victim.kill()
    victim.restart()
    assert_loop_exact(cluster, eid, n)
    [(terminal, items)] = cluster.query(
        "SELECT count(*), count(DISTINCT iteration) FROM events WHERE execution_id = %s "
        "AND step = 'each' AND type IN ('command.completed', 'command.failed')",
        eid,
    )
    assert (terminal, items) == (n, n)  # one terminal event per item, none twice
    assert cluster.recovery(eid, lost, at, "SIGKILL with closes in the window") < 60
