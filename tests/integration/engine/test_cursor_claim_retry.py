"""A cursor drain on the embedded engine survives its queue database going away: the
claims that meet the outage are claimed again (next attempt, after a backoff, issued by
the reaper's sweep) and the run completes with every row done exactly once.

The queue is a Postgres database of its own that the test takes away for 3 seconds
(`ALLOW_CONNECTIONS false` and every session terminated: new connections are refused,
open ones die, as in a restart); the bodies write to another database, which stays up.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict

from noetl_celery.engine.service import Engine
from noetl_celery.settings import Settings
from noetl_celery.store.database import SchemaMode
from tests.support import services

pytestmark = pytest.mark.integration

ROWS = 240
OUTAGE_SECONDS = 3.0

PLAYBOOK = """apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: drain_through_an_outage}
workload: {sink: ""}
workflow:
  - step: drain
    loop:
      cursor:
        kind: postgres
        auth: queue
        claim: |
          WITH c AS (SELECT id FROM queue WHERE status = 'pending'
                     ORDER BY id FOR UPDATE SKIP LOCKED LIMIT {{ __frame_max_rows }})
          UPDATE queue q SET status = 'claimed' FROM c WHERE q.id = c.id RETURNING q.id
      iterator: job
      spec: {mode: cursor, max_in_flight: 4, frame: {max_rows: 3, row_concurrency: 2}}
    tool:
      kind: postgres
      auth: sink
      command: |
        SELECT pg_sleep(0.04);
        INSERT INTO {{ sink }} (id, hits) VALUES ({{ iter.job.id }}, 1)
        ON CONFLICT (id) DO UPDATE SET hits = {{ sink }}.hits + 1;
"""


@pytest.fixture
def queue_db() -> Iterator[str]:
    name = f"noetl_test_queue_{uuid.uuid4().hex[:10]}"
    services.create_database(name)
    with psycopg.connect(services.dsn_for(name), autocommit=True) as conn:
        conn.execute("CREATE TABLE queue (id int PRIMARY KEY, status text NOT NULL)")
        conn.execute("INSERT INTO queue SELECT g, 'pending' FROM generate_series(1, %s) g", (ROWS,))
    yield name
    with services.admin_connection() as admin:  # never leave it refusing connections
        admin.execute(
            sql.SQL("ALTER DATABASE {} ALLOW_CONNECTIONS true").format(sql.Identifier(name))
        )
    services.drop_database(name)


@pytest.fixture
def sink(data_db: str) -> Iterator[str]:
    table = f"h6_sink_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(data_db, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {table} (id int PRIMARY KEY, hits int NOT NULL)")
    yield table
    with psycopg.connect(data_db, autocommit=True) as conn:
        conn.execute(f"DROP TABLE IF EXISTS {table}")


def credential(dsn: str) -> dict[str, Any]:
    info = conninfo_to_dict(dsn)
    return {
        "db_host": info.get("host", "127.0.0.1"),
        "db_port": str(info.get("port", 5432)),
        "db_user": info.get("user", "postgres"),
        "db_password": info.get("password", ""),
        "db_name": info.get("dbname"),
    }


def take_away(name: str, seconds: float) -> None:
    """New connections refused and every open one terminated, for `seconds`."""
    ident = sql.Identifier(name)
    with services.admin_connection() as admin:
        admin.execute(sql.SQL("ALTER DATABASE {} ALLOW_CONNECTIONS false").format(ident))
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = %s AND pid <> pg_backend_pid()",
            (name,),
        )
        time.sleep(seconds)
        admin.execute(sql.SQL("ALTER DATABASE {} ALLOW_CONNECTIONS true").format(ident))


def sink_count(data_db: str, table: str) -> int:
    with psycopg.connect(data_db, autocommit=True) as conn:
        row = conn.execute(f"SELECT count(*) FROM {table}").fetchone()
    return int(row[0]) if row else 0


def test_a_queue_database_outage_during_a_drain_is_ridden_out(
    queue_db: str, sink: str, data_db: str, tmp_path: Path
) -> None:
    creds = tmp_path / "credentials.json"
    creds.write_text(
        json.dumps({"queue": credential(services.dsn_for(queue_db)), "sink": credential(data_db)})
    )
    settings = Settings(
        home=tmp_path / "home",
        credentials_file=str(creds),
        reaper_interval_seconds=0.5,  # the sweep issues a retried claim when it is due
    )
    engine = Engine(settings, schema=SchemaMode.MIGRATE)
    engine.use_in_process_workers()
    outage: list[float] = []
    try:
        eid = engine.start_text(PLAYBOOK, {"sink": sink})
        deadline = time.monotonic() + 30
        while sink_count(data_db, sink) < ROWS // 8:  # the drain is well under way
            assert time.monotonic() < deadline, "the drain did not start"
            time.sleep(0.02)
        started = time.monotonic()
        take_away(queue_db, OUTAGE_SECONDS)
        outage.append(time.monotonic() - started)
        assert engine.store.execution_status(eid) == "RUNNING"  # rode the outage out
        engine.wait(eid, 60)
        summary = engine.summary(eid)
        events = engine.events(eid, types=["command.failed"])
        counts = engine.store.command_counts(eid)
    finally:
        engine.close()
    assert outage and outage[0] >= OUTAGE_SECONDS
    assert summary["status"] == "COMPLETED", summary["error"]
    assert summary["steps"]["drain"]["stats"] == {"total": ROWS, "success": ROWS, "failed": 0}
    # claims met the outage (the test did what it means to) and were claimed again
    failed_claims = [e for e in events if ":c" in (e["command_id"] or "")]
    assert failed_claims, "no claim met the outage"
    assert {e["payload"]["error"]["kind"] for e in failed_claims} == {"db_connection"}
    assert all(e["payload"]["error"]["retryable"] for e in failed_claims)
    assert not [e for e in events if ":c" not in (e["command_id"] or "")]  # bodies: none
    assert counts.delayed == counts.issued == counts.running == 0
    # every row done exactly once, none left behind in the queue
    with psycopg.connect(data_db, autocommit=True) as conn:
        hits = conn.execute(f"SELECT hits, count(*) FROM {sink} GROUP BY hits").fetchall()
    assert hits == [(1, ROWS)]
    with psycopg.connect(services.dsn_for(queue_db), autocommit=True) as conn:
        left = conn.execute("SELECT status, count(*) FROM queue GROUP BY status").fetchall()
    assert left == [("claimed", ROWS)]
