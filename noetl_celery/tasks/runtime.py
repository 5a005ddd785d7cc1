"""One engine per worker process, created lazily in the process that runs tasks (never in
a prefork parent: database pools must not cross a fork).

A worker whose pool runs its tasks on threads of one process (`--pool threads`, gevent,
eventlet) shares that engine between `-c` threads: its database pool is sized from the
concurrency (Settings.for_worker_threads), told by Celery's `worker_init` before any
task runs."""

from __future__ import annotations

import gc
import logging
import sys
import threading
import time

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
_pool = "prefork"  # the worker's pool, told by `worker_init`
# how long a process waits before trying to build its engine again (the database away)
ENGINE_RETRY_SECONDS = 5.0
# the GIL's switch interval in a `--pool threads` worker (CPython's default: 5 ms). Its
# threads wait on Postgres and the broker in turn; one whose reply came waits for the
# thread running Python to give the GIL up, up to this long, every round trip: 1 ms cut
# a 10,000-item no-op fan-out on one threads worker by about 4 % (medians of 9 runs,
# interleaved with the default: bench.embedded_fanout's worker, twice)
THREADS_SWITCH_SECONDS = 0.001


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
    global _threads, _pool
    pool = _pool = pool_name(getattr(sender, "pool_cls", ""))
    concurrency = getattr(sender, "concurrency", 0)
    if pool in THREADED_POOLS and isinstance(concurrency, int):
        _threads = concurrency
    if pool == "threads":
        sys.setswitchinterval(THREADS_SWITCH_SECONDS)


def runs_tasks_here() -> bool:
    """Whether this worker's main process runs the tasks (solo, threads, gevent): its
    engine is built there; with prefork, in each child."""
    return _pool != "prefork"


def start_soon() -> None:
    """Build this process's engine on a thread, with its relay (engine.outbox): a process
    that gets no task (Redis restarted empty, every message lost) must still publish
    what the outbox holds and what the broker lost."""

    def build() -> None:
        while True:
            try:
                engine()
            except Exception as exc:  # the engine database away: try again
                log.warning(
                    "could not open the engine database yet (%s); trying again in %g s",
                    exc,
                    ENGINE_RETRY_SECONDS,
                )
                time.sleep(ENGINE_RETRY_SECONDS)
                continue
            # What the process holds now (the worker's start-up, inherited by a pool
            # process, and its engine: ~100,000 objects) lives as long as it does: moved
            # out of the collector's way, as cli.main does with the imports. Each full
            # collection walked them all (~55 ms); the collector was ~4.5 % of a pool
            # process's CPU on an API-bound flow (bench.pft_cursor). `freeze` relinks
            # the collector's lists without touching an object: no page a pool process
            # shares with its parent is copied.
            gc.freeze()
            return

    threading.Thread(target=build, name="noetl-engine-start", daemon=True).start()


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
