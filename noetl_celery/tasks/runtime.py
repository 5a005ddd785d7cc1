"""One engine per worker process, created lazily in the process that runs tasks (never in
a prefork parent: database pools must not cross a fork)."""

from __future__ import annotations

import threading

from noetl_celery.engine.bootstrap import Role, build_engine
from noetl_celery.engine.service import Engine
from noetl_celery.store.database import SchemaMode, open_database
from noetl_celery.tasks.app import settings
from noetl_celery.tasks.broker import worker_dispatcher

_engine: Engine | None = None
_lock = threading.Lock()


def engine() -> Engine:
    global _engine
    if _engine is None:
        with _lock:
            if _engine is None:
                _engine = build_engine(settings, Role.WORKER, broker=worker_dispatcher)
    return _engine


def read_identity() -> str | None:
    """The engine database's identity, on a connection closed right after (the caller
    may be a prefork parent, which must not keep a pool)."""
    database = open_database(settings.effective_database_url, SchemaMode.REQUIRE)
    try:
        return database.database_id
    finally:
        database.dispose()


def reset_after_fork() -> None:
    global _engine
    _engine = None
