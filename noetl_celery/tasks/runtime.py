"""One engine per worker process, created lazily in the process that runs tasks (never in
a prefork parent: database pools must not cross a fork).

A worker whose pool runs its tasks on threads of one process (`--pool threads`, gevent,
eventlet) shares that engine between `-c` threads: its database pool is sized from the
concurrency (Settings.for_worker_threads), told by Celery's `worker_init` before any
task runs."""

from __future__ import annotations

import logging
import threading

from celery.signals import worker_init

from noetl_celery.engine.bootstrap import Role, build_engine
from noetl_celery.engine.service import Engine
from noetl_celery.settings import Settings
from noetl_celery.store.database import SchemaMode, open_database
from noetl_celery.tasks.app import settings
from noetl_celery.tasks.broker import worker_dispatcher

log = logging.getLogger("noetl_celery.worker")

# pools whose tasks share one process (and so one engine) between their threads
THREADED_POOLS = frozenset({"threads", "thread", "gevent", "eventlet"})

_engine: Engine | None = None
_lock = threading.Lock()
_threads = 0  # concurrency of a threaded pool; 0: a process per slot (prefork, solo)


def engine() -> Engine:
    global _engine
    if _engine is None:
        with _lock:
            if _engine is None:
                sized = worker_settings()
                if _threads:  # logged here: logging is not set up yet at worker_init
                    log.info(
                        "threads pool of %d: engine database pool of %d connections "
                        "(+%d at a peak)",
                        _threads,
                        sized.db_pool_size,
                        sized.db_max_overflow,
                    )
                _engine = build_engine(sized, Role.WORKER, broker=worker_dispatcher)
    return _engine


def worker_settings() -> Settings:
    """The process's settings, with the database pool sized for a threaded pool."""
    return settings.for_worker_threads(_threads) if _threads else settings


def pool_name(pool_cls: object) -> str:
    """`threads`, `prefork`, ... for what Celery holds as the pool: its CLI name, a
    `module:Class` path, or the class itself."""
    if isinstance(pool_cls, str):
        if ":" not in pool_cls:
            return pool_cls.lower()
        module = pool_cls.split(":", 1)[0]
    else:
        module = getattr(pool_cls, "__module__", "") or ""
    name = module.rsplit(".", 1)[-1]
    return "threads" if name == "thread" else name


@worker_init.connect
def _size_for_pool(sender: object = None, **_: object) -> None:
    global _threads
    pool = pool_name(getattr(sender, "pool_cls", ""))
    concurrency = getattr(sender, "concurrency", 0)
    if pool in THREADED_POOLS and isinstance(concurrency, int):
        _threads = concurrency


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
