"""One engine per worker process, created lazily in the process that runs tasks (never in
a prefork parent: database pools must not cross a fork)."""

from __future__ import annotations

import threading

from noetl_celery.engine.service import Engine
from noetl_celery.tasks.app import settings
from noetl_celery.tasks.dispatcher import CeleryDispatcher

_engine: Engine | None = None
_lock = threading.Lock()


def engine() -> Engine:
    global _engine
    if _engine is None:
        with _lock:
            if _engine is None:
                built = Engine(settings, upgrade_schema=True)
                built.use_dispatcher(CeleryDispatcher())
                _engine = built
    return _engine


def reset_after_fork() -> None:
    global _engine
    _engine = None
