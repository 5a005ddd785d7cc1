"""Publishes commands as Celery messages (ids only: a few dozen bytes each).

Messages are sent by task name, so any process with a configured app (the CLI, a test)
can publish without importing the task functions.
"""

from __future__ import annotations

from collections.abc import Sequence

from celery import Celery

from noetl_celery.constants import (
    QUEUE_COMMANDS,
    QUEUE_ORCHESTRATE,
    TASK_EXECUTE_COMMAND,
    TASK_ORCHESTRATE,
)


class CeleryDispatcher:
    def __init__(self, app: Celery | None = None) -> None:
        if app is None:
            from noetl_celery.tasks.app import app as default_app

            app = default_app
        self.app = app

    def publish(self, command_ids: Sequence[str]) -> None:
        if not command_ids:
            return
        with self.app.producer_or_acquire() as producer:
            for command_id in command_ids:
                self.app.send_task(
                    TASK_EXECUTE_COMMAND,
                    args=(command_id,),
                    queue=QUEUE_COMMANDS,
                    producer=producer,
                )

    def wake(self, execution_id: str) -> None:
        self.app.send_task(TASK_ORCHESTRATE, args=(execution_id,), queue=QUEUE_ORCHESTRATE)
