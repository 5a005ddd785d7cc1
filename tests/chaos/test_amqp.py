"""RabbitMQ as the broker: the chaos suite's exactness checks on `amqp://`.

A loop's items exactly once; a worker SIGKILLed mid-loop (RabbitMQ gives its unacked
messages back when its connection drops); a RabbitMQ restart mid-loop (`rabbitmqctl
stop_app && start_app`: every connection dropped; durable queues and persistent messages
keep what was queued, the relays see the broker away and back and republish what is
`issued`); and the same loop on quorum queues. The broker is the one at
NOETL_TEST_AMQP_URL (default amqp://guest:guest@127.0.0.1:5672/noetl_test); the restart
needs `rabbitmqctl` on this machine.
"""

from __future__ import annotations

import shutil
import subprocess
from typing import Any

import pytest

from tests.chaos.conftest import Cluster, assert_loop_exact
from tests.chaos.test_chaos import fault_at, kill_workers
from tests.support import services

pytestmark = pytest.mark.chaos
N = 3000


def rabbitmqctl(*args: str) -> None:
    binary = shutil.which("rabbitmqctl")
    if binary is None:
        pytest.fail("rabbitmqctl is required (apt-get install rabbitmq-server)", pytrace=False)
    proc = subprocess.run([binary, *args], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"rabbitmqctl {' '.join(args)}: {proc.stdout}{proc.stderr}"


def restart_rabbitmq() -> None:
    """Stop and start the RabbitMQ application (every connection drops); it is started
    again whatever happens."""
    try:
        rabbitmqctl("stop_app")
    finally:
        rabbitmqctl("start_app")
        rabbitmqctl("await_startup")


def test_a_loop_on_rabbitmq_runs_every_item_exactly_once(cluster_factory: Any) -> None:
    cluster: Cluster = cluster_factory(broker_url=services.AMQP_URL)
    eid = cluster.start("chaos_loop.yaml", n=N, window=50)
    assert_loop_exact(cluster, eid, N)
    # the queues are durable (a restart keeps what they hold)
    from kombu.connection import Connection

    with Connection(services.AMQP_URL) as conn:
        ok = conn.channel().queue_declare("noetl.commands", passive=True)
    assert ok.queue == "noetl.commands"


def test_a_loop_on_rabbitmq_quorum_queues(cluster_factory: Any) -> None:
    cluster: Cluster = cluster_factory(
        broker_url=services.AMQP_URL, NOETL_BROKER_QUEUE_TYPE="quorum"
    )
    eid = cluster.start("chaos_loop.yaml", n=N, window=50)
    assert_loop_exact(cluster, eid, N)
    listing = subprocess.run(
        ["rabbitmqctl", "list_queues", "-p", vhost(), "name", "type", "durable"],
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout
    lines = {line.split()[0]: line.split()[1:] for line in listing.splitlines() if "\t" in line}
    assert lines["noetl.commands"] == ["quorum", "true"], listing
    assert lines["noetl.orchestrate"] == ["quorum", "true"], listing


def test_worker_sigkill_during_a_loop_on_rabbitmq(cluster_factory: Any) -> None:
    cluster: Cluster = cluster_factory(broker_url=services.AMQP_URL)
    eid = cluster.start("chaos_loop.yaml", n=N, window=50)
    faults = kill_workers(cluster, eid, (800, 1800))
    assert_loop_exact(cluster, eid, N)
    for lost, at, what in faults:
        cluster.recovery(eid, lost, at, what)
    cluster.check_fleet(eid, faults[0][1])


def test_rabbitmq_restarted_in_the_middle_of_a_loop(cluster_factory: Any) -> None:
    cluster: Cluster = cluster_factory(broker_url=services.AMQP_URL)
    eid = cluster.start("chaos_loop.yaml", n=N, window=50)
    lost, at, what = fault_at(cluster, eid, 1000, "rabbitmq stop_app/start_app", restart_rabbitmq)
    assert_loop_exact(cluster, eid, N)
    cluster.recovery(eid, lost, at, what)
    cluster.check_fleet(eid, at)


def vhost() -> str:
    path = services.AMQP_URL.rsplit("/", 1)[1]
    return path or "/"
