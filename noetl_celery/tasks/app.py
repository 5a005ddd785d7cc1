"""The Celery application (composition root for workers: settings are read here).

At-least-once delivery: `acks_late` + `reject_on_worker_lost` put a message back when a
worker dies mid-task, prefetch 1 keeps un-started commands in the broker rather than in
a worker's memory, and duplicates are harmless because `execute_command` starts with a
conditional claim in Postgres.
"""

from __future__ import annotations

from celery import Celery

from noetl_celery.constants import (
    QUEUE_COMMANDS,
    QUEUE_ORCHESTRATE,
    TASK_EXECUTE_COMMAND,
    TASK_ORCHESTRATE,
)
from noetl_celery.settings import Settings


def make_app(settings: Settings) -> Celery:
    app = Celery("noetl_celery", broker=settings.broker_url or "memory://", set_as_current=False)
    app.conf.update(
        task_ignore_result=True,
        result_backend=None,
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        task_serializer="json",
        accept_content=["json"],
        task_default_queue=QUEUE_COMMANDS,
        task_routes={
            TASK_EXECUTE_COMMAND: {"queue": QUEUE_COMMANDS},
            TASK_ORCHESTRATE: {"queue": QUEUE_ORCHESTRATE},
        },
        # a message not acked within this time is redelivered: longer than any lease
        broker_transport_options={"visibility_timeout": max(3600, settings.lease_seconds * 4)},
        broker_connection_retry_on_startup=True,
        worker_hijack_root_logger=False,
        # task events cost broker traffic per task; Flower turns them on when it runs
        worker_send_task_events=False,
        imports=("noetl_celery.tasks.tasks",),
    )
    return app


settings = Settings.from_env()
app = make_app(settings)
