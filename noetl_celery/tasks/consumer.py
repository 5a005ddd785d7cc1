"""The worker's consumer, reconnecting to the broker within a second of its return.

Celery's consumer retries a lost broker connection with kombu's default back-off (2 s,
then 4, 6, ... up to 30 s between attempts): after a 30 s outage a worker resumed up to
12 s after Redis was back. Work issued meanwhile is held in, or republished from, the
engine database as soon as the broker answers (engine.outbox); for it to move within a
few seconds the consumers must be back as soon, so they try every `RETRY_MAX_SECONDS`
at most (a refused connection a second per worker costs nothing).
"""

from __future__ import annotations

from functools import partial
from typing import Any

from celery.worker.consumer import Consumer as CeleryConsumer

RETRY_START_SECONDS = 0.2
RETRY_STEP_SECONDS = 0.2
RETRY_MAX_SECONDS = 1.0


class Consumer(CeleryConsumer):  # type: ignore[misc]
    def connection_for_read(self, heartbeat: float | None = None) -> Any:
        conn = self.app.connection_for_read(heartbeat=heartbeat)
        conn.ensure_connection = partial(
            conn.ensure_connection,
            interval_start=RETRY_START_SECONDS,
            interval_step=RETRY_STEP_SECONDS,
            interval_max=RETRY_MAX_SECONDS,
        )
        return self.ensure_connected(conn)
