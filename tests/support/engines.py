"""Engines for tests: embedded (in-process workers) or publishing to real Celery workers."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from noetl_celery.engine.service import Engine
from noetl_celery.settings import Settings
from noetl_celery.store.database import SchemaMode


def embedded_engine(database_url: str, home: Path, credentials: Path | None = None) -> Engine:
    settings = Settings(
        home=home, database_url=database_url, credentials_file=str(credentials or "")
    )
    engine = Engine(settings, schema=SchemaMode.MIGRATE)
    engine.use_in_process_workers()
    return engine


class Duplicating:
    """Publishes every command twice: at-least-once delivery at its worst."""

    def __init__(self, inner: object) -> None:
        self.inner = inner
        self.published = 0

    def publish(self, command_ids: Sequence[str], queue: str | None = None) -> None:
        self.published += len(command_ids)
        # twice, not one list naming each id twice: a publish sends an id once per
        # message batch, so the second publish is the duplicate delivery
        self.inner.publish(command_ids, queue)  # type: ignore[attr-defined]
        self.inner.publish(command_ids, queue)  # type: ignore[attr-defined]

    def wake(self, execution_id: str) -> None:
        self.inner.wake(execution_id)  # type: ignore[attr-defined]


def celery_engine(
    database_url: str,
    broker_url: str,
    home: Path,
    credentials: Path | None = None,
    duplicate: bool = False,
    queue_type: str = "classic",
    queue_by_kind: tuple[tuple[str, str], ...] = (),
) -> Engine:
    from noetl_celery.tasks.app import make_app
    from noetl_celery.tasks.dispatcher import CeleryDispatcher

    settings = Settings(
        home=home,
        database_url=database_url,
        broker_url=broker_url,
        credentials_file=str(credentials or ""),
        broker_queue_type=queue_type,
        queue_by_kind=queue_by_kind,
    )
    # the workers' database: migrated before they started (they never migrate)
    engine = Engine(settings, schema=SchemaMode.REQUIRE)
    dispatcher = CeleryDispatcher(make_app(settings), database_id=engine.database_id)
    # as a client's: a publish the broker cannot take is held (engine.outbox)
    engine.use_broker(Duplicating(dispatcher) if duplicate else dispatcher)
    return engine
