"""What a cursor claim's queue transaction waits for is durable: the record of a frame's
rows (one command per frame, worker.frames) and the close of a claim whose queue
transaction is held (worker.closing) commit synchronously even though the engine's
bookkeeping commits asynchronously (`NOETL_SYNCHRONOUS_COMMIT=off`, the default). An
engine crash right after them cannot take back rows the queue then commits as claimed.

A private Postgres whose WAL writer flushes every 10 s (no background writer, no
autovacuum) shows an asynchronous commit: the flushed WAL position stays behind the
inserted one until a synchronous commit (or 10 s) flushes it. Each test first shows an
asynchronous write of the engine's leaving it behind, so the check can fail.

Unless the queue runs on the engine's own server: a claim's transaction witnessed there
(its backend pid and transaction id, in the server's pg_locks) commits into the same WAL
after the engine's record, so the record may commit asynchronously: the queue's
synchronous commit flushes both (store.queries.frames)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from noetl_celery.cursors.base import ClaimRequest
from noetl_celery.cursors.postgres import Driver
from noetl_celery.engine.service import Engine
from noetl_celery.models.outcome import Outcome
from noetl_celery.orchestrator.ids import claim_command_id
from noetl_celery.settings import Settings
from noetl_celery.store.database import SchemaMode
from noetl_celery.store.rows import ClaimedCommand
from tests.support import services
from tests.support.frames_by_hand import FRAMES
from tests.support.private_services import PrivatePostgres

LAZY_WAL = (
    "wal_writer_delay = 10000ms",
    "wal_writer_flush_after = 1GB",
    "bgwriter_lru_maxpages = 0",
    "autovacuum = off",
)


@pytest.fixture(scope="module")
def lazy_pg() -> Iterator[PrivatePostgres]:
    pg = PrivatePostgres()
    pg.init(LAZY_WAL)
    pg.start()
    try:
        yield pg
    finally:
        pg.destroy()


@pytest.fixture
def engine(
    lazy_pg: PrivatePostgres, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[Engine]:
    name = "durable_" + request.node.name.removeprefix("test_")[:40]
    lazy_pg.create_database(name)
    settings = Settings(home=tmp_path, database_url=lazy_pg.url(name))
    assert settings.synchronous_commit == "off"  # the default this is about
    engine = Engine(settings, schema=SchemaMode.MIGRATE)
    try:
        yield engine
    finally:
        engine.close()


def flushed_behind(pg: PrivatePostgres) -> bool:
    """The WAL inserted so far is not all flushed: a commit since the last flush was
    asynchronous (nothing else writes WAL on this cluster)."""
    with psycopg.connect(pg.dsn(), autocommit=True) as conn:
        row = conn.execute(
            "SELECT pg_current_wal_flush_lsn() < pg_current_wal_insert_lsn()"
        ).fetchone()
    assert row is not None
    return bool(row[0])


def running_claim(engine: Engine) -> ClaimedCommand:
    eid = engine.start_text(FRAMES)
    command = engine.store.claim(claim_command_id(eid, "drain", 1, 0, 1), "test-worker", 60)
    assert command is not None
    return command


def test_a_frames_record_commits_synchronously(engine: Engine, lazy_pg: PrivatePostgres) -> None:
    command = running_claim(engine)
    assert engine.store.renew_lease(command.command_id, 60)  # bookkeeping: asynchronous
    assert flushed_behind(lazy_pg)

    frame = engine.store.record_frame(command, [{"id": 1}, {"id": 2}])

    assert frame is not None and frame.rows == [{"id": 1}, {"id": 2}]
    assert not flushed_behind(lazy_pg)


def test_a_held_claims_close_commits_synchronously(
    engine: Engine, lazy_pg: PrivatePostgres
) -> None:
    command = running_claim(engine)
    assert engine.store.renew_lease(command.command_id, 60)
    assert flushed_behind(lazy_pg)

    with engine.store.completion(command, durable=True) as tx:
        closed = tx.close(Outcome("ok", {"rows": [{"id": 1}], "row_count": 1}))

    assert closed.closed
    assert not flushed_behind(lazy_pg)


def test_an_ordinary_close_stays_asynchronous(engine: Engine, lazy_pg: PrivatePostgres) -> None:
    """The control: without `durable` the same close leaves the flush behind."""
    command = running_claim(engine)
    assert engine.store.renew_lease(command.command_id, 60)
    with engine.store.completion(command) as tx:
        closed = tx.close(Outcome("ok", {"rows": [{"id": 1}], "row_count": 1}))

    assert closed.closed
    assert flushed_behind(lazy_pg)


def queue_transaction(dsn: str) -> tuple[psycopg.Connection, tuple[int, int]]:
    """An open transaction on a queue database that claimed a row (it wrote: a commit
    that wrote nothing is asynchronous whatever the setting, and nothing of it needs to
    last), and its witness (pid, transaction id)."""
    with psycopg.connect(dsn, autocommit=True) as setup:
        setup.execute("CREATE TABLE IF NOT EXISTS durable_queue (id int, status text)")
    conn = psycopg.connect(dsn)
    conn.execute("INSERT INTO durable_queue VALUES (1, 'claimed')")
    row = conn.execute("SELECT pg_backend_pid(), txid_current()").fetchone()
    assert row is not None
    return conn, (int(row[0]), int(row[1]))


def test_a_record_witnessed_on_the_engines_server_commits_into_the_queues_flush(
    engine: Engine, lazy_pg: PrivatePostgres
) -> None:
    """The queue on the engine's own server (another database of it): the record stays
    asynchronous, and the queue's commit (synchronous, as a client's is by default)
    flushes it."""
    command = running_claim(engine)
    queue, witness = queue_transaction(lazy_pg.dsn())
    try:
        frame = engine.store.record_frame(command, [{"id": 1}], witness)
        assert frame is not None and frame.rows == [{"id": 1}]
        assert flushed_behind(lazy_pg)  # not waited for
        queue.commit()
        assert not flushed_behind(lazy_pg)  # the queue's commit flushed the record first
    finally:
        queue.close()


@pytest.mark.parametrize("queue", ["on another server", "ended"])
def test_a_record_whose_witness_is_not_live_here_stays_synchronous(
    engine: Engine, lazy_pg: PrivatePostgres, queue: str
) -> None:
    """A witness from the suite's other server, or of a queue transaction that ended
    (its pid and transaction id no longer hold a lock here): synchronous."""
    command = running_claim(engine)
    on = services.dsn_for("postgres") if queue == "on another server" else lazy_pg.dsn()
    conn, witness = queue_transaction(on)
    if queue == "ended":
        conn.rollback()
    try:
        assert engine.store.renew_lease(command.command_id, 60)
        assert flushed_behind(lazy_pg)
        assert engine.store.record_frame(command, [{"id": 1}], witness) is not None
        assert not flushed_behind(lazy_pg)
    finally:
        conn.close()


def test_a_held_close_witnessed_on_the_engines_server_is_asynchronous(
    engine: Engine, lazy_pg: PrivatePostgres
) -> None:
    command = running_claim(engine)
    queue, witness = queue_transaction(lazy_pg.dsn())
    try:
        with engine.store.completion(command, durable=True, witness=witness) as tx:
            closed = tx.close(Outcome("ok", {"rows": [{"id": 1}], "row_count": 1}))
        assert closed.closed
        assert flushed_behind(lazy_pg)
    finally:
        queue.close()


def test_the_postgres_cursor_asks_for_a_witness_only_on_the_engines_server(
    lazy_pg: PrivatePostgres, tmp_path: Path
) -> None:
    """The driver compares its queue server's system identifier with the engine's: the
    same server, its claims carry their transaction's witness (live in pg_locks); the
    suite's other server, none."""
    creds = tmp_path / "credentials.json"
    creds.write_text(
        json.dumps(
            {
                "here": credential(lazy_pg.dsn()),
                "there": credential(services.dsn_for("postgres")),
            }
        )
    )
    lazy_pg.create_database("durable_driver")
    settings = Settings(
        home=tmp_path, database_url=lazy_pg.url("durable_driver"), credentials_file=str(creds)
    )
    engine = Engine(settings, schema=SchemaMode.MIGRATE)
    claim = "SELECT g AS id FROM generate_series(1, 2) g"
    try:
        held = Driver().claim(ClaimRequest("postgres", "here", claim, 2), engine.services)
        try:
            assert held.rows == [{"id": 1}, {"id": 2}]
            assert held.witness is not None
            pid, xid = held.witness
            with psycopg.connect(lazy_pg.dsn(), autocommit=True) as conn:
                row = conn.execute(
                    "SELECT count(*) FROM pg_locks WHERE locktype = 'transactionid' "
                    "AND pid = %s AND transactionid::text = (%s %% 4294967296)::text",
                    (pid, xid),
                ).fetchone()
            assert row == (1,)
        finally:
            held.rollback()
        other = Driver().claim(ClaimRequest("postgres", "there", claim, 2), engine.services)
        try:
            assert other.rows == [{"id": 1}, {"id": 2}] and other.witness is None
        finally:
            other.rollback()
    finally:
        engine.close()


def credential(dsn: str) -> dict[str, str]:
    params = psycopg.conninfo.conninfo_to_dict(dsn)
    return {
        "db_host": str(params.get("host", "127.0.0.1")),
        "db_port": str(params.get("port", 5432)),
        "db_user": str(params.get("user", "postgres")),
        "db_password": str(params.get("password", "")),
        "db_name": str(params.get("dbname", "postgres")),
    }
