"""Graceful restarts: a worker told to stop (SIGTERM to its main process, as Kubernetes
does) takes no new work, finishes what it runs within NOETL_WORKER_SHUTDOWN_SECONDS or
hands it back, and exits (tasks.shutdown). A rolling restart of both workers during a
loop loses nothing and counts nothing twice, on Redis and on RabbitMQ; items that sleep
longer than the budget are handed back and run by another worker at once, not after
their lease.
"""

from __future__ import annotations

import datetime as dt
import re
import time
from typing import Any

import pytest

from tests.chaos.conftest import Cluster, assert_loop_exact, report, utcnow
from tests.support import services
from tests.support.sockets import process_group
from tests.support.workers import WorkerProcess

pytestmark = pytest.mark.chaos
N = 3000
BUDGET = 3.0
PAUSE = 8  # seconds an item of the sleepy loop takes


def rolling_restart(cluster: Cluster, eid: str, points: tuple[int, ...]) -> None:
    """TERM each worker in turn when `points` commands have finished, start its
    replacement, and wait for the stopped one to exit (within its budget and a margin)."""
    for round_, point in enumerate(points):
        cluster.wait_finished(eid, point)
        old = cluster.workers[round_]
        old.terminate()
        replacement = WorkerProcess(f"r{round_ + 1}", cluster.env)
        cluster.workers.append(replacement)
        replacement.wait_ready()
        code = old.wait_exit(timeout=BUDGET + 60)
        assert code == 0, old.tail(40)
    cluster.workers[:] = [w for w in cluster.workers if w.proc.poll() is None]


@pytest.mark.parametrize("broker", ["redis", "amqp"])
def test_rolling_restart_during_a_loop(cluster_factory: Any, broker: str) -> None:
    cluster: Cluster = cluster_factory(
        broker_url=services.AMQP_URL if broker == "amqp" else None,
        NOETL_WORKER_SHUTDOWN_SECONDS=str(BUDGET),
    )
    eid = cluster.start("chaos_loop.yaml", n=N, window=50)
    at = utcnow()
    rolling_restart(cluster, eid, (500, 1500))
    assert_loop_exact(cluster, eid, N)
    cluster.check_fleet(eid, at)


def test_items_longer_than_the_budget_are_handed_back(cluster_factory: Any) -> None:
    """Items sleep 8 s, the budget is 3 s, leases 120 s: what the stopped worker ran is
    released, killed with its process (no side effect committed) and run again by
    another worker at once (a lease would hold it for 120 s), counted once."""
    cluster: Cluster = cluster_factory(
        NOETL_WORKER_SHUTDOWN_SECONDS=str(BUDGET),
        NOETL_LEASE_SECONDS="120",
    )
    eid = cluster.start("sleepy_loop.yaml", n=10, window=8, pause=PAUSE)
    stopping = cluster.workers[0]
    # told to stop while it runs an item begun within 2 s: 6 s of it are left, over the budget
    deadline = time.monotonic() + 90
    while not running_under(cluster, eid, stopping.proc.pid, utcnow() - dt.timedelta(seconds=2)):
        assert time.monotonic() < deadline, "worker c1 started no item"
        time.sleep(0.05)
    at = utcnow()
    stopping.terminate()
    # what it runs as it is told to stop (it claims nothing more)
    mine = running_under(cluster, eid, stopping.proc.pid)
    assert mine, "the stopping worker runs nothing: the test would prove nothing"
    assert stopping.wait_exit(timeout=BUDGET + 60) == 0, stopping.tail(40)
    handed = re.findall(r"(\d+) command\(s\) handed back", stopping.log.read_text())
    assert handed and int(handed[-1]) > 0, stopping.tail(40)
    cluster.workers.remove(stopping)
    assert_loop_exact(cluster, eid, 10)
    # what it could not finish in its budget was finished by another worker (a killed run
    # commits no side effect); what it finished in time stays its own
    finished_by = dict(
        cluster.query(
            "SELECT command_id, worker FROM commands WHERE execution_id = %s "
            "AND command_id = ANY(%s)",
            eid,
            list(mine),
        )
    )
    assert set(finished_by) == set(mine)
    elsewhere = {cid for cid, worker in finished_by.items() if worker != mine[cid]}
    assert elsewhere, (finished_by, mine)
    report(cluster.test, "commands handed back", int(handed[-1]), "")
    report(cluster.test, "longest stall", cluster.longest_stall(eid, at))


def running_under(
    cluster: Cluster, eid: str, main_pid: int, since: dt.datetime = dt.datetime.min
) -> dict[str, str]:
    """Command id -> worker identity of the commands running under a worker's processes
    (its main process and its pool's, one process group), loop items started since `since`."""
    rows = cluster.query(
        "SELECT command_id, worker FROM commands WHERE execution_id = %s "
        "AND step = 'each' AND status = 'running' AND started_at >= %s",
        eid,
        since,
    )
    return {
        cid: worker
        for cid, worker in rows
        if process_group(int(str(worker).rsplit(":", 1)[1])) == main_pid
    }
