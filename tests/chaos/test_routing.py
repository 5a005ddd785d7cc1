"""Routing to worker pools on real workers: a step's `spec.queue` and
NOETL_QUEUE_BY_KIND send its commands to a named queue, served only by workers started
with `noetl-celery worker -Q NAME`; until one runs, those commands wait `issued`.
On Redis and on RabbitMQ (where a message to a queue nobody declared yet would be
dropped: the publisher declares it)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.chaos.conftest import Cluster
from tests.support import services
from tests.support.sockets import process_group
from tests.support.workers import WorkerProcess

pytestmark = pytest.mark.chaos


def placed(cluster: Cluster, eid: str) -> dict[str, set[int]]:
    """Step -> the process groups (workers) that ran its commands."""
    out: dict[str, set[int]] = {}
    for step, worker in cluster.query(
        "SELECT step, worker FROM commands WHERE execution_id = %s AND status = 'completed'", eid
    ):
        group = process_group(int(str(worker).rsplit(":", 1)[1]))
        out.setdefault(step, set()).add(group if group is not None else -1)
    return out


@pytest.mark.parametrize("broker", ["redis", "amqp"])
def test_steps_run_only_on_the_pool_of_their_queue(cluster_factory: Any, broker: str) -> None:
    cluster: Cluster = cluster_factory(
        broker_url=services.AMQP_URL if broker == "amqp" else None,
        workers=1,
        NOETL_QUEUE_BY_KIND="python:cpu",
    )
    eid = cluster.start("routed.yaml", n=20)
    # no worker serves `io` yet: the loop's commands wait, issued, while `start` ran
    deadline = time.monotonic() + 60
    while not cluster.query(
        "SELECT 1 FROM commands WHERE execution_id = %s AND step = 'each'", eid
    ):
        assert time.monotonic() < deadline, "the loop was never issued"
        time.sleep(0.1)
    time.sleep(2)
    waiting = dict(
        cluster.query(
            "SELECT status, count(*) FROM commands WHERE execution_id = %s AND step = 'each' "
            "GROUP BY status",
            eid,
        )
    )
    assert waiting.get("issued", 0) > 0 and set(waiting) <= {"issued", "planned"}, waiting
    io = WorkerProcess("io", cluster.env, extra=["-Q", "io"])
    cpu = WorkerProcess("cpu", cluster.env, extra=["--queues=cpu"])
    cluster.workers.extend([io, cpu])
    io.wait_ready()
    cpu.wait_ready()
    assert cluster.wait(eid) == "COMPLETED"
    where = placed(cluster, eid)
    default = cluster.workers[0].proc.pid
    assert where["each"] == {io.proc.pid}, where
    assert where["work"] == {cpu.proc.pid}, where
    assert where["start"] == {default} and where["end"] == {default}, where
    assert cluster.stats(eid, "each") == {"total": 20, "success": 20, "failed": 0}
