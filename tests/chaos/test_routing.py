"""Routing to worker pools on real workers: a step's `spec.queue` and
NOETL_QUEUE_BY_KIND send its commands to a named queue, served only by workers started
with `noetl-celery worker -Q NAME`; until one runs, those commands wait `issued`, and
`status` and `run` name the queue nobody consumes.
On Redis and on RabbitMQ (where a message to a queue nobody declared yet would be
dropped: the publisher declares it)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.chaos.conftest import Cluster
from tests.support import services
from tests.support.sockets import process_group
from tests.support.workers import WorkerProcess, run_cli, run_json

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
    # `status` names the queue, and that no worker of this database consumes it
    shown = ""
    while "no worker of this engine database consumes" not in shown:
        assert time.monotonic() < deadline, f"status never named the unserved queue: {shown}"
        time.sleep(0.5)
        shown = run_cli(["status", eid], cluster.env, timeout=60).stdout
    assert "waiting for a worker on queue io" in shown, shown
    assert "step each waits on queue io" in shown and "noetl-celery worker -Q io" in shown, shown
    code, view, _ = run_json(["status", eid, "--json"], cluster.env, timeout=60)
    assert code == 0 and {"step": "each", "queue": "io"}.items() <= view["waiting"][0].items()
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


def test_run_names_a_routed_queue_no_worker_consumes(cluster_factory: Any) -> None:
    """`run` waiting on a step routed to `io`, with only a default worker: one warning
    naming the step, the queue and the command that serves it; then a worker of `io`
    comes and the run completes."""
    cluster: Cluster = cluster_factory(workers=1, NOETL_QUEUE_BY_KIND="python:io")
    playbook = str(Path(__file__).resolve().parents[1] / "playbooks" / "routed.yaml")
    with subprocess.Popen(
        [sys.executable, "-m", "noetl_celery.cli.main", "run", playbook, "--set", "n=5", "--json"],
        env=cluster.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as running:
        assert running.stderr is not None
        line = ""
        deadline = time.monotonic() + 60
        while "no worker of this engine database consumes" not in line:
            assert time.monotonic() < deadline and running.poll() is None, line
            line = running.stderr.readline()
        assert line.startswith("warning: step each waits on queue io"), line
        assert "`noetl-celery worker -Q io`" in line, line
        io = WorkerProcess("io", cluster.env, extra=["-Q", "io"])
        cluster.workers.append(io)
        stdout, stderr = running.communicate(timeout=120)
    summary = json.loads(stdout.strip().splitlines()[-1])
    assert running.returncode == 0 and summary["status"] == "COMPLETED", (stdout, stderr)
    assert "waits on queue" not in stderr  # said once
    assert cluster.stats(summary["execution_id"], "each") == {
        "total": 5,
        "success": 5,
        "failed": 0,
    }
