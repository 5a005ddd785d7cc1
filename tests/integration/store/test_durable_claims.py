"""What a cursor claim's queue transaction waits for is durable: the record of a frame's
rows (one command per frame, worker.frames) and the close of a claim whose queue
transaction is held (worker.closing) commit synchronously even though the engine's
bookkeeping commits asynchronously (`NOETL_SYNCHRONOUS_COMMIT=off`, the default). An
engine crash right after them cannot take back rows the queue then commits as claimed.

A private Postgres whose WAL writer flushes every 10 s (no background writer, no
autovacuum) shows an asynchronous commit: the flushed WAL position stays behind the
inserted one until a synchronous commit (or 10 s) flushes it. Each test first shows an
asynchronous write of the engine's leaving it behind, so the check can fail."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from noetl_celery.engine.service import Engine
from noetl_celery.models.outcome import Outcome
from noetl_celery.orchestrator.ids import claim_command_id
from noetl_celery.settings import Settings
from noetl_celery.store.database import SchemaMode
from noetl_celery.store.rows import ClaimedCommand
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
