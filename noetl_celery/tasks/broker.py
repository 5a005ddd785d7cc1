"""The Celery dispatchers the engine's bootstrap is handed (engine.bootstrap.BrokerFactory).
Celery is imported only when one is built: commands that never reach a broker (every
embedded run, every read) start without it."""

from __future__ import annotations

from noetl_celery.passes.dispatch import Dispatcher
from noetl_celery.settings import Settings


def client_dispatcher(settings: Settings, database_id: str | None) -> Dispatcher:
    """For a client (CLI, Python API, web server): an app configured from `settings`."""
    from noetl_celery.tasks.app import make_app
    from noetl_celery.tasks.dispatcher import CeleryDispatcher

    return CeleryDispatcher(
        make_app(settings), database_id=database_id, batch_size=settings.batch_size
    )


def worker_dispatcher(settings: Settings, database_id: str | None) -> Dispatcher:
    """For a worker process: the app it is running tasks for."""
    from noetl_celery.tasks.dispatcher import CeleryDispatcher

    return CeleryDispatcher(database_id=database_id, batch_size=settings.batch_size)
