"""One command per cursor frame (worker.frames) under kill -9: a worker killed in a
frame's body, after its claim committed with the rows recorded on the claim command,
loses no row and counts none twice; the claim's next attempt hands the recorded rows
over and a body command runs them again. The same for per-row lanes run as one command
(the claiming worker runs each row's body itself): a kill mid-frame, some rows run,
leaves every row to a body command of its own, each counted once (its body there is a
pipeline with a retry policy: the row's whole run is in the claim's command)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.chaos.conftest import Cluster, assert_drain_exact, utcnow
from tests.support.sockets import process_group
from tests.support.workers import WorkerProcess

pytestmark = pytest.mark.chaos
ROWS = 1000


def in_a_body(cluster: Cluster, eid: str, chained: bool = False) -> tuple[str, WorkerProcess]:
    """A claim running its frame's body (its rows recorded, its queue transaction
    committed) in a live worker: its id and that worker. A re-run (`:a<n>`) of a claim
    killed before is left out: it hands its recorded rows over without a body, and
    killed in that instant its next run is `:a<n+1>`, not `:a<n>:a2`. `chained`: only a
    claim the lane's previous frame's worker issued itself (orchestrator.cursor)."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        groups = {w.proc.pid: w for w in cluster.workers}
        rows = cluster.query(
            "SELECT command_id, worker FROM commands WHERE execution_id = %s AND kind = 'claim' "
            "AND status = 'running' AND resume IS NOT NULL AND command_id !~ ':a[0-9]+$'",
            eid,
        )
        for command_id, worker in rows:
            # (a claim of a worker killed before stays `running` until its lease ends)
            group = process_group(int(str(worker).rsplit(":", 1)[1]))
            if group in groups and (not chained or issued_by_a_chain(cluster, str(command_id))):
                return str(command_id), groups[group]
        time.sleep(0.05)
    raise AssertionError("no claim ever ran its frame's body")


def issued_by_a_chain(cluster: Cluster, command_id: str) -> bool:
    """The claim was issued by the close of its lane's previous frame (its completion
    says `chained`), not by a pass."""
    prefix, _, coordinate = command_id.rpartition(":c")
    lane, _, frame = coordinate.partition(".")
    if int(frame) < 2:
        return False
    before = f"{prefix}:c{lane}.{int(frame) - 1}"
    rows = cluster.query(
        "SELECT count(*) FROM events WHERE (command_id = %s OR command_id LIKE %s) "
        "AND type = 'command.completed' "
        "AND payload->'result'->>'chained' = 'true'",
        before,
        before + ":a%",
    )
    return bool(rows[0][0])


def test_worker_sigkill_in_a_frame_body_run_with_its_claim(cluster_factory: Any) -> None:
    cluster: Cluster = cluster_factory()
    eid = cluster.start("chaos_cursor_frame_command.yaml", n=ROWS, lanes=4, max_rows=50)
    killed: list[tuple[str, Any]] = []
    for round_ in range(2):
        # the first in a claim a chain issued: it runs in the worker that issued it
        command_id, victim = in_a_body(cluster, eid, chained=round_ == 0)
        at = utcnow()
        victim.kill()
        victim.restart()
        killed.append((command_id, at))
        cluster.wait_finished(eid, 5)
    assert_drain_exact(cluster, eid, ROWS)
    handed = 0
    for command_id, _ in killed:
        [(status,)] = cluster.query("SELECT status FROM commands WHERE command_id = %s", command_id)
        if status == "completed":
            continue  # its close beat the kill by a hair
        # its lease ran out: the next attempt handed its recorded rows over (it claimed
        # nothing): its completion carries the rows and no body, a body command ran them
        [(recorded, body)] = cluster.query(
            "SELECT e.payload->'result'->>'recorded', e.payload->'result' ? 'body' "
            "FROM events e WHERE e.execution_id = %s AND e.command_id LIKE %s "
            "AND e.type = 'command.completed'",
            eid,
            command_id + ":a%",
        )
        assert recorded == "true" and body is False
        handed += 1
    assert handed
    [(runs,)] = cluster.query(
        "SELECT count(*) FROM public.chaos_body_runs WHERE execution_id = %s", eid, data=True
    )
    assert runs >= ROWS  # bodies at least once; counted exactly once (assert_drain_exact)


def test_worker_sigkill_mid_frame_of_per_row_bodies_run_with_their_claim(
    cluster_factory: Any,
) -> None:
    cluster: Cluster = cluster_factory()
    # rows of 0.02 s one after another (a body of statements): a frame of 50 takes a second
    eid = cluster.start("chaos_cursor_row_lanes.yaml", n=ROWS, lanes=4, max_rows=50, sleep=0.02)
    killed: list[str] = []
    for _ in range(2):
        command_id, victim = in_a_body(cluster, eid)
        time.sleep(0.2)  # some of the frame's rows ran: the kill lands mid-frame
        victim.kill()
        victim.restart()
        killed.append(command_id)
        cluster.wait_finished(eid, 5)
    assert_drain_exact(cluster, eid, ROWS)
    handed = 0
    for command_id in killed:
        [(status,)] = cluster.query("SELECT status FROM commands WHERE command_id = %s", command_id)
        if status == "completed":
            continue  # its close beat the kill
        # the next attempt handed the recorded rows over, without their bodies: each
        # row's body was a command of its own, at the iteration the claim reserved
        [(recorded, bodies, rows)] = cluster.query(
            "SELECT e.payload->'result'->>'recorded', e.payload->'result' ? 'bodies', "
            "jsonb_array_length(e.payload->'result'->'rows') "
            "FROM events e WHERE e.execution_id = %s AND e.command_id LIKE %s "
            "AND e.type = 'command.completed'",
            eid,
            command_id + ":a%",
        )
        assert recorded == "true" and bodies is False and rows > 0
        handed += 1
    assert handed
    # one body command row per row (run here or handed over), each finished once
    [(bodies_total, finished)] = cluster.query(
        "SELECT count(*), count(*) FILTER (WHERE status = 'completed') FROM commands "
        "WHERE execution_id = %s AND step = 'drain' AND kind = 'iteration'",
        eid,
    )
    assert bodies_total == finished == ROWS
    [(runs,)] = cluster.query(
        "SELECT count(*) FROM public.chaos_body_runs WHERE execution_id = %s", eid, data=True
    )
    assert runs >= ROWS  # at least once; counted exactly once (assert_drain_exact)


def test_postgres_crashed_while_frames_are_recorded_on_its_own_server(
    cluster_factory: Any,
) -> None:
    """The queue lives on the engine's own server (another database of the cluster), so a
    frame's record commits asynchronously: the queue's commit, after it in the same WAL,
    makes it durable (store.queries.frames). Postgres crashed twice mid-drain (stopped
    `immediate`: WAL not yet flushed is gone) loses no row and counts none twice."""
    cluster: Cluster = cluster_factory()
    eid = cluster.start("chaos_cursor_frame_command.yaml", n=ROWS, lanes=4, max_rows=50)
    for finished in (4, 10):
        cluster.wait_finished(eid, finished)
        cluster.pg.restart()
    assert_drain_exact(cluster, eid, ROWS)
