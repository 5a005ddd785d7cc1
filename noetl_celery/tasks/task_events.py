"""Celery task events, which monitors such as Flower need, and which cost broker traffic.

Workers start with them off (`worker_send_task_events=False`): three event messages per
task, for nobody unless a monitor listens. Flower turns them on by broadcasting the
`enable_events` remote-control command, at its start and every 5 s (so workers started
later are covered too); `noetl-celery worker` runs `--without-gossip --without-mingle`,
which does not touch remote control, so the workers obey. Nothing turns them off again: a
worker keeps publishing task events after Flower is gone, until it restarts (measured).
`noetl-celery flower` therefore broadcasts `disable_events` when it exits. A monitor still
running (a second Flower) turns them back on within its own interval.
"""

from __future__ import annotations

import logging

from celery import Celery

log = logging.getLogger("noetl_celery.task_events")


def disable_task_events(app: Celery) -> bool:
    """Ask every worker to stop sending task events. False when the broker cannot be
    reached: then workers go on sending them until they restart (traffic, not harm)."""
    try:
        with app.connection_for_write() as connection:
            # kombu retries a broadcast on a dead broker forever: fail fast instead, a
            # monitor's exit must not hang on it
            connection.ensure_connection(max_retries=1)
            app.control.disable_events(connection=connection)
    except Exception:
        log.warning("could not ask the workers to stop sending task events", exc_info=True)
        return False
    return True
